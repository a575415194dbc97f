"""Shared UI pieces: theme, CSS, the per-device concurrency group, error helpers."""

from __future__ import annotations

import inspect
import os
from dataclasses import dataclass, field
from typing import Any

import gradio as gr

from backend.core.colors import themed  # noqa: F401  (re-exported: every tab's plotly figures)
from backend.core.device import pick_device

# Every model-touching event (every paper's tab, the MCP model tools) joins this one group, which runs up
# to `model_concurrency()` calls at once; each call takes turns per model through the model's own
# lock (backend.core.interventions), so two visitors on different models run side by side and two on
# the same model take turns, and a model load waits for running computations (backend.core.loadgate).
# Calls that touch no model (feature lists and pages, status) keep Gradio's per-event queue and never
# wait behind a model call.
MODEL_GROUP = f"model-{pick_device().type}"
DEFAULT_MODEL_CONCURRENCY = 4


def model_concurrency() -> int:
    """WORKBENCH_MODEL_CONCURRENCY: model calls the app runs at once, over all tabs (default 4; read
    when the app is built)."""
    raw = os.environ.get("WORKBENCH_MODEL_CONCURRENCY", "").strip()
    if not raw:
        return DEFAULT_MODEL_CONCURRENCY
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"WORKBENCH_MODEL_CONCURRENCY must be a whole number ≥ 1, not {raw!r}")
    return int(raw)


def model_event(**extra: Any) -> dict[str, Any]:
    """Keyword arguments for `.click(...)` / `.change(...)` of a model-touching event."""
    return {"concurrency_id": MODEL_GROUP, "concurrency_limit": model_concurrency(), **extra}


def is_model_group(concurrency_id) -> bool:
    return concurrency_id == MODEL_GROUP


@dataclass
class TabContext:
    """What app.py hands each tab's build(): the Tabs container and the preset source."""

    tabs: Any
    source: str
    registry: list[Any] = field(default_factory=list)  # every tab (components.tab.Tab), in order
    tab: Any = None  # the gr.Tab being built, and its id (app.build_app sets both per tab)
    tab_id: str = ""


def on_first_open(
    ctx: TabContext, fn, inputs: list, outputs: list, link_prefix: str | None = None, **events: Any
) -> None:
    """Compute a tab's first view when a session first opens the tab, or when the page opens on it
    (a link's ?tab=), never at every page load: a visitor who does not open the tab costs nothing,
    every tab behaves alike, and the tab's model loads with its progress on the outputs' bar
    (components.serving.guard). `fn(*inputs)` returns the outputs' values (gr.skip() to leave one), or, as a
    generator, yields them step by step. With `link_prefix`, a page whose link carries a setting of
    the tab (a query key starting with it) computes nothing here: the link's own runs do (its Tab.link_runs).

    Both ways in are the tab's select event: a page opened on a tab is put there by the link
    restore's `gr.Tabs(selected=...)` (components.links.deep_links), and Gradio's front end fires the tab's
    select for that as for a click. A load event per tab that checked the link's tab on the server
    cost every page open six calls and the front end a status for every tab's first-view outputs,
    which it then refreshed at every later status message of the session."""
    from components.links import deep_links as links
    from components.inputs.fields import keep_on_failure

    from components.serving import first_views

    if ctx.tab is None:  # a tab built on its own (a notebook, a test) has no tab to open
        return
    opened = gr.State(False)
    skips = tuple(gr.skip() for _ in outputs)
    tab_id = ctx.tab_id
    if ctx.source == "zoo":  # the zoo's default first view is the same every time: kept (first_views)
        first_views.register(tab_id, fn, [getattr(c, "value", None) for c in inputs])

    def first(done, *args):
        if done or links.carries(link_prefix):
            return (True, *skips)
        kept = first_views.served(tab_id, args)
        if kept:
            out = kept[-1]
        else:
            with first_views.live(tab_id, args) as keep:
                out = fn(*args)
                keep([out])
        return (True, *(out if len(outputs) > 1 else (out,)))

    if inspect.isgeneratorfunction(fn):  # a first view in steps: each shows as soon as it is computed

        def first(done, *args):  # noqa: F811
            if done or links.carries(link_prefix):
                yield (True, *skips)
                return
            kept = first_views.served(tab_id, args)
            if kept:
                for out in kept:
                    yield (True, *(out if len(outputs) > 1 else (out,)))
                return
            with first_views.live(tab_id, args) as keep:
                steps = []
                for out in fn(*args):
                    steps.append(out)
                    yield (True, *(out if len(outputs) > 1 else (out,)))
                keep(steps)

    def model_unneeded(done, *args) -> bool:  # answered without the model (components.serving.guard.gated)
        return bool(done) or links.carries(link_prefix) or first_views.ready(tab_id, args)

    first.model_unneeded = model_unneeded
    first.__module__ = fn.__module__  # the tab's own handler: its ZeroGPU duration (guard)
    kw = model_event(api_visibility="private", **events)
    keep_on_failure(ctx.tab.select(first, [opened, *inputs], [opened, *outputs], **kw), outputs)


