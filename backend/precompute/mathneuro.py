"""MathNeuro's statistics over a whole dataset: Σ_samples ‖X_j‖₂ for every linear layer's inputs,
on math and on non-math text, sharded across processes and merged exactly (a sum in chunk order).

    torchrun --nproc_per_node 2 -m backend.precompute.mathneuro --out DIR --cpu [--samples 64]

Writes DIR/mathneuro-norms-math.safetensors and DIR/mathneuro-norms-nonmath.safetensors
({layer name: float64 vector}); `load_masks(model, DIR, top_k)` turns them into the same
{weight name: BoolTensor} masks that `backend.mathneuro.identify` returns.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import torch
from safetensors.torch import load_file

from ..core.precompute import ShardedJob, merge_sum
from ..mathneuro import core

KINDS = ("math", "nonmath")


def run(bench, out: Path, n: int | None = None, chunk: int = 8, state=None) -> dict[str, dict]:
    results = {}
    for kind in KINDS:
        texts = bench.data[f"ident_{kind}"][:n] if n else bench.data[f"ident_{kind}"]

        def compute(start: int, end: int, texts=texts):
            return core.input_norms(bench.model, texts[start:end], tokenizer=bench.tok)

        job = ShardedJob(f"mathneuro-norms-{kind}", out, len(texts), chunk, compute, merge_sum)
        results[kind] = job.run(state)
    return results


def load_masks(model, folder: Path, top_k: float) -> dict[str, torch.Tensor]:
    """MathNeuro masks from precomputed statistics (top-K% on math minus top-K% on non-math)."""
    norms = {k: load_file(str(Path(folder) / f"mathneuro-norms-{k}.safetensors")) for k in KINDS}
    top = {k: core.top_masks(core.importance(model, norms[k]), top_k) for k in KINDS}
    return core.subtract(top["math"], top["nonmath"])


def main(argv: list[str] | None = None) -> None:
    from accelerate import PartialState

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--samples", type=int, default=None, help="samples per set (default: all)")
    ap.add_argument("--chunk", type=int, default=8)
    ap.add_argument("--source", default=None, help="zoo | hub (default: the active preset source)")
    ap.add_argument("--cpu", action="store_true", help="run on CPUs (gloo) even if a GPU exists")
    args = ap.parse_args(argv)
    state = PartialState(cpu=args.cpu)
    from ..mathneuro.service import bench

    b = bench(args.source)
    run(b, args.out, args.samples, args.chunk, state)
    if state.is_main_process:
        print(f"wrote {args.out}/mathneuro-norms-{{math,nonmath}}.safetensors")


if __name__ == "__main__":
    main()
