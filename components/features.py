"""Features: an SAE feature browser for a LLaVA-style model (Zhang et al., 2024, multimodal SAEs).

UI only: the feature list, feature pages, image analysis and steering come from backend.sae
(loading, pages, analysis, hub_index).
"""
from __future__ import annotations

import hashlib
import html
import json
import os
import tempfile
import threading
from pathlib import Path

import gradio as gr
import numpy as np
import pandas as pd

from backend.core import presets as P
from backend.core import sessions
from backend.core.stopflag import StopFlag
from backend.sae import analysis, hub_index, loading, organism, pages
from backend.sae import scenes as S
from backend.sae import steer as ST
from backend.sae.index import INDEX_FILE, Cancelled
from components import links
from components.feature_images import MAX_TAB_IMAGES, collect_images, own_build, own_labels, shown_place
from backend.sae.label_quality import quality
from components.feature_figures import (label_shown, enlarged, concept_plot, hist_plot, maps_max, page_png,
                                        colorbar_html, dimmed, overlay, patch_figure)
from backend.core import bounds
from components.common import fail, model_event
from components.guard import main_only
from components.inputs import CheckedImage, CheckedNumber, clear_unreadable, keep_on_failure, unreadable
from components.model_picker import model_picker

TAB_ID = "features"
TITLE = "Features"
ORDER = 2
SUMMARY = "SAE features of a LLaVA-style model: top images, activation regions, concept labels, steering."
# A deep link opens its feature page on load (`feature=ID` or the linked `features-id`), then reruns
# these (components.links): the model and SAE it names (a user's own too), the filtered list, the
# held-out scene's analysis and the steering.
LINK_RUNS = ("features_load", "features_list", "analyse_image", "steer")
# The session report keeps these results and pins (components.report).
REPORT_RESULTS = {"features-hist": "Feature page", "features-firing": "Features firing on an image", "features-steer-out": "Steering a feature"}
REPORT_PINS = {"features-pin": "features-steer-out"}
LINK_PARAMS = ("feature",)  # read by the tab's own load event, not a linked input

SORTS = ["density", "max activation", "IoU"]
POSITION_CHOICES = [("every prompt position (paper)", "prompt"), ("prompt + generated tokens", "all"),
                    ("image positions of the prompt", "image")]
_EXPORT_DIR: Path | None = None


def _export_path(name: str) -> Path:
    global _EXPORT_DIR
    if _EXPORT_DIR is None:
        _EXPORT_DIR = Path(tempfile.mkdtemp(prefix="wb-features-"))
    return _EXPORT_DIR / name


def _atomic_write(path: Path, write) -> Path:
    """Write beside, then rename: a concurrent request never serves a half-written export."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    write(tmp)
    os.replace(tmp, path)
    return path


# ------------------------------------------------------------------------------ handlers
def _org(source: str, progress=None):
    """The organism; with `progress` (a gr.Progress) its weights too: the VLM and SAE load on the
    first request that needs them, not when the app starts."""
    try:
        org = loading.get_organism(source)
        if progress is not None and org.model is None:
            progress(0.05, desc="loading the model and SAE (first use; they stay loaded)")
            org = loading.get_organism(source, model=True)
        return org
    except FileNotFoundError as e:
        fail(f"The Features organism is not built: {e}")


def no_index_html(org) -> str:
    """What to do when a hub preset has no feature index yet (instead of error panels)."""
    note = (f"<p class='wb-muted'>A file was found but not used: {html.escape(org.index_note)}</p>"
            if org.index_note else "")
    return (f"<div class='wb-explain' id='features-noindex'><b>No feature index yet for this model and SAE.</b> "
            f"A feature's page shows the images of a dataset that excite it most, so an index over your images "
            f"is needed first. Build it above from a few images (up to {MAX_TAB_IMAGES}), or for a large set "
            f"run on a GPU machine:<pre style='white-space:pre-wrap'>{html.escape(hub_index.index_command(org))}</pre>"
            f"This tab picks the file up as soon as it is where the server reads it: the file "
            f"<code>WORKBENCH_SAE_INDEX</code> names (<code>OUT/{INDEX_FILE}</code>), or beside the SAE. "
            f"Image analysis and steering below work without an index.{note}</div>")


def _feature_id(org, value) -> int:
    return bounds.check(bounds.Range("The feature id", 0, org.n_features - 1), value)


def firing_columns(org) -> list[str]:
    """The "which features fire" table's columns: the zoo's planted concept, or a loaded SAE's label."""
    return ["feature", "label" if org.is_hub else "concept", "mean activation"]


def sorts_of(org) -> list[str]:
    return SORTS if not org.is_hub else [s for s in SORTS if s != "IoU"]  # no planted masks, no IoU


def list_features(source: str, query: str, sort: str) -> pd.DataFrame:
    """The feature list: the zoo's concept and its IoU; for a loaded model and SAE, the explainer's
    label and no IoU column (real images have no planted masks to score against)."""
    org = _org(source)
    if sort not in sorts_of(org):
        fail(f"Sort by one of {sorts_of(org)}.")
    rows = pages.feature_table(org, query or "", {"IoU": "iou", "max activation": "max_act"}.get(sort, sort))
    if org.is_hub:
        return pd.DataFrame([[r["feature"], r["label"], round(r["density"], 4), round(r["max_act"], 2)]
                             for r in rows], columns=["feature", "label", "density", "max act"])
    return pd.DataFrame([[r["feature"], label_shown(org, r["feature"], ""), round(r["iou"], 3), round(r["density"], 4),
                          round(r["max_act"], 2)] for r in rows],
                        columns=["feature", "concept", "IoU", "density", "max act"])


def _empty_page(org, f: int):
    """The page outputs when there is no index: the instructions, nothing else changed."""
    return (no_index_html(org), [], [], None, None, None, None, {}, None, f, f, gr.update())


