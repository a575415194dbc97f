"""NeMo (Hintersdorf et al., NeurIPS 2024): find the cross-attention value neurons that hold a
memorized prompt, and switch them off.

Neurons are the output channels of the value projections `attn2.to_v` of the UNet's down and mid
blocks (Stable Diffusion 1.4: 7 layers, 5,760 neurons). Everything here works on any
`StableDiffusionPipeline`-like object with `unet`, `text_encoder`, `tokenizer`, `scheduler` and
`vae`; every computation holds the UNet's lock, and a deactivation is a scoped forward hook that
zeroes channels for both halves of the classifier-free-guidance batch at every denoising step.
"""

from __future__ import annotations

import copy
import itertools
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

import numpy as np
import torch

from backend.core import limits
from backend.core.device import device_of
from backend.core.interventions import locked, scale_channels_many

from .metrics import minmax_per_channel, pairwise_ssim

Spec = dict[str, list[int]]  # {value layer name: [channel, ...]}


# ----------------------------------------------------------------------------- layers


def value_layers(unet) -> list[str]:
    """Names of the cross-attention value projections of the down and mid blocks, in forward
    order (down blocks first, then the mid block)."""
    names = [
        n for n, _ in unet.named_modules() if n.endswith("attn2.to_v") and n.startswith(("down_blocks.", "mid_block."))
    ]
    return [n for n in names if n.startswith("down_blocks.")] + [n for n in names if n.startswith("mid_block.")]


def layer_sizes(unet) -> dict[str, int]:
    return {n: int(unet.get_submodule(n).out_features) for n in value_layers(unet)}


def short_name(layer: str) -> str:
    """'down_blocks.1.attentions.0.transformer_blocks.0.attn2.to_v' → 'down1.attn0'."""
    parts = layer.split(".")
    if parts[0] == "down_blocks":
        return f"down{parts[1]}.attn{parts[3]}"
    return f"mid.attn{parts[2]}"


def validate_spec(unet, spec: Mapping[str, Sequence[int]]) -> Spec:
    """A clean copy of a neuron selection; unknown layers or out-of-range channels raise."""
    sizes = layer_sizes(unet)
    out: Spec = {}
    for name, channels in (spec or {}).items():
        if name not in sizes:
            raise ValueError(f"{name!r} is not a down/mid-block attn2.to_v layer of this UNet")
        chans = sorted({int(c) for c in channels})
        bad = [c for c in chans if c < 0 or c >= sizes[name]]
        if bad:
            raise ValueError(f"channel {bad[0]} out of range for {short_name(name)} ({sizes[name]} neurons)")
        if chans:
            out[name] = chans
    return out


def count(spec: Mapping[str, Sequence[int]]) -> int:
    return sum(len(v) for v in spec.values())


@contextmanager
def deactivate(unet, spec: Mapping[str, Sequence[int]]):
    """Zero the chosen `attn2.to_v` output channels for the duration of the context.

    The hook sits on the value projection itself, so it acts at every denoising step and on both
    halves of a classifier-free-guidance batch; leaving the context removes it (weights are never
    touched), also when the body raises."""
    clean = validate_spec(unet, spec)
    with scale_channels_many(unet, clean, 0.0):
        yield unet


# ----------------------------------------------------------------------------- text and sampling


def encode_prompts(pipe, prompts: Sequence[str]) -> torch.Tensor:
    """Text-encoder states [N, L, D], padded to the tokenizer's max length as Stable Diffusion does."""
    tok = pipe.tokenizer
    ids = tok(
        list(prompts), padding="max_length", max_length=tok.model_max_length, truncation=True, return_tensors="pt"
    ).input_ids
    device = device_of(pipe.text_encoder)
    with torch.no_grad():
        return pipe.text_encoder(ids.to(device))[0]


def _unet_device_dtype(unet):
    p = next(unet.parameters())
    return p.device, p.dtype


def initial_latents(pipe, seeds: Sequence[int]) -> torch.Tensor:
    """x_T for each seed (one CPU generator per seed, so a seed gives the same noise anywhere)."""
    cfg = pipe.unet.config
    size = cfg.sample_size if isinstance(cfg.sample_size, int) else cfg.sample_size[0]
    xs = [torch.randn((1, cfg.in_channels, size, size), generator=torch.Generator().manual_seed(int(s))) for s in seeds]
    return torch.cat(xs)


def _scheduler(pipe, steps: int):
    from diffusers import DDIMScheduler

    sched = DDIMScheduler.from_config(pipe.scheduler.config)
    sched.set_timesteps(steps)
    return sched


# The neuron search's guidance by default, as the official detection script's (`--guidance_scale 0`:
# the conditional prediction alone); detection scores use the model's sampling guidance.
SEARCH_GUIDANCE = 0.0


