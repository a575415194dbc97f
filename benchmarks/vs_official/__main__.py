"""The workbench beside the papers' official code: the same inputs on the same machine, the time
ratio (workbench / official) and the largest difference in the results.

    python -m benchmarks.vs_official --official DIR [--only nemo,lrp,pissa,mathneuro]

DIR holds the official repositories as checked out (not part of this project, never imported by
it): DIR/MambaLRP (FarnoushRJ/MambaLRP), DIR/localizing_memorization_in_diffusion_models
(ml-research), DIR/MathNeuro (bryanchrist/MathNeuro, GPL: run as a program, its code is neither read
nor copied here) and DIR/PiSSA (GraphPKU/PiSSA). Pure-Python packages the official code needs and
this project does not (einops, torchmetrics) are looked up in DIR/site, after the project's own.

Everything done to the official code is glue, named where it happens: the device (their CUDA-only
calls on a CPU), the resolution and layer layout of a model other than theirs, and the same seeds.
Times are medians of alternated runs, one thread per process unless --threads says otherwise.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from datetime import datetime, timezone
from pathlib import Path

import torch

from benchmarks.vs_official.common import NEMO_REPO
from benchmarks.vs_official.lrp import bench_lrp
from benchmarks.vs_official.mathneuro import bench_mathneuro
from benchmarks.vs_official.nemo import bench_nemo_sd14, bench_nemo_zoo
from benchmarks.vs_official.pissa import bench_pissa


def table(rows: list[dict]) -> str:
    head = "| method | case | workbench s | official s | ratio | largest difference | note |"
    lines = [head, "|" + "---|" * 7]
    for r in rows:
        lines.append(
            f"| {r['method']} | {r['case']} | {r['work_s']:.3f} | {r['off_s']:.3f} | "
            f"{r['ratio']:.2f} | {r['diff']} | {r['note']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--official", type=Path, required=True, help="folder holding the official repositories")
    ap.add_argument("--only", default="lrp,nemo,nemo_sd14,mathneuro,pissa")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--nemo-prompts", type=int, default=None, help="zoo prompts to localise (default all)")
    args = ap.parse_args(argv)
    site = args.official / "site"
    if site.is_dir():
        sys.path.append(str(site))
    torch.set_num_threads(args.threads)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    only = set(args.only.split(","))
    start = datetime.now(timezone.utc)
    print(
        f"start {start:%Y-%m-%d %H:%M} UTC  load {os.getloadavg()[0]:.2f}  cpus {os.cpu_count()}  "
        f"threads {args.threads}  torch {torch.__version__}  {platform.processor() or platform.machine()}"
        f"  GPU: {torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none'}"
    )
    sections = {
        "lrp": lambda: bench_lrp(args.official / "MambaLRP", args.repeats),
        "mathneuro": lambda: bench_mathneuro(args.official / "MathNeuro"),
        "pissa": lambda: bench_pissa(args.official / "PiSSA", args.repeats),
        "nemo": lambda: bench_nemo_zoo(args.official / NEMO_REPO, args.repeats, args.nemo_prompts),
        "nemo_sd14": lambda: bench_nemo_sd14(args.official / NEMO_REPO, args.repeats),
    }
    rows: list[dict] = []
    for name, run in sections.items():
        if name in only:
            new = run()
            rows += new
            print("\n".join(table(new).splitlines()[2:]), flush=True)  # as each section ends
    print(table(rows))
    print(f"end {datetime.now(timezone.utc):%H:%M} UTC  load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return rows


if __name__ == "__main__":
    main()
