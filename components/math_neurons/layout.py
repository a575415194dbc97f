"""Math neurons: MathNeuro's math-specific parameters, pruned or scaled live.

UI only: every number comes from backend.mathneuro.service (cached per setting); the model is
modified only inside `scaled(...)`, under its lock, and restored bit-exactly before the answer
returns.
"""
from __future__ import annotations

import html
import json
from pathlib import Path

import gradio as gr

from backend.core.presets import active
from backend.mathneuro import service
from backend.mathneuro.presets import TAB
from backend.mathneuro.service import Setting
from components.serving import exports
from components.links import deep_links as links
from backend.mathneuro import visitor_sets
from components.serving.visitor import space
from components.inputs.model_picker import model_picker
from backend.core import bounds
from components.serving import range_guard
from components.inputs import enter
from components.common import fail, model_event, on_first_open
from components.serving.guard import main_only
from components.inputs.fields import keep_on_failure
from components.math_neurons.figures import (LABEL_OF, METHOD_LABELS, accuracy_html, accuracy_plot,
                                      consistency_plot, curve_plot, describe_result, export_png,
                                      figure2_plot, layers_plot, samples_rows, setting_title)

# The session report keeps these results and pins (components.report.session).
LINKED = ("mn-method", "mn-k", "mn-factor", "mn-n", "mn-prompt")
NONMATH_TYPES = [".jsonl", ".json", ".csv", ".tsv", ".txt"]

SCALE_FACTORS = [0.0, 0.5, 0.9, 1.0, 1.1, 1.2, 1.3, 1.5, 2.0]
CONSISTENCY_SIZES = (1, 4, 16, 64)

PRESENTER_CAPTION = ("<div class='wb-explain'>Switch off the few weights that matter only for math: "
                     "arithmetic breaks, everything else still works.</div>")
EXPLAIN = (
    "<div class='wb-explain'><b>What you see.</b> MathNeuro scores every weight of every linear "
    "layer (the untied lm_head included, as in the paper) by <i>|W<sub>ij</sub>| · ‖X<sub>j</sub>‖</i> summed over samples (forward passes only), "
    "takes the top K % per matrix on <b>math</b> problems and removes those that are also top K % on "
    "<b>non-math</b> text: what is left is math-specific. Scale those weights by the factor "
    "(0 prunes them, 1.1 is the paper's boost) and the model answers the held-out sets again: "
    "<b>math</b> = arithmetic word problems of 2 or 3 steps with operand pairs never seen in "
    "training, answered with the worked solution (“25 + 36 = 61 . 61 - 12 = 49”: one slip fails), "
    "<b>non-math</b> = questions about the organism's world (who lives where, owns which pet, …) "
    "after a story never seen in training; both scored by exact match of the greedy answer. Your "
    "own sets (files above, prompt + answer in the organism's words) replace either side. "
    "Baselines: Wanda (the math top K without subtraction), random weights (same count per matrix), "
    "LAPE (MLP neurons by activation-probability entropy). The model is restored bit-exactly after "
    "every evaluation.</div>")


def explain_hub(preset, template: str | None = None) -> str:
    """The hub preset's (or a user's own model's) explanation: what is loaded and how answers are
    scored; `template` as the data card words it (service.describe), so the two agree."""
    n = service.UI_EVAL
    return (
        "<div class='wb-explain'><b>What you see.</b> MathNeuro scores every weight of every linear "
        "layer by <i>|W<sub>ij</sub>| · ‖X<sub>j</sub>‖</i> summed over samples (forward passes only; a "
        "tied lm_head is skipped), takes the top K % per matrix on <b>math</b> samples and removes those "
        "that are also top K % on <b>non-math</b> samples. Scale those weights by the factor (0 prunes, "
        "1.1 is the paper's boost) and the model answers again.<br>"
        f"<b>Model:</b> <code>{html.escape(preset.path_or_id)}</code> ({html.escape(preset.label)}), every "
        f"question in {html.escape(template or 'its own chat template')}, answered greedily. "
        f"<b>Math:</b> GSM8K (shipped, MIT): samples from the train split identify, the first {n} test "
        "problems score; a problem is right when the last number of the model's answer equals the number "
        "after “####” in the reference. <b>Non-math:</b> the file you name below (JSONL / CSV with prompt or "
        "question + answer, optionally choices, or plain text one per line), or the deployment's set "
        f"(<code>{service.NONMATH_ENV}</code>, or RACE + MMLU through <code>datasets</code> where the hub "
        "is reachable, else the shipped COCO captions as plain text); multiple choice is scored by the letter the model names first, other answers by "
        "their normalised text, plain text by next-token accuracy. Its first half identifies, the rest "
        "scores. <b>Your own math</b> (file or dataset id above) replaces GSM8K the same way: an answer "
        "with a number is scored by its final number (after “####”, else the last one in it), multiple "
        "choice by the letter, plain text by next-token accuracy. "
        "Baselines: Wanda, random weights (same count per matrix), LAPE. The model is restored "
        "bit-exactly after every evaluation.</div>")


