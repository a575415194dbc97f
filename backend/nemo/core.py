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
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np
import torch

from backend.core import limits
from backend.core.device import device_of
from backend.core.interventions import locked, scale_channels_many

from . import speculate
from .metrics import minmax_per_channel, pairwise_ssim

Spec = dict[str, list[int]]  # {value layer name: [channel, ...]}


# ----------------------------------------------------------------------------- layers

def value_layers(unet) -> list[str]:
    """Names of the cross-attention value projections of the down and mid blocks, in forward
    order (down blocks first, then the mid block)."""
    names = [n for n, _ in unet.named_modules()
             if n.endswith("attn2.to_v") and n.startswith(("down_blocks.", "mid_block."))]
    return ([n for n in names if n.startswith("down_blocks.")]
            + [n for n in names if n.startswith("mid_block.")])


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
            raise ValueError(f"channel {bad[0]} out of range for {short_name(name)} "
                             f"({sizes[name]} neurons)")
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
    ids = tok(list(prompts), padding="max_length", max_length=tok.model_max_length,
              truncation=True, return_tensors="pt").input_ids
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
    xs = [torch.randn((1, cfg.in_channels, size, size), generator=torch.Generator().manual_seed(int(s)))
          for s in seeds]
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
        return unet(latents.to(device, dtype), t, encoder_hidden_states=cond.expand(n, -1, -1).to(device, dtype)).sample.float().cpu()
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
    def __init__(self, pipe, prompt: str, seeds: Sequence[int], *, guidance_scale: float = 7.0,
                 num_inference_steps: int = 50, step_index: int = 1):
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
        sub.latents, sub.x_t, sub.x_t_dev = self.latents[keep], self.x_t[keep], self.x_t_dev[keep.to(self.x_t_dev.device)]
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
def noise_differences(pipe, prompt: str, seeds: Sequence[int], *, guidance_scale: float = 7.0,
                      spec: Mapping[str, Sequence[int]] | None = None, num_inference_steps: int = 50,
                      step_index: int = 1) -> torch.Tensor:
    """ε̂(x_T, t, prompt) − x_T: the noise predicted from the initial noise x_T at the timestep
    `step_index` of a DDIM schedule of `num_inference_steps` (the paper's t₁: the second of 50),
    without stepping the scheduler, as the official code computes it; min–max normalised per sample
    and channel → [len(seeds), C, h, w]. `spec` neurons are off during the prediction."""
    return NoiseInputs(pipe, prompt, seeds, guidance_scale=guidance_scale, num_inference_steps=num_inference_steps,
                       step_index=step_index).differences(pipe.unet, spec)


def seed_agreement(diffs: torch.Tensor) -> torch.Tensor:
    """Per seed, its largest SSIM with any other seed's noise difference → [N]."""
    n = len(diffs)
    out = torch.full((n,), float("-inf"))
    for (i, j), s in zip(itertools.combinations(range(n), 2), pairwise_ssim(diffs).tolist()):
        out[i] = max(out[i], s)
        out[j] = max(out[j], s)
    return out


def memorization_score(pipe, prompt: str, *, num_seeds: int = 5, guidance_scale: float = 7.0,
                       spec: Mapping[str, Sequence[int]] | None = None, seed_offset: int = 0,
                       **kw) -> float:
    """Max pairwise SSIM of the normalised noise differences across seeds: a memorized prompt
    pulls every starting noise towards the same image, so its differences agree."""
    d = noise_differences(pipe, prompt, range(seed_offset, seed_offset + num_seeds),
                          guidance_scale=guidance_scale, spec=spec, **kw)
    return float(pairwise_ssim(d).max())


@torch.no_grad()
def generate(pipe, prompt: str, seeds: Iterable[int], *, guidance_scale: float = 7.0,
             num_inference_steps: int = 10, spec: Mapping[str, Sequence[int]] | None = None,
             return_latents: bool = False):
    """DDIM sampling with classifier-free guidance, one image per seed → float [N, H, W, 3] in [0, 1]."""
    seeds = list(seeds)
    unet, vae = pipe.unet, pipe.vae
    cond = encode_prompts(pipe, [prompt])
    uncond = encode_prompts(pipe, [""])
    sched = _scheduler(pipe, num_inference_steps)
    latents = initial_latents(pipe, seeds) * sched.init_noise_sigma
    with deactivate(unet, spec or {}):
        for t in sched.timesteps:
            limits.check("the generation")  # a request's time limit ends seeds × steps, not only searches
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
def activations(pipe, prompts: Sequence[str], layers: Sequence[str] | None = None,
                batch: int = 64) -> dict[str, torch.Tensor]:
    """Per prompt and neuron: mean over all text positions of |to_v(text state)| → {layer: [N, C]}.

    The value projection reads only the text states, so this needs no denoising step."""
    unet = pipe.unet
    layers = list(layers or value_layers(unet))
    out: dict[str, list[torch.Tensor]] = {n: [] for n in layers}
    device, dtype = _unet_device_dtype(unet)
    with locked(unet):
        for i in range(0, len(prompts), batch):
            states = encode_prompts(pipe, prompts[i:i + batch]).to(device, dtype)
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
        return {"n_prompts": self.n_prompts,
                "mean": {k: v.tolist() for k, v in self.mean.items()},
                "std": {k: v.tolist() for k, v in self.std.items()}}


