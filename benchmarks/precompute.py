"""Sharded precompute: wall time with 1 and with N processes for the same job, in one run.

    python -m benchmarks.precompute [--procs 2] [--jobs mathneuro nemo sae] [--n 2000] [--nemo-n 200000]

Each job (backend.precompute.<job>) is launched with torchrun on CPUs, one thread per process, first
with 1 process and then with N, over the same inputs; the merged outputs are checked to be
bit-identical. Times are end to end (process start, model load, the sharded work, the merge).
Inputs: `--n` MathNeuro texts per set (the organism's generators: training-split math problems and
non-math questions) and `--nemo-n` NeMo prompts (ordinary captions of the sd-memo recipe; the
statistics cost a text-encoder pass per prompt, so it takes ~10^5 prompts before the work outweighs
loading the pipeline); the feature index runs over the organism's whole scene set. The zoo's own
sets (64 texts, 160 prompts) are too small for a second process to pay for its start-up; a
precompute job exists for large sets.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

OUTPUTS = {
    "mathneuro": ("mathneuro-norms-math.safetensors", "mathneuro-norms-nonmath.safetensors"),
    "nemo_stats": ("nemo-stats.safetensors",),
    "sae_index": ("feature_index.safetensors",),
}
JOBS = {"mathneuro": "mathneuro", "nemo": "nemo_stats", "sae": "sae_index"}


def write_inputs(tmp: Path, n: int, nemo_n: int) -> dict[str, list[str]]:
    """The extra arguments of each job, with its input files written under `tmp`."""
    import numpy as np

    from backend.mathneuro import data
    from backend.zoo.recipes.memorization import caption_of, random_attrs

    (tmp / "math.json").write_text(json.dumps(data.texts_of(data.math_set(n, 7, split="train"))))
    (tmp / "nonmath.json").write_text(json.dumps(data.texts_of(data.nonmath_set(n, 8))))
    rng = np.random.default_rng(9)  # ordinary captions, repeats allowed (statistics over a prompt stream)
    (tmp / "prompts.json").write_text(json.dumps([caption_of(*random_attrs(rng)) for _ in range(nemo_n)]))
    return {
        "mathneuro": [
            "--math",
            str(tmp / "math.json"),
            "--nonmath",
            str(tmp / "nonmath.json"),
            "--chunk",
            "32",
            "--source",
            "zoo",
        ],
        "nemo_stats": ["--prompts", str(tmp / "prompts.json"), "--chunk", "64", "--source", "zoo"],
        "sae_index": ["--chunk", "64"],
    }


def launch(module: str, nproc: int, out: Path, extra: list[str], port: int) -> float:
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        str(nproc),
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(port),
        "-m",
        f"backend.precompute.{module}",
        "--out",
        str(out),
        "--cpu",
        *extra,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    t0 = time.perf_counter()
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{module} with {nproc} process(es) failed:\n{r.stderr[-3000:]}")
    return time.perf_counter() - t0


def identical(a_dir: Path, b_dir: Path, files) -> bool:
    import torch
    from safetensors.torch import load_file

    for f in files:
        a, b = load_file(str(a_dir / f)), load_file(str(b_dir / f))
        if a.keys() != b.keys() or not all(torch.equal(a[k], b[k]) for k in a):
            return False
    return True


def main() -> None:
    from tests.helpers.server import free_port

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--jobs", nargs="+", choices=sorted(JOBS), default=sorted(JOBS))
    ap.add_argument("--n", type=int, default=2000, help="MathNeuro texts per set")
    ap.add_argument("--nemo-n", type=int, default=200_000, help="NeMo prompts")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="wb-precompute-"))
    extra = write_inputs(tmp, args.n, args.nemo_n)
    print(
        f"start {time.strftime('%H:%M:%S', time.gmtime())} UTC  load average {os.getloadavg()[0]:.2f}  "
        f"cpus {os.cpu_count()}  n={args.n}  nemo prompts={args.nemo_n}"
    )
    for job in args.jobs:
        module = JOBS[job]
        one = launch(module, 1, tmp / job / "one", extra[module], free_port())
        many = launch(module, args.procs, tmp / job / "many", extra[module], free_port())
        same = identical(tmp / job / "one", tmp / job / "many", OUTPUTS[module])
        print(
            f"{module:11s} 1 process: {one:6.2f} s   {args.procs} processes: {many:6.2f} s   "
            f"speed-up {one / many:.2f}x   bit-identical: {same}   load {os.getloadavg()[0]:.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
