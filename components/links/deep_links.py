"""Deep links, presenter view and the light/dark switch, added by app.py around the tabs.

Deep links need nothing from a tab: after every tab is built, each input component inside a tab
that has an `elem_id` (and feeds at least one event) is URL state keyed by that id:

    /?tab=relevance&rel-text="good movie"&rel-n=80&presenter=1&__theme=dark

Values are JSON (a bare word is read as a string). On load every value is checked against its
component (type, range, choices); a bad one is skipped with a notice, never an error. Each tab gets
a "Link to this view" button that writes the URL of what it shows now.

A link reproduces results, not only inputs: a tab may declare `link_runs` (components.tab), the api_names of
its main events in the order a user would click them (e.g. `("explain_text",)`). When a URL carries
any of a tab's linked inputs, those events run once the inputs are restored (through a hidden
per-tab button whose click chains the tab's own handlers, so the computation, its concurrency group
and its caching are the tab's own). A page opened without link values runs nothing extra.

A tab may also read a query key of its own in its first view (Features opens `feature=ID`): it
names such keys in its `link_params`, so the restore does not report them as unknown.

A component whose valid values are not its static choices (e.g. neuron tick boxes filled by a
search) can accept linked values through `accept_link(comp, validate)`: `validate(list) -> list`
raises ValueError for a bad value, and the restore shows the linked values as the choices.

Alt text: Gradio renders an image without alt text; every gr.Image / gr.Gallery with an elem_id and
a label gets its label as the alt text of its pictures (gallery captions win where present), filled
in the browser as pictures appear (`install` wires it).

Presenter view and the theme switch are client-side only (a class on <body>), so they cost no
round trip; links carry them as `presenter=1` and Gradio's own `__theme=dark`.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
from dataclasses import dataclass, field
from typing import Any, Iterable
from urllib.parse import urlencode

import gradio as gr

from components.links.values import (
    MAX_TEXT,  # noqa: F401
    LinkValueError,
    accept_link,  # noqa: F401
    coerce,
    decode,
    encode,
    walk,
)  # (LinkValueError, accept_link, MAX_TEXT: the tabs and tests reach them here)

log = logging.getLogger("workbench.links")
LINKABLE = (gr.Textbox, gr.Slider, gr.Number, gr.Dropdown, gr.Radio, gr.Checkbox, gr.CheckboxGroup)
RESERVED = {"tab", "presenter", "__theme"}
LINK_PREFIX = "wb-link"

# Runs in the browser after Python built "?tab=...": make it absolute, keep presenter and theme.
ABSOLUTE_JS = (
    """(q) => {
  if (typeof q !== 'string' || !q.startsWith('?')) { return q; }
  let u = window.location.origin + window.location.pathname + q;
  if (document.body.classList.contains('wb-presenter')) { u += '&presenter=1'; }
  if (document.body.classList.contains('dark')) { u += '&__theme=dark'; }
  // Copy it and say so on the button for two seconds; where the clipboard is refused (an insecure
  // origin, a denied permission) the URL stays selectable in the box beside it.
  const tab = new URLSearchParams(q).get('tab');
  const btn = document.getElementById('%s-btn-' + tab);
  const say = (text) => {
    if (!btn) { return; }
    const old = btn.dataset.label || btn.textContent;
    btn.dataset.label = old;
    btn.textContent = text;
    setTimeout(() => { btn.textContent = old; }, 2000);
  };
  if (navigator.clipboard && window.isSecureContext) {
    navigator.clipboard.writeText(u).then(() => say('Copied ✓'), () => say('Copy it from the box'));
  } else { say('Copy it from the box'); }
  return u;
}"""
    % LINK_PREFIX
)

PRESENTER_JS = """(on) => {
  document.body.classList.toggle('wb-presenter', !!on);
  setTimeout(() => window.dispatchEvent(new Event('resize')), 50);  // plotly re-fits its width
  return !!on;
}"""
PRESENTER_FROM_URL_JS = """() => {
  const on = new URLSearchParams(window.location.search).get('presenter') === '1';
  document.body.classList.toggle('wb-presenter', on);
  return on;
}"""
THEME_JS = """() => { document.body.classList.toggle('dark'); }"""


RUN_PREFIX = "wb-linkrun"

# After the restore: click the hidden "run" button of every tab whose inputs the URL carries.
RUN_JS = """() => {
  const q = new URLSearchParams(window.location.search);
  const plan = %s;
  window.wbLinkRuns = [];
  window.wbLinkWaiting = new Set();  // runs waiting for their tab to mount (tests wait on these)
  for (const [btn, keys] of plan) {
    if (!keys.some((k) => q.has(k))) { continue; }
    // a tab's contents mount when it is first shown (the linked tab at once, another one of a
    // multi-tab link when the user opens it): wait for its button, then run the tab's results
    const go = () => {
      const el = document.getElementById(btn);
      if (el) { window.wbLinkWaiting.delete(btn); window.wbLinkRuns.push(btn); el.click(); }
      else { window.wbLinkWaiting.add(btn); setTimeout(go, 200); }
    };
    go();
  }
}"""


# Fill empty alt attributes from the image blocks' labels, now and whenever pictures change.
ALT_JS = """() => {
  const alts = %s;
  const fill = () => {
    for (const [id, text] of Object.entries(alts)) {
      const root = document.getElementById(id);
      if (!root) { continue; }
      root.querySelectorAll('img:not([alt]), img[alt=""]').forEach((img) => img.setAttribute('alt', text));
    }
  };
  fill();
  new MutationObserver(fill).observe(document.body, {subtree: true, childList: true, attributes: true,
                                                     attributeFilter: ['src']});
}"""


def image_alts(demo) -> dict[str, str]:
    """{elem_id: alt text} for every image or gallery of the app that has an elem_id and a label."""
    out = {}
    for block in demo.blocks.values():
        if isinstance(block, (gr.Image, gr.Gallery)) and block.elem_id and block.label:
            out[block.elem_id] = str(block.label)
    return out


def build_query(tab_id: str, pairs: Iterable[tuple[str, Any]]) -> str:
    items = [("tab", tab_id)] + [(k, encode(v)) for k, v in pairs if v is not None]
    return "?" + urlencode(items)


def parse_query(params, registry: dict[str, Any], own: Iterable[str] = ()) -> tuple[dict[str, Any], list[str]]:
    """{elem_id: value} for every valid linked value, and the notices for the ones skipped; `own`
    keys are read by a tab itself (its link_params) and passed over here."""
    values, notices = {}, []
    skip = RESERVED | set(own)
    for key in list(params.keys()):
        if key in skip:
            continue
        comp = registry.get(key)
        if comp is None:
            notices.append(f"unknown link parameter {key[:40]!r}")
            continue
        try:
            values[key] = coerce(comp, decode(params.get(key)))
        except LinkValueError as e:
            notices.append(str(e))
    return values, notices


@dataclass
class TabLinks:
    """One tab's link row and the inputs it reads."""

    tab_id: str
    tab: Any
    button: Any = None
    box: Any = None
    run: Any = None
    inputs: list = field(default_factory=list)
    defaults: list = field(default_factory=list)  # each input's value when the app was built
    runs: bool = True  # False for a tab that failed to build: its link_runs events may not exist


