"""Features as MCP tools: the same services as the tab's handlers, with a picture where one carries the
result (registered in components.features)."""

# No `from __future__ import annotations`: gr.api reads the real type objects from the signatures
# (components.agents.tools) to build each tool's schema; each docstring's Args and Returns entry is one
# long line: Gradio's parser keeps only an entry's first line.
from typing import Literal

import gradio as gr
import numpy as np

from backend.core import bounds, image_header

from components.agents.answers import _grid, _json, _png, _source, _whole

SteerPositions = Literal["default", "prompt", "all", "image", "active"]


def _organism():
    from backend.sae import loading

    try:
        return loading.get_organism(_source())
    except FileNotFoundError as e:
        raise ValueError(f"The Features organism is not built: {e}") from None


def find_features(query: str = "", sort: Literal["density", "max_act", "iou"] = "density", limit: int = 20) -> str:
    """List sparse-autoencoder features of the Features tab's vision-language model, with their labels.

    Reads the feature index only (no model call; milliseconds). Use it to pick a feature id for
    open_feature or steer_feature.

    Args:
        query: text to match in a feature's label (e.g. 'red', 'circle'); empty = all features.
        sort: order: density (share of image tokens where it fires, 0-1), max_act (largest activation), iou (concept-mask IoU, 0-1, zoo only).
        limit: how many features to return, 1 to 500 (default 20).

    Returns:
        JSON: list of {feature, label, iou, density, max_act}, best first.
    """
    from backend.sae import pages

    org = _organism()
    if sort not in ("density", "max_act", "iou"):
        raise ValueError("sort must be one of density, max_act, iou.")
    n = bounds.check(bounds.FEAT_LIMIT, limit)
    if org.index is None:
        raise ValueError("This model has no feature index yet: build one in the Features tab.")
    return _json(pages.feature_table(org, query or "", sort, limit=n))


def open_feature(feature: int) -> tuple[str, gr.FileData]:
    """Open one SAE feature's page: top-activating images, activation statistics and label.

    Reads the feature index (no model call; well under a second). The image shows the top images
    (top row), the activation map over each (middle row, brighter = stronger) and each image with
    everything outside the activation region dimmed (bottom row), left to right in rank order.

    Args:
        feature: the feature id, 0 to the number of features - 1 (see find_features).

    Returns:
        JSON: feature, label (concept or empty), family, iou (0-1), density (share of image tokens with a non-zero activation, 0-1), max_act, mean_act (mean of the non-zero activations), hist_counts/hist_edges (log-binned histogram), top: list of {image_id, score (mean activation over the image's patches), caption}; and a PNG of the top images.
    """
    from backend.sae import pages

    from components.features.figures import dimmed, overlay

    org = _organism()
    f = _whole(feature, "The feature id", 0, org.n_features - 1)
    page = pages.feature_page(org, f)
    vmax = max([float(np.max(m)) for m in page["maps"] if np.size(m)] or [1.0])
    imgs = list(page["images"])
    rows = [
        imgs,
        [overlay(im, m, vmax) for im, m in zip(imgs, page["maps"])],
        [dimmed(im, r) for im, r in zip(imgs, page["regions"])],
    ]
    return _json(pages.page_json(page)), _png(
        _grid(rows if imgs else [[np.full((8, 8, 3), 255, np.uint8)]]), f"feature-{f}"
    )


