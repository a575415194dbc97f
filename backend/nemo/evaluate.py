"""The neuron search's evaluations, on the UNet's own device and several selections per UNet batch.

One evaluation asks: with these value neurons off, how similar are the seeds' noise differences to
the unblocked ones (max SSIM over the kept seeds)? Here a batch of G selections runs as one UNet
forward of G × seeds samples, each group of samples under its own channel mask (a forward hook on
every value layer multiplies its output by the group's 0/1 row, which gives bit for bit what zeroing
the channels gives). The min–max scaling and the SSIM (float64, as before: at these sizes it is a
few small convolutions) stay on the device; G scalars come back.

Exactness. The decisions must be the sequential search's, made at one selection per forward. A
batched forward may differ from it in the last bits (kernels are chosen per batch shape: 6e-8 in
the SSIM on the zoo's float32 UNet on a CPU), and a selection can tie with its threshold exactly (a
neuron whose removal changes nothing), so a screened value within `tie_for(dtype)` of its threshold
is settled by `exact`: that selection alone, at the sequential batch shape, which gives the
sequential search's own number (bit for bit on a CPU). `max_screen_error` records the largest
screened-vs-exact gap a search saw, so a run on new hardware shows whether the margin holds.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Mapping, Sequence

import torch

from backend.core import limits

from .core import NoiseInputs, _unet_device_dtype, layer_sizes, seed_agreement
from .metrics import minmax_per_channel, ssim

# A screened SSIM this close to its threshold is recomputed exactly: 15x the batch rounding measured
# on float32 (tests/unit/test_nemo_batched.py); half-precision kernels round 2^13 times coarser.
TIES = {torch.float32: 1e-6, torch.float64: 1e-9}
HALF_TIE = 1e-4


def tie_for(dtype: torch.dtype) -> float:
    return TIES.get(dtype, HALF_TIE)


# Latent pixels (samples × h × w) per UNet batch. On a GPU a batch costs little more than one
# selection's until the device is full: 64 samples of SD-1.4's 64 × 64 latents, a few GiB of fp16
# activations beside the weights. A CPU is busy from a few samples on: batching pays there only where
# per-op overhead dominates (the zoo's 8 × 8 latents), and speculation's misses would cost full price.
PIXEL_BUDGET = {"cuda": 64 * 64 * 64, "cpu": 64 * 8 * 8}
# Speculation beyond a few selections wastes more than it saves when outcomes alternate.
MAX_GROUPS = 16


def groups_for(n_seeds: int, h: int, w: int, guidance: bool, device: str = "cuda") -> int:
    """Selections per UNet batch for this latent size on this kind of device (at least 1)."""
    per = max(1, n_seeds * (2 if guidance else 1) * h * w)
    budget = PIXEL_BUDGET.get(device, PIXEL_BUDGET["cuda"])
    return max(1, min(MAX_GROUPS, budget // per))


class ValueMasks:
    """Forward hooks on the value layers that multiply each sample group's output by its own mask
    row. `set(masks)` installs a [G, Σ C] mask (on the device, in the UNet's dtype) for the next
    forward, `None` runs the layers untouched. The hooks read only device tensors: no host copy or
    sync happens inside them."""

    def __init__(self, unet, sizes: Mapping[str, int], halves: int):
        self.unet, self.sizes, self.halves = unet, dict(sizes), halves
        self.offsets, off = {}, 0
        for name, c in self.sizes.items():
            self.offsets[name] = (off, c)
            off += c
        self.width = off
        self.views: dict[str, torch.Tensor] | None = None

    def set(self, masks: torch.Tensor | None) -> None:
        if masks is None:
            self.views = None
            return
        # [1, G, 1, C] per layer: broadcasts over the CFG halves and each group's samples × tokens
        self.views = {n: masks[None, :, None, o : o + c] for n, (o, c) in self.offsets.items()}

    def _hook(self, name):
        def hook(_m, _i, out):
            if self.views is None:
                return None
            v = self.views[name]
            shape = out.shape
            return (out.reshape(self.halves, v.shape[1], -1, shape[-1]) * v).reshape(shape)

        return hook

    @contextmanager
    def installed(self):
        handles = []
        try:
            for name in self.sizes:
                handles.append(self.unet.get_submodule(name).register_forward_hook(self._hook(name)))
            yield self
        finally:
            for h in handles:
                h.remove()
            self.views = None


class Checker:
    """SSIM between the unblocked and blocked noise differences, seed by seed, over the seeds whose
    unblocked differences agree with another seed's above θ_mem (the official seed filter); the
    maximum over those seeds is what a selection must bring below the threshold.

    `calls` counts the evaluations the sequential search concludes (the figure reported as
    `evaluations`); `samples` the selections evaluated, speculative ones included; `batches` the
    UNet forwards; `exact_calls` the selections settled by the exact path."""

    def __init__(self, pipe, prompt, seeds, guidance_scale, theta_mem, *, groups: int | None = None, **kw):
        self.pipe, self.prompt, self.g, self.theta_mem, self.kw = pipe, prompt, guidance_scale, theta_mem, kw
        self.steps = limits.Steps("the neuron search")  # its first step guessed by the vanilla forward below
        self.steps.end()
        self.unet = pipe.unet
        self.all_seeds = [int(s) for s in seeds]
        self.device, self.dtype = _unet_device_dtype(self.unet)
        self.sizes = layer_sizes(self.unet)  # the module walk, once per search
        inputs = NoiseInputs(pipe, prompt, self.all_seeds, guidance_scale=guidance_scale, **kw)
        self.latents_dev = inputs.latents.to(self.device)
        self.x_t_f32 = inputs.x_t.to(self.device).float()
        self._prepare(inputs)
        vanilla = self._differences(inputs.x_t_dev, self.latents_dev, self.x_t_f32, 1)
        agree_on = vanilla.cpu()
        keep = seed_agreement(agree_on) > theta_mem if len(self.all_seeds) > 1 else torch.ones(1, dtype=torch.bool)
        self.seeds = [s for s, k in zip(self.all_seeds, keep.tolist()) if k]
        keep_dev = keep.to(self.device)
        self.vanilla = agree_on[keep]
        self.vanilla_dev = vanilla[keep_dev]
        self.inputs = inputs.subset(keep)
        self.latents_dev, self.x_t_f32 = self.latents_dev[keep_dev], self.x_t_f32[keep_dev]
        self.masks = ValueMasks(self.unet, self.sizes, 2 if guidance_scale else 1)
        n = max(1, len(self.seeds))
        h, w = inputs.x_t.shape[-2:]
        self.groups = groups or groups_for(n, h, w, bool(guidance_scale), self.device.type)
        self.pin = self.device.type == "cuda"
        self.calls, self.samples, self.batches, self.exact_calls = 1, 0, 1, 0
        self.tie, self.max_screen_error = tie_for(self.dtype), 0.0
        self.log: list | None = None  # set to a list to record each conclusion (spec, SSIM)

    # ------------------------------------------------------------------ one batch of selections
    def _mask(self, specs: Sequence[Mapping[str, Sequence[int]]]) -> torch.Tensor:
        """[G, Σ C] 0/1 rows in the UNet's dtype, built on the host and copied once."""
        m = torch.ones(len(specs), self.masks.width, dtype=self.dtype, pin_memory=self.pin)
        for g, spec in enumerate(specs):
            for name, chans in spec.items():
                if len(chans):
                    if name not in self.masks.offsets:
                        raise ValueError(f"{name!r} is not a down/mid-block attn2.to_v layer of this UNet")
                    o, size = self.masks.offsets[name]
                    idx = [int(c) for c in chans]
                    if min(idx) < 0 or max(idx) >= size:  # host ints: no device sync
                        raise ValueError(f"channel out of range for {name} ({size} neurons)")
                    m[g, [o + c for c in idx]] = 0
        return m.to(self.device, non_blocking=True)

    @torch.no_grad()
    def _differences(self, x_dev, latents, x_t_f32, groups):
        """Normalised noise differences of `groups` selections → [groups · seeds, C, h, w] (device)."""
        n = len(x_dev)
        cond = self.inputs_cond(n * groups)
        x = x_dev.repeat(groups, 1, 1, 1) if groups > 1 else x_dev
        t = self._t
        if self.g == 0:
            eps = self.unet(x, t, encoder_hidden_states=cond).sample.float()
        else:
            assert self._uncond is not None  # set wherever the guidance scale is
            unc = self._uncond.expand(n * groups, -1, -1)
            e_u, e_c = (
                self.unet(torch.cat([x, x]), t, encoder_hidden_states=torch.cat([unc, cond])).sample.float().chunk(2)
            )
            eps = e_u + self.g * (e_c - e_u)
        x_f = x_t_f32.repeat(groups, 1, 1, 1) if groups > 1 else x_t_f32
        if self._v:
            eps = self._abar.sqrt() * eps + (1 - self._abar).sqrt() * x_f
        lat = latents.repeat(groups, 1, 1, 1) if groups > 1 else latents
        return minmax_per_channel(eps - lat)

    def inputs_cond(self, n):
        return self._cond.expand(n, -1, -1)

    def _prepare(self, inputs: NoiseInputs):
        self._cond, self._uncond, self._t = inputs.cond, inputs.uncond, inputs.t
        self._v = inputs.v_prediction
        self._abar = inputs.abar.to(self.device)

    def similarities(self, specs: Sequence[Mapping[str, Sequence[int]]]) -> torch.Tensor:
        """Screening SSIM (on the device, batched) of each selection → [len(specs)] on the host."""
        n = len(self.seeds)
        out = []
        for i in range(0, len(specs), self.groups):
            self.steps.check()  # before every UNet forward: a list may span several
            chunk = specs[i : i + self.groups]
            g = len(chunk)
            with self.masks.installed():
                self.masks.set(self._mask(chunk))
                d = self._differences(self.inputs.x_t_dev, self.latents_dev, self.x_t_f32, g)
            ref = self.vanilla_dev.repeat(g, 1, 1, 1)
            out.append(ssim(ref, d).view(g, n).amax(1))
            self.batches += 1
        self.samples += len(specs)
        return torch.cat(out).cpu()  # the one copy to the host

    def exact(self, spec: Mapping[str, Sequence[int]]) -> float:
        """The sequential search's number: this selection alone, float64 SSIM."""
        self.steps.check()
        self.exact_calls += 1
        self.batches += 1
        with self.masks.installed():
            self.masks.set(self._mask([spec]))
            d = self._differences(self.inputs.x_t_dev, self.latents_dev, self.x_t_f32, 1)
        return float(ssim(self.vanilla_dev, d).max())

    def similarity(self, spec: Mapping[str, Sequence[int]]) -> float:
        """One selection, as the sequential search evaluates it (exact; the mask checks its
        channels against the layer sizes read once per search)."""
        return self.conclude(spec, self.exact(spec))

    def conclude(self, spec, sim: float) -> float:
        """Count one evaluation the sequential search concludes with `sim`."""
        self.calls += 1
        if self.log is not None:
            self.log.append((spec, sim))
        return sim

    def settle(self, spec, sim: float, threshold: float) -> float:
        """The screened `sim`, or the exact one where the comparison with `threshold` is a near tie."""
        if abs(sim - threshold) > self.tie:
            return sim
        exact = self.exact(spec)
        self.max_screen_error = max(self.max_screen_error, abs(exact - sim))
        return exact