class DeepLinks:
    """Collects the tabs while app.py builds them, then wires links and restore once at the end."""

    def __init__(self):
        self.tabs: list[TabLinks] = []
        self.registry: dict[str, Any] = {}

    def add_tab(self, tab_id: str, tab, runs: bool = True) -> TabLinks:
        """Call inside the gr.Tab, after the tab's own build(): adds the 'Link to this view' row.
        `runs=False` (a tab that failed to build) skips its link_runs: its events may not exist."""
        entry = TabLinks(tab_id, tab, runs=runs)
        with gr.Row(elem_classes=["wb-linkrow"]):
            entry.button = gr.Button(
                "Link to this view", size="sm", scale=0, min_width=170, elem_id=f"{LINK_PREFIX}-btn-{tab_id}"
            )
            entry.box = gr.Textbox(
                show_label=False,
                container=False,
                interactive=False,
                scale=4,
                placeholder="a link that reopens this tab with these settings",
                buttons=["copy"],
                elem_id=f"{LINK_PREFIX}-url-{tab_id}",
            )
            # Clicked by the page (RUN_JS) when a link carries this tab's inputs: reruns its results.
            entry.run = gr.Button(
                "run linked view", elem_id=f"{RUN_PREFIX}-{tab_id}", elem_classes=["wb-hidden"], scale=0, min_width=0
            )
        self.tabs.append(entry)
        return entry

    def _collect(self, demo) -> None:
        used = {id(c) for fn in demo.fns.values() for c in (fn.inputs or [])}
        # Inputs a tab itself sets on page load (its own defaults or URL handling): restored a second
        # time once the page's own load events have finished, so the link wins.
        self.load_written = {
            id(c)
            for fn in demo.fns.values()
            if any(ev == "load" for _, ev in (fn.targets or []))
            for c in (fn.outputs or [])
        }
        mine = {id(t.box) for t in self.tabs} | {id(t.run) for t in self.tabs if t.run is not None}
        for entry in self.tabs:
            entry.inputs = []
            for comp in walk(entry.tab):
                eid = getattr(comp, "elem_id", None)
                if (
                    isinstance(comp, LINKABLE)
                    and eid
                    and id(comp) in used
                    and id(comp) not in mine
                    and eid not in RESERVED
                    and eid not in self.registry
                ):
                    self.registry[eid] = comp
                    entry.inputs.append(comp)
                    entry.defaults.append(_plain(_empty_text(comp, getattr(comp, "value", None))))

    def _wire_runs(self, demo, restore_dep) -> None:
        """Chain each tab's `link_runs` handlers behind its hidden run button; the page clicks it after
        the restore when the URL carries that tab's inputs."""
        from components import tabs as declared

        runs = {t.id: t.link_runs for t in declared()}
        by_api = {fn.api_name: fn for fn in list(demo.fns.values()) if getattr(fn, "api_name", None)}
        plan = []
        for entry in self.tabs:
            names = runs.get(entry.tab_id, ()) if entry.runs else ()
            fns = [by_api[n] for n in names if n in by_api]
            missing = [n for n in names if n not in by_api]
            if missing:
                # A tab that built without some events (e.g. a mode with nothing to list) must not take
                # the app down: its links then restore inputs only. tests/unit/test_links.py checks that
                # every tab of the zoo app declares events that exist.
                log.error(
                    "tab %s: its link_runs name unknown events %s; its links restore inputs only", entry.tab_id, missing
                )
                continue
            if not fns or entry.run is None or not entry.inputs:
                continue
            dep = None
            for bf in fns:
                kw = dict(
                    fn=bf.fn,
                    inputs=list(bf.inputs or []),
                    outputs=list(bf.outputs or []),
                    api_visibility="private",
                    concurrency_id=bf.concurrency_id,
                    concurrency_limit=bf.concurrency_limit,
                )
                dep = entry.run.click(**kw) if dep is None else dep.then(**kw)
            plan.append([entry.run.elem_id, [c.elem_id for c in entry.inputs]])
        if plan:
            restore_dep.then(None, js=RUN_JS % json.dumps(plan), api_visibility="private")

    def install(self, demo, tabs, default_tab: str) -> None:
        """Wire every link button and the restore-on-load. Call inside `with demo:`, after all tabs."""
        self._collect(demo)
        ids = [t.tab_id for t in self.tabs]
        for entry in self.tabs:
            fallbacks = [getattr(c, "wb_link_fallback", None) for c in entry.inputs]
            extra = [s for s in fallbacks if s is not None]

            def make(
                *values,
                _tab=entry.tab_id,
                _inputs=tuple(entry.inputs),
                _defaults=tuple(entry.defaults),
                _fallbacks=tuple(fallbacks),
            ):
                # Only what the user changed: a short link, and a later change of a default reaches it.
                # A value the control refuses (typed past its range, not whole) computed nothing: the
                # link leaves it out rather than carry what the view does not show. A model pick the
                # tab refused is replaced by the session's last accepted pick (its picker's state).
                values, last = values[: len(_inputs)], iter(values[len(_inputs) :])
                changed, refused = [], []
                for comp, v, d, fb in zip(_inputs, values, _defaults, _fallbacks):
                    if fb is not None:
                        accepted = next(last)
                        if v != accepted:
                            refused.append(
                                f"{comp.elem_id}: the pick {str(v)[:60]!r} was refused, "
                                + (
                                    f"the link keeps {str(accepted)[:60]!r}"
                                    if accepted is not None and _plain(accepted) != d
                                    else "the link keeps the default"
                                )
                            )
                            v = accepted
                    if v is None or _plain(_empty_text(comp, v)) == d:
                        continue
                    try:
                        v = coerce(comp, _plain(v))
                    except LinkValueError as e:
                        refused.append(f"{e} (got {str(v)[:40]})")
                        continue
                    changed.append((comp.elem_id, v))
                if refused:
                    gr.Warning("Left out of the link: " + "; ".join(refused[:5]))
                return build_query(_tab, changed)

            # preprocess=False: a value the control refuses (a feature id past its maximum) reaches
            # `make`, which leaves it out with a notice, instead of failing the request in preprocess
            # queued (Gradio shows a handler's gr.Warning only for a queued event), never behind model work
            entry.button.click(
                make,
                inputs=entry.inputs + extra,
                outputs=entry.box,
                api_visibility="private",
                show_progress="hidden",
                concurrency_limit=None,
                preprocess=False,
            ).then(None, inputs=entry.box, outputs=entry.box, js=ABSOLUTE_JS, api_visibility="private")

        outputs = [c for t in self.tabs for c in t.inputs]
        registry = self.registry
        from components import tabs as declared

        own = {k for t in declared() if t.id in ids for k in t.link_params}

        def restore(request: gr.Request):
            params = request.query_params if request else {}
            wanted = params.get("tab") or default_tab
            values, notices = parse_query(params, registry, own)
            if params.get("tab") and wanted not in ids:
                notices.insert(0, f"no tab {wanted[:40]!r}")
            if notices:
                gr.Warning("Some link settings were ignored: " + "; ".join(notices[:5]))
            # The page opens on the first tab by itself: selecting it again here (no ?tab=, ?tab= the
            # first tab, or a tab that does not exist) would take back a tab the visitor clicked while
            # this answer was on its way (an Overview button that opens the tour, a tab name)
            selected = gr.Tabs(selected=wanted) if wanted in ids and wanted != default_tab else gr.skip()
            return [selected] + [
                _restored(c, values[c.elem_id]) if c.elem_id in values else gr.update() for c in outputs
            ]

        # A tab's own load event that writes a linked input (its defaults, its own URL handling) would
        # race with the restore: let the link's value win in that event's answer too.
        for fn in list(demo.fns.values()):
            if any(ev == "load" for _, ev in (fn.targets or [])) and fn.fn is not None:
                slots = [
                    (i, c)
                    for i, c in enumerate(fn.outputs or [])
                    if id(c) in self.load_written and c.elem_id in registry and registry[c.elem_id] is c
                ]
                if slots and not inspect.isgeneratorfunction(fn.fn) and not inspect.iscoroutinefunction(fn.fn):
                    fn.fn = _link_wins(fn.fn, slots, registry, len(fn.outputs))

        dep = demo.load(restore, outputs=[tabs] + outputs, api_visibility="private", show_progress="hidden")
        self._wire_runs(demo, dep)
        alts = image_alts(demo)
        if alts:
            demo.load(None, js=ALT_JS % json.dumps(alts, ensure_ascii=False), api_visibility="private")


