"""Overview: what the workbench is, which models each instrument uses, and the way into each tab."""

from __future__ import annotations

import html

import gradio as gr

from backend.core import device, picker, preload, presets, store, weights
from backend.core.cache import all_caches
from components.serving.guard import INTERNAL_ERRORS


def _model_table(source: str) -> list[list[str]]:
    loaded = store.loaded()
    rows = []
    for p in presets.presets():
        active = presets.active(p.tab, source) == p
        # the store keys a checkpoint's weights with the class that loads them (weights.key)
        state = "loaded" if weights.key(p) in loaded else ("active" if active else "available")
        if state != "loaded" and (why := picker.unavailable(p)):  # as the tabs' pickers say it
            state = f"{state}, {why}" if active else why
        rows.append([p.tab, p.source, p.path_or_id, p.model_class.rsplit(".", 1)[-1], state])
    known = {weights.key(p) for p in presets.presets()}
    for model_id in loaded:  # users' own models (picked in a tab), loaded now; not a tokenizer or data
        source, _, rest = model_id.partition(":")
        if model_id not in known and source in ("local", "hub") and "#" not in rest:
            rows.append(["(picked)", "your own", rest.rsplit("@", 1)[0], "", "loaded"])
    return rows or [["—", source, "no models registered yet", "", ""]]


def system_status(source: str) -> dict:
    """The numbers the Overview shows; also served as the `status` API endpoint."""
    return {
        "preset_source": source,
        "device": device.describe(),
        "models": [dict(zip(["tab", "source", "id", "class", "state"], r)) for r in _model_table(source)],
        "caches": [c.stats() for c in all_caches()],
        "model_store": store.stats(),
        # under ZeroGPU: the models a GPU worker had to load itself, then loaded here for the next
        # worker ("tab:model"); those a call named were loaded here before its worker forked
        "mirrored": preload.mirrored(),
        # Hooks left on a shared model, or weights changed since load (checked when fingerprints
        # were taken, WORKBENCH_CHECK_WEIGHTS=1), and handler defects: all should stay empty / 0.
        "integrity": store.integrity_problems(),
        "internal_errors": len(INTERNAL_ERRORS),
    }


def runtime_summary(status: dict) -> str:
    """One plain line on the server's health, above the raw JSON."""
    loaded = sum(m["state"] == "loaded" for m in status["models"])
    used = sum(c.get("bytes", 0) for c in status["caches"])
    problems = len(status["integrity"]) + status["internal_errors"]
    health = "no problems found" if problems == 0 else f"**{problems} problem(s)**: see the JSON below"
    st = status.get("model_store") or {}
    budget = st.get("budget_bytes")
    held = f" ({st.get('resident_bytes', 0) / 2**30:.2f} of {budget / 2**30:.1f} GiB model budget)" if budget else ""
    return (
        f"{loaded} model(s) loaded on {html.escape(status['device'])}{held}; caches hold "
        f"{used / 2**20:.1f} MiB; integrity checks: {health}."
    )


def papers_in_words(tabs) -> str:
    """ "five": as many as the tabs that put a paper to work (a sixth such tab makes it "six")."""
    n = sum(1 for t in tabs if t.paper)
    return "one two three four five six seven eight nine ten".split()[n - 1] if 0 < n <= 10 else str(n)


def build(ctx) -> None:
    instruments = [t for t in ctx.registry if t.card]  # every tab with a card, in the tabs' order
    gr.HTML(
        f"<div class='wb-explain'>{papers_in_words(ctx.registry).capitalize()} interpretability papers as live instruments: each tab runs the "
        "paper's method now, on your input. By default the models are the <b>zoo</b>, tiny models of "
        "the real architectures trained here with a planted ground truth, so each method's claim can "
        "be checked against the truth; on a GPU the same code loads the papers' checkpoints, or your "
        "own model (a hub id or a local folder).</div>"
    )
    # The one obvious first step, above the five instruments: all of it on the first screen at
    # 1000×800 (the Adapters card and the tour once lay below the fold).
    with gr.Row(elem_classes=["wb-start"], equal_height=True):
        gr.HTML(
            "<div class='wb-start-lead'><b>New here? Start with the guided tour:</b> one step per "
            "paper, each with its key figure computed live.</div>",
            elem_classes=["wb-start-text"],
        )
        gr.Button(
            "Start here: the guided tour ▸",
            size="md",
            variant="primary",
            elem_id="overview-tour-all",
            visible=False,
            scale=0,
            min_width=260,
        )
    buttons = []
    with gr.Row(equal_height=True, elem_classes=["wb-instruments"]):
        for t in instruments:
            # A flex column whose card grows: every card ends at one height, so the buttons line up.
            with gr.Column(min_width=150, elem_classes=["wb-instrument"]):
                gr.HTML(
                    f"<div class='wb-card'><h3>{html.escape(t.title)}</h3>"
                    f"<div class='wb-paper'>{html.escape(t.paper)}</div>"
                    f"<p>{html.escape(t.card)}</p></div>",
                    elem_classes=["wb-card-wrap"],
                )
                btn = gr.Button(f"Open {t.title} →", size="sm", variant="primary")
                buttons.append((btn, t.id))
                # Shown and wired by the Guided tour tab (components.tour.layout) when it has this tab's tour.
                gr.Button("Guided tour ▸", size="sm", elem_id=f"overview-tour-{t.id}", visible=False)
    for btn, tab_id in buttons:
        btn.click(lambda t=tab_id: gr.Tabs(selected=t), inputs=None, outputs=ctx.tabs, api_visibility="private")

    gr.Markdown("#### Models")
    models = gr.Dataframe(
        headers=["tab", "source", "checkpoint", "class", "state"],
        value=_model_table(ctx.source),
        interactive=False,
        wrap=True,
        column_widths=["14%", "9%", "37%", "28%", "12%"],
        elem_id="overview-models",
    )
    gr.Markdown(
        f"<span class='wb-muted'>Preset source: <b>{ctx.source}</b> · device: "
        f"<b>{html.escape(device.describe())}</b> · switch to the papers' checkpoints with "
        "<code>WORKBENCH_PRESET=hub python app.py</code> on a GPU machine.</span>"
    )
    # Runtime details are for whoever runs the server, not for an audience: closed by default.
    with gr.Accordion("Runtime details (for the server's operator)", open=False):
        summary = gr.Markdown(runtime_summary(system_status(ctx.source)), elem_id="overview-runtime")
        runtime = gr.JSON(value=system_status(ctx.source), label="status", open=False)
        refresh = gr.Button("Refresh", size="sm")

    def refresh_fn():
        status = system_status(ctx.source)
        return _model_table(ctx.source), status, runtime_summary(status)

    refresh.click(refresh_fn, outputs=[models, runtime, summary], api_name="status")