def open_feature(source: str, feature):
    org = _org(source)
    f = _feature_id(org, feature)
    if org.index is None:
        return _empty_page(org, f)
    page = pages.feature_page(org, f)
    vmax = maps_max(page["maps"])
    over = [(enlarged(overlay(im, m, vmax)), f"#{t['image_id']} · {t['score']:.2f}")
            for im, m, t in zip(page["images"], page["maps"], page["top"])]
    dim = [(enlarged(dimmed(im, r)), t["caption"]) for im, r, t in zip(page["images"], page["regions"], page["top"])]
    if org.is_hub:
        lab = html.escape(page["label"] or "unlabelled")
        header = (f"<h3 style='margin:0'>Feature {f} · <span style='color:var(--color-accent)'>{lab}</span></h3>"
                  f"<div class='wb-muted wb-advanced'>density {page['density']:.3%} of base-image patch tokens · max activation "
                  f"{page['max_act']:.3f} · mean non-zero {page['mean_act']:.3f} · labels: "
                  f"{html.escape(page['labelled_by'])} · maps: the base image's patches stretched over each "
                  f"picture (bilinear), region ≥ 50% of the map's max</div>"
                  + colorbar_html(vmax, "overlay colour scale"))
    else:
        lab = html.escape(page["label"] or "no concept")
        held = html.escape(quality(org.labels.get(str(f), {}), page["density"]) or f"IoU {page['iou']:.2f}")
        header = (f"<h3 style='margin:0'>Feature {f} · <span style='color:var(--color-accent)'>{lab}</span> "
                  f"<span class='wb-badge{' wb-weak' if 'weak' in held or 'broad' in held else ''}'>{held}</span></h3>"
                  f"<div class='wb-muted wb-advanced'>{html.escape(page['family'] or '')} · density {page['density']:.3%} of image "
                  f"tokens · max activation {page['max_act']:.3f} · mean non-zero {page['mean_act']:.3f} · "
                  f"concept explainer: best IoU of a planted concept mask with the activation regions "
                  f"(bilinear upsampling, ≥ 50% of the map's max) over the top-5 images</div>"
                  + colorbar_html(vmax, "overlay colour scale"))
    data = pages.page_json(page)
    # named for the index too: two visitors' own indexes never share an export file
    tag = hashlib.sha256(org.cache_id.encode()).hexdigest()[:10]
    jpath = _atomic_write(_export_path(f"feature_{f}-{tag}.json"), lambda p: p.write_text(json.dumps(data, indent=1)))
    ppath = _atomic_write(_export_path(f"feature_{f}-{tag}.png"), lambda p: page_png(page, p))
    steer_value = analysis.default_clamp_value(org, f)
    hover = patch_figure(page["images"], page["patch_maps"],
                         [f"#{t['image_id']} · {t['score']:.2f}" for t in page["top"]], vmax)
    return (header, over, dim, hist_plot(page), concept_plot(page), str(jpath), str(ppath), data, hover, f,
            f, gr.Number(value=steer_value, maximum=(top := max(clamp_limit(org), steer_value)),
                         label=f"clamp value (0–{top:g})"))


def _explain(org) -> str:
    labels_words = ("its label (none unless a model explainer has labelled the index: the concept explainer "
                    "needs planted masks)" if org.is_hub else
                    "the planted concept whose mask best matches its regions (IoU)")
    return ("<div class='wb-explain'>A sparse autoencoder splits the model's residual stream into "
            "features. Each feature's page shows the images of the dataset that excite it most, "
            "<b>where</b> it fires on them (left: the activation map over the image; right: the paper's view, "
            "everything outside the activation region dimmed), its activation histogram and how often it fires, "
            f"and {labels_words}. Below, upload an image to see "
            "which features fire where, and clamp a feature to watch the caption change.</div>")


def reopen_feature(source: str, feature):
    """The feature page again after the index or the organism changed (its own name: an event's
    function name is its endpoint's, and `open_feature` is an agent tool's)."""
    return open_feature(source, feature)


def clamp_limit(org) -> float:
    """The largest clamp value offered (backend.core.bounds: the API and the tools take the same)."""
    return analysis.clamp_range(org).hi


def _image_input(org, image, example):
    if image is not None:
        if isinstance(image, (str, Path)):  # a file path (API callers, tests)
            try:
                from PIL import Image

                with Image.open(image) as im:
                    return np.asarray(im.convert("RGB"))
            except Exception:
                fail(unreadable(Path(str(image)).name))
        return np.asarray(image)
    if not org.heldout_specs:
        fail("Upload an image (this model has no scene set to pick from).")
    if example is not None and str(example).strip() != "":
        n = len(org.heldout_specs)
        try:
            i = int(str(example).strip())
        except ValueError:
            i = -1
        if not 0 <= i < n:  # never a negative index from the end: the rule is one range, said once
            fail(f"Pick a held-out scene between 0 and {n - 1} (got {str(example)[:20]!r}). Nothing was computed.")
        return S.render(org.heldout_specs[i])[0]
    fail("Upload an image or pick a held-out scene.")


def upload_label(org) -> str:
    if not org.is_hub:
        return "your image (resized to the model's input)"
    return ("your image (any size: LLaVA-NeXT adds high-resolution tiles)" if org.vision.get("anyres") else
            "your image (any size: resized to the model's square input)")


def link_note(org) -> str:
    return ("<span class='wb-muted'>An uploaded image cannot travel in a link"
            + (": “Link to this view” carries the held-out scene number instead." if org.heldout_specs else ".")
            + "</span>")


def input_label(org) -> str:
    return "input scene" if org.heldout_specs else "input image"


