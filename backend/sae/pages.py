"""The feature list and feature pages, read from the index alone (no model call), and the labels
the loaded model gives a hub feature on request.
"""

from __future__ import annotations

import json
import os
from typing import Literal

import numpy as np
import torch

from ..core.cache import ByteLRUCache, make_key
from ..core.interventions import locked
from ..core.zerogpu import gpu
from . import explain as E
from . import scenes as S
from . import vlm
from .hub_index import index_command
from .loading import need_model
from .organism import MODEL_LABELS, Organism, _stamp, labels_path, shown_label
from .results import FeaturePage, FeatureRow, ModelLabel, TopImage


PAGE_CACHE = ByteLRUCache(32 * 2**20, name="features-pages")
THUMB = 160  # px, the longer side of a hub image on a feature page


def feature_table(org: Organism, query: str = "", sort: str = "density", limit: int = 500) -> list[FeatureRow]:
    """Rows: id, concept label, family, IoU score, density, max activation (alive features only)."""
    if org.index is None:
        return []
    t = org.index.tensors
    rows: list[FeatureRow] = []
    q = (query or "").strip().lower()
    for f in range(org.index.n_features):
        lab = org.labels.get(str(f), {})
        if float(t["density"][f]) <= 0:
            continue
        row: FeatureRow = {
            "feature": f,
            "label": shown_label(lab),
            "family": lab.get("family", "") if shown_label(lab) else "",
            "iou": float(lab.get("score", 0.0)),
            "density": float(t["density"][f]),
            "max_act": float(t["max_act"][f]),
        }
        if q and q not in row["label"].lower() and q not in row["family"].lower() and q != str(f):
            continue
        rows.append(row)
    keys: dict[str, Literal["density", "max_act", "iou"]] = {
        "density": "density",
        "max activation": "max_act",
        "max_act": "max_act",
        "iou": "iou",
    }
    if sort not in keys:
        raise ValueError(f"sort by one of {sorted(set(keys))}, not {sort!r}")
    rows.sort(key=lambda r: (-r[keys[sort]], r["feature"]))
    return rows[:limit]


def image_of(org: Organism, image_id: int) -> np.ndarray:
    """Image `image_id` of the index's set: a re-rendered scene (zoo) or a file / dataset row (hub)."""
    if org.index is not None and org.index.source is not None:
        return org.index.source.load(int(image_id))
    return S.render(org.index_specs[int(image_id)])[0]


def thumbnail(image: np.ndarray, side: int = THUMB) -> np.ndarray:
    """A hub image with its longer side at `side` px, aspect kept."""
    from PIL import Image

    h, w = image.shape[:2]
    scale = side / max(h, w)
    size = (max(1, round(w * scale)), max(1, round(h * scale)))
    return np.asarray(Image.fromarray(image).resize(size, Image.Resampling.BILINEAR))


