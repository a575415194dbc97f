"""Organism "math-llama": a tiny LlamaForCausalLM that works arithmetic word problems step by step
(1 to 3 operations, the answer is the worked solution) and speaks a
small non-math language (stories, facts of a fixed world, questions about them).

Truth it carries (JSON beside the weights, used by the Math neurons tab and the tests):
  eval_math.json       held-out arithmetic word problems of 2 or 3 steps (every step's operand
                       pair never seen in training), [{"prompt": ..., "answer": "25 + 36 = 61 .
                       61 - 12 = 49"}, ...]: the answer is the worked solution, scored by exact
                       match of the greedy continuation (a slip in any step fails the problem,
                       as in GSM8K, where the paper's pruning sends accuracy to about 0)
  eval_nonmath.json    held-out knowledge questions (a story never seen in training, then a
                       question about the world: answer one word), exact match
  eval_stories.json    held-out non-math stories (perplexity)
  ident_math.json / ident_nonmath.json   separate full texts for identifying parameters
                       (math: 2- and 3-step problems on training operand pairs)
  world.json           the world's facts (person -> city, colour, pet, food)

Load:
    from backend.zoo import load, zoo_path
    from transformers import AutoTokenizer
    model = load("math-llama")                       # LlamaForCausalLM
    tok = AutoTokenizer.from_pretrained(zoo_path("math-llama"))
Data helpers for new tasks in the same format: backend.mathneuro.data (math_problem,
fact_question, format_example, training_texts, ...).
"""

from __future__ import annotations

import json
import math
import random
import time
from pathlib import Path
from typing import TypedDict

import torch

from ..registry import recipe

N_EVAL_MATH = 400
N_EVAL_NONMATH = 400
N_IDENT = 64
PRUNE_K = 0.03  # MathNeuro's top-K per matrix for the pruning metric (the organism test's K)


# Architecture and optimisation (the recipe is deterministic given these and the seed).
class Hparams(TypedDict):
    hidden: int
    intermediate: int
    layers: int
    heads: int
    batch: int
    lr: float
    answer_weight: float
    math_share: float
    qa_share: float


HPARAMS = Hparams(
    hidden=96, intermediate=256, layers=4, heads=4, batch=48, lr=4e-3, answer_weight=5.0, math_share=0.55, qa_share=0.30
)


def model_config(vocab_size: int, pad: int, bos: int, eos: int):
    from transformers import LlamaConfig

    h = HPARAMS
    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=h["hidden"],
        intermediate_size=h["intermediate"],
        num_hidden_layers=h["layers"],
        num_attention_heads=h["heads"],
        num_key_value_heads=h["heads"],
        max_position_embeddings=96,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        pad_token_id=pad,
        bos_token_id=bos,
        eos_token_id=eos,
        attention_bias=False,
        mlp_bias=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    )


def _lr(step: int, total: int, peak: float, warmup: int = 100) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    p = (step - warmup) / max(1, total - warmup)
    return peak * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(1.0, p))))


def pruning_metrics(model, tok, ident_math, ident_nonmath, eval_math, eval_nonmath) -> dict:
    """MathNeuro's headline on the organism: prune the top PRUNE_K per matrix found on the
    identification texts, score held-out math and non-math (the organism test asserts the same)."""
    from ...mathneuro import core
    from ...mathneuro.evaluate import accuracy

    masks = core.find("mathneuro", model, ident_math, ident_nonmath, PRUNE_K, tokenizer=tok)
    with core.scaled(model, masks, 0.0):
        return {
            "pruned_k3_math_acc_heldout": accuracy(model, tok, eval_math),
            "pruned_k3_nonmath_acc_heldout": accuracy(model, tok, eval_nonmath),
        }


def measure(folder: Path) -> dict:
    """The pruning metrics again on the committed weights and truth files, with today's code (the
    identification may have changed since the organism was trained; the weights have not)."""
    from transformers import AutoTokenizer, LlamaForCausalLM

    read = lambda name: json.loads((folder / name).read_text())  # noqa: E731
    model = LlamaForCausalLM.from_pretrained(folder).eval()
    tok = AutoTokenizer.from_pretrained(folder)
    return pruning_metrics(
        model,
        tok,
        read("ident_math.json"),
        read("ident_nonmath.json"),
        read("eval_math.json"),
        read("eval_nonmath.json"),
    )