def neuron_stats(pipe, prompts: Sequence[str]) -> NeuronStats:
    """μ and σ of every neuron's activation over non-memorized prompts."""
    acts = activations(pipe, prompts)
    return NeuronStats({k: v.mean(0) for k, v in acts.items()},
                       {k: v.std(0).clamp_min(1e-8) for k, v in acts.items()}, len(prompts))


def zscores(acts: Mapping[str, torch.Tensor], stats: NeuronStats) -> dict[str, torch.Tensor]:
    """z = |a − μ| / σ per neuron (acts for one prompt: {layer: [C]} or [1, C])."""
    return {k: ((v.reshape(-1) - stats.mean[k]).abs() / stats.std[k]) for k, v in acts.items()}


# ----------------------------------------------------------------------------- localisation

@dataclass
class Localization:
    """One prompt's search. `found`: the initial selection brought the SSIM to θ_mem or below;
    otherwise (θ reached its floor) the refinement ran against `threshold`, the last SSIM reached,
    as the official code does. `skipped`: no seed's noise difference agreed with another's above
    θ_mem, so the prompt is not memorized and nothing was searched."""
    prompt: str
    neurons: Spec
    initial: Spec
    theta: float
    k: int
    seconds: float
    evaluations: int
    found: bool = True
    history: list[dict] = field(default_factory=list)
    threshold: float = float("nan")
    guidance_scale: float = SEARCH_GUIDANCE
    seeds: list[int] = field(default_factory=list)
    seeds_kept: list[int] = field(default_factory=list)
    skipped: bool = False
    unet_batches: int = 0  # UNet forwards the search ran (several evaluations each when batched)

    @property
    def n_neurons(self) -> int:
        return count(self.neurons)

    @property
    def relaxed(self) -> bool:
        return not self.found and not self.skipped

    def to_json(self) -> dict:
        return {"prompt": self.prompt, "neurons": self.neurons, "n_neurons": self.n_neurons,
                "initial": self.initial, "n_initial": count(self.initial), "theta": self.theta,
                "k": self.k, "seconds": round(self.seconds, 3), "evaluations": self.evaluations,
                "found": self.found, "relaxed": self.relaxed, "skipped": self.skipped,
                "threshold": self.threshold, "guidance_scale": self.guidance_scale,
                "seeds": self.seeds, "seeds_kept": self.seeds_kept, "history": self.history,
                "unet_batches": self.unet_batches}


def initial_selection(pipe, prompt: str, stats: NeuronStats, checker, *,
                      theta_start: float = 5.0, theta_step: float = 0.25, k_start: int = 0,
                      theta_min: float = 1.0, max_k: int | None = None, history: list | None = None):
    """Per layer: neurons with z > θ plus the top-k by raw activation (in that order, each once);
    while switching the selection off leaves the SSIM above θ_mem, θ falls by `theta_step` (down
    to `theta_min`) and k grows by one.

    Returns (spec, θ, k, found, threshold). As in the official code the search ends when θ reaches
    `theta_min` (θ = 1 with k = 16 from the defaults; the last selection tried is θ = 1.25, k = 15) or
    k reaches `max_k`; then found is False and threshold is the last SSIM reached, against which the
    refinement runs. When found, threshold is θ_mem."""
    acts = {k: v[0] for k, v in activations(pipe, [prompt]).items()}
    z = zscores(acts, stats)
    theta, k = theta_start, k_start
    sizes = {n: len(v) for n, v in acts.items()}
    # The selections tried do not depend on the SSIMs reached (only where to stop does), so the
    # whole schedule is listed first and evaluated in batches (speculate.first_below).
    schedule: list[tuple[float, int, Spec]] = []
    while True:
        spec: Spec = {}
        for n in acts:
            # The refinement tries the neurons in list order and its outcome depends on that order,
            # so each layer's list is the official one: the z-score outliers by channel index, then
            # the top-k by activation, highest first. The official list keeps a neuron twice when
            # both criteria pick it; switching one copy back on then changes nothing, so that neuron
            # is never really tested (kept under the relaxed threshold). Here it appears once, at
            # its first occurrence.
            chosen = (z[n] > theta).nonzero().flatten().tolist()
            if k > 0:
                chosen += acts[n].topk(min(k, sizes[n])).indices.tolist()
            if chosen:
                spec[n] = list(dict.fromkeys(chosen))
        schedule.append((theta, k, spec))
        # every neuron already off: lowering θ further cannot change the selection
        full = all(len(spec.get(n, [])) >= sizes[n] for n in sizes)
        next_theta = theta - theta_step if theta > theta_min else theta
        if full or next_theta <= theta_min or (max_k is not None and k + 1 >= max_k):
            break
        theta, k = next_theta, k + 1
    hit, sims = speculate.first_below(checker, [sp for _, _, sp in schedule], checker.theta_mem)
    if history is not None:
        for (theta, k, spec), sim in zip(schedule, sims):
            history.append({"stage": "initial", "theta": theta, "k": k, "n": count(spec),
                            "ssim": round(sim, 4)})
    theta, k, spec = schedule[hit]
    if hit >= 0:
        return spec, theta, k, True, checker.theta_mem
    sim = sims[-1]
    if spec and speculate.batched(checker):
        sim = checker.exact(spec)  # the refinement's threshold: the sequential search's own number
        if history is not None:
            history[-1]["ssim"] = round(sim, 4)
    return spec, theta, k, False, sim


