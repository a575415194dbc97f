"""Guided tour: each paper's headline result told in a few clicks, for someone who has never read it.

The steps live beside each paper's tab (components/<tab>/tour.py, named by its Tab); this tab only runs them: it
offers the tours whose zoo organisms are present, plus all of them in a row, caches each computed
step, and shows one step at a time. The controls sit above the figure and the caption beside it,
so Back / Next stay in one place from step to step and a step fits a 1440×1000 screen. Figures are
plotly with the shared theme (transparent, exact values on hover), so they follow the page's light
or dark theme without being redrawn. The Overview's "Guided tour" buttons open a tour here.
"""

from __future__ import annotations

import html

import gradio as gr
import plotly.io as pio

from backend.core.cache import ByteLRUCache
from components.common import model_event, on_first_open
from components.tab import Step, Tour


CACHE = ByteLRUCache(48 * 2**20, name="tour")


def all_tours() -> list[Tour]:
    """Every paper's tour, present or not, in the tabs' order (each tab names its own: Tab.tour)."""
    from components import tabs

    return [t.tour for t in tabs() if t.tour is not None]


def tours() -> dict[str, Tour]:
    """The tours whose zoo organism is present, plus 'all' (every available step in order)."""
    ready = [t for t in all_tours() if t.available()]
    out = {t.tour_id: t for t in ready}
    if ready:
        out["all"] = Tour(
            "all",
            "All papers, one after the other",
            "",
            [Step(f"{t.title.split(' — ')[0]}: {s.title}", s.compute) for t in ready for s in t.steps],
        )
    return out


def _computed(s: Step) -> tuple[str, str, dict]:
    """(figure JSON, caption, numbers) of a step; cached as JSON so the cache counts its real size
    and every caller gets a fresh figure."""
    fig, cap, numbers = s.compute()
    return fig.to_json(), cap, numbers


def run_step(tour_id: str, step) -> tuple[str, str, object, dict]:
    """(header html, caption html, plotly figure, numbers) of step `step` (1-based) of a tour; cached."""
    available = tours()
    if tour_id not in available:
        raise ValueError(f"No tour {str(tour_id)[:40]!r}; choose from {list(available)}.")
    tour = available[tour_id]
    try:
        k = int(step)
    except (TypeError, ValueError):
        raise ValueError("The step must be a whole number.") from None
    if not 1 <= k <= len(tour.steps):
        raise ValueError(f"The {tour_id!r} tour has steps 1 to {len(tour.steps)}.")
    s = tour.steps[k - 1]
    # Steps shared by 'all' and a paper's tour share one cache entry (keyed by the step function).
    fig_json, cap, numbers = CACHE.get_or_compute(
        f"{s.compute.__module__}.{s.compute.__qualname__}", lambda: _computed(s)
    )
    head = (
        f"<div class='wb-tour-head' title='{html.escape(s.title)}'><span class='wb-tour-step'>Step {k} of "
        f"{len(tour.steps)}</span> · {html.escape(s.title)}</div>"
    )
    return (
        head,
        f"<div class='wb-explain wb-tour-caption'>{cap}</div>",
        pio.from_json(fig_json),
        # which tour and step last: the page's drawing check reads them (a step's own number of
        # the same name must not make it draw again without end)
        {"title": s.title, **numbers, "tour": tour_id, "step": k},
    )


def _clamp(tour_id, step, delta: int = 0) -> tuple[int, int]:
    """(step moved by `delta` and kept within the tour, the tour's number of steps)."""
    t = tours().get(tour_id)
    n = len(t.steps) if t else 1
    try:
        k = int(step)
    except (TypeError, ValueError):
        k = 1
    return max(1, min(n, k + delta)), n


def _buttons(k: int, n: int) -> tuple[gr.Button, gr.Button]:
    """Back is off on the first step, Next on the last: a click that would do nothing is not offered."""
    return gr.Button(interactive=k > 1), gr.Button(interactive=k < n)


def overview_tours() -> dict[str, str]:
    """The Overview's "Guided tour" buttons (components.overview.layout, elem_id overview-tour-<tab id>):
    each opens its tab's tour, the "Start here" button (overview-tour-all) all of them."""
    from components import tabs

    return {**{t.id: t.tour.tour_id for t in tabs() if t.tour is not None}, "all": "all"}


def _overview_buttons() -> dict[str, gr.Button]:
    found: dict[str, gr.Button] = {}

    def walk(block):
        for child in getattr(block, "children", None) or []:
            eid = getattr(child, "elem_id", None) or ""
            if isinstance(child, gr.Button) and eid.startswith("overview-tour-"):
                found[eid[len("overview-tour-") :]] = child
            walk(child)

    walk(gr.context.Context.root_block)
    return found


def _wire_overview(ctx, available: dict, tour, step) -> None:
    """Show the Overview's tour buttons whose tour exists; a click opens this tab on that tour, step 1."""
    if gr.context.Context.root_block is None or getattr(ctx, "tabs", None) is None:
        return
    wanted = overview_tours()
    for key, btn in _overview_buttons().items():
        tour_id = wanted.get(key)
        if tour_id not in available:
            continue
        btn.visible = True
        btn.click(
            lambda t=tour_id, here=ctx.tab_id: (gr.Tabs(selected=here), t, 1),
            None,
            [ctx.tabs, tour, step],
            api_visibility="private",
            queue=False,
        )


