"""What the model does with one image: which features fire where (`analyse_image`, with the
anyres tiles' finer map over the picture on LLaVA-NeXT) and captions with a feature clamped
(`steer_caption`; several at once: `steer_caption_many`, and each alone beside all together:
`steer_combination`; the clamp itself is backend.sae.steer). Uploaded pictures are checked and shaped
for the model here (`model_image`).
"""

from __future__ import annotations

import numpy as np
import torch

from ..core import bounds
from ..core.cache import ByteLRUCache, make_key
from ..core.interventions import locked
from ..core.zerogpu import capped, gpu
from . import ood
from . import scenes as S
from . import steer as ST
from . import vlm
from .loading import need_model
from .organism import Organism, concept_carriers, shown_label
from .results import (
    CaptionVerdict,
    ImageAnalysis,
    NamesConcept,
    Steering,
    SteeredCaption,
    SteeringDefaults,
    SteeringVerdict,
)


_RESULT_CACHE = ByteLRUCache(16 * 2**20, name="features-results")
MAX_SIDE = int(bounds.IMAGE_SIDE.hi)  # px, the largest image side of every image input


@torch.no_grad()
def processor_codes(
    org: Organism, image: np.ndarray, text: str = vlm.HUB_PROMPT
) -> tuple[torch.Tensor, vlm.ImageLayout]:
    """SAE codes [T, F] at the hookpoint for one image through the model's own processor and chat
    template (the path the hub checkpoint uses), and where the image sits in the prompt."""
    need_model(org)
    with locked(org.model):
        h, _, layouts = vlm.hub_residuals(org.model, org.processor, [image], org.hookpoint, text)
    assert org.sae is not None  # need_model loaded it
    return org.sae.encode(h[0].float().to(org.sae.W_enc.device)), layouts[0]


def model_image(org: Organism, image: np.ndarray) -> np.ndarray:
    """Any uploaded picture as uint8 RGB (grayscale repeated over the channels, alpha dropped). The
    zoo model sees it at its vision tower's size; a hub (anyres) model takes any size, up to
    MAX_SIDE px a side."""
    image = np.asarray(image)
    if image.ndim == 2:
        image = np.stack([image] * 3, -1)
    if image.ndim != 3 or image.shape[-1] not in (3, 4) or min(image.shape[:2]) < 1:
        raise ValueError("expected an RGB image")
    if image.dtype != np.uint8:
        if not np.isfinite(image).all():
            raise ValueError("the image holds NaN or infinite values")
        image = image.clip(0, 255)
    image = image[..., :3].astype(np.uint8)
    if org.is_hub:
        if max(image.shape[:2]) > MAX_SIDE:
            raise ValueError(f"the image is {image.shape[1]}×{image.shape[0]} px; at most {MAX_SIDE} px a side")
        if min(image.shape[:2]) < 2:
            raise ValueError("the image must be at least 2 px on each side")
        return np.ascontiguousarray(image)
    size = int(org.vision["image_size"])
    if image.shape[:2] != (size, size):
        from PIL import Image

        image = np.asarray(
            Image.fromarray(pad_square(image)).convert("RGB").resize((size, size), Image.Resampling.BILINEAR)
        )
    return image


def pad_square(image: np.ndarray) -> np.ndarray:
    """A non-square picture centred on a square of its border's median colour: the square model
    input then keeps the objects' shapes (a 2000×50 strip is not squashed into a smear)."""
    h, w = image.shape[:2]
    if h == w:
        return image
    border = np.concatenate([image[0], image[-1], image[:, 0], image[:, -1]])
    side = max(h, w)
    out = np.empty((side, side, 3), np.uint8)
    out[:] = np.median(border, axis=0).astype(np.uint8)
    y, x = (side - h) // 2, (side - w) // 2
    out[y : y + h, x : x + w] = image
    return out