def refine(spec: Spec, checker, threshold: float | None = None,
           history: list | None = None, start_sim: float | None = None) -> Spec:
    """Greedy pruning, as in the paper: first whole layers, then single neurons, each in reverse
    layer order; whatever can be switched back on while the SSIM stays strictly below `threshold`
    (default θ_mem; the official comparison is strict) is. A batched checker evaluates the trials
    speculatively several at a time with the same result (backend.nemo.speculate); `start_sim`, the
    SSIM of `spec` when known, sharpens its guesses."""
    threshold = checker.theta_mem if threshold is None else threshold
    spec = copy.deepcopy(spec)

    def drop_layer(state: Spec, layer: str) -> Spec | None:
        trial = {k: v for k, v in state.items() if k != layer}
        return trial or None

    def drop_neuron(state: Spec, move: tuple[str, int]) -> Spec | None:
        # states are never edited in place, so a trial shares every other layer's list with them
        layer, ch = move
        trial = dict(state)
        rest = list(state[layer])
        rest.remove(ch)
        if rest:
            trial[layer] = rest
        else:
            del trial[layer]
        return trial if count(trial) else None

    def note(stage):
        def on_accept(move, state):
            if history is not None:
                entry = {"stage": stage, "layer": move} if stage == "layer" else \
                    {"stage": stage, "layer": move[0], "channel": move[1]}
                history.append({**entry, "n": count(state)})
        return on_accept

    spec, sim = speculate.greedy(checker, spec, list(reversed(list(spec))), drop_layer, threshold, note("layer"),
                                 state_sim=start_sim)
    moves = [(layer, ch) for layer in reversed(list(spec)) for ch in spec[layer]]
    return speculate.greedy(checker, spec, moves, drop_neuron, threshold, note("neuron"), state_sim=sim)[0]


def localize(pipe, prompt: str, stats: NeuronStats, theta_mem: float, *, num_seeds: int = 5,
             guidance_scale: float = SEARCH_GUIDANCE,
             progress: Callable[[float, str], None] | None = None, max_k: int | None = None,
             groups: int | None = None, **kw) -> Localization:
    """Seed filter, initial selection and refinement → the memorization neurons of one prompt.

    `guidance_scale` is the search's own (default 0, the official search's): detection scores and
    generations use the model's sampling guidance instead. `groups`: selections per UNet batch
    (default from the latent size, evaluate.groups_for; 1 evaluates one at a time)."""
    from .evaluate import Checker

    t0 = time.perf_counter()
    history: list[dict] = []
    report = progress or (lambda f, msg: None)
    with locked(pipe.unet):
        report(0.05, "noise differences without intervention")
        checker = Checker(pipe, prompt, range(num_seeds), guidance_scale, theta_mem, groups=groups, **kw)
        common = dict(guidance_scale=float(guidance_scale), seeds=checker.all_seeds,
                      seeds_kept=checker.seeds)
        if not checker.seeds:
            report(1.0, "no seed agrees with another above θ_mem: not memorized, skipped")
            return Localization(prompt, {}, {}, float("nan"), 0, time.perf_counter() - t0,
                                checker.calls, False, history, skipped=True, unet_batches=checker.batches,
                                **common)
        report(0.15, "initial selection (z-scores and top-k activations)")
        initial, theta, k, found, threshold = initial_selection(pipe, prompt, stats, checker,
                                                                max_k=max_k, history=history)
        report(0.5, f"refining {count(initial)} neurons")
        # relaxed: the threshold is the initial selection's own SSIM
        neurons = refine(initial, checker, threshold, history, start_sim=None if found else threshold)
        report(1.0, f"{count(neurons)} neurons")
    return Localization(prompt, neurons, initial, theta, k, time.perf_counter() - t0,
                        checker.calls, found, history, threshold=float(threshold),
                        unet_batches=checker.batches, **common)


def random_like(unet, spec: Mapping[str, Sequence[int]], seed: int = 0) -> Spec:
    """The same number of neurons per layer, drawn at random (avoiding the given ones)."""
    g = np.random.default_rng(seed)
    sizes = layer_sizes(unet)
    out: Spec = {}
    for n, chans in spec.items():
        pool = [c for c in range(sizes[n]) if c not in set(chans)]
        out[n] = sorted(int(c) for c in g.choice(pool, size=min(len(chans), len(pool)), replace=False))
    return out


def __getattr__(name):  # the search's checker under its former name (benchmarks, tests)
    if name == "_Checker":
        from .evaluate import Checker
        return Checker
    raise AttributeError(name)
