"""The workbench's methods as tools for agents, served over the Model Context Protocol (MCP).

Each tool is a plain function with typed parameters and a docstring an agent can act on. It calls
the same backend service functions as the tab's handler does, so every fix to a method reaches the
tools too, and its interventions follow the same per-request rules (applied inside the service's
context manager, under the model's lock, restored before the answer returns). A tool answers JSON
text, plus a PNG where a picture carries the result (MCP clients show it as an image).

`install(demo, source)` registers the tools as API endpoints of the running app (`gr.api`), each
guarded and marked for ZeroGPU like a model-touching handler, and takes the UI's own events out of
the tool list. Gradio then serves them as MCP tools with `launch(mcp_server=True)` (app.py --mcp).
"""

# No `from __future__ import annotations`: gr.api reads the real type objects from the signatures
# (through the guard's and ZeroGPU's wrappers) to build each tool's schema. Each docstring's Args
# and Returns entries are one long line: Gradio's parser keeps only an entry's first line.
import os

import gradio as gr

from backend.core.zerogpu import gpu

from components.report import session as report
from components.report import writer as report_writer
from components import tabs
from components.agents.answers import _json, set_source  # noqa: F401  (_json: how every tool answers)
from components.serving.guard import guarded, tab_gpu_seconds
from components.tab import AgentTool

# ------------------------------------------------------------------------------- registration
# Each tab names its tools (components.tab.Tab.tools); the report's belongs to no tab. A tool shares
# its tab's ZeroGPU allowance and model queue (components.serving.guard).
REPORT_TOOL = AgentTool(
    report_writer.session_report,
    reads_model=False,
    intervention=False,
    cost="milliseconds to a second (writes one HTML file)",
)


def registered() -> list[tuple[AgentTool, str]]:
    """Every tool with its tab's id, in the tabs' order, the report's last."""
    return [(tool, t.id) for t in tabs() for tool in t.tools] + [(REPORT_TOOL, "report")]


def tool_names() -> list[str]:
    return [tool.name for tool, _tab in registered()]


def ranges() -> dict[str, dict]:
    """The declared ranges of the tools' cost arguments (backend.core.bounds), stated in the schemas."""
    return {tool.name: dict(tool.ranges) for tool, _tab in registered() if tool.ranges}


READS_GROUP = "agent-reads"  # the tools that touch no model: never behind a model call


def annotations() -> dict[str, dict]:
    """MCP tool annotations: nothing a tool does persists (interventions are undone before the
    answer), so every tool is read-only to the world; `intervention` and `cost` say more."""
    return {
        tool.name: {
            "title": tool.name.replace("_", " "),
            "readOnlyHint": True,
            "destructiveHint": False,
            "idempotentHint": True,
            "openWorldHint": False,
            "intervention": tool.intervention,
            "cost": tool.cost,
        }
        for tool, _tab in registered()
    }


def schema_extras(source: str) -> dict[str, dict[str, dict]]:
    """The models a `model` parameter takes, listed in the schema (an agent learnt them from an
    error before); own models (a hub id or an allowed folder) are taken too where the owner allows."""
    from backend.core.modelcheck import custom_models_setting
    from backend.lrp.models import text_presets
    from backend.pissa import service

    own = custom_models_setting() is not False

    def models(keys: list[str]) -> dict:
        keys = [""] + [k for k in keys if k]
        return {"examples": keys} if own else {"enum": keys}

    listed = models([p.path_or_id for p in text_presets(source)])
    pissa = models([k for _lab, k in service.choices(source)])
    return {"token_relevance": {"model": listed}, "pissa_layers": {"model": pissa}, "pissa_layer": {"model": pissa}}


def hide_ui_events(demo: gr.Blocks) -> int:
    """The UI's public events become "undocumented": still callable by name (gradio_client, deep
    links), but out of the API page and so out of the MCP tool list, which Gradio builds from the
    public endpoints. Returns how many were hidden."""
    n = 0
    for fn in demo.fns.values():
        if fn.api_visibility == "public" and fn.api_name not in tool_names():
            fn.api_visibility = "undocumented"
            n += 1
    return n


def install(demo: gr.Blocks, source: str) -> list[str]:
    """Register the tools on a built app and leave them the only public endpoints."""
    from components.agents import mcp_server
    from components.common import MODEL_GROUP, model_concurrency
    from components.serving.guard import gated

    set_source(source)
    hide_ui_events(demo)
    taken = sorted({fn.api_name for fn in demo.fns.values()} & set(tool_names()))
    if taken:  # a UI event of that name would shadow the tool (or the tools are installed already)
        raise ValueError(f"endpoint name(s) {taken} already used by the app")
    with demo:
        for tool, tab in registered():
            fn = guarded(tool.fn)
            if tool.reads_model:  # queued with the app's model calls, never beside a model load
                fn = gpu(duration=tab_gpu_seconds(tab), estimate=False)(gated(fn))
                queue = {"concurrency_id": MODEL_GROUP, "concurrency_limit": model_concurrency()}
            else:
                queue = {"concurrency_id": READS_GROUP, "concurrency_limit": 4}
            fn._wb_guarded = True  # guard_events leaves it as it is
            gr.api(fn, api_name=tool.name, **queue)
    mcp_server.adjust(annotations(), schema_extras(source), ranges())
    report.tool_results(
        demo, [(tool.fn, tab) for tool, tab in registered() if tool is not REPORT_TOOL]
    )  # the tools' answers
    return tool_names()


def mcp_wanted(flag: bool = False, env: dict | None = None) -> bool:
    """Whether to serve the MCP tools. Off by default, locally and on a Space (SPACE_ID set) alike:
    every tool call spends the machine's compute and, while it is on, the UI's events leave the API
    page. `--mcp` or WORKBENCH_MCP=1 (on a Space: a variable only the owner can set) turn it on;
    WORKBENCH_MCP=0 keeps it off whatever the command line says."""
    env = os.environ if env is None else env
    setting = str(env.get("WORKBENCH_MCP", "")).strip().lower()
    if setting in ("0", "false", "no", "off"):
        return False
    if setting in ("1", "true", "yes", "on"):
        return True
    if setting:
        raise ValueError(f"WORKBENCH_MCP must be 1 or 0, not {setting!r}")
    return bool(flag)