def explain_for(preset, template: str | None = None) -> str:
    return EXPLAIN if preset.source == "zoo" else explain_hub(preset, template)


def samples_label(zoo: bool) -> str:
    return ("Sample answers (greedy, ✓ = exact match)" if zoo else
            "Sample answers (greedy, ✓ = right under the set's rule)")


def ask_label(preset) -> str:
    return ("Ask your own question (the organism's language)" if preset.source == "zoo" else
            "Ask your own question (answered as a GSM8K problem is)")


def data_html(info: dict) -> str:
    """The data status card: what the tab is using right now (or what it still needs)."""
    non = (f"<b>non-math:</b> {html.escape(info['nonmath'])} · scored by {html.escape(info['nonmath_rule'])}"
           if info.get("nonmath") else
           f"<b>non-math: none loaded</b> ({html.escape(info.get('nonmath_error') or 'no set named')}). "
           "Name a non-math file above to identify and evaluate.")
    tmpl = f" · prompts in {html.escape(info['template'])}" if info.get("template") else ""
    return (f"<div class='wb-card' style='min-height:0'><b>model:</b> <code>{html.escape(info['model'])}</code>"
            f"{tmpl}<br><b>math:</b> {html.escape(info['math'])} · scored by {html.escape(info['math_rule'])}"
            f"<br>{non}</div>")


# The numeric controls and their ranges: one rule for all (the sliders' own bounds, the API's too).
# A value outside is refused with the range and nothing is computed; nothing is clamped or rounded.
K_RANGE, FACTOR_RANGE, N_RANGE = ((r.lo, r.hi) for r in (bounds.MATH_K, bounds.MATH_FACTOR, bounds.MATH_SAMPLES))
DEFAULTS = {"method": "MathNeuro", "k": 3, "factor": 0.0, "n": service.MAX_SAMPLES}


class Bounded(gr.Slider):
    """Gradio's slider, its value checked by this tab instead of Gradio's preprocess: a refusal
    names the control and its range, and an empty, 'nan' or 'inf' box gets a clear message rather
    than Gradio's generic error (a template keeps the stock slider in the browser)."""
    is_template = True

    def preprocess(self, payload):
        return payload


def _setting(method_label, k_pct, factor, n_samples, nonmath=None, math_set=None) -> Setting:
    if method_label not in METHOD_LABELS:
        fail(f"Unknown method {str(method_label)[:40]!r}: choose one of {', '.join(METHOD_LABELS)}.")
    try:
        k, f, n = (bounds.check(r, v) for r, v in ((bounds.MATH_K, k_pct), (bounds.MATH_FACTOR, factor),
                                                    (bounds.MATH_SAMPLES, n_samples)))
    except ValueError as e:
        fail(str(e))
    return Setting(METHOD_LABELS[method_label], k / 100.0, n, f, nonmath=nonmath or service.DEFAULT_NONMATH,
                   math=math_set or service.DEFAULT_MATH)


def _bench(source, model=None, progress=None):
    try:
        return service.bench(source, model or None, progress)
    except ValueError as e:  # a refused pick (architecture, folder, policy) or a failed load: its reason
        fail(str(e))
    except FileNotFoundError as e:
        fail(f"The math model is not available: {e}")
    except Exception as e:  # noqa: BLE001 - shown to the user, not a trace
        fail(f"Could not load the math model: {type(e).__name__}: {e}")


def _baseline(b, s: Setting) -> dict:
    return _run(b.baseline, nonmath=s.nonmath, math=s.math)


def _run(fn, *args, **kwargs):
    """A service call whose data problems (no non-math set, a file no longer loaded) are shown as
    messages."""
    try:
        return fn(*args, **kwargs)
    except (service.NoNonMath, ValueError) as e:
        fail(str(e))


