"""A new task for the zoo LM (math-llama): "how many more … does A have?" — the difference between
two people's counts. The organism was trained on gains, losses and sums in the same language, never
on this question, so fine-tuning has something to learn; every word is already in its vocabulary.
The loss counts every next-token prediction of the text (prompt, answer and end-of-sequence), as in
supervised fine-tuning on whole examples; `answer_only=True` restricts it to the answer.
"""

from __future__ import annotations

import random

import torch

NAMES = ["ann", "bob", "cal", "dan", "eve", "fay", "gus", "hal", "ivy", "joe", "kim", "lee", "max", "ned", "ora", "pam"]
OBJECTS = ["apples", "pears", "coins", "books", "cards", "eggs", "shells", "stamps", "cups", "pens"]


def difference_problem(rng: random.Random) -> tuple[str, str]:
    n1, n2 = rng.sample(NAMES, 2)
    obj = rng.choice(OBJECTS)
    a, b = rng.randint(0, 99), rng.randint(0, 99)
    a, b = max(a, b), min(a, b)
    prompt = f"{n1} has {a} {obj} and {n2} has {b} {obj} . how many more {obj} does {n1} have ?"
    return prompt, str(a - b)


def encode_task(tokenizer, pairs: list[tuple[str, str]], eos: str | None = None, answer_only: bool = False):
    """(ids LongTensor (n, T), mask BoolTensor (n, T)): mask[t] is True where the token at t + 1
    is a real token of the text (with answer_only: of the answer or the final eos); padded with the
    pad id."""
    eos = eos or tokenizer.eos_token
    rows, masks = [], []
    for prompt, answer in pairs:
        p = tokenizer(prompt)["input_ids"]
        full = tokenizer(f"{prompt} {answer} {eos}")["input_ids"]
        if full[: len(p)] != p:
            raise ValueError("prompt tokens are not a prefix of the full text")
        rows.append(full)
        m = [False] * len(full)
        for t in range(len(p) - 1 if answer_only else 0, len(full) - 1):
            m[t] = True
        masks.append(m)
    width = max(len(r) for r in rows)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.bool)
    for i, (r, m) in enumerate(zip(rows, masks)):
        ids[i, : len(r)] = torch.tensor(r)
        mask[i, : len(m)] = torch.tensor(m)
    return ids, mask


def difference_task_data(tokenizer, n: int = 512, seed: int = 0, answer_only: bool = False):
    rng = random.Random(f"pissa-difference-{seed}")
    return encode_task(tokenizer, [difference_problem(rng) for _ in range(n)], answer_only=answer_only)