def steer_feature(
    feature: int,
    value: float = -1.0,
    scene: int = 0,
    positions: SteerPositions = "default",
    add_error: bool = False,
    suppress_rivals: bool | None = None,
    image_base64: str = "",
    more_clamps: list[dict] | None = None,
    suppress: list[int] | None = None,
) -> tuple[str, gr.FileData]:
    """Clamp one SAE feature while the model captions an image; compare the caption with and without.

    During the prompt pass the feature is set to `value` and the hooked layer's output is replaced
    by the SAE's reconstruction (optionally plus the SAE's error term); everything is restored
    before the answer returns. Cost: two greedy captions (about a second on the zoo model).

    Args:
        feature: the feature id to clamp, 0 to the number of features - 1.
        value: the clamp value in activation units, 0 to 10× the index's largest activation (the tab's range); a negative value (the default) = the tab's default for this feature (a calibrated multiple of its max activation).
        scene: which held-out scene to caption, 0 to the number of held-out scenes - 1.
        positions: where to clamp: prompt (every prompt position, the paper's choice), all (prompt and generated tokens), image (the image positions only), active (the image patches where a clamped or suppressed feature fires: the objects), default (the setting the tab starts with, calibrated for this model).
        add_error: add the SAE's reconstruction error back (keeps everything the SAE does not explain).
        suppress_rivals: also zero the features labelled with the other concepts of the same family (e.g. the other colours); null = the tab's default for this model.
        image_base64: your own image as base64 PNG or JPEG (a data: URI is fine), at most 8 MB and 4096 px a side; when given, it is captioned instead of a held-out scene. Models without a scene set (the papers' LLaVA-NeXT) need it.
        more_clamps: more features clamped together with the first, each {"feature": id, "value": v} (1 to 8 clamps in all); when given, the answer compares no clamp, each clamp alone and all together.
        suppress: feature ids clamped to 0 at the same time (at most 256).

    Returns:
        JSON: baseline and steered captions, value, positions, well_formed (whether the steered caption parses; null for free text), hookpoint, suppressed feature ids; with more_clamps or suppress instead: clamps, baseline, alone (one entry per clamp) and together, each with its caption, the concepts it names and what changed from no clamp. And a PNG of the scene.
    """
    from backend.sae import analysis
    from backend.sae import steer as ST
    from backend.sae import scenes as S

    org = _organism()
    f = _whole(feature, "The feature to clamp", 0, org.n_features - 1)
    own = _decode_image(image_base64) if image_base64 else None
    if own is None and not org.heldout_specs:
        raise ValueError("This model has no held-out scenes to caption: pass your image as image_base64.")
    i = None if own is not None else _whole(scene, "The held-out scene", 0, len(org.heldout_specs) - 1)
    v = (
        analysis.default_clamp_value(org, f)
        if value is None or (isinstance(value, (int, float)) and value < 0)
        else bounds.check(analysis.clamp_range(org), value)
    )
    defaults = analysis.steering_defaults(org)
    positions = defaults["positions"] if positions == "default" else positions
    if positions not in ST.POSITION_MODES:
        raise ValueError(f"positions must be default or one of {', '.join(ST.POSITION_MODES)}.")
    family = defaults["suppress"] if suppress_rivals is None else bool(suppress_rivals)
    img = analysis.model_image(org, own) if own is not None else S.render(org.heldout_specs[i])[0]
    if more_clamps or suppress:
        if not isinstance(more_clamps or [], list) or not all(isinstance(c, dict) for c in more_clamps or []):
            raise ValueError('more_clamps must be a list of objects like {"feature": 12, "value": 4.0}.')
        try:
            clamps = [(f, v)] + [(c["feature"], c["value"]) for c in more_clamps or []]
        except KeyError:
            raise ValueError('each of more_clamps needs "feature" and "value".') from None
        out = analysis.steer_combination(
            org,
            img,
            clamps,
            suppress=list(suppress or []),
            positions=positions,
            add_error=bool(add_error),
            suppress_family=family,
        )
    else:
        out = analysis.steer_caption(
            org, img, f, v, positions=positions, add_error=bool(add_error), suppress_family=family
        )
    name = f"scene-{i}" if i is not None else "your-image"
    return _json({**out, "scene": i}), _png(_grid([[img]], side=192), name)


MAX_IMAGE_BYTES = 8 * 2**20


