"""python -m backend.zoo {list | build NAME [--steps N] [--out DIR] | measure NAME | verify}"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from . import build, recipes, remeasure, verify_all


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m backend.zoo", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="list the organisms")
    b = sub.add_parser("build", help="train an organism and write assets/zoo/NAME")
    b.add_argument("name")
    b.add_argument("--steps", type=int, default=None, help="override the recipe's step count")
    b.add_argument("--seed", type=int, default=None)
    b.add_argument("--out", type=Path, default=None, help="root folder (default assets/zoo)")
    b.add_argument("--threads", type=int, default=None)
    m = sub.add_parser("measure", help="recompute an organism's metrics from its committed folder")
    m.add_argument("name")
    m.add_argument("--root", type=Path, default=None)
    v = sub.add_parser("verify", help="check every manifest's checksums")
    v.add_argument("--root", type=Path, default=None)
    args = ap.parse_args(argv)

    if args.cmd == "list":
        for name, rec in sorted(recipes().items()):
            print(f"{name:28s} seed={rec.seed:<6d} {rec.description}")
        return 0
    if args.cmd == "build":
        manifest = build(args.name, out_root=args.out, steps=args.steps, seed=args.seed, threads=args.threads)
        print(json.dumps({k: manifest[k] for k in ("name", "steps", "wall_time_s", "metrics")}, indent=2))
        return 0
    if args.cmd == "measure":
        manifest = remeasure(args.name, root=args.root)
        print(json.dumps({k: manifest[k] for k in ("name", "metrics", "remeasured")}, indent=2))
        return 0
    results = verify_all(args.root)
    bad = {k: v for k, v in results.items() if v}
    for name, problems in results.items():
        print(f"{'FAIL' if problems else 'ok  '} {name}")
        for p in problems:
            print(f"     {p}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
