"""Relevance tab: MambaLRP token and pixel heatmaps beside the baselines, with the conservation
check, faithfulness curves and rule ablations (Jafari et al., 2024). UI only: the computation lives
in backend.lrp.service."""
from __future__ import annotations

import html

import gradio as gr
import numpy as np

from backend.core import bounds
from backend.lrp import sentences as S
from backend.lrp import service as svc
from backend.lrp.forward import RULES
from backend.lrp.methods import LABELS, METHODS
from backend.lrp.models import IMAGE_ZOO, LONG_ZOO, available, text_preset, text_presets
from backend.lrp.tokens import visible
from components.inputs.model_picker import model_picker
from components.relevance.models import long_note, long_on_pick, model_line
from components.serving import exports
from components.links import deep_links as links
from components.inputs import enter
from components.common import fail, model_event, on_first_open
from components.inputs.fields import bounded_slider, check_image_header, clear_unreadable, keep_on_failure, unreadable
from components.relevance.figures import (conservation_md, curves_plot, daf_table, export_text,
                                          heatmap_html, image_figure, image_plot, longrange_plot, max_abs, md_code,
                                          position_plot, scatter_plot, sentence_frame, sentence_html,
                                          sentence_widths)

# A deep link reruns these (components.links.deep_links): the text explanation, then the linked held-out image.
# the two redraws follow a link's explanation as they follow a click's (ran.success below): a link that
# carries the template toggle draws its bars and heatmap under that toggle, whatever the page's order
# The session report keeps these results and pins (components.report.session).

DEFAULT_METHODS = ["mambalrp", "gi", "ig", "mambaattr"]
RULE_LABELS = {"norm": "RMSNorm: detach the normaliser", "silu": "SiLU: x·stopgrad(σ(x))",
               "ssm": "SSM: detach Ā, B̄, C", "gate": "Gate: half rule"}
# Presenter view's one plain line in place of the explanation above (components.common: wb-presenter-only).
PRESENTER_CAPTION = ("Which words made the model give its answer: red pushed it towards the answer, "
                     "blue against it.")
HUB_LONG_EXAMPLE = ("The secret code is 4817. Remember it, because you will need it at the end. "
                    "Meanwhile the weather turned cold, the trains ran late, and the market was busy "
                    "with people buying bread, apples and coffee before the holiday. The secret code is")
HELD_SOURCES = {"zoo": "zoo held-out set", "captions": "COCO captions (shipped)", "file": "my sentence file",
                "sst2": "SST-2 from the hub"}
TEXT_EXAMPLES = [
    "the plot was dull but the cast was brilliant and the music was lovely",
    "a really charming film with a weak ending",
    "this sequel is long and boring and the dialogue is awful",
    "the director seemed new to the city at night",
]


# ----------------------------------------------------------------------------- colours & rens

def _is_zoo_sentiment_preset(p) -> bool:
    return p.source == "zoo" and p.path_or_id == "mamba-sentiment"


def held_sources_for(preset) -> list[str]:
    """The held-out sentence sets a text model can run: the organism's own set (planted evidence)
    for the zoo sentiment organism, the shipped captions for any other model (the zoo's word-level
    vocabulary would read them as <unk>s), and a file or SST-2 for all."""
    return (["zoo"] if _is_zoo_sentiment_preset(preset) else ["captions"]) + ["file", "sst2"]


def describe(text, methods, rules, target, model) -> dict:
    """What a pin keeps: the inputs of an explanation (recomputed from the cache), never tensors."""
    return {"text": text, "methods": list(methods or []), "rules": list(rules or []), "target": target or "",
            "model": model}


def pinned_html(pin: dict, res: dict, normalise: bool, vmax: float | None, template: bool = False) -> str:
    dropped = [RULE_LABELS[r].split(":")[0] for r in RULES if r not in pin["rules"]]
    rules = "all MambaLRP rules" if not dropped else "without " + ", ".join(dropped)
    head = (f"<div class='wb-pinned-head'><b>Pinned</b> · {html.escape(str(pin['model']).split('/')[-1])} · "
            f"{rules} · target {html.escape(visible(res['target']))} (logit {res['logit']:.3f}) · "
            f"“{html.escape(pin['text'][:80])}”</div>")
    return f"<div class='wb-pinned' style='border-top:2px dashed #9ca3af;margin-top:6px;padding-top:4px'>{head}" \
           f"{heatmap_html(res, normalise, vmax=vmax, template=template)}</div>"


