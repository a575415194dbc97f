"""The Relevance tab's handlers: module-level functions with explicit inputs and outputs, which the
tab's events call (layout.py binds the tab's preset source) and tests call without a running app.
Each takes what the controls hold and answers what the outputs show, in their order; a refused input
raises gr.Error with the service's words. `progress(fraction, desc=…)` is Gradio's tracker or a no-op."""

from __future__ import annotations

import html
from typing import Any, Callable

import gradio as gr
import numpy as np

from backend.core import bounds
from backend.lrp import heldout as held  # the handler `heldout` below takes the plain name
from backend.lrp import sentences as S
from backend.lrp import service as svc
from backend.lrp.forward import RULES
from backend.lrp.methods import LABELS
from backend.lrp.tokens import visible
from components.common import fail
from components.relevance.figures import (
    conservation_md,
    export_text,
    heatmap_html,
    image_figure,
    image_plot,
    longrange_plot,
    max_abs,
    md_code,
    position_plot,
)
from components.relevance.heldout import (
    curves_plot,
    daf_table,
    scatter_plot,
    sentence_frame,
    sentence_html,
    sentence_widths,
)
from components.relevance.models import long_on_pick
from components.report import redraw
from components.serving import exports

Progress = Callable[..., Any]


def _quiet(*_a, **_k) -> None:
    return None


RULE_LABELS = {
    "norm": "RMSNorm: detach the normaliser",
    "silu": "SiLU: x·stopgrad(σ(x))",
    "ssm": "SSM: detach Ā, B̄, C",
    "gate": "Gate: half rule",
}
HELD_SOURCES = {
    "zoo": "zoo held-out set",
    "captions": "COCO captions (shipped)",
    "file": "my sentence file",
    "sst2": "SST-2 from the hub",
}


def _is_zoo_sentiment_preset(p) -> bool:
    return p.source == "zoo" and p.path_or_id == "mamba-sentiment"


def held_sources_for(preset) -> list[str]:
    """The held-out sentence sets a text model can run: the organism's own set (planted evidence)
    for the zoo sentiment organism, the shipped captions for any other model (the zoo's word-level
    vocabulary would read them as <unk>s), and a file or SST-2 for all."""
    return (["zoo"] if _is_zoo_sentiment_preset(preset) else ["captions"]) + ["file", "sst2"]


def describe(text, methods, rules, target, model) -> dict:
    """What a pin keeps: the inputs of an explanation (recomputed from the cache), never tensors."""
    return {
        "text": text,
        "methods": list(methods or []),
        "rules": list(rules or []),
        "target": target or "",
        "model": model,
    }


def pinned_html(pin: dict, res: dict, normalise: bool, vmax: float | None, template: bool = False) -> str:
    dropped = [RULE_LABELS[r].split(":")[0] for r in RULES if r not in pin["rules"]]
    rules = "all MambaLRP rules" if not dropped else "without " + ", ".join(dropped)
    head = (
        f"<div class='wb-pinned-head'><b>Pinned</b> · {html.escape(str(pin['model']).split('/')[-1])} · "
        f"{rules} · target {html.escape(visible(res['target']))} (logit {res['logit']:.3f}) · "
        f"“{html.escape(pin['text'][:80])}”</div>"
    )
    return (
        f"<div class='wb-pinned' style='border-top:2px dashed #9ca3af;margin-top:6px;padding-top:4px'>{head}"
        f"{heatmap_html(res, normalise, vmax=vmax, template=template)}</div>"
    )