def positions_text(org: Organism, layout: vlm.ImageLayout | None = None) -> str:
    """Which tokens are the 'image positions' of this model, in words."""
    g, size = org.grid, org.vision["image_size"]
    if not org.vision.get("anyres"):
        return f"the {g}×{g} image-patch tokens of the single {size}px crop"
    tiles = (
        f"; this image: {layout.tile_shape[0]}×{layout.tile_shape[1]} tile patches and "
        f"{len(layout.newlines)} newline tokens"
        if layout is not None and len(layout.tiles)
        else ""
    )
    return (
        f"LLaVA-NeXT anyres: first the base image (the whole picture resized to {size}px, "
        f"{g}×{g} patches), then the high-resolution tiles stitched over the picture and cropped to its "
        f"aspect ratio, each row ended by a newline token{tiles}. Feature maps, ranking and the index use "
        f"the base image's {g}×{g} patches; the tile map is the tiles' patches in their stitched grid; "
        f"newline tokens are left out of every map"
    )


@gpu(duration=20)  # one VLM prompt pass + SAE encode
@torch.no_grad()
def analyse_image(org: Organism, image: np.ndarray, top_n: int = 8) -> ImageAnalysis:
    """Which features fire where on one image: per-patch codes at the SAE hookpoint."""
    image = model_image(org, image)
    key = make_key(org.cache_id, image, ("analyse", top_n))
    hit = _RESULT_CACHE.get(key)
    if hit is not None:
        return hit
    tile_codes, tile_shape, layout, shift = None, (0, 0), None, None
    need_model(org)  # the tab loads it first, with a progress bar; a notebook or agent call lands here
    assert org.sae is not None
    with locked(org.model):
        if not org.is_hub:
            h = next(vlm.residuals(org.model, org.tokenizer, image[None], org.hookpoint))[1]
            codes = org.sae.encode(h[0, vlm.image_slice(org.model)])  # [P, F]
            caption = vlm.generate_captions(org.model, org.tokenizer, image[None])[0]
            if ood.has_reference(org):  # the same residual, one more number: how far from the scenes
                shift = ood.assess(
                    float(ood.reconstruction_error(org.sae, h[0, vlm.image_slice(org.model)])), ood.reference(org)
                )
        else:
            all_codes, layout = processor_codes(org, image)
            codes = all_codes[layout.base.to(all_codes.device)]
            if len(layout.tiles):
                tile_codes, tile_shape = all_codes[layout.tiles.to(all_codes.device)].float().cpu(), layout.tile_shape
            caption = vlm.hub_generate(org.model, org.processor, image)
    codes = codes.float().cpu()  # the maps leave as numpy (and, under ZeroGPU, pickled)
    g = int(round(codes.shape[0] ** 0.5))
    mean = codes.mean(0)
    order = [int(f) for f in torch.argsort(mean, descending=True)[:top_n] if mean[f] > 0]
    out: ImageAnalysis = {
        "image": image,
        "caption": caption,
        "features": [
            {
                "feature": f,
                "mean_act": round(float(mean[f]), 4),
                "label": (
                    shown_label(org.labels.get(str(f), {}))
                    if org.is_hub
                    else org.labels.get(str(f), {}).get("label", "")
                ),
            }
            for f in order
        ],
        "maps": {f: codes[:, f].reshape(g, g).numpy() for f in order},
        "tile_maps": (
            {f: tile_codes[:, f].reshape(tile_shape).numpy() for f in order} if tile_codes is not None else {}
        ),
        "positions": positions_text(org, layout),
        "ood": shift,
    }  # backend.sae.ood.assess, or None for a model without a scene set
    _RESULT_CACHE.put(key, out)
    return out


