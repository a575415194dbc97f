"""Exact-match scoring of short answers, fast.

Greedy generation of an answer followed by ``<eos>`` equals the reference exactly iff, fed the
prompt plus the reference, the model's argmax at every answer position (and at the position that
must produce ``<eos>``) is the reference token: each greedy step then sees exactly the prefix it
would have generated itself. So exact match of greedy generation costs ONE batched forward pass
per batch (`exact_match`); `generate` runs the actual greedy loop for the sample answers shown in
the tab (and a unit test checks that both agree).
"""

from __future__ import annotations

import math
from typing import Sequence

import torch

from ..core import limits
from .data import EOS


def _ids(tok, text: str) -> list[int]:
    return tok(text, add_special_tokens=True)["input_ids"]


def encode_with_answers(tok, items: Sequence[dict]):
    """Right-padded ids of "<bos> prompt answer <eos>" and a mask of the positions whose *next*
    token is an answer token or the final <eos> (the positions that must predict it)."""
    eos = tok.convert_tokens_to_ids(EOS)
    seqs, starts = [], []
    for it in items:
        p = _ids(tok, it["prompt"])
        a = tok(str(it["answer"]), add_special_tokens=False)["input_ids"]
        seqs.append(p + a + [eos])
        starts.append(len(p))
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), tok.pad_token_id, dtype=torch.long)
    predict = torch.zeros((len(seqs), width), dtype=torch.bool)
    for i, (s, st) in enumerate(zip(seqs, starts)):
        ids[i, : len(s)] = torch.tensor(s)
        predict[i, st - 1 : len(s) - 1] = True
    return ids, predict


@torch.no_grad()
def exact_match(model, tok, items: Sequence[dict], batch_size: int = 256) -> torch.Tensor:
    """Bool per item: the greedy answer equals the reference exactly (see module docstring)."""
    out = []
    # between batches: a request's time limit ends long sweeps, before a batch that would pass it
    for i in limits.Steps("the evaluation").each(range(0, len(items), batch_size)):
        ids, predict = encode_with_answers(tok, items[i : i + batch_size])
        # Right padding + causal attention: pad tokens never influence earlier positions.
        logits = model(input_ids=ids.to(model.device), use_cache=False).logits
        pred = logits.argmax(-1).cpu()
        target = torch.roll(ids, -1, dims=1)
        ok = (pred == target) | ~predict
        out.append(ok.all(dim=1))
    return torch.cat(out) if out else torch.zeros(0, dtype=torch.bool)


def accuracy(model, tok, items: Sequence[dict], batch_size: int = 256) -> float:
    em = exact_match(model, tok, items, batch_size)
    return float(em.float().mean()) if len(em) else float("nan")


def answer_text(tok, ids: Sequence[int]) -> str:
    """Tokens → answer string, digits joined back into numbers ("6 8" → "68")."""
    toks = [t for t in tok.convert_ids_to_tokens(list(ids)) if t not in tok.all_special_tokens]
    out = ""
    for t in toks:
        if out and not (t.isdigit() and out[-1].isdigit()):
            out += " "
        out += t
    return out


@torch.no_grad()
def generate(model, tok, prompts: Sequence[str], max_new_tokens: int = 32) -> list[str]:
    """Greedy answers (text up to <eos>) for a batch of prompts. Left-padded, with attention mask
    and position ids, no sampling. The default length covers the organism's longest worked
    solution (3 steps, 26 tokens)."""
    if not prompts:
        return []
    eos = tok.convert_tokens_to_ids(EOS)
    seqs = [_ids(tok, p) for p in prompts]
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), tok.pad_token_id, dtype=torch.long)
    att = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, width - len(s) :] = torch.tensor(s)
        att[i, width - len(s) :] = 1
    dev = model.device
    ids, att = ids.to(dev), att.to(dev)
    done = torch.zeros(len(seqs), dtype=torch.bool, device=dev)
    answers: list[list[int]] = [[] for _ in seqs]
    past = None
    cur = ids
    for _ in range(max_new_tokens):
        pos = (att.cumsum(-1) - 1).clamp(min=0)[:, -cur.shape[1] :]
        out = model(input_ids=cur, attention_mask=att, position_ids=pos, past_key_values=past, use_cache=True)
        past = out.past_key_values
        nxt = out.logits[:, -1].argmax(-1)
        for i in range(len(seqs)):
            if not done[i]:
                if int(nxt[i]) == eos:
                    done[i] = True
                else:
                    answers[i].append(int(nxt[i]))
        if bool(done.all()):
            break
        cur = nxt.unsqueeze(1)
        att = torch.cat([att, torch.ones_like(att[:, :1])], dim=1)
    return [answer_text(tok, a) for a in answers]


@torch.no_grad()
def perplexity(model, tok, texts: Sequence[str], batch_size: int = 128) -> float:
    """exp(mean next-token loss) over all non-pad tokens of `texts`."""
    total, count = 0.0, 0
    for i in range(0, len(texts), batch_size):
        enc = tok(list(texts[i : i + batch_size]), padding=True, return_tensors="pt")
        ids = enc["input_ids"].to(model.device)
        mask = enc["attention_mask"].to(model.device).bool()
        logits = model(input_ids=ids, use_cache=False).logits[:, :-1]
        tgt = ids[:, 1:]
        m = mask[:, 1:]
        loss = torch.nn.functional.cross_entropy(logits[m], tgt[m], reduction="sum")
        total += float(loss)
        count += int(m.sum())
    return math.exp(total / max(count, 1))
