"""Steering by clamping an SAE feature inside the model, as a scoped intervention.

At the SAE's hookpoint the residual stream h is replaced, at the chosen positions, by the SAE
reconstruction with feature f set to `value`:  h ← decode(z with z_f := value)  [+ (h − SAE(h)) when
`add_error`]. Positions:
- "prompt": every position of the prompt pass (image and text; the paper's setting). Tokens
  generated afterwards are not edited, they read the edited prompt through attention.
- "all":    the prompt pass and every generated token.
- "image":  the image-patch positions of the prompt pass only (on LLaVA-NeXT every image token of the
            prompt: base image, high-resolution tiles and their row newlines; see vlm.ImageLayout).
- "text":   the prompt pass's other positions only (<s> and the prompt words): with "image" it splits
            "prompt" in two, to measure which half of the paper's placement steers and which breaks.
- "active": the image positions where a clamped or suppressed feature fires before the edit, at or
            above its `floor` (ACTIVE_FLOOR × its largest activation in the feature index): the
            objects the features stand for. A caption read from every patch (the zoo's) turns a clamp
            written on the background into extra words; a swap written on the object does not.
`suppress` optionally zeroes other features at the same positions (e.g. the other colours' features,
so the clamp swaps a colour instead of mixing two). Several clamps [(feature, value), ...] go in one
hook (`clamp_features`), so they edit the same residual together; the single clamp is one of them.
The hook is removed and the model's lock released in `finally`.
"""

from __future__ import annotations

import operator
from contextlib import contextmanager
from typing import Mapping, Sequence

import numpy as np
import torch

from ..core import bounds
from . import scenes as S
from . import vlm
from .sae import TopKSAE

POSITION_MODES = ("prompt", "all", "image", "text", "active")
# Where a feature fires this weakly it is a broad feature's background noise, not its object (zoo: a
# yellow feature at under 0.4 of its largest activation covers 39 % of the background, above it 0.8 %).
ACTIVE_FLOOR = 0.4


class FeatureOutOfRange(ValueError, IndexError):
    """A feature id outside the SAE: a user's input (ValueError, shown as such) and an index error."""


Clamp = tuple[int, float]  # (feature, value)


def check_clamps(
    clamps: Sequence[Sequence[float]], n_features: int, suppress: Sequence[int] = (), values: bounds.Range | None = None
) -> tuple[list[Clamp], tuple[int, ...]]:
    """Clamps [(feature, value), ...] and the features to zero, checked: 1..8 clamps, distinct features
    within the SAE, finite values (within `values`, the organism's clamp range, where given), a suppressed
    feature that is not also clamped. Refused with a message, never corrected."""
    try:
        pairs = [(f, v) for f, v in clamps]
    except (TypeError, ValueError):
        raise ValueError("clamps must be a list of (feature, value) pairs") from None
    bounds.check(bounds.STEER_CLAMPS, len(pairs))
    suppress = tuple(suppress)
    bounds.check(bounds.STEER_SUPPRESS, len(suppress))

    def feature(f) -> int:
        try:  # an int, numpy or torch integer, or a float with no fraction (a JSON number)
            i = operator.index(f) if not isinstance(f, float) or not f.is_integer() else int(f)
        except TypeError:
            i = None
        if i is None or isinstance(f, bool):
            raise FeatureOutOfRange(f"a feature is a whole number in 0..{n_features - 1} (got {f!r})")
        if not 0 <= i < n_features:
            raise FeatureOutOfRange(f"feature {i} is not in this SAE: features are 0..{n_features - 1}")
        return i

    out: list[Clamp] = []
    for f, v in pairs:
        fi = feature(f)
        try:
            x = float(v)
        except (TypeError, ValueError):
            raise ValueError(f"the clamp value of feature {fi} must be a number (got {v!r})") from None
        if not np.isfinite(x):
            raise ValueError(f"the clamp value of feature {fi} must be a finite number")
        if values is not None:
            x = float(
                bounds.check(
                    bounds.Range(f"{values.name} of feature {fi}", values.lo, values.hi, values.whole, values.unit), x
                )
            )
        out.append((fi, x))
    fs = [f for f, _ in out]
    if len(set(fs)) != len(fs):
        raise ValueError(
            f"feature {next(f for f in fs if fs.count(f) > 1)} is clamped twice: give each feature one value"
        )
    sup = tuple(dict.fromkeys(feature(g) for g in suppress))  # order kept, duplicates dropped
    both = sorted(set(sup) & set(fs))
    if both:
        raise ValueError(f"feature {both[0]} is both clamped and suppressed: choose one")
    return out, sup