def fail(message: str) -> None:
    """A clear message in the UI for bad input; never a stack trace."""
    raise gr.Error(message)


# System fonts only: a web font would be fetched from the network, and the app must render offline.
THEME = gr.themes.Soft(
    primary_hue=gr.themes.colors.indigo,
    secondary_hue=gr.themes.colors.rose,
    neutral_hue=gr.themes.colors.slate,
    font=["ui-sans-serif", "system-ui", "-apple-system", "Segoe UI", "sans-serif"],
    font_mono=["ui-monospace", "SFMono-Regular", "Menlo", "monospace"],
)

CSS = """
.wb-header {display:flex; flex-wrap:wrap; align-items:baseline; column-gap:14px; row-gap:2px; padding:6px 2px 2px 2px;}
.wb-header h1 {margin:0; font-size:1.6rem; font-weight:700; letter-spacing:-0.01em;}
.wb-header .wb-sub {color: var(--body-text-color-subdued); font-size:0.95rem;}
.wb-header .wb-subline {display:inline-flex; align-items:baseline; column-gap:8px; white-space:nowrap;}
.wb-badge {display:inline-block; padding:2px 9px; border-radius:999px; font-size:0.75rem;
  font-weight:600; background: var(--color-accent-soft); color: var(--color-accent);
  border:1px solid var(--color-accent); margin-left:6px; white-space:nowrap;}
.wb-badge.wb-weak {background: transparent; color: var(--body-text-color-subdued); border-style: dashed;
  border-color: var(--body-text-color-subdued);}
/* a dropdown's text stops before its arrow (Gradio lets a long choice run under it) */
.gradio-container .secondary-wrap:has(.icon-wrap) input {padding-right: 26px !important; text-overflow: ellipsis;}
.wb-card {border:1px solid var(--border-color-primary); border-radius:12px; padding:14px 16px;
  background: var(--block-background-fill); min-height: 128px;}
.wb-card h3 {margin:0 0 4px 0; font-size:1.05rem;}
.wb-card .wb-paper {font-size:0.8rem; color: var(--body-text-color-subdued); margin-bottom:6px;}
.wb-card p {margin:0; font-size:0.9rem;}
/* A card's numbers table keeps inside its card down to 1000 px: compact cells, figures never wrapped. */
.wb-card table.wb-acc {width:100%; border-collapse:collapse; font-size:0.85rem; margin:0;}
.wb-card table.wb-acc th {font-size:0.78rem;}
.wb-card table.wb-acc th, .wb-card table.wb-acc td {padding:4px 6px !important; white-space:nowrap;}
.wb-muted {color: var(--body-text-color-subdued); font-size:0.85rem;}
.wb-picker-line {font-size:0.85rem; margin-top:2px;}
.wb-picker-bad {color: var(--error-text-color, #b91c1c);}
.wb-explain {border-left:3px solid var(--color-accent); padding:6px 12px; margin:4px 0 10px 0;
  background: var(--background-fill-secondary); border-radius:0 8px 8px 0; font-size:0.92rem;}
footer {display:none !important;}
.wb-instrument {display:flex !important; flex-direction:column;}
.wb-instrument > .wb-card-wrap {flex-grow:1;}
.wb-instrument > button {flex-grow:0 !important;}
.wb-card-wrap {display:flex !important; flex-direction:column;}
.wb-card-wrap > .html-container, .wb-card-wrap *:has(> .wb-card), .wb-card-wrap .wb-card {
  flex-grow:1; display:flex; flex-direction:column;}
/* The Overview's first step and its five cards, all on a 1000×800 screen: compact cards in one row. */
.wb-start {align-items:center; gap:12px; margin:2px 0 6px 0;}
.wb-start-lead {font-size:0.95rem;}
.wb-instruments .wb-card {padding:10px 12px; min-height:0;}
.wb-instruments .wb-card p {font-size:0.84rem; line-height:1.32;}
.wb-instruments .wb-card h3 {font-size:1rem;}
.wb-instruments .wb-card .wb-paper {margin-bottom:4px;}
"""