def scene_picker(org) -> dict:
    """The held-out scene dropdown's settings: the zoo's scenes, or hidden for a model without any."""
    n = len(org.heldout_specs)
    return {"choices": [str(i) for i in range(n)], "value": "0" if n else None, "visible": n > 0,
            "label": f"…or a held-out scene, 0–{max(n - 1, 0)} (used when no image is uploaded)"}


def resize_note(org, image) -> str:
    """How the model sees an uploaded picture, in words (the zoo's captioner takes one square size)."""
    h, w = np.asarray(image).shape[:2]
    if org.is_hub and org.vision.get("anyres"):
        return (f"Your {w}×{h} px picture: the base image is it resized to a square (stretched), the "
                f"high-resolution tiles keep its aspect ratio.")
    if org.is_hub:
        return (f"Your {w}×{h} px picture: the model's processor resizes and crops it to its "
                f"{int(org.vision['image_size'])} px square input.")
    size = int(org.vision["image_size"])
    if (h, w) == (size, size):
        return ""
    pad = " padded to a square with its edge colour (aspect kept), then" if h != w else ""
    return f"Your {w}×{h} px picture was{pad} resized to {size}×{size} px, the captioner's input size."


def analyse(source: str, image, example, progress=gr.Progress()):
    org = _org(source, progress)
    img = _image_input(org, image, example)
    progress(0.2, desc="encoding the image at the SAE hookpoint")
    try:
        out = analysis.analyse_image(org, img, top_n=6)
    except ValueError as e:
        fail(str(e))
    shown = pages.thumbnail(out["image"], 320) if org.is_hub else out["image"]
    gallery = []
    vmax = max([float(m.max()) for m in out["maps"].values()] or [1.0])
    from backend.sae.explain import upsample

    for row in out["features"]:
        f = row["feature"]
        m = upsample(out["maps"][f], shown.shape[:2])[0].numpy()
        name = label_shown(org, f, "unlabelled" if org.is_hub else "no concept")
        gallery.append((enlarged(overlay(shown, m, vmax)), f"feature {f} · {name} · mean {row['mean_act']:.2f}"
                        + (" · base image" if org.is_hub else "")))
        if f in out.get("tile_maps", {}):  # the finer map of LLaVA-NeXT's high-resolution tiles
            t = out["tile_maps"][f]
            tm = upsample(t, shown.shape[:2])[0].numpy()
            gallery.append((enlarged(overlay(shown, tm, max(float(t.max()), 1e-9))),
                            f"feature {f} · tiles ({t.shape[0]}×{t.shape[1]} patches)"))
    table = pd.DataFrame([[r["feature"], label_shown(org, r["feature"], ""), r["mean_act"]] for r in out["features"]],
                         columns=firing_columns(org))
    where = (f"<br><span class='wb-muted'>Image positions: {html.escape(out['positions'])}.</span>"
             if org.is_hub else "")
    note = resize_note(org, img)
    note = f"\n\n<span class='wb-muted'>{html.escape(note)}</span>" if note else ""
    top = out["features"][:4]
    hover = patch_figure([shown] * len(top), [out["maps"][r["feature"]] for r in top],
                         [f"feature {r['feature']} · {label_shown(org, r['feature'], 'no label')}" for r in top],
                         vmax) if top else None
    return (enlarged(shown), f"**Model {'answer' if org.is_hub else 'caption'}:** {out['caption'] or '—'}{note}", gallery,
            table, colorbar_html(vmax, "activation per patch") + where, hover)


def concept_words(out: dict) -> str:
    """The steering verdict in words: whether the clamp made the caption name the feature's concept."""
    names, concept = out.get("names_concept"), html.escape(out.get("concept") or "")
    if names is None:
        return ("<span id='features-steer-verdict'>No label for this feature, so no verdict on whether the "
                "caption names its concept: compare the two captions.</span>")
    if names["steered"] and not names["baseline"]:
        text = f"✓ <b>Steered: the caption now names “{concept}”</b> (it did not without the clamp)."
    elif names["steered"]:
        text = f"The caption names “{concept}” with the clamp, but it already did without it: no evidence of steering."
    else:
        text = f"✗ <b>Not steered: the caption does not name “{concept}”</b> with the clamp."
    return f"<span id='features-steer-verdict'>{text}</span>"


def steer(source: str, image, example, feature, value, positions, add_error, suppress, progress=gr.Progress()):
    org = _org(source, progress)
    img = _image_input(org, image, example)
    f = _feature_id(org, feature)
    v = bounds.check(analysis.clamp_range(org), value)
    if positions not in ST.POSITION_MODES:
        fail(f"Positions must be one of {ST.POSITION_MODES}.")
    progress(0.3, desc="generating with and without the clamp")
    try:
        out = analysis.steer_caption(org, img, f, v, positions=positions, add_error=bool(add_error),
                               suppress_family=bool(suppress))
    except ValueError as e:
        fail(str(e))
    lab = organism.shown_label(org.labels.get(str(f), {}))
    ok = {True: " · steered output is well-formed", False: " · steered output is not a well-formed caption",
          None: ""}[out["well_formed"]]
    verdict = concept_words(out)
    zeroed = f" · {len(out['suppressed'])} rival features zeroed" if out["suppressed"] else ""
    def cell(text: str) -> str:  # free text from a model: escaped, wrapped even inside long words
        return f"<td style='word-break:break-word;font-family:var(--font-mono)'>{html.escape(text) or '—'}</td>"

    row = "<td style='width:32%'>{}</td>"
    name = label_shown(org, f, "unlabelled" if org.is_hub else "no concept")
    md = (f"<table style='table-layout:fixed;width:100%'><tr><th style='width:32%'></th><th>"
          f"{'answer' if org.is_hub else 'caption'}</th></tr>"
          f"<tr>{row.format('without')}{cell(out['baseline'])}</tr>"
          f"<tr>{row.format(f'feature {f} ({html.escape(name)}) = {v:g}')}{cell(out['steered'])}</tr>"
          f"</table>\n\n{verdict}\n\n<span class='wb-muted'>clamped at `{out['hookpoint']}`, positions: {positions}, "
          f"error term {'added back' if add_error else 'dropped'}{zeroed}{ok}</span>")
    return enlarged(pages.thumbnail(analysis.model_image(org, img), 320) if org.is_hub else img), md, out


