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

from backend.core import bounds
from backend.core.zerogpu import gpu

from . import report
from .agent_answers import _json, set_source  # noqa: F401  (_json: how every tool answers)
from .agent_tools_images import (check_memorization, find_features, find_memorization_neurons,
                                 generate_without_neurons, memorized_prompts, open_feature, steer_feature)
from .agent_tools_language import math_neurons, pissa_layer, pissa_layers, token_relevance
from .guard import HANDLER_GPU_SECONDS, guarded


# ------------------------------------------------------------------------------- registration
# Each tool: the tab whose ZeroGPU allowance and model queue it shares (components.guard), whether
# it reads the model (a read-only tool that does not waits behind no model call), whether it
# applies an intervention (always undone before the answer), and its typical cost on the zoo.
TOOLS = [(token_relevance, "relevance", True, True, "about a second per method"),
         (find_features, "features", False, False, "milliseconds (reads the feature index)"),
         (open_feature, "features", False, False, "well under a second (reads the feature index)"),
         (steer_feature, "features", True, True, "two greedy captions, about a second"),
         (check_memorization, "memorization", True, False, "a noise step per seed, about a second"),
         (find_memorization_neurons, "memorization", True, True, "dozens of noise evaluations, seconds"),
         (generate_without_neurons, "memorization", True, True, "two generations per seed, seconds"),
         (memorized_prompts, "memorization", False, False, "milliseconds (reads the prompt lists)"),
         (math_neurons, "math_neurons", True, True, "seconds on the zoo, a minute or more at 1B"),
         (pissa_layers, "adapters", True, False, "loads the model once, then milliseconds"),
         (pissa_layer, "adapters", True, False, "one SVD, milliseconds on the zoo"),
         (report.session_report, "report", False, False, "milliseconds to a second (writes one HTML file)")]
TOOL_NAMES = [t[0].__name__ for t in TOOLS]
# The declared ranges of the tools' cost arguments (backend.core.bounds), stated in the schemas
RANGES = {"find_features": {"limit": bounds.FEAT_LIMIT}, "generate_without_neurons": {"seeds": bounds.MEMO_SEEDS},
          "math_neurons": {"k_percent": bounds.MATH_K, "factor": bounds.MATH_FACTOR, "n_samples": bounds.MATH_SAMPLES},
          "pissa_layer": {"rank": bounds.PISSA_RANK, "init": bounds.PISSA_INITS}}
READS_GROUP = "agent-reads"  # the tools that touch no model: never behind a model call


def annotations() -> dict[str, dict]:
    """MCP tool annotations: nothing a tool does persists (interventions are undone before the
    answer), so every tool is read-only to the world; `intervention` and `cost` say more."""
    return {fn.__name__: {"title": fn.__name__.replace("_", " "), "readOnlyHint": True, "destructiveHint": False,
                          "idempotentHint": True, "openWorldHint": False, "intervention": intervention,
                          "cost": cost}
            for fn, _tab, _model, intervention, cost in TOOLS}


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
        if fn.api_visibility == "public" and fn.api_name not in TOOL_NAMES:
            fn.api_visibility = "undocumented"
            n += 1
    return n


def install(demo: gr.Blocks, source: str) -> list[str]:
    """Register the tools on a built app and leave them the only public endpoints."""
    from . import mcp_server
    from .common import MODEL_GROUP, model_concurrency
    from .guard import gated

    set_source(source)
    hide_ui_events(demo)
    taken = sorted({fn.api_name for fn in demo.fns.values()} & set(TOOL_NAMES))
    if taken:  # a UI event of that name would shadow the tool (or the tools are installed already)
        raise ValueError(f"endpoint name(s) {taken} already used by the app")
    with demo:
        for tool, tab, model, _intervention, _cost in TOOLS:
            fn = guarded(tool)
            if model:  # queued with the app's model calls, never beside a model load
                fn = gpu(duration=HANDLER_GPU_SECONDS.get(tab, 120), estimate=False)(gated(fn))
                queue = {"concurrency_id": MODEL_GROUP, "concurrency_limit": model_concurrency()}
            else:
                queue = {"concurrency_id": READS_GROUP, "concurrency_limit": 4}
            fn._wb_guarded = True  # guard_events leaves it as it is
            gr.api(fn, api_name=tool.__name__, **queue)
    mcp_server.adjust(annotations(), schema_extras(source), RANGES)
    report.tool_results(demo, [t for t in TOOLS if t[0] is not report.session_report])  # the tools' answers
    return TOOL_NAMES


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
