"""Adapters: PiSSA explorer — spectra, PiSSA vs LoRA init, QLoRA / LoftQ / QPiSSA quantization
error, and a live LoRA vs PiSSA fine-tuning race. UI only: every number comes from backend.pissa."""

from __future__ import annotations

import gradio as gr

from backend.core import bounds, gpu
from backend.pissa import conversion, service
from components.adapters import race_live
from components.adapters.common import _call
from components.adapters.convert import conversion_md
from components.adapters.errors import ERROR_COLUMNS, errors
from components.adapters.race import run_race, race_in_page, stop_race
from components.adapters import spectrum
from components.adapters.spectrum import analyse, on_model_change
from components.inputs import enter
from components.common import fail, model_event, on_first_open
from components.inputs.fields import CheckedNumber, bounded_slider, checked_radio, keep_on_failure
from components.inputs.model_picker import model_picker

# A deep link reruns the layer analysis of its settings (components.links.deep_links); "layers" first, so a link
# to another model than the default lists that model's layers and keeps the linked one.
# The session report keeps these results and pins (components.report.session).
INIT_LABELS = {"pissa": "full SVD (pissa)", "pissa_niter_4": "fast SVD (pissa_niter_4)"}

EXPLAIN = (
    "<div class='wb-explain'><b>PiSSA</b> (Meng et al., 2024) splits a weight matrix "
    "W = U S Vᵀ into its <b>principal part</b> (top-r singular triplets, A = U<sub>r</sub>S<sub>r</sub>"
    "<sup>½</sup>, B = S<sub>r</sub><sup>½</sup>V<sub>r</sub>ᵀ), which becomes the trainable adapter, "
    "and a frozen <b>residual</b> W<sub>res</sub> = W − AB. LoRA instead freezes W and trains a "
    "“noise &amp; zero” adapter. Pick a model and a linear layer: see its spectrum, how much narrower "
    "W<sub>res</sub> is than W (why it quantizes better), the NF4 quantization error that QLoRA, LoftQ "
    "and QPiSSA leave, and race LoRA against PiSSA fine-tuning live. Everything is computed now on the "
    "model in memory (PiSSA/LoRA through peft; NF4 by this project, checked against the published "
    "table).</div>"
)
# Presenter view: one plain line in place of the explanation above (components.common, wb-presenter-only)
PRESENTER_CAPTION = (
    "<div class='wb-explain'>Start fine-tuning from a weight matrix's biggest directions "
    "instead of from noise: it learns faster and quantizes with less error.</div>"
)


# --- 4. conversion ------------------------------------------------------------------------------
@gpu(duration=120)
def convert(key, rank, steps, layer=None, progress=gr.Progress()):
    if not key:
        fail("Pick a model first.")
    if not layer:
        fail("Pick a layer first.")
    progress(0.2, desc="fine-tuning with PiSSA, then converting")
    r = _call(
        conversion.conversion_demo,
        key,
        _call(bounds.check, bounds.PISSA_RANK, rank),
        _call(bounds.check, bounds.PISSA_CONVERT_STEPS, steps),
        layer=layer,
    )
    return conversion_md(r), r