# ------------------------------------------------------------------------------ compare (pinned result)
PRESENTER_CSS = """<style>
body.wb-presenter #features-overlay {height: auto !important;}
body.wb-presenter #features-overlay .grid-wrap, body.wb-presenter #features-firing .grid-wrap {
  height: auto !important; max-height: none !important;}
</style>"""


def pin(result):
    """Keep the current steering result to compare the next ones against (a small dict of text)."""
    if not isinstance(result, dict) or "steered" not in result:
        fail("Generate a steering result first, then pin it.")
    keep = {k: result.get(k) for k in ("feature", "value", "positions", "add_error", "suppressed", "baseline",
                                       "steered", "hookpoint")}
    return keep, pinned_html(keep)


def pinned_html(p: dict | None) -> str:
    if not p:
        return ""
    words = (f"feature {int(p['feature'])} = {float(p['value']):g} · {html.escape(str(p['positions']))} positions · "
             f"error term {'added back' if p.get('add_error') else 'dropped'}"
             + (f" · {len(p['suppressed'])} rivals zeroed" if p.get("suppressed") else ""))
    cell = "<div style='word-break:break-word;font-family:var(--font-mono);margin:4px 0'>{}</div>"
    return (f"<div class='wb-pinned' style='border-left:3px solid var(--color-accent);padding-left:8px'>"
            f"<b>Pinned</b> <span class='wb-muted'>({words})</span>"
            f"<div class='wb-muted'>without</div>{cell.format(html.escape(p['baseline'] or '—'))}"
            f"<div class='wb-muted'>with the clamp</div>{cell.format(html.escape(p['steered'] or '—'))}</div>")


# ------------------------------------------------------------------------------ layout
def _site_words(cfg: dict) -> str:
    pos = {"prompt": "every prompt position", "all": "every position", "image": "image positions",
           "text": "text positions of the prompt"}.get(cfg["positions"], cfg["positions"])
    return (f"{pos}, {cfg['multiple']:g}× max activation"
            + (", other colours' features zeroed" if cfg.get("suppress_other_colours") else ""))


def _hub_steering_explain(org) -> str:
    return ("<div class='wb-explain'>During the prompt pass the residual stream at the SAE hookpoint "
            f"<code>{html.escape(org.hookpoint)}</code> is replaced by the SAE reconstruction with the chosen feature "
            "clamped to the chosen value (the paper clamps at every position); the answer is then generated "
            "greedily, with and without the clamp. “Image positions” are all of the prompt's image tokens"
            + (": the base image, the high-resolution tiles and their row newlines" if org.vision.get("anyres") else "")
            + ". The default is 2× the feature's largest activation in the index.</div>")


def _steering_explain(org) -> str:
    if org.is_hub:
        return _hub_steering_explain(org)
    st = org.summary.get("steering", {})
    sweep, norms = st.get("sweep", {}), st.get("residual_norms", {}).get(org.hookpoint, {})
    def per_colour(v):
        return " · ".join(f"{c} {r['success']:.0%}" for c, r in v["per_colour"].items())

    rows = "".join(f"<tr><td>{html.escape(_site_words(v))}</td><td>{v['min_success']:.0%}</td>"
                   f"<td>{per_colour(v)}</td></tr>" for v in sweep.values())
    comp = st.get("comparison", {})
    crow = "".join(f"<tr><td>LM input (<code>{html.escape(comp.get('hookpoint', ''))}</code>): "
                   f"{html.escape(_site_words(v))}</td><td>{v['min_success']:.0%}</td><td></td></tr>"
                   for v in comp.get("sweep", {}).values())
    why = ""
    if norms:
        why = (f" <b>Why the site matters:</b> at this site image-token residuals have norm ≈ {norms['image']:.0f} but the text positions "
               f"only ≈ {norms['bos']:.1f} (&lt;s&gt;) and {norms['prompt_word']:.1f} (prompt word); a clamp on the "
               f"image-feature scale swamps the text positions when applied everywhere, and the caption degenerates.")
    return ("<div class='wb-explain'>During the prompt pass the residual stream at the SAE hookpoint "
            f"<code>{html.escape(org.hookpoint)}</code> is replaced by the SAE reconstruction with the chosen "
            "feature clamped to the chosen value (the paper clamps at every position). The table below measures "
            f"it on held-out scenes without the colour (success: a well-formed caption that names the colour).{why}</div>"
            "<details><summary class='wb-muted'>where the intervention must sit (measured)</summary>"
            "<table style='font-size:0.8rem'><tr><th>intervention</th><th>min over colours</th><th>per colour</th></tr>"
            f"{rows}{crow}</table></details>")


def _hub_summary_md(org) -> str:
    parts = [f"`{html.escape(org.ids[0])}` + SAE `{html.escape(org.ids[1])}` at `{org.hookpoint}` · "
             f"{org.n_features} latents ({html.escape(org.sae_text)})"]
    if org.index is not None:
        src = org.index.source
        where = html.escape(shown_place(src.root) if src is not None else "?")
        whose = "your own index" if sessions.within(org.index_path) else "the server's index"
        parts.append(f"feature index: {org.index.meta.get('n_images', '?')} images from `{where}` ({whose})")
    else:
        parts.append("no feature index yet (see below)")
    parts.append(f"labels: {html.escape(org.label_source)}")
    return " · ".join(parts)