def clamp_codes_many(
    sae: TopKSAE, h: torch.Tensor, clamps: Sequence[Clamp], add_error: bool, suppress: tuple[int, ...] = ()
) -> torch.Tensor:
    """The reconstruction with every clamped feature at its value and the suppressed ones at 0."""
    vals, idx = sae.encode_sparse(h)
    # drop the clamped (and suppressed) features from the top-k slots in one pass (a selection: the kept
    # values are the same bits), then add each clamped feature at its value
    drop = torch.tensor([*(f for f, _ in clamps), *suppress], dtype=idx.dtype, device=idx.device)
    vals = torch.where(torch.isin(idx, drop), torch.zeros_like(vals), vals)
    recon = sae.decode_sparse(vals, idx)
    for f, value in clamps:  # one clamp: the same operations, bit for bit, as the single clamp always did
        recon = recon + value * sae.W_dec[f]
    if add_error:
        recon = recon + (h.to(recon.dtype) - sae(h))
    return recon.to(h.dtype)


def clamp_codes(
    sae: TopKSAE, h: torch.Tensor, feature: int, value: float, add_error: bool, suppress: tuple[int, ...] = ()
) -> torch.Tensor:
    return clamp_codes_many(sae, h, [(int(feature), float(value))], add_error, suppress)


def firing(sae: TopKSAE, h: torch.Tensor, features: Sequence[int], floor: torch.Tensor | None) -> torch.Tensor:
    """[..., T] True where any of `features` is among the SAE's active codes at or above its floor."""
    vals, idx = sae.encode_sparse(h)
    feats = torch.as_tensor(list(features), dtype=idx.dtype, device=idx.device)
    least = torch.zeros_like(vals) if floor is None else floor.to(vals.device, vals.dtype)[idx]
    return (torch.isin(idx, feats) & (vals > 0) & (vals >= least)).any(-1)


@contextmanager
def clamp_features(
    model,
    sae: TopKSAE,
    hookpoint: str,
    clamps: Sequence[Sequence[float]],
    *,
    positions: str = "prompt",
    add_error: bool = False,
    image_positions: slice | torch.Tensor | None = None,
    suppress: Sequence[int] = (),
    floor: torch.Tensor | None = None,
    edited: list[torch.Tensor] | None = None,
):
    """Several clamps and suppressions as one intervention: one hook, removed (and the model's lock
    released) in `finally`, so the edits are applied together to the same residual. `floor`: per
    feature, the activation at which a patch counts as firing for "active" (None: any activation);
    `edited`, where given, gets the number of positions each "active" prompt pass edited (on a picture
    where none of the clamped or zeroed features fire it edits nothing, and the caller can say so)."""
    if positions not in POSITION_MODES:
        raise ValueError(f"positions must be one of {POSITION_MODES}, not {positions!r}")
    checked, sup = check_clamps(clamps, sae.n_latents, suppress)
    # a slice (the zoo's fixed prompt) or the positions of one prompt's image tokens (hub, anyres)
    sl = image_positions if image_positions is not None else vlm.image_slice(model)

    def fn(h: torch.Tensor):
        prompt_pass = h.shape[-2] > 1
        if positions != "all" and not prompt_pass:
            return None
        new = clamp_codes_many(sae, h, checked, add_error, sup)
        if positions == "active":
            out = h.clone()
            at = firing(sae, h, [f for f, _ in checked] + list(sup), floor)
            on_image = torch.zeros(h.shape[-2], dtype=torch.bool, device=h.device)
            on_image[sl] = True
            at &= on_image
            out[at] = new[at]
            if edited is not None:  # a count on the device: read once the caption is done, no sync here
                edited.append(at.sum())
            return out
        if positions == "image":
            out = h.clone()
            out[..., sl, :] = new[..., sl, :]
            return out
        if positions == "text":
            out = new.clone()
            out[..., sl, :] = h[..., sl, :]
            return out
        return new

    with vlm.edit_residual(model, hookpoint, fn):
        yield model


