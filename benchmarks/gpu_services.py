"""Every tab's main service calls on the zoo organisms, on whatever device the loaders pick
(`WORKBENCH_DEVICE`, else CUDA when there is one): checks that each model sits on that device after
loading, that no result carries a device tensor out (under ZeroGPU results are pickled back to a
CPU-only process), and times each call after a warm-up, as a measured basis for the ZeroGPU
durations. `--compare FILE` checks the figures against a run on another device.

    WORKBENCH_DEVICE=cpu python -m benchmarks.gpu_services --json cpu.json
    python -m benchmarks.gpu_services --json gpu.json --compare cpu.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def device_tensors(obj: Any, path: str = "result") -> list[str]:
    """Paths of tensors inside `obj` that live off the CPU."""
    if isinstance(obj, torch.Tensor):
        return [path] if obj.device.type != "cpu" else []
    if isinstance(obj, dict):
        return [p for k, v in obj.items() for p in device_tensors(v, f"{path}[{k!r}]")]
    if isinstance(obj, (list, tuple)):
        return [p for i, v in enumerate(obj) for p in device_tensors(v, f"{path}[{i}]")]
    return []


def timed(fn: Callable[[], Any], clear: Callable[[], None] | None = None, repeats: int = 3) -> tuple[Any, float]:
    """(result, median seconds) of `fn`, one warm-up first; `clear` empties the results caches so
    each run computes."""
    out = fn()
    times = []
    for _ in range(repeats):
        if clear:
            clear()
        t0 = time.perf_counter()
        out = fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return out, float(np.median(times))


def _clear(*caches):
    def clear():
        for c in caches:
            c.clear()

    return clear


def relevance() -> tuple[list, dict]:
    from backend.lrp import service as svc

    m = svc.load_text()
    img_m = svc.load_image()
    clear = _clear(svc.CACHE)
    text = "the film was a delight but the ending felt slow"
    r, s = timed(lambda: svc.explain_text(m, text, ["mambalrp", "gi"]), clear)
    ri, si = timed(lambda: svc.explain_image(img_m, svc.example_image(img_m, 0), ["mambalrp", "gi"]), clear)
    models = [m.model, img_m.model]
    calls = {
        "explain_text": (r, s, {"logit": r["logit"], "sum_mambalrp": r["sum_relevance"]["mambalrp"]}),
        "explain_image": (ri, si, {"sum_mambalrp": ri["sum_relevance"]["mambalrp"], "pred": ri["pred_index"]}),
    }
    return models, calls


def features() -> tuple[list, dict]:
    from backend.sae import analysis, loading
    from backend.sae import scenes as S

    org = loading.get_organism("zoo")
    img = S.render(org.heldout_specs[0])[0]
    clear = _clear(analysis._RESULT_CACHE)
    a, sa = timed(lambda: analysis.analyse_image(org, img), clear)
    f = a["features"][0]["feature"]
    st, ss = timed(lambda: analysis.steer_caption(org, img, f, analysis.default_clamp_value(org, f)), clear)
    return [org.model, org.sae], {
        "analyse_image": (a, sa, {"top_feature": f, "top_mean": a["features"][0]["mean_act"]}),
        "steer_caption": (st, ss, {"baseline": st["baseline"], "steered": st["steered"]}),
    }


def memorization() -> tuple[list, dict]:
    from backend.nemo import service as svc

    m = svc.get("zoo")
    prompt = m.memorized[0]["prompt"]
    clear = _clear(svc._RESULTS)
    c, sc = timed(lambda: svc.check(prompt, source="zoo"), clear)
    loc, sl = timed(lambda: svc.find(prompt, source="zoo"), clear)
    spec = svc.parse_neurons(m, loc["labels"])
    cmp_, sp = timed(lambda: svc.compare(prompt, spec, [0, 1], source="zoo"), clear)
    return [m.pipe.unet, m.pipe.text_encoder, m.pipe.vae], {
        "check": (c, sc, {"score": c.get("score")}),
        "find": (loc, sl, {"neurons": loc["labels"]}),
        "compare": (
            cmp_,
            sp,
            {"ssim_on": float(np.median(cmp_["ssim_on"])), "ssim_off": float(np.median(cmp_["ssim_off"]))},
        ),
    }


def math_neurons() -> tuple[list, dict]:
    from backend.mathneuro import service as svc

    b = svc.bench("zoo")
    s = svc.Setting("mathneuro", 0.03, 50, 0.0)
    clear = _clear(svc.MASK_CACHE, svc.RESULT_CACHE)
    mk, sm = timed(lambda: b.masks(s), clear)
    ev, se = timed(lambda: b.evaluate(s), clear)
    return [b.model], {
        "masks": (mk, sm, {"masked": int(sum(int(v.sum()) for v in mk.values()))}),
        "evaluate": (ev, se, {k: v for k, v in ev.items() if isinstance(v, (int, float))}),
    }


def adapters() -> tuple[list, dict]:
    from backend.pissa import service as svc
    from backend.pissa.race import RaceConfig

    key = svc.choices("zoo")[0][1]
    layer = svc.layer_names(key)[0]
    clear = _clear(svc.RESULTS)
    la, sa = timed(lambda: svc.layer_analysis(key, layer, 4), clear)

    def race():
        evs = [
            e
            for e in svc.race_stream(key, RaceConfig(methods=("lora", "pissa"), seeds=(0,), steps=10))
            if not e.get("heartbeat")
        ]
        return evs[-1]

    last, sr = timed(race, repeats=1)
    return [svc.get_model(key)], {
        "layer_analysis": (la, sa, {"energy": la["energy_top_r"], "error": la["reconstruction_rel_error"]}),
        "race_10_steps": (last, sr, {}),
    }


TABS = {
    "relevance": relevance,
    "features": features,
    "memorization": memorization,
    "math_neurons": math_neurons,
    "adapters": adapters,
}


def close(a, b, tol: float) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=tol, abs_tol=tol)
    return a == b


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="", help=f"comma-separated subset of {','.join(TABS)}")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--compare", type=Path, default=None, help="figures of a run on another device")
    ap.add_argument("--tol", type=float, default=0.05, help="relative tolerance of --compare")
    args = ap.parse_args(argv)
    from backend.core.device import describe, pick_device

    dev = pick_device()
    other = json.loads(args.compare.read_text())["tabs"] if args.compare else {}
    out, failures = {"device": describe(), "tabs": {}}, []
    for name in [t for t in args.only.split(",") if t] or list(TABS):
        t0 = time.perf_counter()
        try:
            models, calls = TABS[name]()
        except Exception as e:  # one tab's failure must not hide the others
            failures.append(f"{name}: {type(e).__name__}: {e}")
            print(f"[{name}] FAILED {type(e).__name__}: {e}", flush=True)
            continue
        where = sorted({str(next(m.parameters()).device) for m in models})
        if where != [str(torch.empty(0, device=dev).device)]:
            failures.append(f"{name}: models on {where}, expected {dev}")
        tab = {"load_and_first_s": round(time.perf_counter() - t0, 2), "model_devices": where, "calls": {}}
        for call, (result, sec, figures) in calls.items():
            leaks = device_tensors(result)
            if leaks:
                failures.append(f"{name}.{call}: device tensors in the result: {leaks[:3]}")
            tab["calls"][call] = {"s": round(sec, 4), "figures": figures}
            ref = other.get(name, {}).get("calls", {}).get(call, {}).get("figures", {})
            for k, v in figures.items():
                if k in ref and not close(v, ref[k], args.tol):
                    failures.append(f"{name}.{call}.{k}: {v!r} here vs {ref[k]!r} on the other device")
            print(f"[{name}] {call:16s} {sec * 1000:9.1f} ms  {json.dumps(figures)[:150]}", flush=True)
        out["tabs"][name] = tab
    out["failures"] = failures
    if args.json:
        args.json.write_text(json.dumps(out, indent=2, default=str))
    print(f"device: {out['device']}")
    print("\n".join(failures) if failures else "all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