def _summary_md(org) -> str:
    if org.is_hub:
        return _hub_summary_md(org)
    s = org.summary or {}
    ev = s.get("sae_eval", {})
    rb = s.get("random_baseline", {})
    st = s.get("steering", {})
    parts = [f"SAE at `{org.hookpoint}` · {org.n_features} latents ({html.escape(org.sae_text)})"]
    if ev:
        parts.append(f"held-out FVU **{ev['fvu']:.3f}** · dead latents **{ev['dead_fraction']:.1%}**")
    if rb:
        parts.append(f"top-50 features by density: mean IoU of the label concept on the top-5 images "
                     f"**{rb['top5_iou']:.3f}** vs random images **{rb['random_iou']:.3f}** "
                     f"(**{rb['ratio']}×**; paper 0.20 vs 0.005)")
    cal = st.get("calibrated", {})
    if cal.get("per_colour"):
        per = " · ".join(f"{c} **{r['success']:.0%}**" for c, r in cal["per_colour"].items())
        zeroed = ", other colours' features zeroed" if cal.get("suppress_other_colours") else ""
        parts.append(f"steering ({cal['positions']} positions, clamp value calibrated per colour on scenes "
                     f"apart from the held-out ones{zeroed}): colour named in held-out captions: {per}")
    elif st.get("best") in st.get("sweep", {}):
        b = st["sweep"][st["best"]]
        parts.append(f"steering ({_site_words(b)}): colour named in ≥ **{b['min_success']:.0%}** of held-out "
                     f"scenes per colour")
    return " · ".join(parts)


def _build_note(org) -> str:
    return (f"<span class='wb-muted'>Image positions: {html.escape(analysis.positions_text(org))}. "
            f"Up to {MAX_TAB_IMAGES} images here (a fraction of a second each on a GPU); "
            f"a large set with the sharded, resumable job: "
            f"<code>{html.escape(hub_index.index_command(org))}</code></span>")


@main_only  # under ZeroGPU: loaded in the main process, every later worker inherits the weights
def load_own(default_source: str, vlm, sae, hookpoint, progress=gr.Progress()):
    """Check a model + SAE from metadata and make them this session's organism; its weights load
    now (with progress), so the first index build or analysis does not wait for them."""
    first = P.active(organism.TAB, default_source)
    vlm, sae, hookpoint = (str(x or "").strip() for x in (vlm, sae, hookpoint))
    same = vlm in ("", first.path_or_id) and sae in ("", first.extra.get("sae", "")) and \
        hookpoint in ("", first.extra.get("hookpoint", ""))
    try:
        source = default_source if same else loading.own_source(vlm, sae, hookpoint)
        progress(0.1, desc="loading the model and SAE")
        # the default organism keeps loading its weights on first need (a deep link runs this too)
        org = loading.get_organism(source, model=not same, progress=lambda f, d: progress(0.1 + 0.8 * f, desc=d))
    except (ValueError, KeyError, FileNotFoundError) as e:
        fail(str(e).strip("'\""))
    n = org.n_features
    first_id = (pages.feature_table(org, "", "density")[:1] or [{"feature": 0}])[0]["feature"]
    status = (f"Loaded **{html.escape(org.ids[0] or org.name)}** with the SAE **{html.escape(org.ids[1] or org.name)}** "
              f"at `{html.escape(org.hookpoint)}` ({n:,} latents, {html.escape(org.sae_text)})."
              + ("" if org.index is not None or not org.is_hub else
                 " No feature index yet: build one from your images below."))
    box = dict(minimum=0, maximum=n - 1)
    # a deep link's own feature ids stay (this runs first when a link is opened: LINK_RUNS)
    ids = {} if links.linked(["features-id", "feature"]) else {"value": first_id}
    clamp = {} if links.linked(["features-steer-id"]) else {"value": first_id}
    return (source, status, _summary_md(org), gr.update(visible=org.is_hub, open=org.index is None),
            _build_note(org) if org.is_hub else "", gr.update(visible=org.is_hub),
            list_features(source, "", "density" if org.is_hub else "IoU"),
            gr.update(label=f"feature id (0–{n - 1})", **box, **ids),
            gr.update(label=f"feature to clamp (0–{n - 1})", **box, **clamp),
            _steering_explain(org))  # the loaded model's hookpoint, not the default one's


def _stop_flag(request) -> StopFlag:
    return StopFlag(f"features-index:{getattr(request, 'session_hash', None) or 'anonymous'}")


def build_index(source: str, files, folder: str, request: gr.Request = None, progress=gr.Progress()):
    """Index a small image set here, with a progress bar; Cancel stops it between batches. The index
    and the uploaded images are this visitor's (components.feature_images.own_build): the source
    returned names them, and no other visitor's view or the owner's index file changes. A refused or
    cancelled build leaves nothing of its own on disk."""
    org = _org(source)
    if not org.is_hub:
        fail("The zoo organism's index comes with it; rebuild it with: python -m backend.sae.cli build")
    target = own_build(org, request)
    try:
        src = collect_images(org, files, folder, target)
        for i in range(len(src)):  # every file must open before the model spends time on any
            try:
                src.load(i)
            except Exception:
                fail(unreadable(src.name(i)).replace("nothing was computed", "nothing was indexed"))
        org = _org(source, progress)
        flag = _stop_flag(request).start()
        progress(0, desc=f"indexing {len(src)} images")
        out = target.index_file(src)
        try:
            # written to a file; reading it back installs it (for this visitor, or for all when shared)
            hub_index.index_images(org, src, progress=lambda d, n: progress(d / n, desc=f"{d}/{n} images indexed"),
                            should_stop=flag.is_set, out=out)
        except Cancelled as e:
            target.discard()
            return (f"**Cancelled** ({e}); nothing was written.", gr.update(), gr.update(), gr.update(), source)
        finally:
            flag.finish()
        source = target.installed(source, out, src)
    except BaseException:
        target.discard()
        raise
    org = _org(source)
    rows = list_features(source, "", "density")
    first_id = int(rows.iloc[0, 0]) if len(rows) else 0
    return (f"**Indexed {len(src)} images**{target.note}. The feature list now shows the features that "
            f"fired; the densest one is open.", rows, first_id, _hub_summary_md(org), source)