def family_rivals(org: Organism, feature: int) -> list[int]:
    """The features of the other concepts of the feature's family (e.g. the other colours): for each,
    those labelled with it at IoU ≥ 0.5, or the one that matches it best where none is
    (organism.concept_carriers, the rule the recipe's swaps follow). A feature labelled a colour at a
    lower IoU fires mostly off the objects, and zeroing it removes no colour. A shape with no feature of
    its own (the zoo's circle) still has its best match zeroed: where that feature fires, a clamp to
    "square" with "active" positions has the circle's patches to be written on."""
    lab = org.labels.get(str(int(feature)), {})
    fam, own = lab.get("family"), lab.get("label")
    if fam not in S.FAMILIES:
        return []
    rivals = {g for c in S.FAMILIES[fam] if c != own for g in concept_carriers(org.labels, c)}
    return sorted(rivals - {int(feature)})


def _floor_key(org: Organism, positions: str) -> float | None:
    """What an "active" result depends on besides its inputs: the floors, which change when a feature
    index is built for the model (a hub model starts without one)."""
    floor = active_floor(org) if positions == "active" else None
    return None if floor is None else float(floor.sum())


def active_floor(org: Organism) -> torch.Tensor | None:
    """Per feature, the activation from which the "active" steering positions count a patch as the
    feature's (steer.ACTIVE_FLOOR × its largest activation in the index); None without an index."""
    if org.index is None:
        return None
    return ST.ACTIVE_FLOOR * org.index.tensors["max_act"].float()


def steering_defaults(org: Organism) -> SteeringDefaults:
    st = org.summary.get("steering", {})
    calibrated = [int(f) for f in st.get("colour_features", {}).values()]
    return {
        "positions": st.get("default_positions", "prompt"),
        "multiple": float(st.get("value_multiple", 2.0)),
        "suppress": bool(st.get("suppress_other_colours", False)),
        "hookpoint": org.hookpoint,
        "feature": calibrated[0] if calibrated else None,
    }


def clamp_range(org: Organism) -> bounds.Range:
    """The clamp values steering takes: 0 to 10× the index's largest activation (backend.core.bounds)."""
    top = None if org.index is None else float(org.index.tensors["max_act"].max())
    return bounds.Range("The clamp value", 0, bounds.clamp_max(top), whole=False)


def default_clamp_value(org: Organism, feature: int, multiple: float | None = None) -> float:
    """`multiple` × the feature's max activation; without `multiple`, a colour feature gets the multiple
    calibrated for its colour (summary "steering.calibrated"), any other feature the sweep's best one."""
    st = org.summary.get("steering", {})
    mult = multiple
    if mult is None:
        colour = {int(f): c for c, f in st.get("colour_features", {}).items()}.get(int(feature))
        mult = float(st.get("calibrated", {}).get("multiples", {}).get(colour, st.get("value_multiple", 2.0)))
    if org.index is None:
        return 10.0
    return round(mult * float(org.index.tensors["max_act"][int(feature)]), 3)


@gpu(duration=40)  # two greedy captions (with and without the clamp)
@torch.no_grad()
def steer_caption(
    org: Organism,
    image: np.ndarray,
    feature: int,
    value: float,
    *,
    positions: str = "prompt",
    add_error: bool = False,
    suppress_family: bool = False,
) -> SteeringVerdict:
    """Caption with and without the clamp, side by side."""
    if not np.isfinite(value):
        raise ValueError("clamp value must be a finite number")
    image = model_image(org, image)
    suppress = tuple(family_rivals(org, feature)) if suppress_family else ()
    if not 0 <= int(feature) < org.n_features:
        raise ValueError(f"feature must be in 0..{org.n_features - 1}")
    key = make_key(
        org.cache_id,
        image,
        ("steer", int(feature), float(value), positions, bool(add_error), suppress, _floor_key(org, positions)),
    )
    hit = _RESULT_CACHE.get(key)
    if hit is not None:
        return concept_verdict(org, hit)
    need_model(org)
    edited: list[torch.Tensor] = []
    with locked(org.model):
        if org.is_hub:
            base = vlm.hub_generate(org.model, org.processor, image)
            steered = ST.hub_steered_caption(
                org.model,
                org.processor,
                org.sae,
                org.hookpoint,
                image,
                int(feature),
                float(value),
                positions=positions,
                add_error=add_error,
                suppress=suppress,
                floor=active_floor(org),
                edited=edited,
            )
        else:
            base = vlm.generate_captions(org.model, org.tokenizer, image[None])[0]
            steered = ST.steered_captions(
                org.model,
                org.tokenizer,
                org.sae,
                org.hookpoint,
                image[None],
                int(feature),
                float(value),
                positions=positions,
                add_error=add_error,
                suppress=suppress,
                floor=active_floor(org),
                edited=edited,
            )[0]
    out: SteeredCaption = {
        "feature": int(feature),
        "value": float(value),
        "positions": positions,
        "add_error": bool(add_error),
        "suppressed": list(suppress),
        "hookpoint": org.hookpoint,
        "baseline": base,
        "steered": steered,
        # the zoo's captions follow a template that can be checked; free text cannot
        "well_formed": None if org.is_hub else S.parse_caption(steered) is not None,
        # "active": how many image positions the clamp was written at (0: none of its features fire here)
        "edited_positions": (int(torch.stack(edited).sum()) if edited else 0) if positions == "active" else None,
    }
    _RESULT_CACHE.put(key, out)
    return concept_verdict(org, out)


