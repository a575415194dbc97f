"""Math neurons: MathNeuro's math-specific parameters, pruned or scaled live.

UI only: the controls, their layout and events; the handlers (handlers.py) answer, and every number
comes from backend.mathneuro.service (cached per setting)."""

from __future__ import annotations

import gradio as gr

from backend.core import bounds
from backend.core.presets import active
from backend.mathneuro import service, sets
from backend.mathneuro.presets import TAB
from components.common import model_event, on_first_open
from components.inputs import enter
from components.inputs.fields import keep_on_failure
from components.inputs.model_picker import model_picker
from components.math_neurons import handlers as H
from components.math_neurons.figures import METHOD_LABELS
from components.math_neurons.words import ASK_EXAMPLES, ask_label, explain_for, samples_label
from components.serving import range_guard

NONMATH_TYPES = [".jsonl", ".json", ".csv", ".tsv", ".txt"]

PRESENTER_CAPTION = (
    "<div class='wb-explain'>Switch off the few weights that matter only for math: "
    "arithmetic breaks, everything else still works.</div>"
)


class Bounded(gr.Slider):
    """Gradio's slider, its value checked by this tab instead of Gradio's preprocess: a refusal
    names the control and its range, and an empty, 'nan' or 'inf' box gets a clear message rather
    than Gradio's generic error (a template keeps the stock slider in the browser)."""

    is_template = True

    def preprocess(self, payload):
        return payload


