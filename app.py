"""The interpretability workbench: one Gradio app, the papers as live instruments.

python app.py                    # the zoo (tiny offline models), http://127.0.0.1:7860
python app.py --preset hub       # the papers' checkpoints (GPU machine with hub access)
WORKBENCH_PRESET=hub python app.py
python app.py --mcp              # also serve the methods as MCP tools (docs/agents.md: MCP)
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import sys
import traceback

if __name__ == "__main__":
    # The start allocates some 400,000 long-lived objects (torch, gradio, the page) and little
    # garbage, so the collector's passes over them cost about a second of a 2-core machine's start:
    # it is off until the page is built, then those objects are frozen out of later passes (main()).
    gc.disable()

from backend.core import netenv, preload  # noqa: E402
from backend.core.presets import active_source  # noqa: E402

# Before gradio / huggingface_hub are imported: no analytics, no telemetry, and no hub access at
# all unless the hub preset is asked for.
SOURCE = active_source(sys.argv[1:])
netenv.apply(offline=SOURCE == "zoo")

# Before gradio is imported: no type-stub files rewritten at each start (components.gradio_fixes.stubs).
from components.gradio_fixes.stubs import no_stub_rewrites  # noqa: E402

no_stub_rewrites()

import gradio as gr  # noqa: E402

from backend.core.device import serving_threads  # noqa: E402
from components import tabs as declared_tabs  # noqa: E402
from components.agents import tools as agent_tools  # noqa: E402
from components.common import CSS, THEME, TabContext  # noqa: E402
from components.gradio_fixes.patches import (  # noqa: E402
    argument_counts_checked,
    atomic_image_cache,
    bounded_request_bodies,
    calmer_queue_polls,
    compressed_front_end_kept,
    empty_session_hash_as_none,
    escaped_error_messages,
    light_loading_status,
    no_event_analytics,
    plotly_ahead,
    tracker_timers_at_ten_frames,
)
from components.inputs import enter  # noqa: E402
from components.links.deep_links import DeepLinks, header_controls  # noqa: E402
from components.overview.layout import papers_in_words  # noqa: E402
from components.report import session as report  # noqa: E402
from components.report import writer as report_writer  # noqa: E402
from components.serving import first_views, range_guard, session_memory, upload_allowance, visitor  # noqa: E402
from components.serving.guard import guard_events  # noqa: E402
from components.tab import Tab  # noqa: E402

log = logging.getLogger("workbench")
QUEUE_MAX = int(os.environ.get("WORKBENCH_QUEUE_MAX", "64"))


def build_app(source: str = SOURCE) -> gr.Blocks:
    serving_threads(source)
    atomic_image_cache()
    escaped_error_messages()
    compressed_front_end_kept()
    tracker_timers_at_ten_frames()
    empty_session_hash_as_none()  # an empty session_hash is none on /call, refused on /queue/join
    argument_counts_checked()  # a wrong number of arguments is refused, saying how many are taken
    bounded_request_bodies()  # a request body over the limit is refused before it is read
    upload_allowance.install()  # a visitor's uploads count against one allowance per person
    declared = declared_tabs()
    # Gradio's own copies of uploads and results go after the session time limit too
    ttl = int(visitor.sessions.ttl_seconds())
    with gr.Blocks(
        title="Interpretability workbench", analytics_enabled=False, delete_cache=(min(ttl, 3600), ttl)
    ) as demo:
        # Bounded queue; model-touching events set their own per-device group (components.common).
        # Everything is set up inside this one `with`: each time a Blocks' context closes, or its
        # queue is set, Gradio builds the page's config and its server app again (~0.4 s each here),
        # so the queue comes first, while the page is still empty, and the page is closed once.
        demo.queue(max_size=QUEUE_MAX, default_concurrency_limit=2)
        no_event_analytics(demo)  # no monitoring pages, so no summary of every event after each one
        calmer_queue_polls(demo)  # no millisecond polling while idle
        with gr.Row(equal_height=True, elem_classes=["wb-header-row"]):
            gr.HTML(
                "<div class='wb-header'><h1>Interpretability workbench</h1>"
                # the subtitle and the badge wrap together, so the badge never sits alone on a line
                f"<span class='wb-subline'><span class='wb-sub'>{(n := papers_in_words(declared))} papers, "
                f"{n} live instruments</span><span class='wb-badge'>"
                f"{'zoo models' if source == 'zoo' else 'hub checkpoints'}</span></span></div>"
            )
            # Presenter view and light/dark: browser-only switches (components.links.deep_links).
            header_controls(demo)
            report_writer.header_button()  # one HTML file of this visitor's results (components.report.writer)
        links = DeepLinks()
        with gr.Tabs(overflow_behavior="wrap") as tabs:  # every tab's label stays in view
            ctx = TabContext(tabs=tabs, source=source, registry=declared)
            for t in declared:
                with gr.Tab(t.title, id=t.id, elem_id=f"tab-{t.id}") as tab:
                    ctx.tab, ctx.tab_id = tab, t.id
                    # The "Link to this view" row first, at the top of the tab; its inputs are
                    # collected once every tab is built (links.install).
                    entry = links.add_tab(t.id, tab)
                    entry.runs = build_tab(t, ctx)

        # Deep links: ?tab=ID opens that tab; ?<elem_id>=<json> restores every linked input of every
        # tab (components.links.deep_links); invalid values are skipped with a notice.
        links.install(demo, tabs, default_tab=declared[0].id)
        visitor.install(demo)  # a visitor's own files go when the session ends (components.serving.visitor)
        range_guard.install(demo)  # a number typed past a slider's range is refused, not clamped
        enter.install(demo)  # Enter runs a one-line box's action, Ctrl/⌘+Enter a multi-line box's
        plotly_ahead(demo)  # the figures' plotly is imported while the page is idle, not at the first figure
    guard_events(demo)
    light_loading_status(demo)  # after every event is wired: no status refresh of unseen progress
    report.install(demo, links, source)  # outermost, after the guard: results kept per session
    return demo


def build_tab(t: Tab, ctx: TabContext) -> bool:
    """Build one tab; a tab that cannot start (a missing checkpoint, data or package) shows why in its
    place, and the other tabs still serve. Returns whether the tab built."""
    with gr.Column() as body:
        try:
            t.build(ctx)
            return True
        except Exception as exc:  # noqa: BLE001 - any failure of one tab must not take the app down
            log.error(
                "tab %s could not start: %s", t.id, "".join(traceback.format_exception_only(type(exc), exc)).strip()
            )
            failure = exc
    # What the tab managed to build before failing stays hidden: half a tab would only mislead.
    body.visible = False
    gr.Markdown(
        tab_failure_text(t.title, ctx.source, failure), elem_classes=["wb-explain"], elem_id=f"wb-tab-failed-{t.id}"
    )
    return False


def tab_failure_text(title: str, source: str, exc: BaseException) -> str:
    reason = str(exc).strip() or type(exc).__name__
    hint = (
        "The other tabs work. With hub checkpoints this usually means a checkpoint or data set is not in "
        "the Hugging Face cache and the hub cannot be reached, or a gated repository needs a token "
        "(`HF_TOKEN`)."
        if source == "hub"
        else "The other tabs work; the server log has the details."
    )
    return f"### {title} could not start\n\n**Why:** {reason[:600]}\n\n{hint}"


def frozen_start() -> None:
    """The objects of the start (torch, gradio, the page: some 450,000) frozen out of the collector's
    later passes. A full pass over them holds every thread, the server's event loop included: half a
    second on a quiet 2-core machine, seconds on a loaded one, so a visitor's queue join waited on
    it. When the collector has been off since the start (`python app.py`), the garbage the start
    left (~25,000 objects) stays rather than pay a pass for it; an app built in a running process
    (the tests' in-process servers) is collected once first."""
    if gc.isenabled():
        gc.collect()
    gc.freeze()
    gc.enable()


def launch_kwargs() -> dict:
    return {
        "theme": THEME,
        "css": CSS,
        "footer_links": [],
        "max_file_size": "20mb",
        "run_history": False,
        "show_error": False,
        # Gradio's /monitoring pages are on unless turned off: they would show any visitor every
        # other visitor's calls and their times (components.gradio_fixes.patches.no_event_analytics)
        "enable_monitoring": False,
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", choices=["zoo", "hub"], default=SOURCE)
    ap.add_argument("--host", default=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"))
    ap.add_argument("--port", type=int, default=int(os.environ.get("GRADIO_SERVER_PORT", "7860")))
    ap.add_argument(
        "--mcp",
        action="store_true",
        help="also serve the methods as MCP tools for agents at /gradio_api/mcp/ (or WORKBENCH_MCP=1)",
    )
    args = ap.parse_args(argv)
    session_memory.large_blocks_returned()  # before the models load (components.serving.session_memory)
    # The server's log (a Space's "Logs" pane) says what the app did: models loaded and evicted,
    # inputs refused, ended sessions released; Python's default shows warnings only.
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    log.setLevel(logging.INFO)
    demo = build_app(args.preset)
    frozen_start()
    # ZeroGPU: the checkpoints load here, in the main process, so every GPU worker inherits them
    preload.run(args.preset)
    mcp = agent_tools.mcp_wanted(args.mcp)
    if mcp:  # components.agents.tools: the tools, and the UI's events kept out of the tool list
        agent_tools.install(demo, args.preset)
    if (
        args.preset == "zoo"
    ):  # each tab's default first view, ahead of its first visitor (components.serving.first_views)
        first_views.warm()
    demo.launch(server_name=args.host, server_port=args.port, mcp_server=mcp, **launch_kwargs())


if __name__ == "__main__":
    main()