def _eps(unet, latents, t, cond, uncond, guidance_scale: float):
    n = len(latents)
    device, dtype = _unet_device_dtype(unet)
    if guidance_scale == 0:
        return (
            unet(latents.to(device, dtype), t, encoder_hidden_states=cond.expand(n, -1, -1).to(device, dtype))
            .sample.float()
            .cpu()
        )
    x = torch.cat([latents, latents]).to(device, dtype)
    emb = torch.cat([uncond.expand(n, -1, -1), cond.expand(n, -1, -1)]).to(device, dtype)
    # Standard classifier-free guidance: the batch is [uncond, cond] and is read back in that order.
    # The official NeMo code stacks [uncond, cond] but unpacks it as (text, uncond), which pushes
    # away from the prompt for guidance > 1; that is a bug, not part of the method, so not copied.
    e_u, e_c = unet(x, t, encoder_hidden_states=emb).sample.float().cpu().chunk(2)
    return e_u + guidance_scale * (e_c - e_u)


class NoiseInputs:
    """What the noise differences of one prompt and set of seeds feed the UNet, prepared once: the
    text states, the timestep and x_T (on the UNet's device and dtype). The neuron search
    evaluates tens of selections on the same inputs; re-encoding the prompt and redrawing the
    noise for each cost more than the UNet step itself at SD-1.4's size."""

    @torch.no_grad()
    def __init__(
        self,
        pipe,
        prompt: str,
        seeds: Sequence[int],
        *,
        guidance_scale: float = 7.0,
        num_inference_steps: int = 50,
        step_index: int = 1,
    ):
        device, dtype = _unet_device_dtype(pipe.unet)
        self.guidance_scale = guidance_scale
        self.cond = encode_prompts(pipe, [prompt]).to(device, dtype)
        self.uncond = encode_prompts(pipe, [""]).to(device, dtype) if guidance_scale else None
        sched = _scheduler(pipe, num_inference_steps)
        self.t = sched.timesteps[min(step_index, len(sched.timesteps) - 1)]
        self.latents = initial_latents(pipe, seeds) * sched.init_noise_sigma
        self.x_t = sched.scale_model_input(self.latents, self.t)
        self.x_t_dev = self.x_t.to(device, dtype)
        self.v_prediction = sched.config.prediction_type == "v_prediction"
        self.abar = sched.alphas_cumprod[int(self.t)].float()

    def subset(self, keep: torch.Tensor) -> "NoiseInputs":
        """The same inputs for the seeds where `keep` is True."""
        sub = copy.copy(self)
        sub.latents, sub.x_t, sub.x_t_dev = (
            self.latents[keep],
            self.x_t[keep],
            self.x_t_dev[keep.to(self.x_t_dev.device)],
        )
        return sub

    @torch.no_grad()
    def differences(self, unet, spec: Mapping[str, Sequence[int]] | None = None) -> torch.Tensor:
        with deactivate(unet, spec or {}):
            eps = _eps(unet, self.x_t_dev, self.t, self.cond, self.uncond, self.guidance_scale)
        if self.v_prediction:
            # SD-2.x's v-models predict v = α·ε − σ·x₀; the metric is on the predicted noise, and
            # ε = α·v + σ·x_t (α² + σ² = 1), so a v-model is measured as the paper measures SD-1.x
            eps = self.abar.sqrt() * eps + (1 - self.abar).sqrt() * self.x_t.float()
        return minmax_per_channel(eps - self.latents)


@torch.no_grad()
def noise_differences(
    pipe,
    prompt: str,
    seeds: Sequence[int],
    *,
    guidance_scale: float = 7.0,
    spec: Mapping[str, Sequence[int]] | None = None,
    num_inference_steps: int = 50,
    step_index: int = 1,
) -> torch.Tensor:
    """ε̂(x_T, t, prompt) − x_T: the noise predicted from the initial noise x_T at the timestep
    `step_index` of a DDIM schedule of `num_inference_steps` (the paper's t₁: the second of 50),
    without stepping the scheduler, as the official code computes it; min–max normalised per sample
    and channel → [len(seeds), C, h, w]. `spec` neurons are off during the prediction."""
    return NoiseInputs(
        pipe,
        prompt,
        seeds,
        guidance_scale=guidance_scale,
        num_inference_steps=num_inference_steps,
        step_index=step_index,
    ).differences(pipe.unet, spec)


def seed_agreement(diffs: torch.Tensor) -> torch.Tensor:
    """Per seed, its largest SSIM with any other seed's noise difference → [N]."""
    n = len(diffs)
    out = torch.full((n,), float("-inf"))
    for (i, j), s in zip(itertools.combinations(range(n), 2), pairwise_ssim(diffs).tolist()):
        out[i] = max(out[i], s)
        out[j] = max(out[j], s)
    return out