def _decode_image(data: str) -> np.ndarray:
    """An agent's image, sent inline: the tool never fetches a URL (the app sends nothing anywhere)."""
    import base64
    import binascii
    import io

    from PIL import Image, UnidentifiedImageError

    if not isinstance(data, str):
        raise ValueError("image_base64 must be a base64 string.")
    if data.startswith("data:"):
        data = data.partition(",")[2]
    if len(data) > MAX_IMAGE_BYTES * 4 // 3 + 4:
        raise ValueError(f"image_base64 is larger than {MAX_IMAGE_BYTES // 2**20} MB.")
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("image_base64 is not a base64-encoded PNG or JPEG image.") from None
    try:  # from its header first, as every image input: a small PNG may decode to gigabytes
        image_header.check_file(io.BytesIO(raw), "image_base64")
        with Image.open(io.BytesIO(raw)) as im:
            return np.asarray(im.convert("RGB"))
    except image_header.TooLarge:
        raise
    except (ValueError, UnidentifiedImageError, OSError):
        raise ValueError("image_base64 is not a base64-encoded PNG or JPEG image.") from None


def contrast_features(
    concept_a: str = "red",
    concept_b: str = "blue",
    n: int = 64,
    images_a_base64: list[str] | None = None,
    images_b_base64: list[str] | None = None,
    rows: int = 20,
) -> str:
    """Which SAE features tell two image sets apart: every feature tested for firing more on set A than on set B.

    A set is your images (base64 PNG or JPEG each), or on the zoo a concept filter over the held-out scenes ("red", "striped circle"; a scene matching both filters is in neither set). Per feature: mean activation and firing rate in each set, the rank-biserial effect r (+1: every image of A above every image of B), a two-sided Mann-Whitney U p-value and its Benjamini-Hochberg q over the features tested. Cost: one prompt pass per image (about a second for 2 × 64 zoo scenes).

    Args:
        concept_a: set A's concept filter (zoo), e.g. red, circle, "striped square"; ignored when images_a_base64 is given.
        concept_b: set B's concept filter (zoo); ignored when images_b_base64 is given.
        n: scenes per set for concept filters, 2 to 64.
        images_a_base64: set A as your own images, 2 to 64, each base64 PNG or JPEG (at most 8 MB, 4096 px a side).
        images_b_base64: set B as your own images, 2 to 64.
        rows: features listed, 1 to 500, strongest effect first.

    Returns:
        JSON: sets (how they were made and their sizes), n_tested, n_significant, can_be_significant, the test, effect size and correction used, and rows: feature, label, mean_a, mean_b, rate_a, rate_b, effect, p, q, significant, top_a and top_b (indices of each set's strongest images for the feature).
    """
    from backend.sae import contrast as C
    from backend.sae import contrast_scenes as CS

    org = _organism()
    r = bounds.check_whole(bounds.CONTRAST_ROWS, rows)
    own = []
    for name, data in (("A", images_a_base64), ("B", images_b_base64)):
        if data is None:
            own.append(None)
            continue
        if not isinstance(data, list):
            raise ValueError(f"images_{name.lower()}_base64 must be a list of base64 images.")
        bounds.check(bounds.CONTRAST_IMAGES, len(data))  # before any image is decoded
        own.append([_decode_image(d) for d in data])
    if own[0] is not None and own[1] is not None:
        out = C.contrast_images(org, own[0], own[1], rows=r)
        how = {"a": f"your {len(own[0])} images", "b": f"your {len(own[1])} images"}
    elif own[0] is None and own[1] is None:
        out = CS.contrast_scenes(org, concept_a, concept_b, n=n, rows=r)
        how = {"a": f"held-out scenes: {concept_a}", "b": f"held-out scenes: {concept_b}"}
    else:
        raise ValueError("Give both sets as images, or neither (then the two concept filters make them).")
    keep = (
        "feature",
        "label",
        "mean_a",
        "mean_b",
        "rate_a",
        "rate_b",
        "effect",
        "p",
        "q",
        "significant",
        "top_a",
        "top_b",
    )
    return _json(
        {
            "sets": how,
            **{
                k: out[k]
                for k in (
                    "n_a",
                    "n_b",
                    "n_tested",
                    "n_significant",
                    "can_be_significant",
                    "alpha",
                    "test",
                    "effect_size",
                    "correction",
                )
            },
            "rows": [{k: row.get(k) for k in keep} for row in out["rows"] if row["tested"]],
        }
    )