# Presenter view (a class on <body> set by the header switch, components.links.deep_links): hide what only an
# expert needs (closed accordions, raw JSON, file exports but a tab's main one, marked `wb-export`, so
# a presenter can hand a result out; `wb-advanced`), make text and figures big,
# one result per row (Gradio also prefixes every rule with its container, which outranks a plain
# `body.x .y`: hence !important). Then the deep-link row, the header switches and the guided tour
# (whose figure and caption stay side by side in presenter view, so a step is one screen).
CSS += """
body.wb-presenter {font-size: 18px;}
body.wb-presenter .wb-advanced,
body.wb-presenter .gr-accordion:not(:has(> .label-wrap.open)),
body.wb-presenter .block:not(.gr-accordion):has(.json-holder),
body.wb-presenter .block:not(.gr-accordion):not(.wb-export):has(.file-preview-holder) {display: none !important;}
body.wb-presenter .wb-explain {font-size: 1.25rem !important; line-height: 1.5 !important;}
body.wb-presenter .wb-tour-caption {font-size: 1.45rem !important;}
body.wb-presenter .gradio-container label span, body.wb-presenter .gradio-container button {font-size: 1.05rem !important;}
body.wb-presenter .row:has(.js-plotly-plot), body.wb-presenter .row:has([data-testid="image"]) {
  flex-direction: column !important;}
body.wb-presenter .row:has(.js-plotly-plot) > *, body.wb-presenter .row:has([data-testid="image"]) > * {
  width: 100% !important; max-width: 100% !important;}
body.wb-presenter .js-plotly-plot {min-height: 60vh !important;}
.wb-header-row {align-items: center;}
.wb-header-controls {justify-content: center;}
.wb-header-controls .block, .wb-header-controls .form {background: transparent !important;
  border: none !important; box-shadow: none !important;}
.wb-linkrow {align-items: center; margin-top: 10px; opacity: 0.9;}
.wb-tour-caption {font-size: 1rem; line-height: 1.5;}
.wb-tour-step {font-weight: 600; color: var(--color-accent);}
.wb-tour-controls {flex-wrap: nowrap !important; align-items: flex-end !important;}
.wb-tour-controls > button {align-self: flex-end; margin-bottom: 6px;}
.wb-tour-head {white-space: nowrap; overflow: hidden; text-overflow: ellipsis; font-size: 1.05rem;}
.wb-tour-caption-box .wb-tour-caption {margin-top: 0;}
body.wb-presenter .row.wb-tour-body:has(.js-plotly-plot) {flex-direction: row !important;}
body.wb-presenter .row.wb-tour-body:has(.js-plotly-plot) > * {width: auto !important; max-width: none !important;}
body.wb-presenter .wb-tour-figure .js-plotly-plot {min-height: 0 !important;}
"""

# Dark mode for figures. Plotly figures carry the shared template (backend.core.colors.themed:
# transparent backgrounds, mid-grey grid), so only their text needs the page's colour: titles, axes,
# legends, colour bars, annotations and point labels (hover labels keep plotly's own contrast);
# an annotation in the positive red (colors.POSITIVE, e.g. the tour's steered captions) stays red, lighter
# (matched without a comma: Gradio splits selectors at commas when it scopes the CSS).
# Matplotlib PNGs keep their white card so their dark text stays readable.
CSS += """
.dark .js-plotly-plot .main-svg .infolayer text, .dark .js-plotly-plot .main-svg .xaxislayer-above text,
.dark .js-plotly-plot .main-svg .yaxislayer-above text, .dark .js-plotly-plot .main-svg .textpoint text,
.dark .js-plotly-plot .main-svg .annotation-text, .dark .js-plotly-plot .main-svg .g-gtitle text {
  fill: #e5e7eb !important;}
.dark .js-plotly-plot .main-svg .legend .bg {fill: transparent !important;}
.dark .js-plotly-plot .main-svg .bartext-outside {fill: #e5e7eb !important;}
.dark .js-plotly-plot .main-svg .annotation-text[style*="fill: rgb(178"] {fill: #f87171 !important;}
.dark .js-plotly-plot .modebar-btn path {fill: #9ca3af !important;}
.dark [data-testid="image"] img, .dark .gallery-item img, .dark .thumbnail-item img {background: #ffffff;}
.wb-token {color: #111827;}
.wb-hidden {display: none !important;}
"""

# Keyboard users see where they are: a visible ring on every focused text field, checkbox, radio,
# button and tab header (Gradio's own is a faint border). The header's Presenter box keeps a visible
# outline when unchecked, on light and dark backgrounds.
CSS += """
.gradio-container input:focus-visible, .gradio-container textarea:focus-visible,
.gradio-container select:focus-visible, .gradio-container button:focus-visible,
.gradio-container [role="tab"]:focus-visible, .gradio-container input[type="checkbox"]:focus-visible,
.gradio-container input[type="radio"]:focus-visible {
  outline: 3px solid var(--color-accent) !important; outline-offset: 2px !important;}
.gradio-container input[type="checkbox"]:not(:checked) {border: 1.5px solid var(--body-text-color-subdued) !important;}
#wb-presenter-toggle input[type="checkbox"] {border-width: 2px !important; width: 18px; height: 18px;}
"""

