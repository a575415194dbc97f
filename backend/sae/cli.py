"""The feature index from the command line, in one process (the sharded, resumable job for large
image sets is `backend.precompute.sae_index`, which writes the same file).

    python -m backend.sae.cli build [--organism llava-scenes-sae] [--out FILE] [--n-images N]
    python -m backend.sae.cli show FEATURE [--organism llava-scenes-sae] [--file FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from . import loading, organism
from .index import FeatureIndex, build_index


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m backend.sae.cli", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="rebuild the feature index of an SAE organism")
    b.add_argument("--organism", default=organism.ZOO_SAE)
    b.add_argument(
        "--out",
        type=Path,
        default=None,
        help="file to write (default: a copy beside, "
        "feature_index.rebuilt.safetensors, so the committed organism's checksums stay valid)",
    )
    b.add_argument("--n-images", type=int, default=None, help="use the first N scenes of the index set")
    b.add_argument("--top-k", type=int, default=16)
    s = sub.add_parser("show", help="print one feature's page from the stored index")
    s.add_argument("feature", type=int)
    s.add_argument("--organism", default=organism.ZOO_SAE)
    s.add_argument("--file", type=Path, default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    org = loading.load_organism(args.organism)
    if args.cmd == "build":
        specs = org.index_specs[: args.n_images] if args.n_images else org.index_specs
        assert org.sae is not None  # load_organism loads the weights
        idx = build_index(org.model, org.tokenizer, org.sae, specs, hookpoint=org.hookpoint, top_k=args.top_k)
        out = args.out or org.folder / "feature_index.rebuilt.safetensors"
        idx.save(out)
        print(json.dumps({"written": str(out), **idx.meta}, indent=2))
        return 0
    index = FeatureIndex.load(args.file) if args.file else org.index
    if index is None:
        ap.error(f"{args.organism} has no feature index: pass --file")
    ids, _, scores = index.top(args.feature, 5)
    t = index.tensors
    print(
        json.dumps(
            {
                "feature": args.feature,
                "density": float(t["density"][args.feature]),
                "max_act": float(t["max_act"][args.feature]),
                "top_images": ids,
                "top_scores": [round(s, 4) for s in scores],
                "label": org.labels.get(str(args.feature), {}),
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
