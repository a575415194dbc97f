"""Hub mode's inputs and scoring: prompts in the model's chat template, greedy generation, and
the answer rules (GSM8K: the final number; multiple choice: the letter; other answers: the
normalised text; plain text: next-token accuracy).

The chat template already writes the BOS token, so its text is tokenized without special tokens
(tokenizing it with them gives a second BOS).
"""

from __future__ import annotations

import re
import string
from typing import Sequence

import torch

from ..core import limits
from ..core.device import device_of
from .sources import LETTERS, final_number, same_number

MATH_INSTRUCTION = "Solve the problem step by step, then give the final answer as a number."


def has_template(tok) -> bool:
    return bool(getattr(tok, "chat_template", None))


def _user_text(item: dict, kind: str) -> str:
    if kind == "math":
        return f"{item['prompt']}\n{MATH_INSTRUCTION}"
    return item["prompt"]


def prompt_ids(tok, item: dict, kind: str) -> list[int]:
    """The question as a user turn, ready for the assistant's answer."""
    text = _user_text(item, kind)
    if has_template(tok):
        rendered = tok.apply_chat_template(
            [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
        )
        return tok(rendered, add_special_tokens=False)["input_ids"]
    return tok(text)["input_ids"]


def sample_ids(tok, item: dict, kind: str) -> list[int]:
    """An identification sample: the question and its reference answer as one conversation (plain
    text items as they are)."""
    if "text" in item and "prompt" not in item:
        return tok(item["text"])["input_ids"]
    text = _user_text(item, kind)
    answer = str(item["answer"])
    if has_template(tok):
        rendered = tok.apply_chat_template(
            [{"role": "user", "content": text}, {"role": "assistant", "content": answer}], tokenize=False
        )
        return tok(rendered, add_special_tokens=False)["input_ids"]
    return tok(f"{text}\n{answer}")["input_ids"]


def stop_ids(model, tok) -> list[int]:
    ids = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids = list(ids) if isinstance(ids, (list, tuple)) else ([ids] if ids is not None else [])
    if tok.eos_token_id is not None and tok.eos_token_id not in ids:
        ids.append(tok.eos_token_id)
    return ids


@torch.no_grad()
def generate(model, tok, prompts: Sequence[list[int]], max_new_tokens: int, batch_size: int = 32) -> list[str]:
    """Greedy answers (decoded, special tokens dropped) for token-id prompts, left-padded with an
    attention mask; `generate` derives the position ids from it."""
    stops = stop_ids(model, tok)
    pad = tok.pad_token_id if tok.pad_token_id is not None else (stops[0] if stops else 0)
    dev = device_of(model)
    out: list[str] = []
    # between batches: a request's time limit ends long evaluations, before a batch that would pass it
    for i in limits.Steps("the answers").each(range(0, len(prompts), batch_size)):
        chunk = [list(p) for p in prompts[i : i + batch_size]]
        width = max(len(p) for p in chunk)
        ids = torch.full((len(chunk), width), pad, dtype=torch.long)
        att = torch.zeros((len(chunk), width), dtype=torch.long)
        for j, p in enumerate(chunk):
            ids[j, width - len(p) :] = torch.tensor(p)
            att[j, width - len(p) :] = 1
        gen = model.generate(
            input_ids=ids.to(dev),
            attention_mask=att.to(dev),
            do_sample=False,
            max_new_tokens=max_new_tokens,
            eos_token_id=stops or None,
            pad_token_id=pad,
            temperature=None,
            top_p=None,
            top_k=None,
        )
        for row in gen[:, width:].cpu():
            toks = row.tolist()
            cut = next((k for k, t in enumerate(toks) if t in stops), len(toks))
            out.append(tok.decode(toks[:cut], skip_special_tokens=True).strip())
    return out


_PUNCT = str.maketrans("", "", string.punctuation)


def normalise(text: str) -> str:
    return " ".join(text.lower().translate(_PUNCT).split())


def choice_letter(text: str, n: int = len(LETTERS)) -> str | None:
    """The first option letter the model names ("B", "(B)", "B.", "The answer is B")."""
    m = re.search(rf"\b([{LETTERS[:n]}])\b", text)
    return m.group(1) if m else None


def correct(item: dict, generated: str, kind: str) -> bool:
    """The answer rules: a math item with a reference number (GSM8K's, or a user's) by the final
    number; multiple choice by the first option letter; anything else by the normalised answer
    starting the normalised generation."""
    if kind == "math" and "final" in item:
        return same_number(final_number(generated), item["final"])
    if item.get("choice"):
        return choice_letter(generated) == item["answer"]
    ref = normalise(str(item["answer"]))
    return bool(ref) and normalise(generated).startswith(ref)


@torch.no_grad()
def next_token_accuracy(model, tok, items: Sequence[dict], batch_size: int = 16, max_tokens: int = 256) -> float:
    """Plain-text sets: the share of next tokens the model predicts (argmax) over all items,
    right-padded (causal: pads never reach the real tokens)."""
    dev = device_of(model)
    hits = total = 0
    seqs = [tok(it.get("text") or f"{it['prompt']} {it.get('answer', '')}")["input_ids"][:max_tokens] for it in items]
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    for i in range(0, len(seqs), batch_size):
        chunk = seqs[i : i + batch_size]
        width = max(len(s) for s in chunk)
        ids = torch.full((len(chunk), width), pad, dtype=torch.long)
        att = torch.zeros((len(chunk), width), dtype=torch.long)
        for j, s in enumerate(chunk):
            ids[j, : len(s)] = torch.tensor(s)
            att[j, : len(s)] = 1
        logits = model(input_ids=ids.to(dev), attention_mask=att.to(dev), use_cache=False).logits
        pred = logits[:, :-1].argmax(-1).cpu()
        m = att[:, 1:].bool()
        hits += int(((pred == ids[:, 1:]) & m).sum())
        total += int(m.sum())
    return hits / total if total else float("nan")


def accuracy(model, tok, items: Sequence[dict], kind: str, max_new_tokens: int, batch_size: int = 32) -> float:
    """Accuracy of a set under its rule (see `correct`; plain text: next-token accuracy)."""
    if not items:
        return float("nan")
    if any("answer" not in it for it in items):
        return next_token_accuracy(model, tok, items)
    gens = generate(model, tok, [prompt_ids(tok, it, kind) for it in items], max_new_tokens, batch_size)
    return sum(correct(it, g, kind) for it, g in zip(items, gens)) / len(items)