@contextmanager
def clamp_feature(
    model,
    sae: TopKSAE,
    hookpoint: str,
    feature: int,
    value: float,
    *,
    positions: str = "prompt",
    add_error: bool = False,
    image_positions: slice | torch.Tensor | None = None,
    suppress: Sequence[int] = (),
    floor: torch.Tensor | None = None,
    edited: list[torch.Tensor] | None = None,
):
    with clamp_features(
        model,
        sae,
        hookpoint,
        [(feature, value)],
        positions=positions,
        add_error=add_error,
        image_positions=image_positions,
        suppress=suppress,
        floor=floor,
        edited=edited,
    ):
        yield model


@torch.no_grad()
def captions_with_clamps(
    model,
    tokenizer,
    sae,
    hookpoint: str,
    images: np.ndarray,
    clamps: Sequence[Sequence[float]],
    *,
    positions: str = "prompt",
    add_error: bool = False,
    suppress: Sequence[int] = (),
    floor: torch.Tensor | None = None,
    edited: list[torch.Tensor] | None = None,
) -> list[str]:
    with clamp_features(
        model,
        sae,
        hookpoint,
        clamps,
        positions=positions,
        add_error=add_error,
        suppress=suppress,
        floor=floor,
        edited=edited,
    ):
        return vlm.generate_captions(model, tokenizer, images)


@torch.no_grad()
def steered_captions(
    model,
    tokenizer,
    sae,
    hookpoint: str,
    images: np.ndarray,
    feature: int,
    value: float,
    *,
    positions: str = "prompt",
    add_error: bool = False,
    suppress: Sequence[int] = (),
    floor: torch.Tensor | None = None,
    edited: list[torch.Tensor] | None = None,
) -> list[str]:
    return captions_with_clamps(
        model,
        tokenizer,
        sae,
        hookpoint,
        images,
        [(feature, value)],
        positions=positions,
        add_error=add_error,
        suppress=suppress,
        floor=floor,
        edited=edited,
    )


@torch.no_grad()
def hub_caption_with_clamps(
    model,
    processor,
    sae,
    hookpoint: str,
    image,
    clamps: Sequence[Sequence[float]],
    *,
    positions: str = "prompt",
    add_error: bool = False,
    suppress: Sequence[int] = (),
    floor: torch.Tensor | None = None,
    edited: list[torch.Tensor] | None = None,
    text: str = vlm.HUB_PROMPT,
    max_new_tokens: int = 24,
) -> str:
    """The clamps on a hub VLM, prompted through its processor and chat template (LLaVA-NeXT's
    image_sizes included); "image" positions are all of the prompt's image tokens (base image,
    tiles and row newlines)."""
    inputs = vlm.hub_inputs(model, processor, [image], text)
    sizes = inputs.get("image_sizes")
    lay = vlm.image_layout(model, inputs["input_ids"][0], None if sizes is None else sizes[0])
    tok = processor.tokenizer
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    with clamp_features(
        model,
        sae,
        hookpoint,
        clamps,
        positions=positions,
        add_error=add_error,
        image_positions=lay.image.to(inputs["input_ids"].device),
        suppress=suppress,
        floor=floor,
        edited=edited,
    ):
        out = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=pad)
    return tok.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True).strip()


