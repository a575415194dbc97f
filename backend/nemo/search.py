"""NeMo's localisation search (the official algorithm): the initial selection by z-scores and
top-k activations, then the refinement neuron by neuron, each decision an SSIM of noise differences
with a selection switched off, evaluated by `evaluate.Checker` (several selections per UNet batch).
Kept apart from `core` (layers, noise, generation, statistics), which the checker builds on.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from backend.core.interventions import locked

from . import speculate
from .core import SEARCH_GUIDANCE, NeuronStats, Spec, activations, count, zscores
from .evaluate import Checker
from .results import LocalizationJSON


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

    def to_json(self) -> LocalizationJSON:
        return {
            "prompt": self.prompt,
            "neurons": self.neurons,
            "n_neurons": self.n_neurons,
            "initial": self.initial,
            "n_initial": count(self.initial),
            "theta": self.theta,
            "k": self.k,
            "seconds": round(self.seconds, 3),
            "evaluations": self.evaluations,
            "found": self.found,
            "relaxed": self.relaxed,
            "skipped": self.skipped,
            "threshold": self.threshold,
            "guidance_scale": self.guidance_scale,
            "seeds": self.seeds,
            "seeds_kept": self.seeds_kept,
            "history": self.history,
            "unet_batches": self.unet_batches,
        }


def initial_selection(
    pipe,
    prompt: str,
    stats: NeuronStats,
    checker,
    *,
    theta_start: float = 5.0,
    theta_step: float = 0.25,
    k_start: int = 0,
    theta_min: float = 1.0,
    max_k: int | None = None,
    history: list | None = None,
):
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
            history.append({"stage": "initial", "theta": theta, "k": k, "n": count(spec), "ssim": round(sim, 4)})
    theta, k, spec = schedule[hit]
    if hit >= 0:
        return spec, theta, k, True, checker.theta_mem
    sim = sims[-1]
    if spec and speculate.batched(checker):
        sim = checker.exact(spec)  # the refinement's threshold: the sequential search's own number
        if history is not None:
            history[-1]["ssim"] = round(sim, 4)
    return spec, theta, k, False, sim


def refine(
    spec: Spec, checker, threshold: float | None = None, history: list | None = None, start_sim: float | None = None
) -> Spec:
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
                entry = (
                    {"stage": stage, "layer": move}
                    if stage == "layer"
                    else {"stage": stage, "layer": move[0], "channel": move[1]}
                )
                history.append({**entry, "n": count(state)})

        return on_accept

    spec, sim = speculate.greedy(
        checker, spec, list(reversed(list(spec))), drop_layer, threshold, note("layer"), state_sim=start_sim
    )
    moves = [(layer, ch) for layer in reversed(list(spec)) for ch in spec[layer]]
    return speculate.greedy(checker, spec, moves, drop_neuron, threshold, note("neuron"), state_sim=sim)[0]


def localize(
    pipe,
    prompt: str,
    stats: NeuronStats,
    theta_mem: float,
    *,
    num_seeds: int = 5,
    guidance_scale: float = SEARCH_GUIDANCE,
    progress: Callable[[float, str], None] | None = None,
    max_k: int | None = None,
    groups: int | None = None,
    **kw,
) -> Localization:
    """Seed filter, initial selection and refinement → the memorization neurons of one prompt.

    `guidance_scale` is the search's own (default 0, the official search's): detection scores and
    generations use the model's sampling guidance instead. `groups`: selections per UNet batch
    (default from the latent size, evaluate.groups_for; 1 evaluates one at a time)."""
    t0 = time.perf_counter()
    history: list[dict] = []
    report = progress or (lambda f, msg: None)
    with locked(pipe.unet):
        report(0.05, "noise differences without intervention")
        checker = Checker(pipe, prompt, range(num_seeds), guidance_scale, theta_mem, groups=groups, **kw)
        common: dict[str, Any] = dict(
            guidance_scale=float(guidance_scale), seeds=checker.all_seeds, seeds_kept=checker.seeds
        )
        if not checker.seeds:
            report(1.0, "no seed agrees with another above θ_mem: not memorized, skipped")
            return Localization(
                prompt,
                {},
                {},
                float("nan"),
                0,
                time.perf_counter() - t0,
                checker.calls,
                False,
                history,
                skipped=True,
                unet_batches=checker.batches,
                **common,
            )
        report(0.15, "initial selection (z-scores and top-k activations)")
        initial, theta, k, found, threshold = initial_selection(
            pipe, prompt, stats, checker, max_k=max_k, history=history
        )
        report(0.5, f"refining {count(initial)} neurons")
        # relaxed: the threshold is the initial selection's own SSIM
        neurons = refine(initial, checker, threshold, history, start_sim=None if found else threshold)
        report(1.0, f"{count(neurons)} neurons")
    return Localization(
        prompt,
        neurons,
        initial,
        theta,
        k,
        time.perf_counter() - t0,
        checker.calls,
        found,
        history,
        threshold=float(threshold),
        unet_batches=checker.batches,
        **common,
    )