def concept_verdict(org: Organism, out: SteeredCaption) -> SteeringVerdict:
    """A steering result with the verdict that matters: does the steered caption name the feature's
    concept (its label now, which a hub model may have been asked for since), and did the one
    without the clamp already? `names_concept` is None for a feature without a label."""
    concept = shown_label(org.labels.get(str(out["feature"]), {}))
    names: NamesConcept | None = (
        {"baseline": ST.names_concept(out["baseline"], concept), "steered": ST.names_concept(out["steered"], concept)}
        if concept
        else None
    )
    return {**out, "concept": concept, "names_concept": names}


# ------------------------------------------------------------------------------ several clamps at once
def check_steering(
    org: Organism, clamps, suppress=(), suppress_family: bool = False
) -> tuple[list[ST.Clamp], tuple[int, ...]]:
    """Clamps and suppressions checked against this organism (feature ids, its clamp range, the
    bounds); `suppress_family` adds each clamped feature's family rivals, except the features clamped
    (clamping red and blue together must not zero blue as one of red's rivals)."""
    checked, sup = ST.check_clamps(clamps, org.n_features, suppress, values=clamp_range(org))
    if suppress_family:
        clamped = {f for f, _ in checked}
        rivals = [g for f, _ in checked for g in family_rivals(org, f) if g not in clamped]
        sup = tuple(dict.fromkeys((*sup, *rivals)))
        bounds.check(bounds.STEER_SUPPRESS, len(sup))
    return checked, sup


def _caption(
    org: Organism, image: np.ndarray, clamps: list[ST.Clamp], suppress: tuple[int, ...], positions: str, add_error: bool
) -> str:
    """One greedy caption with these clamps (none: the model as it is); the caller holds the lock."""
    if org.is_hub:
        if not clamps:
            return vlm.hub_generate(org.model, org.processor, image)
        return ST.hub_caption_with_clamps(
            org.model,
            org.processor,
            org.sae,
            org.hookpoint,
            image,
            clamps,
            positions=positions,
            add_error=add_error,
            suppress=suppress,
            floor=active_floor(org),
        )
    if not clamps:
        return vlm.generate_captions(org.model, org.tokenizer, image[None])[0]
    return ST.captions_with_clamps(
        org.model,
        org.tokenizer,
        org.sae,
        org.hookpoint,
        image[None],
        clamps,
        positions=positions,
        add_error=add_error,
        suppress=suppress,
        floor=active_floor(org),
    )[0]