def refuse_unreadable(image: gr.Image) -> gr.Image:
    """Refuse an upload past the image bound from its header, and one Pillow cannot read (a damaged
    or non-image file), with a clear message.

    Gradio decodes the upload before the handler runs, and its own failure there reaches the user
    as a generic error. Wrapped on the instance rather than by a subclass: a gr.Image subclass makes
    Gradio write a .pyi stub beside this module at every import."""
    decode = image.preprocess

    def preprocess(payload):
        check_image_header(payload)
        try:
            return decode(payload)
        except gr.Error:
            raise
        except Exception:
            raise gr.Error(unreadable(getattr(payload, "orig_name", None)), print_exception=False) from None

    image.preprocess = preprocess
    return image


def _guard(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except (svc.InputError, S.DataError) as e:
        fail(str(e))


def heldout_note(hres: dict) -> str:
    """What data and targets the held-out numbers come from."""
    src = {"zoo": "the zoo organism's held-out sentences (planted evidence words)",
           "sst2": "SST-2 validation sentences from the hub", "file": "your sentence file",
           "captions": "COCO 2014 captions shipped with the app (assets/data/nemo, MIT; no labels)"}
    parts = [f"**Data:** {src.get(hres.get('source', 'zoo'), hres.get('source'))} · {hres['n']} sentences"]
    if hres.get("source") == "zoo":
        parts.append("**Target:** the label the organism prefers for each sentence")
    elif hres.get("target") == "label":
        words = ", ".join(f"{html.escape(k)} → {md_code(visible(v))}" for k, v in hres["label_tokens"].items())
        parts.append(f"**Target:** each sentence's label word ({words})")
    elif hres.get("target") == "predicted":
        top = ", ".join(f"{md_code(visible(k))} ×{v}" for k, v in list(hres["targets_used"].items())[:6])
        parts.append(f"**Target:** the model's own next-token prediction ({top})")
    if hres.get("suffix"):
        parts.append(f"**Prompt after each sentence:** {md_code(hres['suffix'])} (its tokens are never removed)")
    if hres.get("neutral"):
        parts.append(f"Removed tokens are replaced by {md_code(hres['neutral'])}.")
    if hres.get("skipped"):
        parts.append("Skipped: " + ", ".join(f"{v} ({k})" for k, v in hres["skipped"].items()) + ".")
    for note in hres.get("notes", []):
        parts.append(f"<span class='wb-muted'>{html.escape(note)}</span>")
    if hres.get("source") != "zoo":
        parts.append("<span class='wb-muted'>No planted evidence here, so no precision@k. The paper's "
                     "ΔA^F figures are for Mamba-130M fine-tuned on SST-2; a base checkpoint explains "
                     "its own next-token predictions.</span>")
    return "  \n".join(parts)


def read_heldout(data: str, upload) -> list[dict]:
    """The sentences the held-out section runs on: an uploaded file or SST-2 from the hub."""
    if data == "sst2":
        return S.load_sst2()
    if data == "captions":
        return S.load_captions()
    if not upload:
        raise S.DataError("Upload a sentence file (one per line, or CSV/TSV/JSONL with a 'sentence' or "
                          "'text' column and an optional 'label').")
    path = upload if isinstance(upload, str) else getattr(upload, "name", None) or upload.get("path")
    return S.read_sentences(path)


def build(ctx) -> None:
    source = ctx.source
    text_p = text_preset(source)
    text_choices = text_presets(source)
    hub = text_p.source == "hub"
    gr.HTML(
        "<div class='wb-explain'><b>MambaLRP</b> (Jafari et al., 2024) explains a Mamba model's output "
        "as relevance per input token (or pixel). It is Gradient×Input on a forward pass whose values "
        "are unchanged but whose gradient paths are cut by four rules (RMSNorm, SiLU, selective SSM, "
        "gate), so relevance <i>sums to the explained logit</i>. Compare it with gradient baselines "
        "and Mamba's hidden-attention maps, check conservation, ablate rules, and measure faithfulness "
        "by deleting the tokens each method calls most (MoRF) or least (LeRF) relevant. Your own "
        "Mamba or FalconMamba model can be typed into the model box; FalconMamba's extra norms on "
        "Δ, B and C lie on the SSM parameters' branch, which the SSM rule detaches, so they need no rule "
        "of their own (being scale-invariant, that branch adds nothing to the total either: on FalconMamba "
        "conservation holds even with the SSM rule off, which only changes how relevance is shared)."
        "</div>",
        elem_classes=["wb-advanced"])
    gr.HTML(f"<div class='wb-explain'>{PRESENTER_CAPTION}</div>", elem_classes=["wb-presenter-only", "wb-lead"],
            elem_id="rel-presenter-caption")
    model_md = gr.Markdown(model_line(source, None, hub), elem_classes=["wb-advanced"], elem_id="rel-model-line")

    # ---------------------------------------------------------------- text
    with gr.Row():
        with gr.Column(scale=3):
            text = gr.Textbox(label="Text", value=TEXT_EXAMPLES[0], lines=2, elem_id="rel-text")
            gr.Examples(TEXT_EXAMPLES, inputs=[text], label="Examples")
        with gr.Column(scale=2):
            # the zoo organism, the paper's checkpoints, or your own Mamba / FalconMamba typed in
            model, _ = model_picker(text_choices, "relevance", elem_id="rel-model", value=text_p.path_or_id,
                                    takes="Mamba language model")
            methods = gr.CheckboxGroup([(LABELS[m], m) for m in METHODS], value=DEFAULT_METHODS,
                                       label="Methods", elem_id="rel-methods", elem_classes=["wb-advanced"])
            rules = gr.CheckboxGroup([(RULE_LABELS[r], r) for r in RULES], value=list(RULES),
                                     label="MambaLRP rules (untick to ablate)", elem_id="rel-rules",
                                     elem_classes=["wb-advanced"])
            with gr.Row(elem_classes=["wb-advanced"]):
                target = gr.Textbox(label="Target word or token (blank = the model's prediction)", value="",
                                    elem_id="rel-target", scale=2)
                normalise = gr.Checkbox(label="Normalise per method", value=True, elem_id="rel-normalise")
                tpl_scale = gr.Checkbox(label="Template tokens in the colour scale and bars", value=False,
                                        elem_id="rel-template-scale")
            explain = gr.Button("Explain", variant="primary", elem_id="rel-explain")
            enter.runs(explain, text, target)
    heat = gr.HTML(elem_id="rel-heatmap", elem_classes=["wb-keyfig", "wb-keyfirst"])
    with gr.Row():
        pin_btn = gr.Button("Pin this result", size="sm", elem_id="rel-pin", scale=0, min_width=160)
        unpin_btn = gr.Button("Clear pin", size="sm", elem_id="rel-unpin", scale=0, min_width=120)
        gr.Markdown("<span class='wb-muted'>A pinned explanation stays below the current one, on the same "
                    "colour scale: change the rules, the target or the model and compare.</span>")
    pinned = gr.HTML(elem_id="rel-pinned")
    last, pin = gr.State(None), gr.State(None)
    with gr.Row():
        with gr.Column(scale=3):
            bars = gr.Plot(label="Relevance by position", elem_id="rel-bars")
        with gr.Column(scale=2):
            cons = gr.Markdown(elem_id="rel-conservation", elem_classes=["wb-advanced"])
    with gr.Row():
        jfile = gr.File(label="Export JSON", elem_id="rel-json", elem_classes=["wb-export"])
        pfile = gr.File(label="Export PNG", elem_id="rel-png", elem_classes=["wb-export"])
    with gr.Accordion("Result as data", open=False):
        summary = gr.JSON(label="Result (raw)", open=False, elem_id="rel-result")

    def run_text(t, ms, rs, tgt, norm, model_id=None, progress=gr.Progress()):
        _guard(svc.check_text_request, t, ms, rs)  # a refused text waits for no model load
        progress(0.1, desc="loading model")
        m = _guard(svc.load_text, source, model_id, lambda f, d: progress(0.1 + 0.2 * f, desc=d))
        progress(0.3, desc="explaining")
        res = _guard(svc.explain_text, m, t, ms, rs, tgt or None)
        jpath, ppath = export_text(res)
        return heatmap_html(res, norm), position_plot(res, norm), conservation_md(res), jpath, ppath, res

    text_out = [heat, bars, cons, jfile, pfile, summary]
    text_in = [text, methods, rules, target, model]
    ran = keep_on_failure(explain.click(run_text, [text, methods, rules, target, normalise, model], text_out,
                                        **model_event(api_name="explain_text")), text_out)

    def first_view(*args):
        """The example's explanation when the tab is first opened, as the other tabs open with a
        result; a deep link with relevance settings runs its own (the tab's link_runs)."""
        if any(k.startswith("rel-") for k in links.current_query()):
            return tuple(gr.skip() for _ in text_out)
        return run_text(*args)

    on_first_open(ctx, first_view, [text, methods, rules, target, normalise, model], text_out)

    def pair(p, res, norm, tpl=False):
        """The current heatmap and the pinned one, on one scale when not normalised per method."""
        if not p or not res:
            return (heatmap_html(res, norm, template=tpl) if res else gr.skip()), ""
        m = _guard(svc.load_text, source, p["model"])
        pres = _guard(svc.explain_text, m, p["text"], p["methods"], p["rules"], p["target"] or None)
        vmax = max(max_abs(res, tpl), max_abs(pres, tpl))
        return heatmap_html(res, norm, vmax=vmax, template=tpl), pinned_html(p, pres, norm, vmax, tpl)

    def do_pin(last_inputs, res, norm, tpl=False):
        if not last_inputs or not res:
            fail("Explain a text first, then pin it.")
        return (last_inputs, *pair(last_inputs, res, norm, tpl))

    ran.success(describe, text_in, [last], queue=False, api_name=False).then(
        pair, [pin, summary, normalise, tpl_scale], [heat, pinned], show_progress="hidden",
        **model_event(api_name="rel_redraw_heatmap", api_visibility="private"))
    # the toggle redraws what is shown (both heatmaps when pinned) from the cached explanations
    tpl_scale.change(pair, [pin, summary, normalise, tpl_scale], [heat, pinned], show_progress="hidden",
                     **model_event(api_name=False))

    def redraw_bars(res, norm, tpl):
        """The bars under the same rule as the heatmap: template tokens in or out with the toggle."""
        return position_plot(res, norm, template=bool(tpl)) if res else gr.skip()

    tpl_scale.change(redraw_bars, [summary, normalise, tpl_scale], bars, show_progress="hidden", queue=False,
                     api_name=False)
    ran.success(redraw_bars, [summary, normalise, tpl_scale], bars, show_progress="hidden", queue=False,
                api_name="rel_redraw_bars", api_visibility="private")
    keep_on_failure(pin_btn.click(do_pin, [last, summary, normalise, tpl_scale], [pin, heat, pinned],
                                  **model_event(api_name=False)), [pin, heat, pinned])
    unpin_btn.click(lambda res, norm, tpl: (None, heatmap_html(res, norm, template=tpl) if res else gr.skip(), ""),
                    [summary, normalise, tpl_scale], [pin, heat, pinned], queue=False, api_name=False)

    # ---------------------------------------------------------------- held-out evaluation
    with gr.Accordion("Held-out evaluation: faithfulness (ΔA^F) and conservation", open=False,
                      elem_id="rel-heldout-acc"):
        gr.Markdown("Tokens are replaced by a neutral token (`<unk>`; for GPT-NeoX vocabularies "
                    "`<|endoftext|>`) in order of relevance, most relevant first (MoRF) or "
                    "least relevant first (LeRF); the area between the two logit curves is ΔA^F "
                    "(higher = more faithful). Precision@k (zoo only): share of the top-k words that are the "
                    "label-supporting evidence words (k = their number). Paper (SST-2, Mamba-130M): "
                    "MambaLRP 1.978, IG 0.857, LRP (LN-rule) 0.877, GI 0.078, random −0.012.")
        held_sources = held_sources_for(text_p)
        with gr.Row():
            held_data = gr.Radio([(HELD_SOURCES[k], k) for k in held_sources], value=held_sources[0],
                                 label="Sentences", elem_id="rel-held-data")
            held_target = gr.Radio([("the model's prediction", "predicted"), ("each sentence's label", "label")],
                                   value="predicted", label="Target", elem_id="rel-held-target")
        with gr.Row(visible=held_sources[0] not in ("zoo", "captions")) as held_own:
            held_file = gr.File(label="Sentence file (.txt lines · .csv/.tsv/.jsonl with 'sentence' or "
                                      "'text' and optional 'label')",
                                file_types=[".txt", ".csv", ".tsv", ".jsonl", ".json"], elem_id="rel-held-file")
            with gr.Column():
                held_words = gr.Textbox(label="Label words (label=word, …; blank: 0/1 → negative/positive, "
                                              "other labels are their own word)", value="",
                                        elem_id="rel-held-words")
                held_suffix = gr.Textbox(label="Prompt after each sentence (optional, e.g. ' Sentiment:')",
                                         value="", elem_id="rel-held-suffix")
        with gr.Row():
            n_sent = bounded_slider(bounds.REL_SENTENCES, value=60, step=10, label="Held-out sentences (at most)",
                                    elem_id="rel-n")
            run_held = gr.Button("Run held-out evaluation", elem_id="rel-heldout")
            enter.runs(run_held, held_words, held_suffix)
        held_note = gr.Markdown(elem_id="rel-held-note")
        table = gr.Dataframe(headers=["method", "ΔA^F", "± s.e.", "A LeRF", "A MoRF", "precision@k",
                                      "paper ΔA^F"], interactive=False, elem_id="rel-daf")
        with gr.Row():
            curves = gr.Plot(label="MoRF / LeRF", elem_id="rel-curves")
            scatter = gr.Plot(label="Σ R vs logit", elem_id="rel-scatter")
        sentences = gr.Dataframe(label="Per sentence: sort from a header's ⋮ menu, select a row to see its heatmap; "
                                       "conservation error = |Σ R − logit| / |logit|",
                                 interactive=False, wrap=True, max_height=360, elem_id="rel-sentences",
                                 elem_classes=["wb-table-words"], visible=False)  # no "1 2 3" headers before a run
        with gr.Row():
            with gr.Column(scale=3):
                sentence_view = gr.HTML(elem_id="rel-sentence-view")
            with gr.Column(scale=1):
                sentence_csv = gr.File(label="Per-sentence results (CSV)", elem_id="rel-sentences-csv")
        held_res = gr.State(None)  # the last held-out result (per-sentence relevance for the row view)

    def run_heldout(ms, n, data=None, upload=None, tgt="predicted", words="", suffix="", model_id=None,
                    progress=gr.Progress()):
        n = bounds.check(bounds.REL_SENTENCES, n)
        m = _guard(svc.load_text, source, model_id)
        report = lambda f, d: progress(f, desc=d)  # noqa: E731
        data = data or held_sources[0]
        if data == "zoo":
            res = dict(_guard(svc.heldout_sentiment, m, ms, n, progress=report), source="zoo")
        else:
            progress(0.02, desc="reading sentences")
            items = _guard(read_heldout, data, upload)
            res = _guard(svc.heldout_sentences, m, items, ms, target=tgt or "predicted", label_words=words,
                         suffix=suffix, n=n, source=data, progress=report)
        return daf_table(res), curves_plot(res), scatter_plot(res), heldout_note(res), res

    def sentence_table(res):
        df, kinds = sentence_frame(res)
        path = exports.hand_out(lambda d: df.to_csv(d / "sentences.csv", index=False) or d / "sentences.csv")
        return (gr.update(value=df, datatype=kinds, column_widths=sentence_widths(df.columns), visible=True), "",
                path)

    def open_sentence(res, norm, evt: gr.SelectData):
        """A selected row (after any sort: its '#' cell says which sentence) shows that sentence."""
        if not res or evt is None or not evt.row_value:
            return gr.skip()
        try:
            number = int(evt.row_value[0])
        except (TypeError, ValueError):
            return gr.skip()
        return sentence_html(res, number, norm)

    # the file, label words and prompt only matter for sentences of the user's or SST-2
    held_data.change(lambda d: gr.update(visible=d not in ("zoo", "captions")), [held_data], [held_own],
                     api_name=False)

    def held_for_model(model_id):
        """A newly picked text model gets the sentence sets it can run (an unreadable pick says why
        when it is used)."""
        try:
            options = held_sources_for(svc.pick_text(source, model_id or None).preset)
        except svc.InputError:
            return gr.skip(), gr.skip()
        return (gr.update(choices=[(HELD_SOURCES[k], k) for k in options], value=options[0]),
                gr.update(visible=options[0] not in ("zoo", "captions")))

    model.change(held_for_model, model, [held_data, held_own], queue=False, show_progress="hidden",
                 api_visibility="private")

    held_out = [table, curves, scatter, held_note, held_res]
    held = keep_on_failure(run_held.click(run_heldout, [methods, n_sent, held_data, held_file, held_target,
                                                        held_words, held_suffix, model], held_out,
                                          **model_event(api_name="heldout_eval")), held_out)
    held.success(sentence_table, held_res, [sentences, sentence_view, sentence_csv], queue=False,
                 api_visibility="private")
    sentences.select(open_sentence, [held_res, normalise], sentence_view, queue=False, api_visibility="private")

    # ---------------------------------------------------------------- long range
    with gr.Accordion("Long-range: where does the answer come from?", open=False, elem_id="rel-long-acc"):
        long_ok = hub or available(LONG_ZOO)
        lr_example = HUB_LONG_EXAMPLE if hub else ""
        if long_ok and not hub:
            lr_example = svc.longrange_example()
        if hub:
            gr.Markdown("Runs on the **selected hub checkpoint** above (the zoo's long-range organism is not "
                        "used in hub mode): type a text whose next token depends on something far back, "
                        "e.g. a code stated at the start and asked for at the end. The plot shows where "
                        "the 10 most relevant tokens sit, counted back from the predicted token.")
        else:
            gr.Markdown("The zoo long-range model sees one `key` token near the start, then 40–60 noise "
                        "tokens, and must answer with the key's value. The explanation of its predicted "
                        "answer should sit on the key, far back. Underlined: each method's own top-10 tokens.")
        lr_text = gr.Textbox(label="Text (the predicted next token is explained)" if hub else
                             "Sequence (answer: is appended)", value=lr_example, lines=3,
                             elem_id="rel-long-text", interactive=long_ok)
        lr_btn = gr.Button("Explain the predicted next token", interactive=long_ok, elem_id="rel-long-explain")
        enter.runs(lr_btn, lr_text)
        lr_heat = gr.HTML(elem_id="rel-long-heatmap")
        lr_plot = gr.Plot(label="Top-10 relevant tokens by distance", elem_id="rel-long-plot")
        with gr.Accordion("Top tokens as data", open=False):
            lr_json = gr.JSON(label="Top tokens", open=False, elem_id="rel-long-json")
        if not long_ok:
            gr.Markdown("<span class='wb-muted'>The long-range organism is not built.</span>")
        long_md = gr.Markdown(long_note(source, None, hub), elem_id="rel-long-model")

    def run_long(t, ms, model_id=None, progress=gr.Progress()):
        progress(0.2, desc="explaining")
        # a checkpoint or the visitor's own model is explained itself; a zoo text organism hands the
        # run to the zoo long-range organism (the section's line under the button says which)
        m = _guard(svc.load_text, source, model_id) if hub or long_on_pick(source, model_id) else svc.load_longrange()
        res = _guard(svc.longrange, m, t, ms)
        mark = {meth: {d["position"] for d in tops} for meth, tops in res["top_tokens"].items()}
        return heatmap_html(res, True, mark), longrange_plot(res), {"model": m.model_id, "target": res["target"],
                                                                     "top_tokens": res["top_tokens"]}

    long_out = [lr_heat, lr_plot, lr_json]
    model.change(lambda k: (model_line(source, k, hub), long_note(source, k, hub)), model, [model_md, long_md],
                 queue=False, show_progress="hidden", api_visibility="private")
    keep_on_failure(lr_btn.click(run_long, [lr_text, methods, model], long_out,
                                 **model_event(api_name="explain_longrange")), long_out)

    # ---------------------------------------------------------------- image
    with gr.Accordion("Image: Vision-Mamba-style classifier (zoo organism)" if hub else
                      "Image: Vision-Mamba-style classifier", open=True, elem_id="rel-image-acc"):
        img_ok = available(IMAGE_ZOO)
        if hub:
            gr.Markdown("<b>Not a paper checkpoint:</b> the image classifier is this project's own "
                        "Vision-Mamba organism (trained here, from the zoo); no hub checkpoint is registered "
                        "for images, so this section runs on it in hub mode too.", elem_id="rel-image-hub-note")
        gr.Markdown("Which pixels made the classifier name the shape: red pushed towards its answer.",
                    elem_classes=["wb-presenter-only"])
        gr.Markdown("A patch embedding feeds `MambaModel(inputs_embeds=…)`; the class is the shape of "
                    "the one bright 4×4 object (ring / cross / stripes) on one patch, or none when there is no "
                    "object, among noise and distractor strokes on other patches. "
                    "For held-out examples the green box is the ground-truth patch, and each title gives "
                    "the share of positive relevance inside it.", elem_classes=["wb-advanced"])
        with gr.Row():
            with gr.Column(scale=1):
                gr.Markdown("**Image** · up to " f"{bounds.IMAGE_SIDE.hi:g} px a side; converted to 16×16 grayscale. <span class='wb-muted'>"
                            "A link to this view carries the held-out example number, not an uploaded "
                            "image.</span>")
                image = clear_unreadable(refuse_unreadable(gr.Image(label="input image (16×16 grayscale)", show_label=False,
                                                   type="numpy", format="png", image_mode="L", height=220,
                                                   elem_id="rel-image")))
                with gr.Row():
                    ex_idx = bounded_slider(bounds.REL_EXAMPLE, value=0, step=1, label="Held-out example",
                                            elem_id="rel-ex-idx")
                    ex_btn = gr.Button("Load example", size="sm", interactive=img_ok, elem_id="rel-ex-load")
                img_btn = gr.Button("Explain image", variant="primary", interactive=img_ok,
                                    elem_id="rel-image-explain")
            with gr.Column(scale=3):
                gr.Markdown("**Heatmaps** · one symmetric scale, each map divided by its max |R|; hover a pixel "
                            "for its exact relevance")
                img_out = gr.Plot(label="relevance heatmaps: the input and one map per method", show_label=False,
                                  elem_id="rel-image-out")
                img_md = gr.Markdown(elem_id="rel-image-md")
                img_file = gr.File(label="Export PNG", elem_id="rel-image-png")
        if not img_ok:
            gr.Markdown("<span class='wb-muted'>The image organism is not built.</span>")

    def load_example(i):
        return _guard(svc.example_image, svc.load_image(), bounds.check(bounds.REL_EXAMPLE, i))

    keep_on_failure(ex_btn.click(load_example, [ex_idx], [image], api_name="image_example"), [image])

    def run_image(img, ms, rs, progress=gr.Progress()):
        progress(0.2, desc="explaining")
        m = svc.load_image()
        res = _guard(svc.explain_image, m, img, ms, rs)
        _, path = image_figure(res)
        logits = ", ".join(f"{k} {v:.2f}" for k, v in res["logits"].items())
        md = [f"**Prediction:** {res['pred']} (logits: {logits})"]
        if res["share_in_region"]:
            md.append("Share of positive relevance inside the object's box: " + ", ".join(
                f"{LABELS[k]} {100 * v:.0f}%" for k, v in res["share_in_region"].items())
                      + f" (the box covers {100 * np.mean(res['mask']):.0f}% of the image)")
        md.append("Σ relevance: " + ", ".join(f"{LABELS[k]} {v:.3f}" for k, v in res["sum_relevance"].items()))
        return image_plot(res), "\n\n".join(md), path

    image_out = [img_out, img_md, img_file]
    keep_on_failure(img_btn.click(run_image, [image, methods, rules], image_out,
                                  **model_event(api_name="explain_image")), image_out)