# --- layout -------------------------------------------------------------------------------------
def build(ctx) -> None:
    # Presenter view (body.wb-presenter, components.common): the plain caption replaces the
    # explanation, the spectrum and the race curves are the key figures, expert controls are hidden.
    gr.HTML(EXPLAIN, elem_classes=["wb-advanced"])
    gr.HTML(PRESENTER_CAPTION, elem_classes=["wb-presenter-only", "wb-lead"])
    listed = service.listed(ctx.source)
    default = listed[0].path_or_id if listed else None
    # Only a zoo model is loaded while the page is built; a hub checkpoint loads on first use.
    prefill = default and service.preset_for(default).source == "zoo"
    # a hub checkpoint's layers come from its config (no weights): the list is never empty at start
    layers = service.layer_names(default) if prefill else (service.config_layer_names(default) if default else [])
    layer0 = next((n for n in layers if n.endswith("fc2") or n.endswith("q_proj")), layers[0] if layers else None)
    with gr.Row():
        # the zoo, the papers' checkpoints, or your own model typed in (any model with linear layers)
        model, _ = model_picker(
            listed, "adapters", elem_id="pissa-model", value=default, takes="language model", scale=2
        )
        with gr.Column(scale=2, min_width=200):
            # custom values: a deep link may name a layer of another model than the default one
            layer = gr.Dropdown(
                layers, value=layer0, label="linear layer", elem_id="pissa-layer", allow_custom_value=True
            )
            list_layers = gr.Button("List the model's layers", size="sm", elem_id="pissa-list-layers")
        rank = bounded_slider(
            bounds.PISSA_RANK,
            value=8,
            step=1,
            label="rank r",
            elem_id="pissa-rank",
            scale=2,
            elem_classes=["wb-advanced"],
        )
        init = checked_radio(
            "init",
            [(INIT_LABELS[i], i) for i in bounds.PISSA_INITS],
            value="pissa",
            label="PiSSA init (peft)",
            elem_id="pissa-init",
            scale=2,
            elem_classes=["wb-advanced"],
        )

    gr.Markdown("### 1 · Spectrum and the PiSSA split")
    with gr.Row():
        analyse_btn = gr.Button("Analyse layer", variant="primary", elem_id="pissa-analyse", scale=2)
        pin_btn = gr.Button("Pin this result", size="sm", elem_id="pissa-pin", scale=1)
        unpin_btn = gr.Button("Clear pin", size="sm", elem_id="pissa-unpin", scale=1)
    pin_md = gr.Markdown(elem_id="pissa-pin-msg", elem_classes=["wb-muted"])
    with gr.Row():
        spec_plot = gr.Plot(label="spectrum", elem_id="pissa-spectrum", elem_classes=["wb-keyfig", "wb-keyfirst"])
        hist_plot = gr.Plot(label="histograms", elem_id="pissa-hist", elem_classes=["wb-advanced"])
    stats = gr.Markdown(elem_id="pissa-stats", elem_classes=["wb-advanced"])
    analysis_files = gr.File(label="export (JSON, PNG)", file_count="multiple", elem_id="pissa-analysis-files")
    shown = gr.State(None)  # the analysis on screen (describe_analysis: numbers only)
    pinned = gr.State(None)  # a pinned analysis, drawn over the next ones on the same axes

    gr.Markdown("### 2 · Quantization error: QLoRA vs LoftQ vs QPiSSA (NF4, block 64)")
    gr.HTML(
        "<div class='wb-explain'>Each method stores a 4-bit base Q plus a rank-r adapter AB. "
        "QLoRA: Q = nf4(W), no correction. LoftQ: quantize W, fit AB to the error (iterated). "
        "QPiSSA: take AB = principal part of W first, quantize only the narrower W<sub>res</sub>. "
        "Ratio = 1 − ‖W − (Q + AB)‖<sub>*</sub> / ‖W − nf4(W)‖<sub>*</sub> (nuclear norm; higher is "
        "better). The heatmap sweeps the rank.</div>"
    )
    with gr.Row():
        heat_method = gr.Dropdown(
            ["qpissa-1", "qpissa-5", "loftq-1", "loftq-5"],
            value="qpissa-1",
            label="heatmap method",
            elem_id="pissa-heat-method",
            scale=1,
            elem_classes=["wb-advanced"],
        )
        errors_btn = gr.Button("Compute error table", variant="primary", elem_id="pissa-errors", scale=2)
    error_md = gr.Markdown(elem_id="pissa-error-summary")
    error_df = gr.Dataframe(headers=ERROR_COLUMNS, interactive=False, elem_id="pissa-error-table", wrap=True)
    with gr.Row():
        bars_plot = gr.Plot(label="ratios at r", elem_id="pissa-bars")
        heat_plot = gr.Plot(label="layers × rank", elem_id="pissa-heatmap")
    error_files = gr.File(label="export (JSON, CSV)", file_count="multiple", elem_id="pissa-error-files")

    gr.Markdown("### 3 · The race: LoRA vs PiSSA fine-tuning, live")
    gr.HTML(
        "<div class='wb-explain'>Each run fine-tunes a private copy of the model on a new task "
        "(digits toy: the even digits the MLP never saw; LM: “how many more … does A have?”) with "
        "the same lr, rank and alpha; only the initialisation differs. Loss and gradient norm stream "
        "as they are computed; line style = seed. Stop ends the race after the current step.</div>"
    )
    with gr.Row():
        methods = gr.CheckboxGroup(
            [("LoRA", "lora"), ("PiSSA", "pissa"), ("full fine-tuning", "full")],
            value=["lora", "pissa"],
            label="methods",
            elem_id="pissa-methods",
            scale=2,
            elem_classes=["wb-advanced"],
        )
        seeds = bounded_slider(
            bounds.PISSA_SEEDS,
            value=3,
            step=1,
            label="seeds",
            elem_id="pissa-seeds",
            scale=1,
            elem_classes=["wb-advanced"],
        )
        steps = bounded_slider(bounds.PISSA_STEPS, value=100, step=10, label="steps", elem_id="pissa-steps", scale=1)
        lr = CheckedNumber(
            value=0,
            minimum=bounds.PISSA_LR.lo,
            maximum=bounds.PISSA_LR.hi,
            label="learning rate (0 = task default)",
            elem_id="pissa-lr",
            scale=1,
            elem_classes=["wb-advanced"],
        )
    with gr.Row(elem_classes=["wb-keyfirst"]):
        start = gr.Button("Start race", variant="primary", elem_id="pissa-start")
        enter.runs(start, lr)
        gr.Button("Stop", variant="stop", elem_id="pissa-stop")  # race_live wires it by its id
    # the page's race is drawn here, live and finished, with its status (components.adapters.race_live)
    live_view = race_live.live_view(elem_id="pissa-race-live", elem_classes=["wb-keyfig", "wb-keyfirst"])
    # the API's race streams its figure and status into these; the page never shows them
    race_plot = gr.Plot(label="race", elem_id="pissa-race", visible=False)
    race_status = gr.Markdown(elem_id="pissa-race-status", visible=False)
    with gr.Row():
        race_summary = gr.JSON(label="summary", elem_id="pissa-race-summary", open=False)
        race_files = gr.File(label="export (JSON, PNG)", file_count="multiple", elem_id="pissa-race-files")

    gr.Markdown("### 4 · PiSSA → LoRA conversion")
    gr.HTML(
        "<div class='wb-explain'>A PiSSA adapter lives on W<sub>res</sub>, not on W. peft can "
        "rewrite the fine-tuned PiSSA adapter as a plain LoRA of rank 2r on the original W "
        "(ΔW = B′A′ − BA), so it can be shared like any LoRA. This fine-tunes the chosen layer briefly "
        "with PiSSA, converts, and compares the two models' outputs.</div>"
    )
    with gr.Row():
        conv_steps = bounded_slider(
            bounds.PISSA_CONVERT_STEPS,
            value=20,
            step=1,
            label="PiSSA steps before converting",
            elem_id="pissa-conv-steps",
            scale=2,
        )
        conv_btn = gr.Button("Fine-tune, convert and compare", variant="primary", elem_id="pissa-convert", scale=1)
    conv_md = gr.Markdown(elem_id="pissa-convert-result")
    conv_json = gr.JSON(label="conversion check", open=False, elem_id="pissa-convert-json")

    # a refused pick leaves the layer list and rank as they were (the reason is the toast, no badges)
    keep_on_failure(
        model.change(on_model_change, inputs=model, outputs=[layer, rank], **model_event(api_name="layers")),
        [layer, rank],
    )
    stale = [
        spec_plot,
        hist_plot,
        stats,
        analysis_files,
        error_df,
        bars_plot,
        heat_plot,
        error_md,
        error_files,
        race_plot,
        race_status,
        race_summary,
        race_files,
        conv_md,
        conv_json,
        shown,
    ]
    # no stale results after the user picks another model (a restored link sets results of its own)
    model.input(lambda: [None] * len(stale), outputs=stale, api_visibility="private")
    model.input(None, js="() => { window.wbRaceClear?.(); }", api_visibility="private")
    keep_on_failure(
        list_layers.click(
            on_model_change, inputs=model, outputs=[layer, rank], **model_event(api_visibility="private")
        ),
        [layer, rank],
    )
    # A refused value (checked inputs) or a failed computation leaves the last good view as it was,
    # without Gradio's Error badge: the message is the toast (components.inputs.fields.keep_on_failure).
    analysis_out = [spec_plot, hist_plot, stats, analysis_files, shown]
    keep_on_failure(
        analyse_btn.click(
            analyse, inputs=[model, layer, rank, init, pinned], outputs=analysis_out, **model_event(api_name="analyse")
        ),
        analysis_out,
    )
    # opened, the tab shows the default layer's analysis (a link with settings of this tab: its own)
    on_first_open(ctx, analyse, [model, layer, rank, init, pinned], analysis_out, link_prefix="pissa-")
    error_out = [error_df, bars_plot, heat_plot, error_md, error_files]
    keep_on_failure(
        errors_btn.click(
            errors, inputs=[model, rank, heat_method], outputs=error_out, **model_event(api_name="errors")
        ),
        error_out,
    )
    race_out = [race_plot, race_status, race_summary, race_files]
    race_in = [model, methods, seeds, steps, rank, lr]
    # as few outputs as can be: each output's status is refreshed by the front end at the start and end
    page_out = [race_summary, race_files]
    keep_on_failure(
        start.click(
            race_in_page,
            inputs=race_in + [live_view],
            outputs=page_out,
            show_progress="hidden",
            **model_event(api_visibility="private"),
        ),
        page_out,
    )
    # the API's race streams its status and figure as before (a button the page does not show)
    gr.Button(visible=False, elem_id="pissa-race-api").click(
        run_race, inputs=race_in, outputs=race_out, **model_event(api_name="race")
    )

    # A number typed past a slider's range: components.serving.range_guard refuses it in the browser.

    # Compare (a pinned datapoint): the pin is the shown analysis's numbers; no model work.
    pin_btn.click(spectrum.pin, shown, [pinned, spec_plot, pin_md], api_visibility="private", show_progress="hidden")
    unpin_btn.click(
        spectrum.unpin, shown, [pinned, spec_plot, pin_md], api_visibility="private", show_progress="hidden"
    )
    # Stop goes straight to the server, not through the queue behind other requests, and with no
    # progress overlay: its answer is the message
    # The page's Stop is handled by the live view (a server function: a Gradio event would make the
    # front end refresh every component's status); the API's goes to the same place
    stop_api = gr.Markdown(visible=False)
    gr.Button(visible=False, elem_id="pissa-stop-api").click(
        stop_race, outputs=stop_api, api_name="race_stop", queue=False, show_progress="hidden"
    )
    keep_on_failure(
        conv_btn.click(
            convert,
            inputs=[model, rank, conv_steps, layer],
            outputs=[conv_md, conv_json],
            **model_event(api_name="convert"),
        ),
        [conv_md, conv_json],
    )
