"""Cold start of the workbench to an answering page, against a bare Gradio app in the same run.

    python -m benchmarks.startup [--repeats 3] [--compare OTHER/app.py]

Prints seconds for each and the ratio (machines are noisy; the ratio is what to compare). The goals:
an answering page within 15 s on a 2-core CPU machine with the zoo, and within 2× a bare Gradio
app's start in the same run. `--compare` also times another checkout's app.py in the same
interleaved runs (e.g. the code before a change, unpacked with `git archive REV | tar -x -C DIR`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.helpers.server import serve  # noqa: E402

BARE = textwrap.dedent("""
    import argparse, os
    os.environ["GRADIO_ANALYTICS_ENABLED"] = "False"
    import gradio as gr
    ap = argparse.ArgumentParser(); ap.add_argument("--port", type=int); ap.add_argument("--host")
    a = ap.parse_args()
    with gr.Blocks() as demo:
        gr.Markdown("hello")
    demo.queue().launch(server_name=a.host, server_port=a.port)
""")


def cold_start(app_path: Path | None = None) -> float:
    t0 = time.perf_counter()
    with serve(app_path=app_path):
        return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--compare", type=Path, default=None, help="another app.py to time in the same runs")
    args = ap.parse_args()
    bare_app = Path(tempfile.mkdtemp()) / "bare_app.py"
    bare_app.write_text(BARE)
    apps = {"workbench": None, "bare Gradio app (baseline)": bare_app}
    if args.compare:
        apps[f"compared: {args.compare}"] = args.compare
    times: dict[str, list[float]] = {name: [] for name in apps}
    print(
        f"start {time.strftime('%H:%M:%S UTC', time.gmtime())}  load average {os.getloadavg()[0]:.1f}  "
        f"cpus {os.cpu_count()}",
        flush=True,
    )
    for _ in range(args.repeats):  # interleaved, so drift on a noisy machine hits all alike
        for name, path in apps.items():
            times[name].append(cold_start(path))
    med = {name: statistics.median(xs) for name, xs in times.items()}
    runs = lambda xs: ", ".join(f"{x:.2f}" for x in xs)  # noqa: E731
    for name, xs in times.items():
        print(f"{name + ':':<40} median {med[name]:.2f} s  (runs: {runs(xs)})")
    bare = med["bare Gradio app (baseline)"]
    for name in apps:
        if not name.startswith("bare"):
            print(f"ratio {name} / bare: {med[name] / bare:.2f}   (goal <= 2.0)")
    w = med["workbench"]
    print(
        f"goal <= 15 s: {'met' if w <= 15 else 'NOT met'}; goal <= 2.0 x bare: "
        f"{'met' if w / bare <= 2.0 else 'NOT met'}   (load average at the end {os.getloadavg()[0]:.1f})"
    )


if __name__ == "__main__":
    main()