# Presenter view, second part: a tab's one-line plain caption shown only there (`wb-presenter-only`,
# in place of its expert explanation marked `wb-advanced`), and its key figure (`wb-keyfig`) at full width.
# A row of controls beside its key figure that stays a row (`wb-presenter-row`), so the figure is on the
# first screen. A wide table whose headers break between words only (`wb-table-words`; Gradio breaks them anywhere).
CSS += """
body:not(.wb-presenter) .wb-presenter-only {display: none !important;}
body.wb-presenter .wb-keyfig {max-width: none !important; font-size: 1.1rem;}
body.wb-presenter .row.wb-presenter-row:has(.js-plotly-plot) {flex-direction: row !important;}
body.wb-presenter .row.wb-presenter-row:has(.js-plotly-plot) > * {width: auto !important; max-width: none !important;}
.wb-table-words th .header {word-break: normal !important; overflow-wrap: normal !important; font-size: 0.8rem;}
"""

# Presenter view, third part: the key figure first. Every row and column on the way from the tab to
# a block marked `wb-keyfirst` gives up its box (display: contents), so that block and its
# neighbours become items of the tab's own column; the tab's plain caption (`wb-lead`) comes
# first, then the marked blocks (the figure and the button that fills it), then the rest in order.
CSS += """
body.wb-presenter .tabitem:has(.wb-keyfirst) {flex-direction: column !important;}
body.wb-presenter .tabitem .column:has(.wb-keyfirst), body.wb-presenter .tabitem .row:has(.wb-keyfirst),
body.wb-presenter .tabitem .form:has(.wb-keyfirst) {display: contents !important;}
body.wb-presenter .tabitem .wb-lead {order: -2;}
body.wb-presenter .tabitem .wb-keyfirst {order: -1;}
"""

# Layout at any screen: below 1280 px the page takes the window's width (Gradio keeps a 768 px column
# on a 1000 px screen; not an @media rule: Gradio scopes those inside its page, below this element), and the tab bar wraps its labels (app.py) rather than hide tabs behind "⋯".
# A block's label sits above its image, gallery, upload area, plot or file, in the flow, instead of
# floating over the block's top-left corner (where it covered the first image, the upload icon, a
# plot's title), and such a block grows to hold both.
CSS += """
.main.fillable.app:not(.fill_width) {max-width: max(min(100%, 1280px), 80vw) !important;
  padding-left: clamp(12px, 2vw, 32px) !important; padding-right: clamp(12px, 2vw, 32px) !important;}
.gradio-container .block > label[data-testid="block-label"].float:has(~ [data-testid="image"], ~ .gallery-container,
  ~ .upload-container, ~ .js-plotly-plot, ~ .file-preview-holder) {position: static !important; margin: 0 0 6px 0;
  width: fit-content; max-width: 100%;}
.gradio-container .block:has(> label[data-testid="block-label"].float ~ :is([data-testid="image"], .gallery-container,
  .upload-container, .js-plotly-plot, .file-preview-holder)) {height: auto !important;}
"""

# Relevance's conservation table: a number never breaks over two lines (it read "-2.19e+0 / 0"), a
# header only between words; a table wider than its column scrolls.
CSS += """
#rel-conservation table {display: block; overflow-x: auto; font-size: 0.85rem;}
#rel-conservation td {white-space: nowrap;}
#rel-conservation th {word-break: normal; overflow-wrap: normal;}
"""

# Presenter view, Relevance: the token heatmap is the key figure; its tokens read from the back row.
CSS += """
body.wb-presenter .wb-relevance-heatmap .wb-token {font-size: min(1.7rem, 2.1vw, 2.7vh); padding: 1px 5px !important;}
body.wb-presenter .wb-relevance-heatmap {font-size: 1.15rem;}
body.wb-presenter .wb-relevance-heatmap div[style*="line-height"] {line-height: 1.45 !important;}
"""

# Presenter view, the whole key figure on the first screen (1000×800 and up): Memorization's grid of
# seeds is as wide as the screen's height allows (its height grows with its width: two rows of square
# images), and its table of numbers below it stays compact.
CSS += """
body.wb-presenter .memo-grid {max-width: min(100%, calc(3 * (100vh - 610px) + 140px)) !important;}
body.wb-presenter #memo-compare .wb-card table {font-size: 0.8rem !important;}
body.wb-presenter #memo-compare .wb-card th, body.wb-presenter #memo-compare .wb-card td {padding: 3px 6px !important;}
body.wb-presenter #memo-compare .wb-card {padding: 8px 10px;}
"""