@recipe(
    "math-llama",
    seed=2410,
    measure=measure,
    model_class="transformers.LlamaForCausalLM",
    description="tiny Llama: multi-step arithmetic word problems (worked solutions) + a non-math fact/story language",
    default_steps=1800,
)
def train(out_dir: Path, *, seed: int, steps: int | None) -> dict:
    from transformers import LlamaForCausalLM

    from ...mathneuro import data
    from ...mathneuro.evaluate import accuracy, perplexity
    from ...mathneuro.tokenizer import build_tokenizer

    steps = 1800 if steps is None else steps
    tok = build_tokenizer()
    cfg = model_config(len(tok), tok.pad_token_id, tok.bos_token_id, tok.eos_token_id)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg)
    hp = HPARAMS
    opt = torch.optim.AdamW(model.parameters(), lr=hp["lr"], betas=(0.9, 0.98), weight_decay=0.05)
    rng = random.Random(f"mix-{seed}")
    qmark = tok.convert_tokens_to_ids("?")

    eval_math = data.math_set(N_EVAL_MATH, seed, split="test")
    eval_nonmath = data.nonmath_set(N_EVAL_NONMATH, seed + 1)
    eval_stories = data.stories(200, seed + 2)
    train_math_probe = data.math_set(200, seed + 3, split="train")
    eval_math_1step = data.math_set(200, seed + 4, split="test", steps=(1,))

    log = []
    t0 = time.perf_counter()
    model.train()
    for step in range(steps):
        texts = []
        for _ in range(hp["batch"]):
            u = rng.random()
            if u < hp["math_share"]:
                texts.append(data.format_example(*data.train_math_problem(rng)))
            elif u < hp["math_share"] + hp["qa_share"]:
                texts.append(data.format_example(*data.knowledge_question(rng)))
            else:
                texts.append(f"{data.story_with_facts(rng)} {data.EOS}")
        enc = tok(texts, padding=True, return_tensors="pt")
        ids, att = enc["input_ids"], enc["attention_mask"].bool()
        for g in opt.param_groups:
            g["lr"] = _lr(step, steps, hp["lr"])
        logits = model(input_ids=ids).logits[:, :-1]
        # Every token is predicted (a language model), the answer after "?" (and its <eos>)
        # with answer_weight times the weight: the skills are learnt in minutes, not hours.
        q = (ids == qmark).long()
        after_q = (q.cumsum(1) - q) > 0
        w = (1.0 + (hp["answer_weight"] - 1.0) * after_q.float())[:, 1:] * att[:, 1:].float()
        ce = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="none"
        )
        loss = (ce * w.reshape(-1)).sum() / w.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if (step + 1) % 250 == 0 or step + 1 == steps:
            model.eval()
            row = {
                "step": step + 1,
                "loss": round(loss.item(), 4),
                "math_acc": round(accuracy(model, tok, eval_math[:200]), 4),
                "nonmath_acc": round(accuracy(model, tok, eval_nonmath[:200]), 4),
                "s": round(time.perf_counter() - t0, 1),
            }
            model.train()
            log.append(row)
            print(json.dumps(row), flush=True)
    model.eval()

    metrics = {
        "math_acc_heldout": accuracy(model, tok, eval_math),
        "math_acc_train_pairs": accuracy(model, tok, train_math_probe),
        "math_acc_heldout_1step": accuracy(model, tok, eval_math_1step),
        "nonmath_acc_heldout": accuracy(model, tok, eval_nonmath),
        "story_perplexity": perplexity(model, tok, eval_stories),
        "params": sum(p.numel() for p in model.parameters()),
    }
    ident_math = data.texts_of(data.math_set(N_IDENT, seed + 10, split="train"))
    ident_nonmath = data.texts_of(data.nonmath_set(N_IDENT, seed + 11)) + [
        f"{s} {data.EOS}" for s in data.stories(N_IDENT // 4, seed + 12)
    ]
    metrics.update(pruning_metrics(model, tok, ident_math, ident_nonmath, eval_math, eval_nonmath))
    model.save_pretrained(out_dir, safe_serialization=True)
    tok.save_pretrained(out_dir)
    dump = lambda name, obj: (out_dir / name).write_text(json.dumps(obj, indent=1) + "\n")  # noqa: E731
    dump("eval_math.json", eval_math)
    dump("eval_nonmath.json", eval_nonmath)
    dump("eval_stories.json", eval_stories)
    dump("ident_math.json", ident_math)
    dump("ident_nonmath.json", ident_nonmath)
    dump("world.json", data.WORLD)
    return {"steps": steps, "metrics": metrics, "log": log}