def ask_model(source: str, feature, request: gr.Request = None, progress=gr.Progress()):
    """Label the open feature with the loaded VLM as the explainer, then show the page again. The
    label is this visitor's (components.feature_images.own_labels), as is the source returned."""
    org = _org(source, progress)
    if not org.is_hub:
        fail("The zoo's features are labelled by the concept explainer.")
    f = _feature_id(org, feature)
    if org.index is None:
        fail("Build the feature index first: the model is shown the feature's top images.")
    source = own_labels(source, org, request)  # first: a call with no session is refused before it costs
    entry = pages.model_label(org, f)
    pages.save_label(_org(source), entry)
    return (*open_feature(source, f), source)


def cancel_index(request: gr.Request = None):
    if _stop_flag(request).request():
        return "Stopping after the current batch…"
    return "No index build is running."


def build(ctx) -> None:
    source = gr.State(ctx.source)
    # the tab's model pick (its VLM + SAE): under ZeroGPU the main process loads a user's own before
    # a worker forks, so every worker inherits it (components.guard, loading.source_pick)
    source.wb_pick_tab = organism.TAB
    try:
        org = loading.get_organism(ctx.source)
        n_features = org.n_features
        first = pages.feature_table(org, "", "density" if org.is_hub else "iou")
        first_id = first[0]["feature"] if first else 0
    except Exception as e:  # the organism is not built: say so instead of failing the whole app
        gr.Markdown(f"**The Features model could not be loaded:** {html.escape(str(e))}")
        return
    # Presenter view (body.wb-presenter, components/common.py): one plain line per section in place of
    # the expert text (`wb-advanced` hides it), the top images with their activation regions large.
    gr.HTML(PRESENTER_CSS, padding=False, elem_classes=["wb-advanced"])
    gr.Markdown("**Each feature is one thing the model has learned to notice. The coloured pictures show "
                "where in its favourite images it fires.**", elem_classes=["wb-presenter-only", "wb-lead"])
    explain = gr.HTML(_explain(org), elem_classes=["wb-advanced"], elem_id="features-explain")
    # the model and SAE: the zoo organism, the paper's LLaVA-NeXT + SAE, or your own LLaVA-family VLM
    # with your own sparsify / SAELens SAE at a hookpoint you name (a session's choice: its `source`)
    listed = sorted(P.presets(organism.TAB), key=lambda p: p != P.active(organism.TAB, ctx.source))
    first_p = listed[0]
    with gr.Accordion("Model and SAE: the zoo's, the paper's, or your own", open=False, elem_id="features-own",
                      elem_classes=["wb-advanced"]):
        with gr.Row():
            own_vlm, _ = model_picker(listed, "features", elem_id="feat-model", value=first_p.path_or_id,
                                      takes="LLaVA or LLaVA-NeXT model", scale=2)
            own_sae = gr.Textbox(label="SAE: hub id or folder (sparsify or SAELens); empty for the zoo's",
                                 value=first_p.extra.get("sae", "") if first_p.source == "hub" else "",
                                 elem_id="feat-sae", scale=2)
            own_hook = gr.Textbox(label="hookpoint, e.g. model.layers.24", elem_id="feat-hookpoint",
                                  value=first_p.extra.get("hookpoint", ""), scale=1)
        with gr.Row():
            own_btn = gr.Button("Load this model and SAE", variant="primary", elem_id="feat-load", scale=0,
                                min_width=220)
            own_md = gr.Markdown(elem_id="feat-own-status")
    summary = gr.Markdown(_summary_md(org), elem_classes=["wb-muted", "wb-advanced"], elem_id="features-summary")
    with gr.Accordion("Build the feature index from images", open=org.index is None,
                      elem_id="features-build", visible=org.is_hub) as build_acc:
        build_note = gr.Markdown(_build_note(org) if org.is_hub else "")
        with gr.Row():
            build_files = gr.File(label="images to index (or one .zip of them)", file_count="multiple",
                                  file_types=["image", ".zip"],
                                  elem_id="features-build-files", scale=2)
            build_folder = gr.Textbox(label="…or a folder on the server (under WORKBENCH_MODEL_ROOTS)",
                                      elem_id="features-build-folder", scale=2)
        with gr.Row():
            build_btn = gr.Button("Build index", variant="primary", elem_id="features-build-run")
            cancel_btn = gr.Button("Cancel", variant="stop", elem_id="features-build-cancel")
        build_status = gr.Markdown(elem_id="features-build-status")

    with gr.Row():
        with gr.Column(scale=2, min_width=320):
            with gr.Row(elem_classes=["wb-advanced"]):  # presenter: the id box below picks the feature
                query = gr.Textbox(label="search label or id" if org.is_hub else "search concept",
                                   placeholder="a feature id" if org.is_hub else "e.g. red, circle, striped",
                                   elem_id="features-query", scale=2)
                sort = gr.Dropdown(sorts_of(org), value="density" if org.is_hub else "IoU", label="sort by",
                                   elem_id="features-sort", scale=1)
            table = gr.Dataframe(value=list_features(ctx.source, "", "density" if org.is_hub else "IoU"),
                                 interactive=False, elem_classes=["wb-advanced"],
                                 elem_id="features-table", max_height=420)
            with gr.Row():
                feat = CheckedNumber(value=first_id, precision=0, label=f"feature id (0–{n_features - 1})",
                           elem_id="features-id", minimum=0, maximum=n_features - 1)
                open_btn = gr.Button("Open feature", variant="primary", elem_id="features-open")
            ask_btn = gr.Button("Ask the model to name this feature", elem_id="features-ask", visible=org.is_hub)
            gr.Markdown("<span class='wb-muted'>Click a row or type an id. Deep link: "
                        "<code>?tab=features&amp;feature=ID</code>, or “Link to this view” below.</span>")
        with gr.Column(scale=3):
            header = gr.HTML(elem_id="features-header", elem_classes=["wb-keyfirst"])
            with gr.Row():
                gal_overlay = gr.Gallery(label="top images · activation overlay", columns=5, height=210,
                                         format="png", elem_id="features-overlay", object_fit="contain",
                                         elem_classes=["wb-keyfirst"])
            patch_plot = gr.Plot(label="activation per patch over the top images (hover a patch for its value)",
                                 elem_id="features-patches", elem_classes=["wb-advanced"])
            with gr.Row(elem_classes=["wb-advanced"]):
                gal_dim = gr.Gallery(label="top images · outside the activation region dimmed", columns=5,
                                     height=210, format="png", elem_id="features-dimmed", object_fit="contain")
            with gr.Row(elem_classes=["wb-advanced"]):
                hist = gr.Plot(label="activation histogram", elem_id="features-hist")
                concepts = gr.Plot(label="concept IoU", elem_id="features-concepts",
                                   visible=not org.is_hub)  # no planted concepts in real images
            with gr.Row():
                json_file = gr.File(label="export JSON", elem_id="features-json")
                png_file = gr.File(label="export PNG", elem_id="features-png")
            with gr.Accordion("feature page data (JSON)", open=False):
                page_data = gr.JSON(label="feature page (data)")

    gr.Markdown("### Which features fire where")
    gr.Markdown("Upload a picture: the model's strongest features on it, and where each one fires.",
                elem_classes=["wb-presenter-only"])
    with gr.Row():
        with gr.Column(scale=1):
            upload = CheckedImage(label=upload_label(org), type="numpy", format="png",
                              height=220, elem_id="features-upload", sources=["upload", "clipboard"])
            clear_unreadable(upload)
            link_md = gr.Markdown(link_note(org))
            # a preset without a scene set (hub) has no scene picker: the upload is the input
            example = gr.Dropdown(**scene_picker(org), elem_id="features-example", allow_custom_value=True)
            analyse_btn = gr.Button("Analyse image", variant="primary", elem_id="features-analyse")
        with gr.Column(scale=3):
            with gr.Row():
                shown = gr.Image(label=input_label(org), format="png", height=200, interactive=False,
                                 elem_id="features-shown")
                with gr.Column():
                    cap = gr.Markdown()
                    firing = gr.Dataframe(headers=firing_columns(org), interactive=False,
                                          elem_id="features-firing-table")
            fire_gallery = gr.Gallery(label="strongest features on this image", columns=6, height=200,
                                      object_fit="contain",
                                      format="png", elem_id="features-firing")
            fire_bar = gr.HTML()
            fire_plot = gr.Plot(label="activation per patch of the strongest features (hover a patch for its value)",
                                elem_id="features-fire-patches", elem_classes=["wb-advanced"])

    gr.Markdown("### Steering: clamp a feature and watch the caption")
    gr.Markdown("Switch one feature on hard and compare what the model says with and without it.",
                elem_classes=["wb-presenter-only"])
    steer_explain = gr.HTML(_steering_explain(org), elem_classes=["wb-advanced"], elem_id="features-steer-explain")
    defaults = analysis.steering_defaults(org)
    slider_max = clamp_limit(org)
    with gr.Row():
        with gr.Column(scale=2):
            steer_feat = CheckedNumber(value=first_id, precision=0, label=f"feature to clamp (0–{n_features - 1})",
                             elem_id="features-steer-id", minimum=0, maximum=n_features - 1)
            # a number box, not a slider: a slider's box shows a typed 5000 while the slider sends its max
            steer_val = CheckedNumber(value=analysis.default_clamp_value(org, first_id), minimum=0, maximum=slider_max,
                            label=f"clamp value (0–{slider_max:g})", elem_id="features-clamp")
            positions = gr.Radio(POSITION_CHOICES, value=defaults["positions"], label="positions",
                                 elem_id="features-positions", elem_classes=["wb-advanced"])
            with gr.Row(elem_classes=["wb-advanced"]):
                add_err = gr.Checkbox(False, label="add the SAE error term back", elem_id="features-adderr")
                suppress = gr.Checkbox(defaults["suppress"], visible=not org.is_hub,  # families need concept labels
                                       label="zero rival features of the same family "
                                       "(e.g. the other colours)", elem_id="features-suppress")
            steer_btn = gr.Button("Generate with and without", variant="primary", elem_id="features-steer")
        with gr.Column(scale=3):
            with gr.Row():
                with gr.Column(scale=1, min_width=140):
                    steer_img = gr.Image(label="image given to the model" if org.is_hub else "scene given to the captioner",
                                         format="png", height=180, interactive=False, elem_id="features-steer-img")
                with gr.Column(scale=2, min_width=240):
                    steer_md = gr.Markdown(elem_id="features-steer-out")
                with gr.Column(scale=2, min_width=200):
                    pinned_md = gr.HTML(elem_id="features-pinned")  # beside the current result
            with gr.Row():
                pin_btn = gr.Button("Pin this result to compare", size="sm", elem_id="features-pin")
                unpin_btn = gr.Button("Clear the pin", size="sm", elem_id="features-unpin")
            with gr.Accordion("steering result (JSON)", open=False):
                steer_json = gr.JSON(label="steering result")
    pinned = gr.State(None)  # the pinned steering result: a small dict of text, never tensors

    def clamp_for(source_, fid):
        """A newly typed feature gets its own default clamp value, not the previous feature's."""
        org_ = _org(source_)
        if fid is None or not 0 <= int(fid) < org_.n_features:
            return gr.skip()
        return analysis.default_clamp_value(org_, int(fid))

    steer_feat.input(clamp_for, [source, steer_feat], steer_val, queue=False, show_progress="hidden",
                     api_visibility="private")

    page_outputs = [header, gal_overlay, gal_dim, hist, concepts, json_file, png_file, page_data, patch_plot,
                    feat, steer_feat, steer_val]
    # every event: a failure leaves the last good view as it was (no Error badges), message in the toast
    keep_on_failure(open_btn.click(open_feature, [source, feat], page_outputs, api_name="feature_page"), page_outputs)
    keep_on_failure(query.submit(list_features, [source, query, sort], table, api_name="features_list"), [table])
    keep_on_failure(sort.change(list_features, [source, query, sort], table, api_visibility="private"), [table])

    def pick_row(source_, rows, evt: gr.SelectData):
        r = evt.index[0] if isinstance(evt.index, (list, tuple)) else evt.index
        try:
            fid = int(rows.iloc[r, 0]) if hasattr(rows, "iloc") else int(rows[r][0])
        except Exception:
            fail("Pick a row of the feature list.")
        return open_feature(source_, fid)

    keep_on_failure(table.select(pick_row, [source, table], page_outputs, api_visibility="private"), page_outputs)
    built = build_btn.click(build_index, [source, build_files, build_folder],
                            [build_status, table, feat, summary, source], **model_event(api_name="build_index"))
    keep_on_failure(built, [build_status, table, feat, summary, source])
    keep_on_failure(built.success(reopen_feature, [source, feat], page_outputs, api_visibility="private"),
                    page_outputs)
    cancel_btn.click(cancel_index, None, build_status, api_name="cancel_index")
    asked = ask_btn.click(ask_model, [source, feat], page_outputs + [source], **model_event(api_name="ask_model"))
    keep_on_failure(asked, page_outputs + [source])
    asked.success(list_features, [source, query, sort], table, api_visibility="private")  # the new label
    analysis_out = [shown, cap, fire_gallery, firing, fire_bar, fire_plot]
    keep_on_failure(analyse_btn.click(analyse, [source, upload, example], analysis_out,
                                      **model_event(api_name="analyse_image")), analysis_out)
    steer_out = [steer_img, steer_md, steer_json]
    keep_on_failure(steer_btn.click(steer, [source, upload, example, steer_feat, steer_val, positions, add_err,
                                            suppress], steer_out, **model_event(api_name="steer")), steer_out)

    keep_on_failure(pin_btn.click(pin, [steer_json], [pinned, pinned_md], api_name="pin_steering"),
                    [pinned, pinned_md])
    unpin_btn.click(lambda: (None, ""), None, [pinned, pinned_md], api_visibility="private")
    default_source = gr.State(ctx.source)
    load_out = [source, own_md, summary, build_acc, build_note, ask_btn, table, feat, steer_feat, steer_explain]
    loaded = own_btn.click(load_own, [default_source, own_vlm, own_sae, own_hook], load_out,
                           **model_event(api_name="features_load"))
    keep_on_failure(loaded, load_out)  # every output: a failed load leaves no Error badge on any

    def planted_views(source_):
        """Planted concepts (their IoU plot, the search by concept, zeroing rival features of a
        family) exist for the zoo organism only: a loaded model and SAE show them or hide them."""
        org_ = loading.get_organism(source_)
        planted = not org_.is_hub
        return (_explain(org_), gr.update(visible=planted), gr.update(visible=planted, value=planted and defaults["suppress"]),
                gr.update(choices=sorts_of(org_), value="IoU" if planted else "density"),
                gr.update(label="search concept" if planted else "search label or id",
                          placeholder="e.g. red, circle, striped" if planted else "a feature id"),
                gr.update(**scene_picker(org_)), gr.update(label=upload_label(org_)), link_note(org_),
                gr.update(label=input_label(org_)),
                gr.update(label="image given to the model" if org_.is_hub else "scene given to the captioner"))

    loaded.success(planted_views, source, [explain, concepts, suppress, sort, query, example, upload, link_md, shown,
                                           steer_img],
                   queue=False,
                   show_progress="hidden", api_visibility="private")

    def cleared(source_):
        """The last analysis and steering were another model's: blank them (a pinned result stays,
        for comparison), with the firing table's columns for the model now loaded."""
        again = "<span class='wb-muted'>A new model and SAE are loaded: run this again to see theirs.</span>"
        return (None, again, [], pd.DataFrame(columns=firing_columns(loading.get_organism(source_))), "", None,
                None, again, None)

    loaded.success(cleared, source, analysis_out + steer_out, queue=False, show_progress="hidden",
                   api_visibility="private")
    keep_on_failure(loaded.success(reopen_feature, [source, feat], page_outputs, api_visibility="private"),
                    page_outputs)

    def from_url(source_, request: gr.Request):
        params = request.query_params if request else {}
        wanted = params.get("feature", params.get("features-id"))
        fid = first_id
        if wanted is not None:
            raw = links.decode(wanted)
            fid = raw if isinstance(raw, int) and not isinstance(raw, bool) else first_id
            if not 0 <= fid < n_features:
                fid = first_id
        org_ = _org(source_)
        if org_.index is None:  # the instructions, never an error toast on page load
            return _empty_page(org_, fid)
        return open_feature(source_, fid)

    from gradio.context import Context

    Context.root_block.load(from_url, [source], page_outputs, api_visibility="private")
