"""How long the tabs' export buttons and Math's "Ask" take, warm, through the app's own handlers.

    python -m benchmarks.ui_actions [--repeat 3] [--profile OUT_DIR]

Each action runs once to warm up (models loaded, the tab's first view computed), then `--repeat`
times; the median is printed beside two baselines measured in the same run: one forward pass of
the math zoo model and one 1100 × 420 matplotlib PNG written to disk (what an export's figure
costs at least). Targets (issue 26, a 2-core machine): each export ≤ 2 s, Ask ≤ 5 s.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

TARGETS = {"mn_export": 2.0, "memo_export": 2.0, "mn_ask": 5.0}


def handler(demo, api_name: str):
    fn = next(f for f in demo.fns.values() if f.api_name == api_name)
    return fn.fn, [getattr(c, "value", None) for c in fn.inputs]


def timed(call, repeat: int, profile: Path | None = None, name: str = "") -> float:
    call()  # warm
    runs = []
    for i in range(repeat):
        prof = cProfile.Profile() if profile and i == 0 else None
        t0 = time.perf_counter()
        if prof:
            prof.enable()
        out = call()
        if prof:
            prof.disable()
            prof.dump_stats(str(profile / f"{name}.prof"))
        runs.append(time.perf_counter() - t0)
        assert out is not None
    return statistics.median(runs)


def baselines(repeat: int) -> dict[str, float]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import torch

    from backend.mathneuro import service

    model = service.bench("zoo").model
    ids = torch.ones(1, 16, dtype=torch.long)

    def forward():
        with torch.no_grad():
            return model(input_ids=ids).logits

    out = {"forward": timed(forward, repeat)}
    folder = Path(tempfile.mkdtemp(prefix="wb-bench-"))

    def png():
        fig, ax = plt.subplots(1, 3, figsize=(10, 3.8))
        for a in ax:
            a.plot(range(50), range(50))
        fig.savefig(folder / "b.png", dpi=110)
        plt.close(fig)
        return True

    out["png"] = timed(png, repeat)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--profile", type=Path, default=None, help="write cProfile stats of one run per action here")
    args = ap.parse_args(argv)
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    import app

    demo = app.build_app("zoo")
    base = baselines(args.repeat)
    print("baselines: " + ", ".join(f"{k} {v * 1000:.1f} ms" for k, v in base.items()))
    actions = {}
    fn, inputs = handler(demo, "mn_ask")
    inputs[0] = "What is 3 + 4?"
    actions["mn_ask"] = (fn, inputs)
    for name in ("mn_export", "memo_export"):
        actions[name] = handler(demo, name)
    for name, (fn, inputs) in actions.items():
        t = timed(lambda: fn(*inputs), args.repeat, args.profile, name)
        ratio = " · ".join(f"{t / v:,.0f}× {k}" for k, v in base.items())
        verdict = "ok" if t <= TARGETS[name] else f"OVER the {TARGETS[name]:g} s target"
        print(f"{name:12s} {t:7.2f} s  ({ratio})  {verdict}")


if __name__ == "__main__":
    main()