def build(ctx) -> None:
    source = "hub" if ctx.source == "hub" else "zoo"

    # the handlers with this tab's source bound; each keeps Gradio's progress tracker as its default
    def live(method_label, k_pct, factor, n_samples, nonmath=None, pinned=None, model=None, math_set=None):
        return H.live(source, method_label, k_pct, factor, n_samples, nonmath, pinned, model, math_set)

    def figure2(k_pct, n_samples, nonmath=None, model=None, math_set=None, progress=gr.Progress()):
        return H.figure2(source, k_pct, n_samples, nonmath, model, math_set, progress)

    def curve(method_label, k_pct, n_samples, nonmath=None, model=None, math_set=None, progress=gr.Progress()):
        return H.curve(source, method_label, k_pct, n_samples, nonmath, model, math_set, progress)

    def consistency(k_pct, n_samples, nonmath=None, model=None, math_set=None, progress=gr.Progress()):
        return H.consistency(source, k_pct, n_samples, nonmath, model, math_set, progress)

    def ask(prompt, method_label, k_pct, factor, n_samples, nonmath=None, model=None, math_set=None):
        return H.ask(source, prompt, method_label, k_pct, factor, n_samples, nonmath, model, math_set)

    def export(method_label, k_pct, factor, n_samples, nonmath=None, model=None, math_set=None, progress=gr.Progress()):
        return H.export(source, method_label, k_pct, factor, n_samples, nonmath, model, math_set, progress)

    def on_model(model, progress=gr.Progress()):
        return H.on_model(source, model, progress)

    def words_for(model, asked):
        return H.words_for(source, model, asked)

    def first_view(*args):
        return H.first_view(source, *args)

    # Presenter view (body.wb-presenter, components.common): the long explanation, the expert
    # controls and figures give way to a one-line plain caption and the accuracy figure, large.
    explain = gr.HTML(explain_for(active(TAB, ctx.source)), elem_classes=["wb-advanced"], elem_id="mn-explain")
    gr.HTML(PRESENTER_CAPTION, elem_classes=["wb-presenter-only", "wb-lead"])
    nonmath = gr.State(sets.DEFAULT_NONMATH)
    math_set = gr.State(sets.DEFAULT_MATH)
    with gr.Row():
        # the zoo organism, the paper's Llama, or your own causal LM with nn.Linear layers
        model, _ = model_picker(
            service.listed(ctx.source), "math_neurons", elem_id="mn-model", takes="causal language model"
        )
    # the data: the organism's own sets on the zoo, GSM8K and a non-math file (or RACE + MMLU when
    # the hub is reachable) for a real LM; either side can be the user's own file or dataset id
    with gr.Row(elem_classes=["wb-advanced"]):
        with gr.Column(scale=1, min_width=220):
            m_file = gr.File(
                label="Your math set (JSONL/CSV/text)",
                file_types=NONMATH_TYPES,
                type="filepath",
                elem_id="mn-math-file",
                height=120,
            )
        with gr.Column(scale=1, min_width=220):
            nm_file = gr.File(
                label="Non-math set (JSONL/CSV/text)",
                file_types=NONMATH_TYPES,
                type="filepath",
                elem_id="mn-nonmath-file",
                height=120,
            )
        with gr.Column(scale=1, min_width=220):
            ds_id = gr.Textbox(
                label="or a dataset id (needs the hub)",
                value="",
                max_lines=1,
                placeholder="owner/name:config@split",
                elem_id="mn-dataset",
            )
            with gr.Row():
                ds_math = gr.Button("Use as math", size="sm", elem_id="mn-dataset-math")
                ds_non = gr.Button("Use as non-math", size="sm", elem_id="mn-dataset-nonmath")
        with gr.Column(scale=2):
            data_box = gr.HTML(elem_id="mn-data")
    with gr.Row(elem_classes=["wb-presenter-row"]):
        with gr.Column(scale=1, min_width=280):
            method = gr.Radio(list(METHOD_LABELS), value="MathNeuro", label="Method", elem_id="mn-method")
            k_pct = Bounded(
                *H.K_RANGE, value=H.DEFAULTS["k"], step=1, label="K: top % per weight matrix", elem_id="mn-k"
            )
            factor = Bounded(
                *H.FACTOR_RANGE,
                value=H.DEFAULTS["factor"],
                step=0.05,
                label="Scale factor (0 = prune, 1 = unmodified)",
                elem_id="mn-factor",
            )
            n_samples = Bounded(
                *H.N_RANGE,
                value=H.DEFAULTS["n"],
                step=1,
                elem_classes=["wb-advanced"],
                label="Samples per set (math, non-math) to find the weights",
                elem_id="mn-n",
            )
            for sl, r in ((k_pct, bounds.MATH_K), (factor, bounds.MATH_FACTOR), (n_samples, bounds.MATH_SAMPLES)):
                range_guard.declare(sl.elem_id, r)
            run = gr.Button("Apply", variant="primary", elem_id="mn-run")
            with gr.Row():
                pin_btn = gr.Button("Pin this result", size="sm", elem_id="mn-pin")
                unpin_btn = gr.Button("Clear pin", size="sm", elem_id="mn-unpin")
            gr.Markdown(
                "<span class='wb-muted'>Sliders update the accuracies when released; each "
                "setting is computed once and cached. A pinned result stays beside the current "
                "one in the accuracy figure.</span>",
                elem_classes=["wb-advanced"],
            )
        with gr.Column(scale=2):
            acc = gr.HTML(elem_id="mn-acc", elem_classes=["wb-advanced"])  # the figure title says it in presenter view
            acc_fig = gr.Plot(
                label="Math and non-math accuracy", elem_id="mn-accfig", elem_classes=["wb-keyfig", "wb-keyfirst"]
            )
    with gr.Row(elem_classes=["wb-advanced"]):
        table = gr.Dataframe(
            headers=["set", "question", "reference", "unmodified", "modified"],
            interactive=False,
            wrap=True,
            label=samples_label(source == "zoo"),
            column_widths=(
                ["10%", "54%", "12%", "12%", "12%"] if source == "zoo" else ["8%", "38%", "8%", "23%", "23%"]
            ),
            elem_id="mn-samples",
        )
    with gr.Row():
        with gr.Column():
            fig2_btn = gr.Button("Compare methods (prune each set)", elem_id="mn-fig2-btn")
            fig2 = gr.Plot(label="Math vs non-math accuracy after pruning", elem_id="mn-fig2")
        with gr.Column():
            curve_btn = gr.Button("Sweep the scale factor", elem_id="mn-curve-btn")
            curve_out = gr.Plot(label="Accuracy vs scale factor", elem_id="mn-curve")
    with gr.Row(elem_classes=["wb-advanced"]):
        with gr.Column():
            layers_out = gr.Plot(label="Parameters per layer", elem_id="mn-layers")
        with gr.Column():
            cons_btn = gr.Button("Measure consistency across sample subsets", elem_id="mn-cons-btn")
            cons_out = gr.Plot(label="Consistency", elem_id="mn-cons")
    with gr.Row():
        with gr.Column(scale=3):
            prompt = gr.Textbox(
                label=ask_label(active(TAB, ctx.source)), elem_id="mn-prompt", value=ASK_EXAMPLES[source][0]
            )
            examples = gr.Examples([[q] for q in ASK_EXAMPLES[source][1:]], inputs=[prompt])
            ask_btn = gr.Button("Answer", elem_id="mn-ask-btn")
            enter.runs(ask_btn, prompt)
            ask_out = gr.HTML(elem_id="mn-ask-out")
        with gr.Column(scale=2):  # in presenter view too: a presenter hands a result out
            export_btn = gr.Button("Export results (JSON + PNG)", elem_id="mn-export-btn")
            files = gr.File(label="Exports", file_count="multiple", elem_id="mn-files", elem_classes=["wb-export"])

    pinned = gr.State(None)  # a pinned result's descriptor (describe_result: numbers only)
    shown = gr.State(None)  # the descriptor of the result on screen
    controls = [method, k_pct, factor, n_samples, nonmath, pinned, model, math_set]
    live_out = [acc, acc_fig, table, layers_out, shown]
    numbers = [k_pct, factor, n_samples]

    def chain(trigger, fn, inputs, outputs, **kw):
        first = trigger(
            H.check,
            [method, k_pct, factor, n_samples],
            None,
            show_progress="hidden",
            api_visibility="private",
            concurrency_limit=None,
        )
        first.failure(H.restore, shown, numbers, queue=False, show_progress="hidden", api_visibility="private")
        event = first.success(fn, inputs, outputs, **model_event(**kw))
        keep_on_failure(event, outputs)
        return event

    chain(run.click, live, controls, live_out, api_name="mn_evaluate")
    for sl in numbers:
        chain(sl.release, live, controls, live_out, api_visibility="private")
    chain(method.change, live, controls, live_out, api_visibility="private")
    chain(fig2_btn.click, figure2, [k_pct, n_samples, nonmath, model, math_set], [fig2], api_name="mn_figure2")
    chain(
        curve_btn.click,
        curve,
        [method, k_pct, n_samples, nonmath, model, math_set],
        [curve_out],
        api_name="mn_scale_curve",
    )
    chain(
        cons_btn.click, consistency, [k_pct, n_samples, nonmath, model, math_set], [cons_out], api_name="mn_consistency"
    )
    chain(ask_btn.click, ask, [prompt] + controls[:5] + [model, math_set], [ask_out], api_name="mn_ask")
    chain(export_btn.click, export, controls[:5] + [model, math_set], [files], api_name="mn_export")
    picked = model.change(
        on_model, model, [nonmath, math_set, data_box, m_file, nm_file], **model_event(api_name="mn_model")
    )
    keep_on_failure(picked, [nonmath, math_set, data_box, m_file, nm_file])
    keep_on_failure(picked.success(live, controls, live_out, **model_event(api_visibility="private")), live_out)

    picked.success(
        words_for,
        [model, prompt],
        [explain, prompt, examples.dataset, table],
        queue=False,
        show_progress="hidden",
        api_visibility="private",
    )

    pin_btn.click(H.pin, shown, [pinned, acc_fig], api_visibility="private", show_progress="hidden")
    unpin_btn.click(H.unpin, shown, [pinned, acc_fig], api_visibility="private", show_progress="hidden")
    # a named file or dataset is read at once; the accuracies follow with it
    for trigger, given, side, via, api in (
        (nm_file.upload, nm_file, "nonmath", "file", "mn_nonmath"),
        (m_file.upload, m_file, "math", "file", "mn_math"),
        (ds_non.click, ds_id, "nonmath", "dataset", "mn_nonmath_dataset"),
        (ds_math.click, ds_id, "math", "dataset", "mn_math_dataset"),
    ):
        mine, other = (math_set, nonmath) if side == "math" else (nonmath, math_set)
        named = trigger(
            H.name_data(source, side, via), [given, model, other], [mine, data_box], **model_event(api_name=api)
        )
        keep_on_failure(named, [mine, data_box])
        keep_on_failure(named.success(live, controls, live_out, **model_event(api_visibility="private")), live_out)

    # First view: the default setting's accuracies, computed when the tab is first opened (cached
    # after). In hub mode without a non-math set (or with a model that cannot load), the data card
    # says what is missing instead of an error toast.
    on_first_open(ctx, first_view, controls, live_out + [data_box])
