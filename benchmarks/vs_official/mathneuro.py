"""MathNeuro: identification by the official script (run as a program, its GPL code never read)
beside backend.mathneuro.core.identify."""

from __future__ import annotations

import contextlib
import csv
import os
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.vs_official.common import ROOT, official_path, row


@contextlib.contextmanager
def observed_mathneuro():
    """Observation only, at the libraries' boundary (their GPL code is run, never read): every
    model transformers loads for them, with a copy of its weights as loaded, and every text their
    tokenizer encodes."""
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerBase

    models, texts = [], []
    load, encode = AutoModelForCausalLM.from_pretrained.__func__, PreTrainedTokenizerBase.encode

    def loading(cls, *a, **k):
        m = load(cls, *a, **k)
        models.append((m, {n: p.detach().clone() for n, p in m.named_parameters()}))
        return m

    def encoding(self, text, *a, **k):
        texts.append(text)
        return encode(self, text, *a, **k)

    AutoModelForCausalLM.from_pretrained = classmethod(loading)
    PreTrainedTokenizerBase.encode = encoding
    try:
        yield models, texts
    finally:
        AutoModelForCausalLM.from_pretrained = classmethod(load)
        PreTrainedTokenizerBase.encode = encode


def bench_mathneuro(folder: Path, proportion: float = 0.05) -> list[dict]:
    """Identification on the zoo math LM from one math and one non-math text (the paper's
    one-sample setting): their MathNeuro.py run in this process with --proportion and one repeat,
    its math-specific set read off the first model it prunes (the parameters it sets to 0), and
    the workbench's `identify` on the very strings their script encoded (their prompt template
    included). Their time is the whole script (it also loads the model several times and runs its
    evaluation); the workbench's is the identification alone."""
    import json
    import runpy

    from transformers import AutoTokenizer

    from backend.mathneuro import core

    zoo = ROOT / "assets" / "zoo" / "math-llama"
    tmp = Path(tempfile.mkdtemp(prefix="mathneuro-official-"))
    files = []
    for kind in ("math", "nonmath"):
        text = json.loads((zoo / f"ident_{kind}.json").read_text())[0]
        files.append(tmp / f"{kind}.csv")
        with files[-1].open("w", newline="") as f:  # their column names, from their error messages
            csv.writer(f).writerows([["question", "solution", "answer"], [text, "", ""]])
    argv = sys.argv
    sys.argv = [
        "MathNeuro.py",
        "--model",
        str(zoo),
        "--save_path",
        str(tmp / "out"),
        "--train_dataset",
        str(files[0]),
        "--calibration_datasets",
        str(files[1]),
        "--calibration_dataset_names",
        "Other",
        "--eval_datasets",
        "race",
        "--num_samples",
        "1",
        "--num_repeats",
        "1",
        "--proportion",
        str(proportion),
    ]
    try:
        with (
            official_path(folder),
            observed_mathneuro() as (models, texts),
            contextlib.redirect_stdout(open(os.devnull, "w")),
        ):
            t0 = time.perf_counter()
            runpy.run_path(str(folder / "MathNeuro.py"), run_name="__main__")
            off_s = time.perf_counter() - t0
    finally:
        sys.argv = argv
    pruned = next(
        (
            {n: (p.detach() == 0) & (w0[n] != 0) for n, p in m.named_parameters()}
            for m, w0 in models
            if any(bool((p.detach() != w0[n]).any()) for n, p in m.named_parameters())
        ),
        None,
    )
    base = models[0][0]
    tok = AutoTokenizer.from_pretrained(zoo)
    t0 = time.perf_counter()
    masks = core.identify(base, [texts[0]], [texts[1]], proportion, tokenizer=tok)
    work_s = time.perf_counter() - t0
    if pruned is None:
        diff = "their script pruned nothing"
    else:
        inter = sum(int((pruned[n] & masks[n].to(pruned[n].device)).sum()) for n in masks if n in pruned)
        union = core.count(masks) + sum(int(v.sum()) for v in pruned.values()) - inter
        diff = (
            f"sets: official {sum(int(v.sum()) for v in pruned.values())}, workbench "
            f"{core.count(masks)}, Jaccard {inter / max(1, union):.3f}"
        )
    return [
        row(
            "MathNeuro",
            f"identification, zoo math LM, 1 + 1 texts, top {proportion:g}",
            work_s,
            off_s,
            diff,
            "their time: the whole script",
        )
    ]
