"""Cold start of the workbench to an answering page, against a bare Gradio app in the same run.

    python -m benchmarks.startup [--repeats 3]

Prints seconds for each and the ratio (machines are noisy; the ratio is what to compare). The goal
is an answering page within 15 s on a 2-core CPU machine with the zoo.
"""
from __future__ import annotations

import argparse
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
    args = ap.parse_args()
    bare_app = Path(tempfile.mkdtemp()) / "bare_app.py"
    bare_app.write_text(BARE)
    wb, bare = [], []
    for _ in range(args.repeats):  # interleaved, so drift on a noisy machine hits both alike
        bare.append(cold_start(bare_app))
        wb.append(cold_start())
    w, b = statistics.median(wb), statistics.median(bare)
    runs = lambda xs: ", ".join(f"{x:.2f}" for x in xs)  # noqa: E731
    print(f"workbench cold start to answering page: median {w:.2f} s  (runs: {runs(wb)})")
    print(f"bare Gradio app (baseline):            median {b:.2f} s  (runs: {runs(bare)})")
    print(f"ratio workbench / bare: {w / b:.2f}")
    print(f"goal <= 15 s: {'met' if w <= 15 else 'NOT met'}")


if __name__ == "__main__":
    main()