def memorization_score(
    pipe,
    prompt: str,
    *,
    num_seeds: int = 5,
    guidance_scale: float = 7.0,
    spec: Mapping[str, Sequence[int]] | None = None,
    seed_offset: int = 0,
    **kw,
) -> float:
    """Max pairwise SSIM of the normalised noise differences across seeds: a memorized prompt
    pulls every starting noise towards the same image, so its differences agree."""
    d = noise_differences(
        pipe, prompt, range(seed_offset, seed_offset + num_seeds), guidance_scale=guidance_scale, spec=spec, **kw
    )
    return float(pairwise_ssim(d).max())


@torch.no_grad()
def generate(
    pipe,
    prompt: str,
    seeds: Iterable[int],
    *,
    guidance_scale: float = 7.0,
    num_inference_steps: int = 10,
    spec: Mapping[str, Sequence[int]] | None = None,
    return_latents: bool = False,
):
    """DDIM sampling with classifier-free guidance, one image per seed → float [N, H, W, 3] in [0, 1]."""
    seeds = list(seeds)
    unet, vae = pipe.unet, pipe.vae
    cond = encode_prompts(pipe, [prompt])
    uncond = encode_prompts(pipe, [""])
    sched = _scheduler(pipe, num_inference_steps)
    latents = initial_latents(pipe, seeds) * sched.init_noise_sigma
    with deactivate(unet, spec or {}):
        # a request's time limit ends seeds × steps, not only searches, before a step that would pass it
        for t in limits.Steps("the generation").each(sched.timesteps):
            eps = _eps(unet, sched.scale_model_input(latents, t), t, cond, uncond, guidance_scale)
            latents = sched.step(eps, t, latents).prev_sample
    vdev = device_of(vae)
    vdtype = next(vae.parameters()).dtype
    with locked(vae):
        img = vae.decode((latents / vae.config.scaling_factor).to(vdev, vdtype)).sample.float().cpu()
    img = ((img.clamp(-1, 1) + 1) / 2).permute(0, 2, 3, 1).numpy()
    return (img, latents) if return_latents else img


# ----------------------------------------------------------------------------- activation statistics


@torch.no_grad()
def activations(
    pipe, prompts: Sequence[str], layers: Sequence[str] | None = None, batch: int = 64
) -> dict[str, torch.Tensor]:
    """Per prompt and neuron: mean over all text positions of |to_v(text state)| → {layer: [N, C]}.

    The value projection reads only the text states, so this needs no denoising step."""
    unet = pipe.unet
    layers = list(layers or value_layers(unet))
    out: dict[str, list[torch.Tensor]] = {n: [] for n in layers}
    device, dtype = _unet_device_dtype(unet)
    with locked(unet):
        for i in range(0, len(prompts), batch):
            states = encode_prompts(pipe, prompts[i : i + batch]).to(device, dtype)
            for n in layers:
                attn = unet.get_submodule(n.rsplit(".", 1)[0])
                h = states
                if getattr(attn, "norm_cross", None) is not None:
                    h = attn.norm_cross(h)
                out[n].append(unet.get_submodule(n)(h).abs().mean(1).float().cpu())
    return {n: torch.cat(v) for n, v in out.items()}


@dataclass
class NeuronStats:
    mean: dict[str, torch.Tensor]
    std: dict[str, torch.Tensor]
    n_prompts: int

    def to_json(self) -> dict:
        return {
            "n_prompts": self.n_prompts,
            "mean": {k: v.tolist() for k, v in self.mean.items()},
            "std": {k: v.tolist() for k, v in self.std.items()},
        }


def neuron_stats(pipe, prompts: Sequence[str]) -> NeuronStats:
    """μ and σ of every neuron's activation over non-memorized prompts."""
    acts = activations(pipe, prompts)
    return NeuronStats(
        {k: v.mean(0) for k, v in acts.items()}, {k: v.std(0).clamp_min(1e-8) for k, v in acts.items()}, len(prompts)
    )


def zscores(acts: Mapping[str, torch.Tensor], stats: NeuronStats) -> dict[str, torch.Tensor]:
    """z = |a − μ| / σ per neuron (acts for one prompt: {layer: [C]} or [1, C])."""
    return {k: ((v.reshape(-1) - stats.mean[k]).abs() / stats.std[k]) for k, v in acts.items()}


def random_like(unet, spec: Mapping[str, Sequence[int]], seed: int = 0) -> Spec:
    """The same number of neurons per layer, drawn at random (avoiding the given ones)."""
    g = np.random.default_rng(seed)
    sizes = layer_sizes(unet)
    out: Spec = {}
    for n, chans in spec.items():
        pool = [c for c in range(sizes[n]) if c not in set(chans)]
        out[n] = sorted(int(c) for c in g.choice(pool, size=min(len(chans), len(pool)), replace=False))
    return out
