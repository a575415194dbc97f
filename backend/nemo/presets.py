"""The Memorization tab's presets and the one pipeline loader both sources go through."""

from __future__ import annotations

from pathlib import Path

from backend.core import weights
from backend.core.presets import Preset, load_pretrained, register

TAB = "memorization"

ZOO = register(
    Preset(
        tab=TAB,
        source="zoo",
        path_or_id="sd-memo",
        model_class="diffusers.StableDiffusionPipeline",
        label="sd-memo: tiny Stable Diffusion with 10 memorized images (zoo)",
    )
)
HUB = register(
    Preset(
        tab=TAB,
        source="hub",
        path_or_id="CompVis/stable-diffusion-v1-4",
        model_class="diffusers.StableDiffusionPipeline",
        label="Stable Diffusion v1.4 (CompVis)",
        # The paper's settings: θ_mem = 0.428 (mean + 1 std over non-memorized LAION prompts, scored at
        # guidance 7), 10 seeds, 50 DDIM steps; the neuron search at guidance 0 as the official script.
        extra={
            "theta_mem": 0.428,
            "guidance_scale": 7.0,
            "num_inference_steps": 50,
            "num_seeds": 10,
            "search_guidance_scale": 0.0,
        },
    )
)


def load_pipeline(path_or_id: str | Path, *, roots: list[Path] | None = None, device=None, dtype=None, **kwargs):
    """`StableDiffusionPipeline.from_pretrained` under the workbench's loading rules (validated
    location, safetensors only, no remote code), without the safety checker, with a DDIM
    scheduler (steps_offset=1) as the paper samples, in eval mode and without progress bars."""
    from diffusers import DDIMScheduler, StableDiffusionPipeline

    if dtype is not None:
        kwargs["torch_dtype"] = dtype
    pipe = load_pretrained(
        StableDiffusionPipeline,
        path_or_id,
        roots=roots,
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
        **kwargs,
    )
    pipe.scheduler = DDIMScheduler.from_config(
        pipe.scheduler.config, steps_offset=1, clip_sample=False, set_alpha_to_one=False
    )
    if device is not None:
        pipe.to(device)
    for m in (pipe.unet, pipe.vae, pipe.text_encoder):
        m.eval().requires_grad_(False)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def load_preset_pipeline(preset: Preset, **kwargs):
    from backend.core.presets import ZOO_ROOT

    roots = [ZOO_ROOT] if preset.source == "zoo" else None
    if preset.revision:
        kwargs.setdefault("revision", preset.revision)
    return load_pipeline(preset.location(), roots=roots, **kwargs)


def _load_shared(preset: Preset, *, size_hint: int | None = None, dtype=None):
    """A Stable Diffusion pipeline's shared weights (backend.core.weights), whichever tab asks."""
    return load_preset_pipeline(preset, dtype=dtype)


weights.register_loader("diffusers.StableDiffusionPipeline", _load_shared)
