"""The session report: the header's "Report" button and the MCP tool `session_report`
(components.report.writer) write one self-contained HTML file (components.report.html) of what this
visitor computed, tab by tab; this module keeps those results as the handlers return them.

A tab takes part by naming its results in its declaration (components.tab.Tab), beside its link_runs:

    report_results={"rel-bars": "Token relevance", ...}  # elem_id of a result's key output → heading
    report_pins={"rel-pin": "rel-bars"}                   # a pin button's elem_id → the result it pins

`install` (after guard_events: it must wrap outermost, in the server process, where the session
is known) wraps every handler whose outputs include such a key output: when it returns, its shown
outputs (figures, tables, HTML, images), inputs (the settings), model, time and a link to the view
are kept for the session (components.report.record). A pin handler copies the tab's current result
into its pins. Handlers with linked inputs (components.links.deep_links) keep those values, so a result's link
restores the inputs that led to it (an example picked before an image was explained, too). The
guided tour's steps are kept as they are shown.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import re
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import gradio as gr

from backend.core import presets as P
from backend.core import sessions

from components.report import record as R
from components.links.deep_links import LINKABLE, _plain, build_query, walk
from components.serving.visitor import session_of

log = logging.getLogger("workbench.report")
TOUR_TAB = "tour"
TOUR_KEY = "tour-figure"
_STATE: dict[str, Any] = {"source": None, "tabs": {}, "defaults": {}, "base": ""}


def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _inner(fn):
    while hasattr(fn, "__wrapped__"):
        fn = fn.__wrapped__
    return fn


def _request() -> gr.Request | None:
    try:
        from gradio.context import LocalContext

        return LocalContext.request.get(None)
    except (ImportError, LookupError):
        return None


def scope_of(request) -> str | None:
    """The session a result or report belongs to: the page's Gradio session. MCP calls all reach the
    app through one Gradio client of its own (x-gradio-user: mcp), so an agent is told apart by its
    MCP session id where the transport has one, else by the credentials it sends; an agent with
    neither has no report scope (None: nothing is kept, so no agent ever sees another's answers)."""
    headers = getattr(request, "headers", None) or {}
    get = headers.get if hasattr(headers, "get") else (lambda k: None)
    if get("mcp-session-id") or get("x-gradio-user") == "mcp":
        who = get("mcp-session-id") or get("authorization")
        return "mcp-" + sessions.content_name([who], 24) if who else None
    try:
        return session_of(request)
    except ValueError:
        return None


def base_url(request) -> str:
    """The app's address as the visitor's browser knows it (for the report's links)."""
    headers = getattr(request, "headers", None) or {}
    ref = headers.get("referer") if hasattr(headers, "get") else None
    if ref:
        u = urlsplit(ref)
        if u.scheme in ("http", "https") and u.netloc:
            return f"{u.scheme}://{u.netloc}{u.path}"
    host = headers.get("host") if hasattr(headers, "get") else None
    return f"http://{host}/" if host else ""


# ------------------------------------------------------------------------------------------ wiring
def install(demo: gr.Blocks, links, source: str) -> int:
    """Wrap the handlers that produce the tabs' results, pins and tour steps. Returns how many."""
    from components import tabs as declared

    _STATE["source"] = source
    mods = {t.id: t for t in declared()}
    comp_tab: dict[int, str] = {}
    for entry in links.tabs:
        for comp in walk(entry.tab):
            comp_tab.setdefault(id(comp), entry.tab_id)
        _STATE["tabs"][entry.tab_id] = [c.elem_id for c in entry.inputs]
        _STATE["defaults"][entry.tab_id] = {c.elem_id: d for c, d in zip(entry.inputs, entry.defaults)}
    linked = {id(c): (t.tab_id, c.elem_id) for t in links.tabs for c in t.inputs}
    n = 0
    for bf in demo.fns.values():
        if bf.fn is None or any(ev == "failure" for _, ev in (bf.targets or [])):
            continue
        name = getattr(_inner(bf.fn), "__name__", "")
        tabs = [
            comp_tab[i]
            for i in [id(c) for c in (bf.outputs or [])] + [id(demo.blocks.get(t[0])) for t in (bf.targets or [])]
            if i in comp_tab
        ]
        tab = tabs[0] if tabs else None
        mod = mods.get(tab)
        results = dict(mod.report_results) if mod else {}
        pins = dict(mod.report_pins) if mod else {}
        keys = [c.elem_id for c in (bf.outputs or []) if getattr(c, "elem_id", None) in results]
        tracked = [(i, linked[id(c)]) for i, c in enumerate(bf.inputs or []) if id(c) in linked]
        triggers = [getattr(demo.blocks.get(t[0]), "elem_id", None) or "" for t in (bf.targets or [])]
        pin = next((pins[t] for t in triggers if t in pins), None)
        on_load = bool(bf.targets) and all(ev == "load" for _, ev in bf.targets)
        if pin:
            bf.fn = _wrap(bf.fn, functools.partial(_on_pin, tab, pin))
        elif tab == TOUR_TAB and any(getattr(c, "elem_id", None) == TOUR_KEY for c in bf.outputs or []):
            bf.fn = _wrap(bf.fn, functools.partial(_on_tour, bf))
        # a redraw (declared with components.report.redraw: the same result under another view rule,
        # or with a pinned one beside it) is not a new result: the record of the computation stays
        elif keys and name != "<lambda>" and not getattr(_inner(bf.fn), "report_redraw", False):
            bf.fn = _wrap(bf.fn, functools.partial(_on_result, bf, tab, keys[0], results[keys[0]], mod, on_load))
        elif tracked and not on_load:
            bf.fn = _wrap(bf.fn, functools.partial(_on_inputs, bf, tab))
        else:
            continue
        n += 1
    return n


def _filled(value) -> bool:
    """Whether an output shows something. A table's DataFrame or an image's array has no truth value
    of its own (pandas raises), so a Features result with its table was once not kept."""
    v = R.unwrap(value)
    if v is None:
        return False
    if hasattr(v, "empty"):  # a pandas DataFrame or Series
        return not v.empty
    if hasattr(v, "size") and hasattr(v, "shape"):  # a numpy array
        return v.size > 0
    return bool(v)


def _wrap(fn, after):
    """`fn` unchanged for Gradio (signature, streaming), then `after(args, kwargs, output, seconds)`
    in the server process; a failure of `after` is logged, never the visitor's."""

    def note(args, kwargs, out, t0):
        try:
            after(args, kwargs, out, time.perf_counter() - t0)
        except Exception:  # noqa: BLE001
            log.exception("session report: could not keep a result")

    if inspect.isasyncgenfunction(fn) or inspect.iscoroutinefunction(fn):
        return fn  # none of the result handlers is async; left as they are
    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def gen(*args, **kwargs):
            t0, last = time.perf_counter(), None
            for item in fn(*args, **kwargs):
                last = item
                yield item
            if last is not None:
                note(args, kwargs, last, t0)

        gen._wb_report = after
        return gen

    @functools.wraps(fn)
    def plain(*args, **kwargs):
        t0 = time.perf_counter()
        out = fn(*args, **kwargs)
        note(args, kwargs, out, t0)
        return out

    plain._wb_report = after
    return plain


_SPECIAL = (gr.Request, gr.Progress, gr.EventData)


def _values(bf, args) -> list:
    """The handler's input values in the order of its input components (Gradio's own arguments out)."""
    return [a for a in args if not isinstance(a, _SPECIAL)][: len(bf.inputs or [])]


def _outputs(bf, out) -> list:
    outs = list(bf.outputs or [])
    if isinstance(out, dict) and out and all(hasattr(k, "_id") for k in out):
        return [out.get(c) for c in outs]
    if len(outs) == 1:
        return [out]
    return list(out) if isinstance(out, (list, tuple)) else [out]


def _on_inputs(bf, tab, args, kwargs, out, seconds):
    sid = scope_of(_request())
    if sid:
        _keep_links(sid, bf, _values(bf, args))
        R.mark_used(sid, tab)


def _keep_links(sid, bf, values) -> None:
    by_tab: dict[str, dict] = {}
    for comp, v in zip(bf.inputs or [], values):
        eid = getattr(comp, "elem_id", None)
        for tab, ids in _STATE["tabs"].items():
            if eid and eid in ids and isinstance(comp, LINKABLE):
                by_tab.setdefault(tab, {})[eid] = _plain(v)
    for tab, vals in by_tab.items():
        R.put_link_values(sid, tab, vals)


def _on_result(bf, tab, section, heading, mod, on_load, args, kwargs, out, seconds):
    request = _request()
    sid = scope_of(request)
    if not sid:
        return
    values = _values(bf, args)
    _keep_links(sid, bf, values)
    if not on_load:
        R.mark_used(sid, tab)
    query = getattr(request, "query_params", None) or {}
    parts = [p for c, v in zip(bf.outputs or [], _outputs(bf, out)) if (p := R.part_of(c, v))]
    if not any(p["kind"] in ("figure", "table", "images") for p in parts) and not any(
        getattr(c, "elem_id", None) == section for c, v in zip(bf.outputs or [], _outputs(bf, out)) if _filled(v)
    ):
        return  # an event that blanks the outputs: the last result stays the current one
    settings, images = [], []
    for comp, v in zip(bf.inputs or [], values):
        s = R.setting_of(comp, v)
        if s:
            settings.append(s)
        if isinstance(comp, gr.Image) and v is not None:
            images.append(v)
    if images:
        inp = R.images_part(images, "input image")
        if inp:
            parts.insert(0, inp)
    model, revision = model_of(tab, bf, values)
    R.put_result(
        sid,
        tab,
        section,
        {
            "tab": tab,
            "section": section,
            "heading": heading,
            "computed_at": now(),
            "seconds": round(seconds, 3),
            "model": model,
            "revision": revision,
            "method": method_of(mod, settings),
            "settings": settings,
            "note": note_of(mod),
            "parts": parts,
            "link": link_for(sid, tab, request),
            "link_note": "; an image you uploaded is not part of a link" if images else "",
            "on_load": on_load,
            "opened_here": on_load and query.get("tab") == tab,
        },
    )


def _on_pin(tab, section, args, kwargs, out, seconds):
    sid = scope_of(_request())
    if sid:
        R.mark_used(sid, tab)
        R.put_pin(sid, tab, section, now())


def _on_tour(bf, args, kwargs, out, seconds):
    sid = scope_of(_request())
    if not sid:
        return
    outs = dict(zip([getattr(c, "elem_id", None) for c in bf.outputs or []], _outputs(bf, out)))
    header = R.unwrap(outs.get("tour-header")) or ""
    parts = [
        p
        for c, v in zip(bf.outputs or [], _outputs(bf, out))
        if getattr(c, "elem_id", None) in ("tour-figure", "tour-numbers") and (p := R.part_of(c, v))
    ]
    if not header or not parts:
        return
    R.put_tour_step(
        sid,
        {
            "key": R.plain(header),
            "header_html": R.clean_html(header),
            "caption_html": R.clean_html(R.unwrap(outs.get("tour-caption")) or ""),
            "parts": parts,
            "computed_at": now(),
        },
    )


# ------------------------------------------------------------------------------ what a result says
def model_of(tab: str, bf, values) -> tuple[str, str]:
    """The model a result came from (its picker's value, else the tab's model for that kind of input)
    and its revision; a user's own folder shows by name only (no server path)."""
    source = _STATE["source"] or P.active_source()
    pick = None
    for comp, v in zip(bf.inputs or [], values):
        if isinstance(comp, gr.Dropdown) and str(getattr(comp, "elem_id", "") or "").endswith("-model") and v:
            pick = str(v).strip()
    listed = P.presets(tab)
    preset = next((p for p in listed if pick in (p.path_or_id, p.model_id, p.label)), None) if pick else None
    if pick and preset is None:
        shown = (
            pick
            if re.fullmatch(r"[\w.-]+/[\w.-]+", pick) and not P.looks_local(pick)
            else f"your own model (folder {Path(pick).name})"
        )
        return shown, "main (hub) or as saved (folder)"
    if preset is None:
        images = any(isinstance(c, gr.Image) for c in bf.inputs or [])
        same = [p for p in listed if p.source == source]
        visual = [p for p in same if not p.model_class.endswith("ForCausalLM")]
        try:
            preset = visual[0] if images and visual else P.active(tab, source)
        except Exception:  # noqa: BLE001 - a tab with no registered model (the tour)
            return "", ""
    return f"{preset.label or preset.path_or_id} ({preset.source}: {preset.path_or_id})", revision_of(preset)


def revision_of(preset) -> str:
    if preset.revision:
        return preset.revision
    if preset.source != "zoo":
        return "main"
    try:
        files = json.loads((P.ZOO_ROOT / preset.path_or_id / "manifest.json").read_text()).get("files", {})
        weights = sorted(k for k in files if k.endswith(".safetensors"))
        if weights:
            return f"committed zoo weights, {weights[0]} sha256 {files[weights[0]][:12]}"
    except (OSError, ValueError):
        pass
    return "committed zoo weights"


_METHODISH = re.compile(r"^(methods?\b|.*\brules?\b|.*\binit\b|positions|.*error term|scale factor|k:)", re.I)


def method_of(mod, settings) -> str:
    paper = (mod.summary if mod else "").split(":")[0]
    variant = "; ".join(f"{k}: {v}" for k, v in settings if _METHODISH.search(k))
    return f"{paper} — {variant}" if variant else paper


def note_of(mod) -> str:
    """Two or three sentences of the tab's own explanation (its presenter caption, then its text)."""
    if mod is None:
        return ""
    if mod.report_note:
        return mod.report_note
    text = " ".join(R.plain(t) for t in (mod.presenter_caption, mod.explain)).strip()
    text = re.sub(r"^What you see\.\s*", "", text) or mod.summary
    sentences = re.split(r"(?<=[.!?])\s+(?=[A-Z(])", text)
    return " ".join(sentences[:3])


def link_for(sid: str, tab: str, request) -> str:
    rec = R.record(sid, create=False)
    vals = rec.link_values.get(tab, {}) if rec else {}
    defaults = _STATE["defaults"].get(tab, {})
    pairs = [(k, v) for k, v in vals.items() if k in defaults and _plain(v) != defaults[k]]
    return base_url(request) + build_query(tab, pairs)


# ------------------------------------------------------------------------------ MCP tools' answers
def tool_results(demo: gr.Blocks, tools) -> None:
    """Keep each MCP tool's answer (its JSON as a table, its picture) in the caller's report, under the
    tool's tab. `tools`: (function, tab) pairs."""
    by_name = {fn.__name__: tab for fn, tab, *_ in tools}
    for bf in demo.fns.values():
        tab = by_name.get(getattr(bf, "api_name", None))
        if tab and bf.fn is not None:
            bf.fn = _wrap(bf.fn, functools.partial(_on_tool, bf, tab))


def _on_tool(bf, tab, args, kwargs, out, seconds):
    from components import tab_by_id

    request = _request()
    sid = scope_of(request)
    if not sid:
        return
    mod = tab_by_id(tab)
    outs = list(out) if isinstance(out, (list, tuple)) else [out]
    parts = []
    for v in outs:
        if isinstance(v, str):
            p = R.json_part(v, bf.api_name)
        elif isinstance(v, dict) or hasattr(v, "path"):
            p = R.images_part([getattr(v, "path", None) or v.get("path")], bf.api_name)
        else:
            p = None
        if p:
            parts.append(p)
    params = list(inspect.signature(_inner(bf.fn)).parameters)
    settings = [(k, R.fmt(v)) for k, v in zip(params, _values(bf, args))]
    model, revision = model_of(tab, bf, [])
    R.put_result(
        sid,
        tab,
        f"tool:{bf.api_name}",
        {
            "tab": tab,
            "section": f"tool:{bf.api_name}",
            "heading": f"{bf.api_name} (MCP tool)",
            "computed_at": now(),
            "seconds": round(seconds, 3),
            "model": model,
            "revision": revision,
            "method": method_of(mod, []),
            "settings": settings,
            "note": note_of(mod) if mod else "",
            "parts": parts,
            "link": "",
            "link_note": "",
        },
    )
    R.mark_used(sid, tab)