# ------------------------------------------------------------------------------------ handlers
def computed_figures(b, s) -> dict:
    """The method comparison and the scale sweep of this setting as far as they have been computed
    (cached), else None with a note: the export holds what was computed, and costs no model call."""
    fig2 = {m: b.evaluated(s.but(method=m, factor=0.0)) for m in service.core.METHODS}
    curve = [{"factor": float(f), **r} if (r := b.evaluated(s.but(factor=float(f)))) else None
             for f in SCALE_FACTORS]
    out = {"figure2": fig2 if all(fig2.values()) else None,
           "scale_curve": curve if all(curve) else None}
    missing = [what for key, what in (("figure2", "Compare methods"), ("scale_curve", "Sweep the scale factor"))
               if out[key] is None]
    if missing:
        out["not_computed"] = f"press {' and '.join(repr(m) for m in missing)} first to include them"
    return out


def make_handlers(source: str):
    def live(method_label, k_pct, factor, n_samples, nonmath=None, pinned=None, model=None, math_set=None):
        """The accuracies of one setting: card, figure (beside the pinned result, if any), sample
        answers, per-layer plot, and the setting's descriptor (numbers only, kept in gr.State)."""
        s = _setting(method_label, k_pct, factor, n_samples, nonmath, math_set)
        b = _bench(source, model)
        base = _baseline(b, s)
        mod = _run(b.evaluate, s)
        n_total = sum(m.weight.numel() for m in service.core.linear_layers(b.model).values())
        desc = describe_result(s, base, mod)
        return (accuracy_html(base, mod, s, n_total, _run(b.n_ident, s)), accuracy_plot(desc, pinned),
                samples_rows(_run(b.samples, s)), layers_plot(_run(b.layers, s), s), desc)

    def figure2(k_pct, n_samples, nonmath=None, model=None, math_set=None, progress=gr.Progress()):
        s = _setting("MathNeuro", k_pct, 0.0, n_samples, nonmath, math_set)
        b = _bench(source, model)
        base = _baseline(b, s)
        results = {}
        for i, m in enumerate(service.core.METHODS):
            progress((i, len(service.core.METHODS)), desc=f"pruning the {LABEL_OF[m]} set")
            results[m] = _run(b.evaluate, s.but(method=m))
        return figure2_plot(base, results, s.top_k)

    def curve(method_label, k_pct, n_samples, nonmath=None, model=None, math_set=None, progress=gr.Progress()):
        s = _setting(method_label, k_pct, 1.0, n_samples, nonmath, math_set)
        b = _bench(source, model)
        out = []
        for i, f in enumerate(SCALE_FACTORS):
            progress((i, len(SCALE_FACTORS)), desc=f"factor {f:g}")
            out.append({"factor": f, **_run(b.evaluate, s.but(factor=f))})
        return curve_plot(out, _baseline(b, s), s)

    def consistency(k_pct, n_samples, nonmath=None, model=None, math_set=None, progress=gr.Progress()):
        s = _setting("MathNeuro", k_pct, 0.0, n_samples, nonmath, math_set)
        progress(0.1, desc="identifying on random subsets")
        cons = _run(_bench(source, model).consistency, s, sizes=CONSISTENCY_SIZES)
        return consistency_plot(cons, s)

    def ask(prompt, method_label, k_pct, factor, n_samples, nonmath=None, model=None, math_set=None):
        prompt = (prompt or "").strip()
        if not prompt:
            fail(f"Type a question first, e.g. '{ASK_EXAMPLES[source][0]}'")
        if len(prompt) > 400:
            fail("The question is too long (400 characters at most).")
        s = _setting(method_label, k_pct, factor, n_samples, nonmath, math_set)
        r = _run(_bench(source, model).answer, prompt, s)
        return (f"<div class='wb-card' style='min-height:0'><b>unmodified:</b> {html.escape(r['before'] or '∅')}"
                f" &nbsp;·&nbsp; <b>modified:</b> {html.escape(r['after'] or '∅')}</div>")

    def export(method_label, k_pct, factor, n_samples, nonmath=None, model=None, math_set=None,
               progress=gr.Progress()):
        s = _setting(method_label, k_pct, factor, n_samples, nonmath, math_set)
        b = _bench(source, model)
        progress(0.2, desc="collecting results")
        state = {
            "title": setting_title({"method": s.method, "top_k": s.top_k, "factor": s.factor,
                                    "n_samples": s.n_samples}, b.model_id),
            "model": b.model_id,
            "data": service.describe(b, s.nonmath, s.math),
            "setting": {"method": s.method, "top_k": s.top_k, "factor": s.factor, "n_samples": s.n_samples},
            "baseline": _baseline(b, s),
            "modified": _run(b.evaluate, s),
            # what "Compare methods" and "Sweep the scale factor" have computed, never computed here:
            # both would cost 4 + 5 evaluations (20 s on a 2-core CPU) an export did not ask for
            **computed_figures(b, s),
            "layers": _run(b.layers, s),
            "modules": service.core.per_module(_run(b.masks, s)),
            "samples": _run(b.samples, s),
        }
        def write(out: Path) -> list[str]:
            (out / "mathneuro.json").write_text(json.dumps(state, indent=1))
            export_png(state, out / "mathneuro.png")
            return [str(out / "mathneuro.json"), str(out / "mathneuro.png")]

        return exports.hand_out(write)

    def name_data(side: str, via: str):
        """A user's math or non-math set, from an uploaded file or a dataset id: loaded, checked,
        and named in this session's state (`other` is the other side's id, for the data card)."""
        what = service.SIDES[side]

        def handler(given, model=None, other=None, request: gr.Request = None):
            owner = space(request, visitor_sets.SPACE, write=True).session  # kept while this session lasts
            if via == "file":
                if given is None:
                    fail(f"Choose a {what} file first (JSONL, JSON, CSV or plain text).")
                path = given if isinstance(given, str) else getattr(given, "name", None) or given.get("path")
                kw = {"path": path, "name": Path(str(path)).name}
            else:
                if not (given or "").strip():
                    fail("Type a dataset id first, e.g. openai/gsm8k:main@test.")
                kw = {"dataset": given.strip()}
            b = _bench(source, model)
            try:
                key = service.register_data(source, side, model=model or None, owner=owner, **kw)
            except (ValueError, RuntimeError, UnicodeDecodeError) as e:
                fail(f"Could not read that {what} {'file' if via == 'file' else 'dataset'}: {e}")
            keys = (key, other) if side == "math" else (other, key)
            return key, data_html(service.describe(b, keys[1] or service.DEFAULT_NONMATH,
                                                   keys[0] or service.DEFAULT_MATH))

        # under ZeroGPU the set must be registered in the main process, or it would die with a worker
        return main_only(handler)

    def on_model(model, progress=gr.Progress()):
        """A newly picked model: load it (with progress), say what data and rules it is measured
        with, and go back to its default sets (a file named for another model is not loaded for
        this one, so its box is emptied too)."""
        progress(0.1, desc="loading the model")
        b = _bench(source, model, lambda f, d: progress(f, desc=d))
        return service.DEFAULT_NONMATH, service.DEFAULT_MATH, data_html(service.describe(b)), None, None

    return live, figure2, curve, consistency, ask, export, name_data, on_model


