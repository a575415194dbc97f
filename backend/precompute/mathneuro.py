"""MathNeuro's statistics over a whole dataset: Σ_samples ‖X_j‖₂ for every linear layer's inputs,
on math and on non-math text, sharded across processes and merged exactly (a sum in chunk order).

    torchrun --nproc_per_node 2 -m backend.precompute.mathneuro --out DIR --cpu [--samples 64]
    accelerate launch --num_processes 8 -m backend.precompute.mathneuro --out DIR --source hub \
        --math assets/data/gsm8k/train.jsonl --nonmath my_nonmath.jsonl

--math / --nonmath: the texts to score, read before the model or any hub is asked for. Zoo: one
per line, or a JSON list of strings or of {"prompt", "answer"} items. Hub: JSONL / JSON / CSV with
prompt (or question) and answer, optionally choices, or text; plain text one per line; each
question and answer is scored as a conversation in the model's chat template. Defaults: the zoo's
identification sets; in hub mode the whole GSM8K train split, and the tab's default non-math set.

Writes DIR/mathneuro-norms-math.safetensors and DIR/mathneuro-norms-nonmath.safetensors
({layer name: float64 vector}); `load_masks(model, DIR, top_k)` turns them into the same
{weight name: BoolTensor} masks that `backend.mathneuro.identify` returns.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file

from ..core.precompute import ShardedJob, job_parser, job_state, merge_sum, read_texts, texts_digest
from ..core.presets import active_source
from ..mathneuro import chat, core, sources

KINDS = ("math", "nonmath")


def run(
    bench,
    out: Path,
    n: int | None = None,
    chunk: int = 8,
    state=None,
    texts: dict | None = None,
    stop_after: int | None = None,
) -> dict[str, dict | None]:
    """`texts`: {"math": [...], "nonmath": [...]} to score instead of the preset's identification sets.
    Each kind's merged norms on the main process, None on the others (ShardedJob.run)."""
    results = {}
    for kind in KINDS:
        texts_ = inputs(bench, kind, (texts or {}).get(kind), n)

        def compute(start: int, end: int, texts_=texts_):
            return core.input_norms(bench.model, texts_[start:end], tokenizer=bench.tok)

        job = ShardedJob(
            f"mathneuro-norms-{kind}", out, len(texts_), chunk, compute, merge_sum, signature=texts_digest(texts_)[:16]
        )
        results[kind] = job.run(state, stop_after=stop_after)
    return results


def inputs(bench, kind: str, given: list | None, n: int | None = None) -> list:
    """What one side scores: the zoo's texts as they are; in hub mode each item (or text) as token
    ids in the model's chat template, as the tab identifies."""
    if given:
        items = given
    elif kind == "math":
        items = bench.data["ident_math"] if bench.zoo else sources.read_gsm8k("train")
    else:
        items = bench.nonmath_set()["ident"]
    items = items[:n] if n else items
    if bench.zoo:
        return items
    return [chat.sample_ids(bench.tok, it if isinstance(it, dict) else {"text": it}, kind) for it in items]


def read_inputs(path: Path, source: str) -> list:
    """A --math / --nonmath file, read as the preset's source expects (see the module docstring)."""
    return read_texts(path) if source == "zoo" else sources.read_items(path)


def load_masks(model, folder: Path, top_k: float) -> dict[str, torch.Tensor]:
    """MathNeuro masks from precomputed statistics (top-K% on math minus top-K% on non-math)."""
    norms = {k: load_file(str(Path(folder) / f"mathneuro-norms-{k}.safetensors")) for k in KINDS}
    return core.masks_from_norms(model, norms["math"], top_k, minus=norms["nonmath"])


def main(argv: list[str] | None = None) -> None:
    ap = job_parser(__doc__, chunk=8, chunk_help="texts per chunk (= one forward batch)")
    ap.add_argument("--samples", type=int, default=None, help="samples per set (default: all)")
    ap.add_argument("--source", default=None, help="zoo | hub (default: the active preset source)")
    ap.add_argument("--math", type=Path, default=None, help="math texts (default: the preset's identification set)")
    ap.add_argument("--nonmath", type=Path, default=None, help="non-math texts (default: the preset's)")
    args = ap.parse_args(argv)
    state = job_state(args)
    from ..mathneuro.service import bench
    from ..mathneuro.sets import NoNonMath

    source = (args.source or active_source()).strip().lower()
    # the files first: a bad file fails here, before any model or hub is asked for
    try:
        texts = {k: read_inputs(p, source) for k, p in (("math", args.math), ("nonmath", args.nonmath)) if p}
    except (OSError, ValueError) as e:
        ap.error(str(e))
    b = bench(source)
    try:
        run(b, args.out, args.samples, args.chunk, state, texts=texts, stop_after=args.stop_after)
    except NoNonMath as e:  # hub mode offline with no --nonmath file
        ap.error(str(e).replace("Name a non-math file", "Pass --nonmath FILE"))
    if state.is_main_process:
        print(f"wrote {args.out}/mathneuro-norms-{{math,nonmath}}.safetensors")


if __name__ == "__main__":
    main()
