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
`suppress` optionally zeroes other features at the same positions (e.g. the other colours' features,
so the clamp swaps a colour instead of mixing two).
The hook is removed and the model's lock released in `finally`.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Mapping, Sequence

import numpy as np
import torch

from . import scenes as S
from . import vlm
from .sae import TopKSAE

POSITION_MODES = ("prompt", "all", "image", "text")


def clamp_codes(sae: TopKSAE, h: torch.Tensor, feature: int, value: float, add_error: bool,
                suppress: tuple[int, ...] = ()) -> torch.Tensor:
    vals, idx = sae.encode_sparse(h)
    # drop the feature (and any suppressed ones) from the top-k slots, then add it at the clamped value
    for g in (feature, *suppress):
        vals = torch.where(idx == g, torch.zeros_like(vals), vals)
    recon = sae.decode_sparse(vals, idx) + value * sae.W_dec[feature]
    if add_error:
        recon = recon + (h.to(recon.dtype) - sae(h))
    return recon.to(h.dtype)


@contextmanager
def clamp_feature(model, sae: TopKSAE, hookpoint: str, feature: int, value: float, *,
                  positions: str = "prompt", add_error: bool = False,
                  image_positions: slice | torch.Tensor | None = None,
                  suppress: Sequence[int] = ()):
    if positions not in POSITION_MODES:
        raise ValueError(f"positions must be one of {POSITION_MODES}, not {positions!r}")
    if not 0 <= int(feature) < sae.n_latents:
        raise IndexError(f"feature {feature} out of range 0..{sae.n_latents - 1}")
    # a slice (the zoo's fixed prompt) or the positions of one prompt's image tokens (hub, anyres)
    sl = image_positions if image_positions is not None else vlm.image_slice(model)

    def fn(h: torch.Tensor):
        prompt_pass = h.shape[-2] > 1
        if positions != "all" and not prompt_pass:
            return None
        new = clamp_codes(sae, h, int(feature), float(value), add_error, tuple(int(g) for g in suppress))
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


@torch.no_grad()
def steered_captions(model, tokenizer, sae, hookpoint: str, images: np.ndarray, feature: int, value: float, *,
                     positions: str = "prompt", add_error: bool = False, suppress: Sequence[int] = ()) -> list[str]:
    with clamp_feature(model, sae, hookpoint, feature, value, positions=positions, add_error=add_error,
                       suppress=suppress):
        return vlm.generate_captions(model, tokenizer, images)


@torch.no_grad()
def hub_steered_caption(model, processor, sae, hookpoint: str, image, feature: int, value: float, *,
                        positions: str = "prompt", add_error: bool = False, suppress: Sequence[int] = (),
                        text: str = vlm.HUB_PROMPT, max_new_tokens: int = 24) -> str:
    """The same clamp on a hub VLM, prompted through its processor and chat template (LLaVA-NeXT's
    image_sizes included); "image" positions are all of the prompt's image tokens (base image,
    tiles and row newlines)."""
    inputs = vlm.hub_inputs(model, processor, [image], text)
    sizes = inputs.get("image_sizes")
    lay = vlm.image_layout(model, inputs["input_ids"][0], None if sizes is None else sizes[0])
    tok = processor.tokenizer
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    with clamp_feature(model, sae, hookpoint, feature, value, positions=positions, add_error=add_error,
                       image_positions=lay.image.to(inputs["input_ids"].device), suppress=suppress):
        out = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=pad)
    return tok.decode(out[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True).strip()


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
def steering_success(model, tokenizer, sae, hookpoint: str, specs: list[dict], colour_features: dict[str, int],
                     value_for: dict[str, float], *, positions: str = "prompt", add_error: bool = False,
                     n: int = 25, suppress_for: Mapping[str, Sequence[int]] | None = None) -> dict:
    """For every colour: fraction of held-out scenes without that colour whose steered caption is
    well formed and names it."""
    out = {}
    for colour, f in colour_features.items():
        pool = [s for s in specs if all(o["colour"] != colour for o in s["objects"])][:n]
        imgs = np.stack([S.render(s)[0] for s in pool])
        caps = steered_captions(model, tokenizer, sae, hookpoint, imgs, f, value_for[colour],
                                positions=positions, add_error=add_error,
                                suppress=(suppress_for or {}).get(colour, ()))
        ok = [names_colour(c, colour) for c in caps]
        out[colour] = {"feature": int(f), "value": round(float(value_for[colour]), 3), "success": float(np.mean(ok)),
                       "malformed": float(np.mean([S.parse_caption(c) is None for c in caps])),
                       "example": caps[0] if caps else ""}
    return out
