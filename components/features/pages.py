"""The Features tab's feature list and feature pages (top images, activation regions, histogram,
exports), and the label a hub model gives a feature on request."""

from __future__ import annotations

import hashlib
import html
import json

import gradio as gr
import pandas as pd

from backend.core import bounds
from backend.sae import analysis, hub_index, loading, pages
from backend.sae.index import INDEX_FILE
from backend.sae.label_quality import quality
from components.serving import exports
from components.common import fail
from components.features.figures import (
    colorbar_html,
    concept_plot,
    dimmed,
    enlarged,
    hist_plot,
    label_shown,
    maps_max,
    overlay,
    page_png,
    patch_figure,
)
from components.features.images import MAX_TAB_IMAGES, own_labels


SORTS = ["density", "max activation", "IoU"]


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
    note = (
        f"<p class='wb-muted'>A file was found but not used: {html.escape(org.index_note)}</p>"
        if org.index_note
        else ""
    )
    return (
        f"<div class='wb-explain' id='features-noindex'><b>No feature index yet for this model and SAE.</b> "
        f"A feature's page shows the images of a dataset that excite it most, so an index over your images "
        f"is needed first. Build it above from a few images (up to {MAX_TAB_IMAGES}), or for a large set "
        f"run on a GPU machine:<pre style='white-space:pre-wrap'>{html.escape(hub_index.index_command(org))}</pre>"
        f"This tab picks the file up as soon as it is where the server reads it: the file "
        f"<code>WORKBENCH_SAE_INDEX</code> names (<code>OUT/{INDEX_FILE}</code>), or beside the SAE. "
        f"Image analysis and steering below work without an index.{note}</div>"
    )


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
        return pd.DataFrame(
            [[r["feature"], r["label"], round(r["density"], 4), round(r["max_act"], 2)] for r in rows],
            columns=["feature", "label", "density", "max act"],
        )
    return pd.DataFrame(
        [
            [
                r["feature"],
                label_shown(org, r["feature"], ""),
                round(r["iou"], 3),
                round(r["density"], 4),
                round(r["max_act"], 2),
            ]
            for r in rows
        ],
        columns=["feature", "concept", "IoU", "density", "max act"],
    )


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
    over = [
        (enlarged(overlay(im, m, vmax)), f"#{t['image_id']} · {t['score']:.2f}")
        for im, m, t in zip(page["images"], page["maps"], page["top"])
    ]
    dim = [(enlarged(dimmed(im, r)), t["caption"]) for im, r, t in zip(page["images"], page["regions"], page["top"])]
    if org.is_hub:
        lab = html.escape(page["label"] or "unlabelled")
        header = (
            f"<h3 style='margin:0'>Feature {f} · <span style='color:var(--color-accent)'>{lab}</span></h3>"
            f"<div class='wb-muted wb-advanced'>density {page['density']:.3%} of base-image patch tokens · max activation "
            f"{page['max_act']:.3f} · mean non-zero {page['mean_act']:.3f} · labels: "
            f"{html.escape(page['labelled_by'])} · maps: the base image's patches stretched over each "
            f"picture (bilinear), region ≥ 50% of the map's max</div>" + colorbar_html(vmax, "overlay colour scale")
        )
    else:
        lab = html.escape(page["label"] or "no concept")
        held = html.escape(quality(org.labels.get(str(f), {}), page["density"]) or f"IoU {page['iou']:.2f}")
        header = (
            f"<h3 style='margin:0'>Feature {f} · <span style='color:var(--color-accent)'>{lab}</span> "
            f"<span class='wb-badge{' wb-weak' if 'weak' in held or 'broad' in held else ''}'>{held}</span></h3>"
            f"<div class='wb-muted wb-advanced'>{html.escape(page['family'] or '')} · density {page['density']:.3%} of image "
            f"tokens · max activation {page['max_act']:.3f} · mean non-zero {page['mean_act']:.3f} · "
            f"concept explainer: best IoU of a planted concept mask with the activation regions "
            f"(bilinear upsampling, ≥ 50% of the map's max) over the top-5 images</div>"
            + colorbar_html(vmax, "overlay colour scale")
        )
    data = pages.page_json(page)
    # the name says which index the page came from (a visitor's own, the shared one)
    tag = hashlib.sha256(org.cache_id.encode()).hexdigest()[:10]

    def write(d):
        (d / f"feature_{f}-{tag}.json").write_text(json.dumps(data, indent=1))
        page_png(page, d / f"feature_{f}-{tag}.png")
        return d / f"feature_{f}-{tag}.json", d / f"feature_{f}-{tag}.png"

    jpath, ppath = exports.hand_out(write)
    steer_value = analysis.default_clamp_value(org, f)
    hover = patch_figure(
        page["images"], page["patch_maps"], [f"#{t['image_id']} · {t['score']:.2f}" for t in page["top"]], vmax
    )
    return (
        header,
        over,
        dim,
        hist_plot(page),
        concept_plot(page),
        str(jpath),
        str(ppath),
        data,
        hover,
        f,
        f,
        gr.Number(
            value=steer_value, maximum=(top := max(clamp_limit(org), steer_value)), label=f"clamp value (0–{top:g})"
        ),
    )


def _explain(org) -> str:
    labels_words = (
        "its label (none unless a model explainer has labelled the index: the concept explainer needs planted masks)"
        if org.is_hub
        else "the planted concept whose mask best matches its regions (IoU)"
    )
    return (
        "<div class='wb-explain'>A sparse autoencoder splits the model's residual stream into "
        "features. Each feature's page shows the images of the dataset that excite it most, "
        "<b>where</b> it fires on them (left: the activation map over the image; right: the paper's view, "
        "everything outside the activation region dimmed), its activation histogram and how often it fires, "
        f"and {labels_words}. Below, upload an image to see "
        "which features fire where, and clamp a feature to watch the caption change.</div>"
    )


def reopen_feature(source: str, feature):
    """The feature page again after the index or the organism changed (its own name: an event's
    function name is its endpoint's, and `open_feature` is an agent tool's)."""
    return open_feature(source, feature)


def clamp_limit(org) -> float:
    """The largest clamp value offered (backend.core.bounds: the API and the tools take the same)."""
    return analysis.clamp_range(org).hi


def ask_model(source: str, feature, request: gr.Request = None, progress=gr.Progress()):
    """Label the open feature with the loaded VLM as the explainer, then show the page again. The
    label is this visitor's (components.features.images.own_labels), as is the source returned."""
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
