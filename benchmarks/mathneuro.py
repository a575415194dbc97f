"""MathNeuro on the zoo organism: cost of the intervention and the paper's numbers.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/mathneuro.py            # timing + memory
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/mathneuro.py --quality  # + prune / scale / overlap

Timing: `scaled(model, masks, f)` entered and left (apply + bit-exact restore), against the
baseline that copies the model (`copy.deepcopy`) and scales the copy, both measured in this run.
Memory: what `scaled` keeps while active (the masked entries' original values) per model
parameter, against the copy's 4 bytes per parameter.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backend.mathneuro import core  # noqa: E402
from backend.mathneuro.evaluate import accuracy  # noqa: E402


def load():
    from transformers import AutoTokenizer

    from backend.zoo import load as zoo_load, zoo_path

    path = zoo_path("math-llama")
    model = zoo_load("math-llama").eval()
    tok = AutoTokenizer.from_pretrained(path)
    read = lambda n: json.loads((path / n).read_text())  # noqa: E731
    return model, tok, {k: read(f"{k}.json") for k in ("eval_math", "eval_nonmath", "ident_math", "ident_nonmath")}


def timeit(fn, reps: int) -> list[float]:
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append(1000 * (time.perf_counter() - t0))
    return out


def bench_intervention(model, masks, reps: int) -> dict:
    snap = {k: v.clone() for k, v in model.state_dict().items()}
    n_params = sum(p.numel() for p in model.parameters())

    def apply_restore():
        with core.scaled(model, masks, 0.0):
            pass

    def deepcopy_apply():
        m2 = copy.deepcopy(model)
        params = dict(m2.named_parameters())
        with torch.no_grad():
            for name, mask in masks.items():
                params[name].data[mask] *= 0.0
        return m2

    apply_restore()
    deepcopy_apply()  # warm-up
    t_scaled = timeit(apply_restore, reps)
    t_copy = timeit(deepcopy_apply, reps)
    exact = all(torch.equal(v, snap[k]) for k, v in model.state_dict().items())
    extra = core.saved_bytes(model, masks, with_index=True)  # values + cached int32 positions
    return {
        "masked_weights": core.count(masks),
        "model_params": n_params,
        "scaled_apply_restore_ms_median": statistics.median(t_scaled),
        "scaled_apply_restore_ms_max": max(t_scaled),
        "deepcopy_baseline_ms_median": statistics.median(t_copy),
        "speedup_vs_deepcopy": statistics.median(t_copy) / statistics.median(t_scaled),
        "extra_bytes_per_param": extra / n_params,
        "deepcopy_bytes_per_param": sum(p.numel() * p.element_size() for p in model.parameters()) / n_params,
        "restored_bit_exactly": exact,
    }


def quality(model, tok, d, ks=(0.05, 0.1, 0.15), factors=(1.0, 1.05, 1.1, 1.15, 1.2, 1.3, 1.4, 1.5)) -> dict:
    em, en = d["eval_math"], d["eval_nonmath"]

    def ev(masks, f):
        with core.scaled(model, masks, f):
            return {"math": accuracy(model, tok, em), "nonmath": accuracy(model, tok, en)}

    base = ev({}, 1.0)
    out = {"baseline": base, "n_eval": {"math": len(em), "nonmath": len(en)}, "by_k": {}}
    for k in ks:
        t0 = time.perf_counter()
        mn = core.identify(model, d["ident_math"], d["ident_nonmath"], k, tokenizer=tok)
        t_ident = time.perf_counter() - t0
        sets = {
            "mathneuro": mn,
            "wanda": core.wanda(model, d["ident_math"], k, tokenizer=tok),
            "random": core.random_like(mn, 0),
            "lape": core.lape(model, d["ident_math"], d["ident_nonmath"], k, tokenizer=tok),
        }
        row = {"identify_s": t_ident, "prune": {}}
        for name, masks in sets.items():
            r = ev(masks, 0.0)
            r["math_drop_rel"] = 1 - r["math"] / base["math"] if base["math"] else float("nan")
            r["nonmath_drop_pts"] = 100 * (base["nonmath"] - r["nonmath"])
            r["count"] = core.count(masks)
            row["prune"][name] = r
        row["scale_curve"] = [{"factor": f, **ev(mn, f)} for f in factors]
        one = [
            core.identify(model, d["ident_math"][i : i + 1], d["ident_nonmath"][i : i + 1], k, tokenizer=tok)
            for i in range(5)
        ]
        row["one_sample_overlap"] = [core.overlap(o, mn) for o in one]
        row["per_layer_fraction"] = {l: v["fraction"] for l, v in core.per_layer(mn).items()}
        out["by_k"][str(k)] = row
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--k", type=float, default=0.15)
    ap.add_argument("--quality", action="store_true")
    ap.add_argument("--ks", default="0.03,0.05,0.15", help="K fractions for --quality")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    model, tok, d = load()
    res = {}
    for name, masks in (
        ("mathneuro", core.identify(model, d["ident_math"], d["ident_nonmath"], args.k, tokenizer=tok)),
        ("wanda", core.wanda(model, d["ident_math"], args.k, tokenizer=tok)),
    ):
        r = bench_intervention(model, masks, args.reps)
        res[f"intervention_{name}"] = r
        print(
            f"[{name} K={args.k:g}] scaled apply+restore {r['scaled_apply_restore_ms_median']:.2f} ms "
            f"(max {r['scaled_apply_restore_ms_max']:.2f}) vs deepcopy {r['deepcopy_baseline_ms_median']:.2f} ms "
            f"→ {r['speedup_vs_deepcopy']:.1f}× faster; extra {r['extra_bytes_per_param']:.3f} B/param "
            f"vs copy {r['deepcopy_bytes_per_param']:.1f} B/param; bit-exact restore: {r['restored_bit_exactly']}"
        )
    if args.quality:
        q = quality(model, tok, d, ks=tuple(float(x) for x in args.ks.split(",")))
        res["quality"] = q
        b = q["baseline"]
        print(f"baseline: math {100 * b['math']:.1f} %, non-math {100 * b['nonmath']:.1f} %")
        for k, row in q["by_k"].items():
            print(f"K = {100 * float(k):g} %  (identify {row['identify_s']:.2f} s)")
            for name, r in row["prune"].items():
                print(
                    f"  prune {name:9s} n={r['count']:7d}  math {100 * r['math']:5.1f} % "
                    f"(drop {100 * r['math_drop_rel']:5.1f} % rel)  non-math {100 * r['nonmath']:5.1f} % "
                    f"(drop {r['nonmath_drop_pts']:+.1f} pts)"
                )
            print(
                "  scale: "
                + ", ".join(
                    f"{c['factor']:g}→{100 * c['math']:.1f}/{100 * c['nonmath']:.1f}" for c in row["scale_curve"]
                )
            )
            print(
                f"  one-sample overlap with the {len(d['ident_math'])}-sample set: "
                + ", ".join(f"{100 * o:.1f} %" for o in row["one_sample_overlap"])
            )
            print("  per layer: " + ", ".join(f"L{l} {100 * v:.2f} %" for l, v in row["per_layer_fraction"].items()))
    if args.json:
        args.json.write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