def feature_page(org: Organism, feature: int, n_top: int = 5) -> FeaturePage:
    """A feature's page from the index only (no model call): top images with their maps and
    regions, histogram, density, label. Cached per (organism, index version, feature)."""
    if org.index is None:
        raise ValueError(f"this preset has no feature index yet; build one: {index_command(org)}")
    if not 0 <= int(feature) < org.index.n_features:
        raise IndexError(f"feature must be in 0..{org.index.n_features - 1}")
    key = make_key(org.cache_id, ("page", int(feature), n_top))
    hit = PAGE_CACHE.get(key)
    if hit is not None:
        return hit
    f = int(feature)
    ids, maps, scores = org.index.top(f, n_top)
    lab = org.labels.get(str(f), {})
    up: list[np.ndarray] | np.ndarray  # per image: a list (hub, sizes differ) or one array (zoo)
    reg: list[np.ndarray] | np.ndarray
    top: list[TopImage]
    if org.index.source is not None:  # hub images: any size; the base-image map covers the whole picture
        imgs = [thumbnail(image_of(org, i)) for i in ids]
        up = [E.upsample(m, im.shape[:2])[0].numpy() for m, im in zip(maps, imgs)]
        reg = [E.regions(m, im.shape[:2])[0].numpy() for m, im in zip(maps, imgs)]
        top = [
            {
                "image_id": int(i),
                "score": round(float(sc), 4),
                "caption": org.index.source.name(int(i)),
                "iou_label": None,
            }
            for i, sc in zip(ids, scores)
        ]
    else:
        specs = [org.index_specs[i] for i in ids]
        imgs = [S.render(sp)[0] for sp in specs]
        size = imgs[0].shape[0] if imgs else S.IMAGE_SIZE
        up = E.upsample(maps, size).numpy() if len(ids) else np.zeros((0, size, size), np.float32)
        reg = E.regions(maps, size).numpy() if len(ids) else np.zeros((0, size, size), bool)
        top = [
            {
                "image_id": int(i),
                "score": round(float(sc), 4),
                "caption": S.caption(sp),
                "iou_label": round(E.iou(r, S.render(sp)[1][lab["label"]]), 4)
                if lab.get("label") in S.CONCEPTS
                else None,
            }
            for i, sc, sp, r in zip(ids, scores, specs, reg)
        ]
    t = org.index.tensors
    page: FeaturePage = {
        "feature": f,
        "label": shown_label(lab),
        "family": lab.get("family", "") if shown_label(lab) else "",
        "iou": float(lab.get("score", 0.0)),
        "concept_scores": lab.get("scores", {}),
        "labelled_by": org.label_source,
        "density": float(t["density"][f]),
        "max_act": float(t["max_act"][f]),
        "mean_act": float(t["mean_act"][f]),
        "hist_counts": t["hist"][f].tolist(),
        "hist_edges": t["hist_edges"].tolist(),
        "top": top,
        "images": imgs,
        "maps": up,
        "regions": reg,
        "patch_maps": [m.numpy() for m in maps],  # the index's own per-patch values, for exact hover
    }
    PAGE_CACHE.put(key, page)
    return page


@gpu(duration=60)  # one multi-image prompt
@torch.no_grad()
def model_label(org: Organism, feature: int, n_images: int = 4) -> ModelLabel:
    """Label a hub feature with the loaded VLM as its own explainer (explain.ModelExplainer's prompt
    and view); the label is kept in memory and in labels.json beside the index."""
    if not org.is_hub:
        raise ValueError("the zoo's features are labelled by the concept explainer")
    page = feature_page(org, feature)
    if not page["top"]:
        raise ValueError(f"feature {feature} fired on no indexed image: nothing to show the model")
    views = [E.dim_outside(im, r) for im, r in list(zip(page["images"], page["regions"]))[:n_images]]
    need_model(org)
    with locked(org.model):
        text = vlm.hub_describe(org.model, org.processor, views, E.ModelExplainer.PROMPT)
    label = " ".join(text.split())[:60] or "(no answer)"
    return {
        "feature": int(feature),
        "label": label,
        "family": "",
        "score": 0.0,
        "explainer": "model",
        "images": len(views),
    }


def save_label(org: Organism, entry: dict) -> None:
    """Keep a model label (in the server process: under ZeroGPU `model_label` runs in a worker)."""
    with org.lock:
        org.labels = {**org.labels, str(entry["feature"]): {k: v for k, v in entry.items() if k != "feature"}}
        org.label_source = MODEL_LABELS
        org.version += 1  # pages cached with the old label
        path = labels_path(org)
        if path is not None:
            try:
                tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
                tmp.write_text(json.dumps(org.labels, indent=1))
                tmp.replace(path)
                org.summary["labels_stamp"] = _stamp(path)
            except OSError:  # a read-only folder: the label lives until the server stops
                pass


def page_json(page: dict) -> dict:
    """The JSON-exportable part of a page (no arrays)."""
    return {k: v for k, v in page.items() if k not in ("images", "maps", "regions", "patch_maps")}
