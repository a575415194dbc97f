"""Relevance tab: MambaLRP token and pixel heatmaps beside the baselines, with the conservation
check, faithfulness curves and rule ablations (Jafari et al., 2024). UI only: the computation lives
in backend.lrp.service."""

from __future__ import annotations


import gradio as gr

from backend.core import bounds
from backend.lrp import service as svc
from backend.lrp.forward import RULES
from backend.lrp.methods import LABELS, METHODS
from backend.lrp.models import IMAGE_ZOO, LONG_ZOO, available, text_preset, text_presets
from components.inputs.model_picker import model_picker
from components.relevance import handlers as H
from components.relevance.handlers import HELD_SOURCES, RULE_LABELS, describe, held_sources_for
from components.relevance.models import long_note, model_line
from components.links import deep_links as links
from components.inputs import enter
from components.common import model_event, on_first_open
from components.inputs.fields import bounded_slider, check_image_header, clear_unreadable, keep_on_failure, unreadable

# A deep link reruns these (components.links.deep_links): the text explanation, then the linked held-out image.
# the two redraws follow a link's explanation as they follow a click's (ran.success below): a link that
# carries the template toggle draws its bars and heatmap under that toggle, whatever the page's order
# The session report keeps these results and pins (components.report.session).

DEFAULT_METHODS = ["mambalrp", "gi", "ig", "mambaattr"]
# Presenter view's one plain line in place of the explanation above (components.common: wb-presenter-only).
PRESENTER_CAPTION = "Which words made the model give its answer: red pushed it towards the answer, blue against it."
HUB_LONG_EXAMPLE = (
    "The secret code is 4817. Remember it, because you will need it at the end. "
    "Meanwhile the weather turned cold, the trains ran late, and the market was busy "
    "with people buying bread, apples and coffee before the holiday. The secret code is"
)
TEXT_EXAMPLES = [
    "the plot was dull but the cast was brilliant and the music was lovely",
    "a really charming film with a weak ending",
    "this sequel is long and boring and the dialogue is awful",
    "the director seemed new to the city at night",
]