def build(ctx) -> None:
    available = tours()
    missing = [t.title.split(" — ")[0] for t in all_tours() if not t.available()]
    note = f" Tours for {', '.join(missing)} appear once their zoo models are built." if missing else ""
    gr.HTML(
        "<div class='wb-explain'>Each tour tells one paper's main finding in a few steps, computed "
        "live on this workbench's small models. Press <b>Next</b> to move on; every figure is "
        "recomputed by the paper's method the first time it is shown (hover for exact values)."
        f"{html.escape(note)}</div>",
        elem_classes=["wb-advanced"],
    )
    if not available:
        gr.Markdown("No tour is available: no zoo model is built yet.")
        return
    first = next(iter(available))
    # One row of controls above the figure and a one-line header: nothing above Back / Next changes
    # height from step to step, so they never move under the presenter's pointer, and the figure
    # with the caption beside it fits a 1440×1000 screen.
    with gr.Row(elem_classes=["wb-tour-controls"]):
        tour = gr.Dropdown(
            [(t.title, k) for k, t in available.items()], value=first, label="Tour", elem_id="tour-name", scale=4
        )
        step = gr.Number(value=1, precision=0, minimum=1, label="Step", elem_id="tour-step", scale=0, min_width=90)
        back = gr.Button("← Back", elem_id="tour-back", scale=1, min_width=110, interactive=False)
        nxt = gr.Button("Next →", variant="primary", elem_id="tour-next", scale=1, min_width=110)
    head = gr.HTML(elem_id="tour-header", elem_classes=["wb-tour-header"])
    with gr.Row(elem_classes=["wb-tour-body"]):
        with gr.Column(scale=3, min_width=400):
            figure = gr.Plot(show_label=False, elem_id="tour-figure", elem_classes=["wb-tour-figure"])
        with gr.Column(scale=2, min_width=300):
            caption = gr.HTML(elem_id="tour-caption", elem_classes=["wb-tour-caption-box"])
    with gr.Accordion("Numbers behind this figure (JSON export)", open=False, elem_id="tour-numbers-acc"):
        numbers = gr.JSON(show_label=False, elem_id="tour-numbers")

    def show(tour_id, k, progress=gr.Progress()):
        progress(0.1, desc="computing this step (cached afterwards)")
        return run_step(tour_id, k)

    def draw(tour_id, k, progress=gr.Progress()):
        # A picked tour changes before the step box is reset to 1, so a run can read the last tour's
        # step: it is held within the tour here, and the run the reset triggers draws step 1 after it.
        return show(tour_id, _clamp(tour_id, k)[0], progress)

    def held(tour_id, k):
        """A typed step past the tour's end becomes its last step; Back / Next follow the box at once."""
        kept, n = _clamp(tour_id, k)
        return (gr.skip() if kept == k else kept, *_buttons(kept, n))

    def move(tour_id, k, delta: int):
        k, n = _clamp(tour_id, k, delta)
        return (k, *_buttons(k, n))

    back.click(lambda t, k: move(t, k, -1), [tour, step], [step, back, nxt], api_visibility="private", queue=False)
    nxt.click(lambda t, k: move(t, k, +1), [tour, step], [step, back, nxt], api_visibility="private", queue=False)
    tour.input(lambda t: (1, *_buttons(*_clamp(t, 1))), tour, [step, back, nxt], api_visibility="private", queue=False)
    _wire_overview(ctx, available, tour, step)

    outputs = [head, caption, figure, numbers]
    # Both boxes change at once (a link, a picked tour and its step's reset), and the two runs of the
    # drawing they trigger can overlap and end in either order, leaving the first box change's step
    # on the page (always_last defers a run only once the first has reached the queue). So every
    # drawing is checked when it ends against the boxes as they are then; one that shows another step
    # bumps `redo`, which draws again: the last drawing to end is always followed by a check.
    redo = gr.Number(value=0, visible=False)  # no elem_id: page state, not a link's (components.links)
    drawn = gr.on(
        [tour.change, step.change, redo.change],
        draw,
        [tour, step],
        outputs,
        trigger_mode="always_last",
        **model_event(api_visibility="private"),
    )

    def check(tour_id, k, shown, n):
        """Draw again if the figure shows another step than the boxes hold; Back / Next for the boxes."""
        kept, total = _clamp(tour_id, k)
        current = isinstance(shown, dict) and shown.get("tour") == tour_id and shown.get("step") == kept
        return (gr.skip() if current else int(n or 0) + 1, *_buttons(kept, total))

    # Fast Back / Next while the figure computes, set again after each drawing.
    step.change(held, [tour, step], [step, back, nxt], api_visibility="private", queue=False)
    drawn.success(check, [tour, step, numbers, redo], [redo, back, nxt], api_visibility="private", queue=False)
    # The API's step, checked strictly (a step past the end is an error, not the last step). Nothing
    # on the page triggers it: the page draws through the event above.
    gr.Button(visible=False, elem_id="tour-api").click(show, [tour, step], outputs, **model_event(api_name="tour_step"))

    def first_view(tour_id, k):
        k, n = _clamp(tour_id, k)
        return (*run_step(tour_id, k), *_buttons(k, n))

    # The first step is drawn when the tab first opens (it was drawn at every page load, a model call
    # for every visitor). A link's tour and step are drawn by the link's own run once they are
    # restored (the tab's link_runs, components.links): the tab's contents mount when the link opens
    # it, and a box that mounts already holding its linked value may fire no change, so the changes
    # above cannot be relied on to draw a link's step.
    on_first_open(ctx, first_view, [tour, step], outputs + [back, nxt], link_prefix="tour-")
    gr.Button(visible=False).click(
        first_view, [tour, step], outputs + [back, nxt], **model_event(api_name="tour_link", api_visibility="private")
    )
