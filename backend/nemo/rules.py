"""Which of a user's own models the Memorization tab takes (backend.core.modelcheck asks): NeMo's
neurons are the value projections of a Stable Diffusion UNet's text cross-attention."""

from __future__ import annotations

from backend.core.modelcheck import MethodRule, register_rule
from backend.core.modelmeta import ModelMeta

from .presets import TAB

SD_PIPELINES = ("StableDiffusionPipeline",)


def problem(meta: ModelMeta) -> str | None:
    arch = meta.architecture
    if meta.diffusers_component:
        return (
            f"{arch} is one diffusers model, not a pipeline: pick the Stable Diffusion pipeline's "
            "folder (the one with model_index.json and unet/, text_encoder/, vae/ inside)"
        )
    if arch not in SD_PIPELINES:
        return f"{arch}: NeMo needs a Stable Diffusion 1.x/2.x pipeline (StableDiffusionPipeline)"
    spec = meta.config.get("unet")
    unet_cls = spec[1] if isinstance(spec, list) and len(spec) == 2 else None
    if unet_cls != "UNet2DConditionModel" or meta.unet is None:
        return f"{arch}: NeMo needs a UNet2DConditionModel under unet/ (found {unet_cls})"
    blocks = list(meta.unet.get("down_block_types", []))
    if not meta.unet.get("cross_attention_dim") or not any("CrossAttn" in b for b in blocks):
        return f"{arch}: its UNet has no text cross-attention (attn2.to_v), where NeMo's neurons live"
    return None


RULE = register_rule(
    MethodRule(method=TAB, problem=problem, order=3, aliases=("nemo",), architectures=SD_PIPELINES, pipeline=True)
)