# ----------------------------------------------------------------------------- colours & rens


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
        elem_classes=["wb-advanced"],
    )
    gr.HTML(
        f"<div class='wb-explain'>{PRESENTER_CAPTION}</div>",
        elem_classes=["wb-presenter-only", "wb-lead"],
        elem_id="rel-presenter-caption",
    )
    model_md = gr.Markdown(model_line(source, None, hub), elem_classes=["wb-advanced"], elem_id="rel-model-line")

    # ---------------------------------------------------------------- text
    with gr.Row():
        with gr.Column(scale=3):
            text = gr.Textbox(label="Text", value=TEXT_EXAMPLES[0], lines=2, elem_id="rel-text")
            gr.Examples(TEXT_EXAMPLES, inputs=[text], label="Examples")
        with gr.Column(scale=2):
            # the zoo organism, the paper's checkpoints, or your own Mamba / FalconMamba typed in
            model, _ = model_picker(
                text_choices, "relevance", elem_id="rel-model", value=text_p.path_or_id, takes="Mamba language model"
            )
            methods = gr.CheckboxGroup(
                [(LABELS[m], m) for m in METHODS],
                value=DEFAULT_METHODS,
                label="Methods",
                elem_id="rel-methods",
                elem_classes=["wb-advanced"],
            )
            rules = gr.CheckboxGroup(
                [(RULE_LABELS[r], r) for r in RULES],
                value=list(RULES),
                label="MambaLRP rules (untick to ablate)",
                elem_id="rel-rules",
                elem_classes=["wb-advanced"],
            )
            with gr.Row(elem_classes=["wb-advanced"]):
                target = gr.Textbox(
                    label="Target word or token (blank = the model's prediction)",
                    value="",
                    elem_id="rel-target",
                    scale=2,
                )
                normalise = gr.Checkbox(label="Normalise per method", value=True, elem_id="rel-normalise")
                tpl_scale = gr.Checkbox(
                    label="Template tokens in the colour scale and bars", value=False, elem_id="rel-template-scale"
                )
            explain = gr.Button("Explain", variant="primary", elem_id="rel-explain")
            enter.runs(explain, text, target)
    heat = gr.HTML(elem_id="rel-heatmap", elem_classes=["wb-keyfig", "wb-keyfirst"])
    with gr.Row():
        pin_btn = gr.Button("Pin this result", size="sm", elem_id="rel-pin", scale=0, min_width=160)
        unpin_btn = gr.Button("Clear pin", size="sm", elem_id="rel-unpin", scale=0, min_width=120)
        gr.Markdown(
            "<span class='wb-muted'>A pinned explanation stays below the current one, on the same "
            "colour scale: change the rules, the target or the model and compare.</span>"
        )
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
        return H.explain(source, t, ms, rs, tgt, norm, model_id, progress)

    text_out = [heat, bars, cons, jfile, pfile, summary]
    text_in = [text, methods, rules, target, model]
    ran = keep_on_failure(
        explain.click(
            run_text, [text, methods, rules, target, normalise, model], text_out, **model_event(api_name="explain_text")
        ),
        text_out,
    )

    def first_view(*args):
        """The example's explanation when the tab is first opened, as the other tabs open with a
        result; a deep link with relevance settings runs its own (the tab's link_runs)."""
        if any(k.startswith("rel-") for k in links.current_query()):
            return tuple(gr.skip() for _ in text_out)
        return run_text(*args)

    on_first_open(ctx, first_view, [text, methods, rules, target, normalise, model], text_out)

    def pair(p, res, norm, tpl=False):
        return H.with_pin(source, p, res, norm, tpl)

    def do_pin(last_inputs, res, norm, tpl=False):
        return H.pin(source, last_inputs, res, norm, tpl)

    ran.success(describe, text_in, [last], queue=False, api_name=False).then(
        pair,
        [pin, summary, normalise, tpl_scale],
        [heat, pinned],
        show_progress="hidden",
        **model_event(api_name="rel_redraw_heatmap", api_visibility="private"),
    )
    # the toggle redraws what is shown (both heatmaps when pinned) from the cached explanations
    tpl_scale.change(
        pair,
        [pin, summary, normalise, tpl_scale],
        [heat, pinned],
        show_progress="hidden",
        **model_event(api_name=False),
    )

    redraw_bars = H.redraw_bars  # declared a redraw: the report keeps the explanation's record
    tpl_scale.change(
        redraw_bars, [summary, normalise, tpl_scale], bars, show_progress="hidden", queue=False, api_name=False
    )
    ran.success(
        redraw_bars,
        [summary, normalise, tpl_scale],
        bars,
        show_progress="hidden",
        queue=False,
        api_name="rel_redraw_bars",
        api_visibility="private",
    )
    keep_on_failure(
        pin_btn.click(
            do_pin, [last, summary, normalise, tpl_scale], [pin, heat, pinned], **model_event(api_name=False)
        ),
        [pin, heat, pinned],
    )
    unpin_btn.click(H.unpin, [summary, normalise, tpl_scale], [pin, heat, pinned], queue=False, api_name=False)

    # ---------------------------------------------------------------- held-out evaluation
    with gr.Accordion(
        "Held-out evaluation: faithfulness (ΔA^F) and conservation", open=False, elem_id="rel-heldout-acc"
    ):
        gr.Markdown(
            "Tokens are replaced by a neutral token (`<unk>`; for GPT-NeoX vocabularies "
            "`<|endoftext|>`) in order of relevance, most relevant first (MoRF) or "
            "least relevant first (LeRF); the area between the two logit curves is ΔA^F "
            "(higher = more faithful). Precision@k (zoo only): share of the top-k words that are the "
            "label-supporting evidence words (k = their number). Paper (SST-2, Mamba-130M): "
            "MambaLRP 1.978, IG 0.857, LRP (LN-rule) 0.877, GI 0.078, random −0.012."
        )
        held_sources = held_sources_for(text_p)
        with gr.Row():
            held_data = gr.Radio(
                [(HELD_SOURCES[k], k) for k in held_sources],
                value=held_sources[0],
                label="Sentences",
                elem_id="rel-held-data",
            )
            held_target = gr.Radio(
                [("the model's prediction", "predicted"), ("each sentence's label", "label")],
                value="predicted",
                label="Target",
                elem_id="rel-held-target",
            )
        with gr.Row(visible=held_sources[0] not in ("zoo", "captions")) as held_own:
            held_file = gr.File(
                label="Sentence file (.txt lines · .csv/.tsv/.jsonl with 'sentence' or 'text' and optional 'label')",
                file_types=[".txt", ".csv", ".tsv", ".jsonl", ".json"],
                elem_id="rel-held-file",
            )
            with gr.Column():
                held_words = gr.Textbox(
                    label="Label words (label=word, …; blank: 0/1 → negative/positive, "
                    "other labels are their own word)",
                    value="",
                    elem_id="rel-held-words",
                )
                held_suffix = gr.Textbox(
                    label="Prompt after each sentence (optional, e.g. ' Sentiment:')",
                    value="",
                    elem_id="rel-held-suffix",
                )
        with gr.Row():
            n_sent = bounded_slider(
                bounds.REL_SENTENCES, value=60, step=10, label="Held-out sentences (at most)", elem_id="rel-n"
            )
            run_held = gr.Button("Run held-out evaluation", elem_id="rel-heldout")
            enter.runs(run_held, held_words, held_suffix)
        held_note = gr.Markdown(elem_id="rel-held-note")
        table = gr.Dataframe(
            headers=["method", "ΔA^F", "± s.e.", "A LeRF", "A MoRF", "precision@k", "paper ΔA^F"],
            interactive=False,
            elem_id="rel-daf",
        )
        with gr.Row():
            curves = gr.Plot(label="MoRF / LeRF", elem_id="rel-curves")
            scatter = gr.Plot(label="Σ R vs logit", elem_id="rel-scatter")
        sentences = gr.Dataframe(
            label="Per sentence: sort from a header's ⋮ menu, select a row to see its heatmap; "
            "conservation error = |Σ R − logit| / |logit|",
            interactive=False,
            wrap=True,
            max_height=360,
            elem_id="rel-sentences",
            elem_classes=["wb-table-words"],
            visible=False,
        )  # no "1 2 3" headers before a run
        with gr.Row():
            with gr.Column(scale=3):
                sentence_view = gr.HTML(elem_id="rel-sentence-view")
            with gr.Column(scale=1):
                sentence_csv = gr.File(label="Per-sentence results (CSV)", elem_id="rel-sentences-csv")
        held_res = gr.State(None)  # the last held-out result (per-sentence relevance for the row view)

    def run_heldout(
        ms, n, data=None, upload=None, tgt="predicted", words="", suffix="", model_id=None, progress=gr.Progress()
    ):
        return H.heldout(source, held_sources[0], ms, n, data, upload, tgt, words, suffix, model_id, progress)

    sentence_table = H.sentence_table

    def open_sentence(res, norm, evt: gr.SelectData):
        return H.open_sentence(res, norm, evt.row_value if evt is not None else None)

    # the file, label words and prompt only matter for sentences of the user's or SST-2
    held_data.change(lambda d: gr.update(visible=d not in ("zoo", "captions")), [held_data], [held_own], api_name=False)

    def held_for_model(model_id):
        return H.held_choices(source, model_id)

    model.change(
        held_for_model, model, [held_data, held_own], queue=False, show_progress="hidden", api_visibility="private"
    )

    held_out = [table, curves, scatter, held_note, held_res]
    held = keep_on_failure(
        run_held.click(
            run_heldout,
            [methods, n_sent, held_data, held_file, held_target, held_words, held_suffix, model],
            held_out,
            **model_event(api_name="heldout_eval"),
        ),
        held_out,
    )
    held.success(
        sentence_table, held_res, [sentences, sentence_view, sentence_csv], queue=False, api_visibility="private"
    )
    sentences.select(open_sentence, [held_res, normalise], sentence_view, queue=False, api_visibility="private")

    # ---------------------------------------------------------------- long range
    with gr.Accordion("Long-range: where does the answer come from?", open=False, elem_id="rel-long-acc"):
        long_ok = hub or available(LONG_ZOO)
        lr_example = HUB_LONG_EXAMPLE if hub else ""
        if long_ok and not hub:
            lr_example = svc.longrange_example()
        if hub:
            gr.Markdown(
                "Runs on the **selected hub checkpoint** above (the zoo's long-range organism is not "
                "used in hub mode): type a text whose next token depends on something far back, "
                "e.g. a code stated at the start and asked for at the end. The plot shows where "
                "the 10 most relevant tokens sit, counted back from the predicted token."
            )
        else:
            gr.Markdown(
                "The zoo long-range model sees one `key` token near the start, then 40–60 noise "
                "tokens, and must answer with the key's value. The explanation of its predicted "
                "answer should sit on the key, far back. Underlined: each method's own top-10 tokens."
            )
        lr_text = gr.Textbox(
            label="Text (the predicted next token is explained)" if hub else "Sequence (answer: is appended)",
            value=lr_example,
            lines=3,
            elem_id="rel-long-text",
            interactive=long_ok,
        )
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
        return H.longrange(source, hub, t, ms, model_id, progress)

    long_out = [lr_heat, lr_plot, lr_json]
    model.change(
        lambda k: (model_line(source, k, hub), long_note(source, k, hub)),
        model,
        [model_md, long_md],
        queue=False,
        show_progress="hidden",
        api_visibility="private",
    )
    keep_on_failure(
        lr_btn.click(run_long, [lr_text, methods, model], long_out, **model_event(api_name="explain_longrange")),
        long_out,
    )

    # ---------------------------------------------------------------- image
    with gr.Accordion(
        "Image: Vision-Mamba-style classifier (zoo organism)" if hub else "Image: Vision-Mamba-style classifier",
        open=True,
        elem_id="rel-image-acc",
    ):
        img_ok = available(IMAGE_ZOO)
        if hub:
            gr.Markdown(
                "<b>Not a paper checkpoint:</b> the image classifier is this project's own "
                "Vision-Mamba organism (trained here, from the zoo); no hub checkpoint is registered "
                "for images, so this section runs on it in hub mode too.",
                elem_id="rel-image-hub-note",
            )
        gr.Markdown(
            "Which pixels made the classifier name the shape: red pushed towards its answer.",
            elem_classes=["wb-presenter-only"],
        )
        gr.Markdown(
            "A patch embedding feeds `MambaModel(inputs_embeds=…)`; the class is the shape of "
            "the one bright 4×4 object (ring / cross / stripes) on one patch, or none when there is no "
            "object, among noise and distractor strokes on other patches. "
            "For held-out examples the green box is the ground-truth patch, and each title gives "
            "the share of positive relevance inside it.",
            elem_classes=["wb-advanced"],
        )
        with gr.Row():
            with gr.Column(scale=1):
                gr.Markdown(
                    "**Image** · up to "
                    f"{bounds.IMAGE_SIDE.hi:g} px a side; converted to 16×16 grayscale. <span class='wb-muted'>"
                    "A link to this view carries the held-out example number, not an uploaded "
                    "image.</span>"
                )
                image = clear_unreadable(
                    refuse_unreadable(
                        gr.Image(
                            label="input image (16×16 grayscale)",
                            show_label=False,
                            type="numpy",
                            format="png",
                            image_mode="L",
                            height=220,
                            elem_id="rel-image",
                        )
                    )
                )
                with gr.Row():
                    ex_idx = bounded_slider(
                        bounds.REL_EXAMPLE, value=0, step=1, label="Held-out example", elem_id="rel-ex-idx"
                    )
                    ex_btn = gr.Button("Load example", size="sm", interactive=img_ok, elem_id="rel-ex-load")
                img_btn = gr.Button("Explain image", variant="primary", interactive=img_ok, elem_id="rel-image-explain")
            with gr.Column(scale=3):
                gr.Markdown(
                    "**Heatmaps** · one symmetric scale, each map divided by its max |R|; hover a pixel "
                    "for its exact relevance"
                )
                img_out = gr.Plot(
                    label="relevance heatmaps: the input and one map per method",
                    show_label=False,
                    elem_id="rel-image-out",
                )
                img_md = gr.Markdown(elem_id="rel-image-md")
                img_file = gr.File(label="Export PNG", elem_id="rel-image-png")
        if not img_ok:
            gr.Markdown("<span class='wb-muted'>The image organism is not built.</span>")

    load_example = H.example_image

    keep_on_failure(ex_btn.click(load_example, [ex_idx], [image], api_name="image_example"), [image])

    def run_image(img, ms, rs, progress=gr.Progress()):
        return H.explain_image(img, ms, rs, progress)

    image_out = [img_out, img_md, img_file]
    keep_on_failure(
        img_btn.click(run_image, [image, methods, rules], image_out, **model_event(api_name="explain_image")), image_out
    )
