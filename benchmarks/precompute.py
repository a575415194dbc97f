"""Sharded precompute: wall time with 1 and with N processes for the same job, in one run.

    python -m benchmarks.precompute [--procs 2] [--samples 64]

The job is MathNeuro's statistics over the zoo's identification sets (backend.precompute.mathneuro),
launched with torchrun on CPUs. Prints both times and the speed-up; the merged results are checked
to be bit-identical.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def launch(nproc: int, out: Path, samples: int, port: int) -> float:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
           "--master_addr", "127.0.0.1", "--master_port", str(port), "-m", "backend.precompute.mathneuro",
           "--out", str(out), "--samples", str(samples), "--chunk", "8", "--cpu", "--source", "zoo"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, env=env, check=True, capture_output=True)
    return time.perf_counter() - t0


def main() -> None:
    import torch
    from safetensors.torch import load_file

    from tests.helpers.server import free_port

    ap = argparse.ArgumentParser()
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--samples", type=int, default=None)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="wb-precompute-"))
    samples = args.samples or 10**9
    one = launch(1, tmp / "one", samples, free_port())
    many = launch(args.procs, tmp / "many", samples, free_port())
    same = True
    for f in ("mathneuro-norms-math.safetensors", "mathneuro-norms-nonmath.safetensors"):
        a, b = load_file(str(tmp / "one" / f)), load_file(str(tmp / "many" / f))
        same &= a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    print(f"1 process: {one:.2f} s   {args.procs} processes: {many:.2f} s   speed-up {one / many:.2f}x")
    print(f"merged results bit-identical: {same}")


if __name__ == "__main__":
    main()