ASK_EXAMPLES = {
    "zoo": ["ann has 23 pens . she finds 45 more . how many pens does ann have now ?",
            "bob has 57 cards . he loses 19 . then he finds 8 more . how many cards does bob have now ?",
            "one day kim went to the lake . she was calm . where does ann live ?"],
    "hub": ["Tom has 23 pens and finds 45 more. How many pens does he have now?",
            "A baker makes 12 trays of 8 rolls and sells 57 rolls. How many rolls are left?",
            "What is the capital of Norway?"],
}


def build(ctx) -> None:
    source = "hub" if ctx.source == "hub" else "zoo"
    live, figure2, curve, consistency, ask, export, name_data, on_model = make_handlers(ctx.source)
    # Presenter view (body.wb-presenter, components.common): the long explanation, the expert
    # controls and figures give way to a one-line plain caption and the accuracy figure, large.
    explain = gr.HTML(explain_for(active(TAB, ctx.source)), elem_classes=["wb-advanced"], elem_id="mn-explain")
    gr.HTML(PRESENTER_CAPTION, elem_classes=["wb-presenter-only", "wb-lead"])
    nonmath = gr.State(service.DEFAULT_NONMATH)
    math_set = gr.State(service.DEFAULT_MATH)
    with gr.Row():
        # the zoo organism, the paper's Llama, or your own causal LM with nn.Linear layers
        model, _ = model_picker(service.listed(ctx.source), "math_neurons", elem_id="mn-model",
                                takes="causal language model")
    # the data: the organism's own sets on the zoo, GSM8K and a non-math file (or RACE + MMLU when
    # the hub is reachable) for a real LM; either side can be the user's own file or dataset id
    with gr.Row(elem_classes=["wb-advanced"]):
        with gr.Column(scale=1, min_width=220):
            m_file = gr.File(label="Your math set (JSONL/CSV/text)", file_types=NONMATH_TYPES,
                             type="filepath", elem_id="mn-math-file", height=120)
        with gr.Column(scale=1, min_width=220):
            nm_file = gr.File(label="Non-math set (JSONL/CSV/text)", file_types=NONMATH_TYPES,
                              type="filepath", elem_id="mn-nonmath-file", height=120)
        with gr.Column(scale=1, min_width=220):
            ds_id = gr.Textbox(label="or a dataset id (needs the hub)", value="", max_lines=1,
                               placeholder="owner/name:config@split", elem_id="mn-dataset")
            with gr.Row():
                ds_math = gr.Button("Use as math", size="sm", elem_id="mn-dataset-math")
                ds_non = gr.Button("Use as non-math", size="sm", elem_id="mn-dataset-nonmath")
        with gr.Column(scale=2):
            data_box = gr.HTML(elem_id="mn-data")
    with gr.Row(elem_classes=["wb-presenter-row"]):
        with gr.Column(scale=1, min_width=280):
            method = gr.Radio(list(METHOD_LABELS), value="MathNeuro", label="Method", elem_id="mn-method")
            k_pct = Bounded(*K_RANGE, value=DEFAULTS["k"], step=1, label="K: top % per weight matrix", elem_id="mn-k")
            factor = Bounded(*FACTOR_RANGE, value=DEFAULTS["factor"], step=0.05,
                             label="Scale factor (0 = prune, 1 = unmodified)", elem_id="mn-factor")
            n_samples = Bounded(*N_RANGE, value=DEFAULTS["n"], step=1, elem_classes=["wb-advanced"],
                                label="Samples per set (math, non-math) to find the weights", elem_id="mn-n")
            for sl, r in ((k_pct, bounds.MATH_K), (factor, bounds.MATH_FACTOR), (n_samples, bounds.MATH_SAMPLES)):
                range_guard.declare(sl.elem_id, r)
            run = gr.Button("Apply", variant="primary", elem_id="mn-run")
            with gr.Row():
                pin_btn = gr.Button("Pin this result", size="sm", elem_id="mn-pin")
                unpin_btn = gr.Button("Clear pin", size="sm", elem_id="mn-unpin")
            gr.Markdown("<span class='wb-muted'>Sliders update the accuracies when released; each "
                        "setting is computed once and cached. A pinned result stays beside the current "
                        "one in the accuracy figure.</span>", elem_classes=["wb-advanced"])
        with gr.Column(scale=2):
            acc = gr.HTML(elem_id="mn-acc", elem_classes=["wb-advanced"])  # the figure title says it in presenter view
            acc_fig = gr.Plot(label="Math and non-math accuracy", elem_id="mn-accfig", elem_classes=["wb-keyfig", "wb-keyfirst"])
    with gr.Row(elem_classes=["wb-advanced"]):
        table = gr.Dataframe(headers=["set", "question", "reference", "unmodified", "modified"],
                             interactive=False, wrap=True,
                             label=samples_label(source == "zoo"),
                             column_widths=(["10%", "54%", "12%", "12%", "12%"] if source == "zoo" else
                                            ["8%", "38%", "8%", "23%", "23%"]), elem_id="mn-samples")
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
            prompt = gr.Textbox(label=ask_label(active(TAB, ctx.source)),
                                elem_id="mn-prompt", value=ASK_EXAMPLES[source][0])
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

    def check(method_label, k, f, n):
        """The fast first step of every event: a refused value stops the chain before any model
        work, and as this step has no outputs no result block is marked as failed."""
        _setting(method_label, k, f, n)

    def restore(last):
        """After a refusal the boxes show the setting on screen again (the browser would otherwise keep
        the typed value beside a slider it clamped, and the next click would compute with that)."""
        last = last or DEFAULTS
        return tuple(gr.update(value=last[key]) for key in ("k", "factor", "n"))

    def chain(trigger, fn, inputs, outputs, **kw):
        first = trigger(check, [method, k_pct, factor, n_samples], None, show_progress="hidden",
                        api_visibility="private", concurrency_limit=None)
        first.failure(restore, shown, numbers, queue=False, show_progress="hidden", api_visibility="private")
        event = first.success(fn, inputs, outputs, **model_event(**kw))
        keep_on_failure(event, outputs)
        return event

    chain(run.click, live, controls, live_out, api_name="mn_evaluate")
    for sl in numbers:
        chain(sl.release, live, controls, live_out, api_visibility="private")
    chain(method.change, live, controls, live_out, api_visibility="private")
    chain(fig2_btn.click, figure2, [k_pct, n_samples, nonmath, model, math_set], [fig2], api_name="mn_figure2")
    chain(curve_btn.click, curve, [method, k_pct, n_samples, nonmath, model, math_set], [curve_out],
          api_name="mn_scale_curve")
    chain(cons_btn.click, consistency, [k_pct, n_samples, nonmath, model, math_set], [cons_out],
          api_name="mn_consistency")
    chain(ask_btn.click, ask, [prompt] + controls[:5] + [model, math_set], [ask_out], api_name="mn_ask")
    chain(export_btn.click, export, controls[:5] + [model, math_set], [files], api_name="mn_export")
    picked = model.change(on_model, model, [nonmath, math_set, data_box, m_file, nm_file],
                          **model_event(api_name="mn_model"))
    keep_on_failure(picked, [nonmath, math_set, data_box, m_file, nm_file])
    keep_on_failure(picked.success(live, controls, live_out, **model_event(api_visibility="private")), live_out)

    def words_for(model, asked):
        """The explanation, the question box and its examples follow the picked model (the
        organism's language and exact match, or a chat model's template and GSM8K's rules); a
        question the user typed stays."""
        preset = service.pick(ctx.source, model or None).preset
        kind = "zoo" if preset.source == "zoo" else "hub"
        ours = any(asked == q for qs in ASK_EXAMPLES.values() for q in qs)
        template = None if kind == "zoo" else service.describe(_bench(source, model))["template"]
        return (explain_for(preset, template),
                gr.update(label=ask_label(preset), **({"value": ASK_EXAMPLES[kind][0]} if ours else {})),
                gr.Dataset(samples=[[q] for q in ASK_EXAMPLES[kind][1:]]),
                gr.update(label=samples_label(kind == "zoo")))

    picked.success(words_for, [model, prompt], [explain, prompt, examples.dataset, table], queue=False,
                   show_progress="hidden", api_visibility="private")

    # Compare (a pinned datapoint): the pin is the shown result's numbers; no model work.
    def pin(current):
        if not current:
            fail("Nothing to pin yet: wait for the accuracies to appear.")
        return current, accuracy_plot(current, current)

    def unpin(current):
        return None, (accuracy_plot(current) if current else gr.skip())

    pin_btn.click(pin, shown, [pinned, acc_fig], api_visibility="private", show_progress="hidden")
    unpin_btn.click(unpin, shown, [pinned, acc_fig], api_visibility="private", show_progress="hidden")
    # a named file or dataset is read at once; the accuracies follow with it
    for trigger, given, side, via, api in (
            (nm_file.upload, nm_file, "nonmath", "file", "mn_nonmath"), (m_file.upload, m_file, "math", "file", "mn_math"),
            (ds_non.click, ds_id, "nonmath", "dataset", "mn_nonmath_dataset"),
            (ds_math.click, ds_id, "math", "dataset", "mn_math_dataset")):
        mine, other = (math_set, nonmath) if side == "math" else (nonmath, math_set)
        named = trigger(name_data(side, via), [given, model, other], [mine, data_box], **model_event(api_name=api))
        keep_on_failure(named, [mine, data_box])
        keep_on_failure(named.success(live, controls, live_out, **model_event(api_visibility="private")), live_out)

    # First view: the default setting's accuracies, computed when the tab is first opened (cached
    # after). In hub mode without a non-math set (or with a model that cannot load), the data card
    # says what is missing instead of an error toast.
    skips = tuple(gr.skip() for _ in live_out)

    def first_view(*args):
        if source == "hub":
            try:
                info = service.describe(_bench(source), args[4], args[7])
            except gr.Error as e:
                why = html.escape(getattr(e, "message", None) or str(e))
                return (*skips, f"<div class='wb-card' style='min-height:0'>{why}</div>")
            if not info["nonmath"]:
                return (*skips, data_html(info))
            if links.linked(LINKED):
                return (*skips, data_html(info))
            return (*live(*args), data_html(info))
        if links.linked(LINKED):  # a deep link computes its own setting once its values are restored
            return (*skips, gr.skip())
        return (*live(*args), gr.skip())

    on_first_open(ctx, first_view, controls, live_out + [data_box])