def _verdict(org: Organism, caption: str, clamps: list[ST.Clamp], baseline: str | None = None) -> CaptionVerdict:
    """What a caption says: the scene template's concepts it names (zoo), whether it names each clamped
    feature's concept (its label; None without one) and, against the baseline, which attributes changed."""
    names: dict[str, bool | None] = {}
    for f, _ in clamps:
        concept = shown_label(org.labels.get(str(f), {}))
        names[str(f)] = ST.names_concept(caption, concept) if concept else None
    return {
        "caption": caption,
        "well_formed": None if org.is_hub else S.parse_caption(caption) is not None,
        "concepts": [] if org.is_hub else ST.concepts_named(caption),
        "names_concept": names,
        "changed": None if org.is_hub or baseline is None else ST.changed_attributes(baseline, caption),
    }


@gpu(duration=40)  # two greedy captions (with and without the clamps)
@torch.no_grad()
def steer_caption_many(
    org: Organism,
    image: np.ndarray,
    clamps,
    *,
    suppress=(),
    positions: str = "prompt",
    add_error: bool = False,
    suppress_family: bool = False,
) -> Steering:
    """`steer_caption` with several clamps [(feature, value), ...] and suppressed features, applied
    together in one intervention: the caption with and without them."""
    return _steer_runs(org, image, clamps, suppress, positions, add_error, suppress_family, alone=False)


def _combination_seconds(org, image, clamps, *args, **kwargs) -> float:
    return capped(20 * (len(clamps) + 2))  # a caption each: none, every clamp alone, all together


@gpu(duration=_combination_seconds)
@torch.no_grad()
def steer_combination(
    org: Organism,
    image: np.ndarray,
    clamps,
    *,
    suppress=(),
    positions: str = "prompt",
    add_error: bool = False,
    suppress_family: bool = False,
) -> Steering:
    """For one image: the caption with no clamp, with each clamp alone (the suppressions asked for and,
    with `suppress_family`, its own family's rivals) and with all together, each with its verdict (the
    concepts it names, whether it names each clamped feature's concept, the attributes changed from the
    caption with no clamp)."""
    return _steer_runs(org, image, clamps, suppress, positions, add_error, suppress_family, alone=True)


def _steer_runs(
    org: Organism,
    image: np.ndarray,
    clamps,
    suppress,
    positions: str,
    add_error: bool,
    suppress_family: bool,
    *,
    alone: bool,
) -> Steering:
    bounds.check_choice("positions", positions, ST.POSITION_MODES)
    image = model_image(org, image)
    checked, sup = check_steering(org, clamps, suppress, suppress_family)
    # alone, a clamp zeroes what it would zero by itself: the suppressions asked for and, with
    # `suppress_family`, its own family's rivals (a colour clamp alone does not zero the shapes)
    sup_alone = [check_steering(org, [c], suppress, suppress_family)[1] for c in checked] if alone else []
    key = make_key(
        org.cache_id,
        image,
        ("steer-many", checked, sup, sup_alone, positions, bool(add_error), alone, _floor_key(org, positions)),
    )
    hit = _RESULT_CACHE.get(key)
    if hit is None:
        need_model(org)
        with locked(org.model):
            base = _caption(org, image, [], (), positions, add_error)
            each = [_caption(org, image, [c], cs, positions, add_error) for c, cs in zip(checked, sup_alone)]
            # one clamp alone is all of them together: its caption is not computed twice
            together = (
                each[0] if alone and len(checked) == 1 else _caption(org, image, checked, sup, positions, add_error)
            )
        hit = {"base": base, "each": each, "together": together}
        _RESULT_CACHE.put(key, hit)
    out: Steering = {
        "clamps": [{"feature": f, "value": v, "concept": shown_label(org.labels.get(str(f), {}))} for f, v in checked],
        "suppressed": list(sup),
        "positions": positions,
        "add_error": bool(add_error),
        "hookpoint": org.hookpoint,
        "baseline": _verdict(org, hit["base"], checked),
        "together": _verdict(org, hit["together"], checked, hit["base"]),
    }
    if alone:
        out["alone"] = [
            {"feature": f, "value": v, **_verdict(org, cap, [(f, v)], hit["base"])}
            for (f, v), cap in zip(checked, hit["each"])
        ]
    return out
