"""NeMo's search evaluation as it was before it moved to the device and to batches: one selection
per UNet forward, ε copied to the host, min–max scaling and a float64 SSIM there, and a hook that
validates and indexes its channels on every forward (`nemo.deactivate`). Kept as the reference the
batched search is checked against (tests/unit/test_nemo_batched.py) and timed against
(benchmarks.fullsize, benchmarks.nemo)."""

from __future__ import annotations

import torch

from backend.nemo import core, search
from backend.nemo.metrics import ssim


class SequentialChecker:
    def __init__(self, pipe, prompt, seeds, guidance_scale, theta_mem, **kw):
        self.pipe, self.theta_mem = pipe, theta_mem
        self.all_seeds = [int(s) for s in seeds]
        inputs = core.NoiseInputs(pipe, prompt, self.all_seeds, guidance_scale=guidance_scale, **kw)
        vanilla = inputs.differences(pipe.unet)
        keep = core.seed_agreement(vanilla) > theta_mem if len(self.all_seeds) > 1 else torch.ones(1, dtype=torch.bool)
        self.seeds = [s for s, k in zip(self.all_seeds, keep.tolist()) if k]
        self.vanilla = vanilla[keep]
        self.inputs = inputs.subset(keep)
        self.calls = 1
        self.log: list[tuple[dict, float]] = []

    def similarity(self, spec) -> float:
        self.calls += 1
        blocked = self.inputs.differences(self.pipe.unet, spec)
        sim = float(ssim(self.vanilla, blocked).max())
        self.log.append((spec, sim))
        return sim


def sequential_localize(pipe, prompt, stats, theta_mem, *, num_seeds=5, guidance_scale=0.0, max_k=None):
    """The search's result the old way → (initial, θ, k, found, threshold, neurons, checker)."""
    with core.locked(pipe.unet):
        checker = SequentialChecker(pipe, prompt, range(num_seeds), guidance_scale, theta_mem)
        if not checker.seeds:
            return None, checker
        initial, theta, k, found, thr = search.initial_selection(pipe, prompt, stats, checker, max_k=max_k)
        neurons = search.refine(initial, checker, thr)
    return (initial, theta, k, found, thr, neurons), checker