@torch.no_grad()
def hub_steered_caption(
    model,
    processor,
    sae,
    hookpoint: str,
    image,
    feature: int,
    value: float,
    *,
    positions: str = "prompt",
    add_error: bool = False,
    suppress: Sequence[int] = (),
    floor: torch.Tensor | None = None,
    edited: list[torch.Tensor] | None = None,
    text: str = vlm.HUB_PROMPT,
    max_new_tokens: int = 24,
) -> str:
    return hub_caption_with_clamps(
        model,
        processor,
        sae,
        hookpoint,
        image,
        [(feature, value)],
        positions=positions,
        add_error=add_error,
        suppress=suppress,
        floor=floor,
        edited=edited,
        text=text,
        max_new_tokens=max_new_tokens,
    )


def concepts_named(caption: str) -> list[str]:
    """The scene template's concepts a caption names (colours, shapes, textures, positions, in that
    order), none for a malformed caption."""
    objs = S.parse_caption(caption) or []
    named = {o[k] for o in objs for k in ("colour", "shape", "texture", "position")}
    return [c for c in S.CONCEPTS if c in named]


def changed_attributes(before: str, after: str) -> list[str] | None:
    """The attributes in which two captions of the scene template differ: colour, shape, texture of the
    objects at the same positions; "object added" or "object removed" where the second caption only
    adds or only drops objects, "position" where both (an object moved); None where either caption is
    malformed (then nothing can be compared)."""
    a, b = S.parse_caption(before), S.parse_caption(after)
    if a is None or b is None:
        return None
    pa, pb = {o["position"]: o for o in a}, {o["position"]: o for o in b}
    common = set(pa) & set(pb)
    out = [k for k in ("colour", "shape", "texture") if any(pa[p][k] != pb[p][k] for p in common)]
    added, dropped = set(pb) - set(pa), set(pa) - set(pb)
    if added and dropped:
        out.append("position")
    elif added:
        out.append("object added")
    elif dropped:
        out.append("object removed")
    return out


def names_colour(caption: str, colour: str) -> bool:
    """Success = a well-formed caption (template parse) that names the colour."""
    objs = S.parse_caption(caption)
    return bool(objs and any(o["colour"] == colour for o in objs))


def names_concept(caption: str, concept: str) -> bool:
    """Whether a caption names a concept: for a concept of the scenes' template (a colour, shape,
    texture or position), a well-formed caption with an object that has it; for any other label (a
    model's own words), the label's words in the text."""
    import re

    concept = concept.strip().lower()
    if concept in S.COLOURS or concept in S.SHAPES or concept in S.TEXTURES or concept in S.POSITIONS:
        objs = S.parse_caption(caption)
        return bool(objs and any(concept in (o["colour"], o["shape"], o["texture"], o["position"]) for o in objs))
    return bool(concept) and re.search(rf"(?<!\w){re.escape(concept)}(?!\w)", caption.lower()) is not None


@torch.no_grad()
def steering_success(
    model,
    tokenizer,
    sae,
    hookpoint: str,
    specs: list[dict],
    colour_features: dict[str, int],
    value_for: dict[str, float],
    *,
    positions: str = "prompt",
    add_error: bool = False,
    n: int = 25,
    suppress_for: Mapping[str, Sequence[int]] | None = None,
    floor: torch.Tensor | None = None,
) -> dict:
    """For every colour: fraction of held-out scenes without that colour whose steered caption is
    well formed and names it."""
    out = {}
    for colour, f in colour_features.items():
        pool = [s for s in specs if all(o["colour"] != colour for o in s["objects"])][:n]
        imgs = np.stack([S.render(s)[0] for s in pool])
        caps = steered_captions(
            model,
            tokenizer,
            sae,
            hookpoint,
            imgs,
            f,
            value_for[colour],
            positions=positions,
            add_error=add_error,
            suppress=(suppress_for or {}).get(colour, ()),
            floor=floor,
        )
        ok = [names_colour(c, colour) for c in caps]
        out[colour] = {
            "feature": int(f),
            "value": round(float(value_for[colour]), 3),
            "success": float(np.mean(ok)),
            "malformed": float(np.mean([S.parse_caption(c) is None for c in caps])),
            "example": caps[0] if caps else "",
        }
    return out