def _empty_text(comp, value):
    """An empty text box is "" whether it was built with no value (None) or emptied in the browser."""
    return "" if value is None and isinstance(comp, gr.Textbox) else value


def _plain(value):
    """A value in the form it takes in a URL, so a default and the same value sent back compare equal."""
    try:
        return json.loads(encode(value))
    except (TypeError, ValueError):
        return value


def _restored(comp, value):
    """The update that shows a linked value (a validated custom list also becomes the choices)."""
    if getattr(comp, "_wb_link_validate", None) is not None and isinstance(value, list):
        return gr.update(choices=list(value), value=value)
    return gr.update(value=value)


def linked(keys: Iterable[str]) -> bool:
    """Inside a request: whether the page's URL carries any of these link keys."""
    query = _current_query()
    return any(k in query for k in keys)


def current_query() -> dict:
    """Inside a request: the page URL's query parameters ({} elsewhere)."""
    return _current_query()


def carries(prefix: str | None) -> bool:
    """Inside a request: whether the page's link carries a setting whose key starts with `prefix`
    (a tab's own inputs, e.g. "memo-")."""
    return bool(prefix) and any(k.startswith(prefix) for k in current_query())


def _current_query() -> dict:
    try:
        from gradio.context import LocalContext

        request = LocalContext.request.get(None)
    except (ImportError, LookupError):
        request = None
    return dict(request.query_params) if request is not None and request.query_params else {}