def _guard(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except (svc.InputError, S.DataError) as e:
        fail(str(e))


def heldout_note(hres: dict) -> str:
    """What data and targets the held-out numbers come from."""
    src = {
        "zoo": "the zoo organism's held-out sentences (planted evidence words)",
        "sst2": "SST-2 validation sentences from the hub",
        "file": "your sentence file",
        "captions": "COCO 2014 captions shipped with the app (assets/data/nemo, MIT; no labels)",
    }
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
        parts.append(
            "<span class='wb-muted'>No planted evidence here, so no precision@k. The paper's "
            "ΔA^F figures are for Mamba-130M fine-tuned on SST-2; a base checkpoint explains "
            "its own next-token predictions.</span>"
        )
    return "  \n".join(parts)


def read_heldout(data: str, upload) -> list[dict]:
    """The sentences the held-out section runs on: an uploaded file or SST-2 from the hub."""
    if data == "sst2":
        return S.load_sst2()
    if data == "captions":
        return S.load_captions()
    if not upload:
        raise S.DataError(
            "Upload a sentence file (one per line, or CSV/TSV/JSONL with a 'sentence' or "
            "'text' column and an optional 'label')."
        )
    path = upload if isinstance(upload, str) else getattr(upload, "name", None) or upload.get("path")
    return S.read_sentences(path)


# ----------------------------------------------------------------------------- the text explanation
def explain(source: str, text, methods, rules, target, normalise, model_id=None, progress: Progress = _quiet):
    """(heatmap, bars, conservation, JSON file, PNG file, result) of one text explanation."""
    _guard(svc.check_text_request, text, methods, rules)  # a refused text waits for no model load
    progress(0.1, desc="loading model")
    m = _guard(svc.load_text, source, model_id, lambda f, d: progress(0.1 + 0.2 * f, desc=d))
    progress(0.3, desc="explaining")
    res = _guard(svc.explain_text, m, text, methods, rules, target or None)
    jpath, ppath = export_text(res)
    return heatmap_html(res, normalise), position_plot(res, normalise), conservation_md(res), jpath, ppath, res


def with_pin(source: str, pin, res, normalise, template=False):
    """(heatmap, pinned heatmap): the current explanation and the pinned one, on one scale when not
    normalised per method (the pin's explanation comes from the cache)."""
    if not pin or not res:
        return (heatmap_html(res, normalise, template=template) if res else gr.skip()), ""
    m = _guard(svc.load_text, source, pin["model"])
    pres = _guard(svc.explain_text, m, pin["text"], pin["methods"], pin["rules"], pin["target"] or None)
    vmax = max(max_abs(res, template), max_abs(pres, template))
    return (
        heatmap_html(res, normalise, vmax=vmax, template=template),
        pinned_html(pin, pres, normalise, vmax, template),
    )


def pin(source: str, last_inputs, res, normalise, template=False):
    """(pin, heatmap, pinned heatmap) after pinning the current explanation."""
    if not last_inputs or not res:
        fail("Explain a text first, then pin it.")
    return (last_inputs, *with_pin(source, last_inputs, res, normalise, template))


def unpin(res, normalise, template=False):
    return None, (heatmap_html(res, normalise, template=template) if res else gr.skip()), ""


@redraw
def redraw_bars(res, normalise, template):
    """The bars under the same rule as the heatmap: template tokens in or out with the toggle."""
    return position_plot(res, normalise, template=bool(template)) if res else gr.skip()


# ----------------------------------------------------------------------------- held-out evaluation
def heldout(
    source: str,
    default_data: str,
    methods,
    n,
    data=None,
    upload=None,
    target="predicted",
    words="",
    suffix="",
    model_id=None,
    progress: Progress = _quiet,
):
    """(ΔA^F table, MoRF/LeRF curves, conservation scatter, note, result) of the held-out evaluation."""
    n = bounds.check(bounds.REL_SENTENCES, n)
    m = _guard(svc.load_text, source, model_id)
    report = lambda f, d: progress(f, desc=d)  # noqa: E731
    data = data or default_data
    if data == "zoo":
        res = dict(_guard(held.heldout_sentiment, m, methods, n, progress=report), source="zoo")
    else:
        progress(0.02, desc="reading sentences")
        items = _guard(read_heldout, data, upload)
        res = _guard(
            held.heldout_sentences,
            m,
            items,
            methods,
            target=target or "predicted",
            label_words=words,
            suffix=suffix,
            n=n,
            source=data,
            progress=report,
        )
    return daf_table(res), curves_plot(res), scatter_plot(res), heldout_note(res), res


def sentence_table(res):
    """(per-sentence table, cleared sentence view, its CSV)."""
    df, kinds = sentence_frame(res)
    path = exports.hand_out(lambda d: df.to_csv(d / "sentences.csv", index=False) or d / "sentences.csv")
    return gr.update(value=df, datatype=kinds, column_widths=sentence_widths(df.columns), visible=True), "", path


def open_sentence(res, normalise, row):
    """A selected row (after any sort: its '#' cell says which sentence) shows that sentence."""
    if not res or not row:
        return gr.skip()
    try:
        number = int(row[0])
    except (TypeError, ValueError):
        return gr.skip()
    return sentence_html(res, number, normalise)


def held_choices(source: str, model_id):
    """(sentence sets, visibility of the file row) for a newly picked text model; an unreadable pick
    changes nothing here (it says why when it is used)."""
    try:
        options = held_sources_for(svc.pick_text(source, model_id or None).preset)
    except svc.InputError:
        return gr.skip(), gr.skip()
    return (
        gr.update(choices=[(HELD_SOURCES[k], k) for k in options], value=options[0]),
        gr.update(visible=options[0] not in ("zoo", "captions")),
    )


# ----------------------------------------------------------------------------- long range
def longrange(source: str, hub: bool, text, methods, model_id=None, progress: Progress = _quiet):
    """(heatmap with each method's top tokens underlined, distance plot, top tokens as data)."""
    progress(0.2, desc="explaining")
    # a checkpoint or the visitor's own model is explained itself; a zoo text organism hands the
    # run to the zoo long-range organism (the section's line under the button says which)
    m = _guard(svc.load_text, source, model_id) if hub or long_on_pick(source, model_id) else svc.load_longrange()
    res = _guard(svc.longrange, m, text, methods)
    mark = {meth: {d["position"] for d in tops} for meth, tops in res["top_tokens"].items()}
    return (
        heatmap_html(res, True, mark),
        longrange_plot(res),
        {"model": m.model_id, "target": res["target"], "top_tokens": res["top_tokens"]},
    )


# ----------------------------------------------------------------------------- image
def example_image(i):
    return _guard(svc.example_image, svc.load_image(), bounds.check(bounds.REL_EXAMPLE, i))


def explain_image(image, methods, rules, progress: Progress = _quiet):
    """(heatmaps figure, prediction and shares, PNG file) of one image explanation."""
    progress(0.2, desc="explaining")
    m = svc.load_image()
    res = _guard(svc.explain_image, m, image, methods, rules)
    _, path = image_figure(res)
    logits = ", ".join(f"{k} {v:.2f}" for k, v in res["logits"].items())
    md = [f"**Prediction:** {res['pred']} (logits: {logits})"]
    if res["share_in_region"]:
        md.append(
            "Share of positive relevance inside the object's box: "
            + ", ".join(f"{LABELS[k]} {100 * v:.0f}%" for k, v in res["share_in_region"].items())
            + f" (the box covers {100 * np.mean(res['mask']):.0f}% of the image)"
        )
    md.append("Σ relevance: " + ", ".join(f"{LABELS[k]} {v:.3f}" for k, v in res["sum_relevance"].items()))
    return image_plot(res), "\n\n".join(md), path
