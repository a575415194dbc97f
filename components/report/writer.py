"""The session report written and handed out: the page for a session's records, its file in the
visitor's space, the header's Report button and the MCP tool session_report. Apart from the wiring
that keeps the results (components.report.session), which runs on every event; this runs on a click.
"""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timezone
from pathlib import Path

import gradio as gr

from components.serving import exports
from components.report import record as R
from components.report.html import build_html, plotly_bundle
from components.report.session import _STATE, _request, now, scope_of

SPACE = "report"  # the report's place in a session's folder (backend.core.sessions.Space)


def report_html(sid: str | None, progress=None) -> tuple[str, dict]:
    """The page for session `sid` and a summary (tabs, results, figures)."""
    from components import tabs as declared

    titles = {t.id: t.title for t in declared()}
    order = {t.id: i for i, t in enumerate(declared())}
    rec = R.record(sid, create=False) if sid else None
    tabs, tour = [], []
    if rec is not None:
        with R._LOCK:
            current = {t: [r for r in s.values() if R.shown(rec, t, r)] for t, s in rec.current.items()}
            current = {t: rs for t, rs in current.items() if rs}
            pins = {t: list(p) for t, p in rec.pins.items() if p}
            tour = list(rec.tour) if len(rec.tour) > 1 else []  # the first step shows on every page load
        names = sorted(set(current) | set(pins), key=lambda t: order.get(t, 99))
        for i, t in enumerate(names):
            if progress is not None:
                progress((i, len(names) + 1), desc=f"Report: {titles.get(t, t)}")
            tabs.append({"tab": t, "title": titles.get(t, t), "current": current.get(t, []), "pins": pins.get(t, [])})
    if progress is not None:
        progress((len(tabs), len(tabs) + 1), desc="Report: writing the page")
    page = build_html(
        {
            "title": "Interpretability workbench — session report",
            "generated_at": now(),
            "origin": f"{'zoo models' if _STATE['source'] == 'zoo' else 'hub checkpoints'}",
            "tabs": tabs,
            "tour": tour,
        },
        plotly_bundle(),
    )
    summary = {
        "tabs": [t["tab"] for t in tabs],
        "results": sum(len(t["current"]) for t in tabs),
        "pinned": sum(len(t["pins"]) for t in tabs),
        "tour_steps": len(tour),
        "bytes": len(page.encode()),
    }
    return page, summary


def write_report(request, progress=None) -> tuple[Path, dict]:
    """The report page, written and handed to Gradio: the path returned is a copy in Gradio's cache
    (components.serving.exports), so it is served wherever the session folders lie, and a session keeps one
    report there at a time (the newest: an earlier one is gone with its link)."""
    t0 = time.perf_counter()
    sid = scope_of(request)
    page, summary = report_html(sid, progress)
    name = f"workbench-report-{datetime.now(timezone.utc):%Y%m%d-%H%M%S}.html"

    def write(folder: Path) -> Path:
        (folder / name).write_text(page, encoding="utf-8")
        return folder / name

    # every MCP agent reaches the app through one Gradio session: an agent's report is nobody's file
    # (a link of its own, components.agents.mcp_server), never replacing another agent's
    owner = request if sid and not sid.startswith("mcp-") else exports.NOBODY
    path = Path(exports.hand_out(write, owner, SPACE))
    if owner is request:
        exports.drop_others(request, "workbench-report-*.html", keep=path)
    summary["seconds"] = round(time.perf_counter() - t0, 3)
    return path, summary


REPORT_FAILED = "report failed: press Report to try again"


def header_button() -> None:
    """The header's Report button and, once written, the report's download button (its label says
    what it holds). Call inside the header row."""
    with gr.Column(scale=0, min_width=150, elem_classes=["wb-report"]):
        btn = gr.Button("⤓ Report", size="sm", elem_id="wb-report-btn", variant="secondary")
        dl = gr.DownloadButton("session report", visible=False, size="sm", elem_id="wb-report-file")

    def make(request: gr.Request, progress=gr.Progress()):
        path, s = write_report(request, progress)
        said = (
            f"{len(s['tabs'])} tab(s), {s['pinned']} pinned · {s['bytes'] / 1e6:.2f} MB · {s['seconds']:.1f} s"
            if s["tabs"]
            else "nothing computed yet"
        )
        return gr.update(value=str(path), visible=True, label=f"⤓ {said}"), gr.update(interactive=True)

    made = btn.click(
        lambda: (gr.update(visible=True, value=None, label="writing the report…"), gr.update(interactive=False)),
        None,
        [dl, btn],
        queue=False,
        api_visibility="private",
        show_progress="hidden",
    ).then(
        make,
        None,
        [dl, btn],
        api_visibility="private",
        concurrency_limit=4,
        concurrency_id="wb-report",
        show_progress_on=[dl],
    )
    # Whatever fails (the page, its file, Gradio handing the file over), the button comes back and
    # says so: "writing the report…" must never be the last word.
    made.failure(report_failed, None, [dl, btn], queue=False, api_visibility="private", show_progress="hidden")


def report_failed():
    return gr.update(visible=True, value=None, label=REPORT_FAILED), gr.update(interactive=True)


def session_report() -> tuple[str, gr.FileData]:
    """Write one self-contained HTML report of this MCP session's results.

    Every tool answer this agent got (token_relevance, open_feature, steer_feature, check_memorization, math_neurons, pissa_layer, …) with its numbers as tables, pictures, model, settings and time, in one HTML file that opens offline. An agent is known by its MCP session id, or else by its Authorization header; only its own answers are in its report. Nothing is computed (milliseconds to a second).

    Returns:
        JSON: tabs (those with results), results, pinned, bytes, seconds, note (why nothing could be kept, where so); and the HTML file.
    """
    request = _request()
    path, s = write_report(request)
    if scope_of(request) is None:
        s["note"] = (
            "this MCP connection carries no session id (the server is stateless) and no "
            "credentials, so no answers could be kept as yours: send an Authorization header"
        )
    return json.dumps(s), gr.FileData(path=str(path), mime_type="text/html", orig_name=path.name)


if os.environ.get("WORKBENCH_REPORT_WARM", "1") != "0":
    # the bundle takes ~0.3 s to pack once per process: done on import, not on the first click
    import threading

    threading.Thread(target=plotly_bundle, name="wb-report-bundle", daemon=True).start()


# gr.api builds the tool's schema from real type objects (this module postpones annotations)
session_report.__annotations__ = {"return": tuple[str, gr.FileData]}