def _link_wins(fn, slots, registry, n_outputs):
    """Wrap a tab's load handler: outputs that are linked inputs named in the URL take the URL value."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        result = fn(*args, **kwargs)
        query = _current_query()
        if not query:
            return result
        values, _ = parse_query({c.elem_id: query[c.elem_id] for _, c in slots if c.elem_id in query}, registry)
        if not values:
            return result
        if isinstance(result, dict):
            for _, c in slots:
                if c.elem_id in values:
                    result[c] = gr.update(value=values[c.elem_id])
            return result
        seq = list(result) if n_outputs > 1 and isinstance(result, (list, tuple)) else [result]
        for i, c in slots:
            if c.elem_id in values and i < len(seq):
                seq[i] = gr.update(value=values[c.elem_id])
        return type(result)(seq) if isinstance(result, tuple) else (seq if n_outputs > 1 else seq[0])

    return wrapper


def header_controls(demo=None) -> tuple[Any, Any]:
    """The presenter switch and the light/dark button (browser-only events). Call inside the header Row."""
    with gr.Column(scale=0, min_width=330, elem_classes=["wb-header-controls"]):
        with gr.Row(equal_height=True):
            presenter = gr.Checkbox(
                label="Presenter view",
                value=False,
                container=False,
                scale=0,
                min_width=150,
                elem_id="wb-presenter-toggle",
            )
            theme = gr.Button("◐ Light / dark", size="sm", scale=0, min_width=130, elem_id="wb-theme-toggle")
    presenter.input(None, inputs=presenter, outputs=presenter, js=PRESENTER_JS, api_visibility="private")
    theme.click(None, js=THEME_JS, api_visibility="private")
    if demo is not None:
        demo.load(None, outputs=presenter, js=PRESENTER_FROM_URL_JS, api_visibility="private")
    return presenter, theme
