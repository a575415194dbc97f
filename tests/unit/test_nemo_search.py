"""NeMo's neuron search on a tiny pipeline: refinement, the initial selection, localize, random_like."""

import json

import pytest
import torch

from backend import nemo
from backend.core.interventions import count_hooks
from tests.helpers.tiny import tiny_sd_pipe
from tests.unit.test_nemo import PROMPT


@pytest.fixture(scope="module")
def pipe():
    return tiny_sd_pipe()


class FakeChecker:
    """Memorization is removed exactly when every neuron of `needed` is off; each other neuron
    switched off nudges the similarity up by `noise` (as useless neurons do, a little)."""

    def __init__(self, needed, theta_mem=0.5, removed=0.1, kept=0.9, noise=0.0):
        self.needed, self.theta_mem, self.calls = needed, theta_mem, 0
        self.removed, self.kept, self.noise = removed, kept, noise

    def similarity(self, spec):
        self.calls += 1
        ok = all(c in spec.get(layer, []) for layer, c in self.needed)
        extra = nemo.count(spec) - (len(self.needed) if ok else 0)
        return (self.removed if ok else self.kept) + self.noise * extra


def test_refinement_keeps_exactly_what_is_needed(pipe):
    layers = nemo.value_layers(pipe.unet)
    needed = [(layers[0], 4), (layers[2], 9)]
    initial = {layers[0]: [1, 4, 6], layers[1]: [0, 2, 3], layers[2]: [9, 11]}
    out = nemo.refine(initial, FakeChecker(needed))
    assert out == {layers[0]: [4], layers[2]: [9]}


class ConditionChecker:
    """A fake checker whose similarity is low exactly when `condition(switched-off set)` holds."""

    def __init__(self, condition, theta_mem=0.5):
        self.condition, self.theta_mem, self.calls = condition, theta_mem, 0

    def similarity(self, spec):
        self.calls += 1
        return 0.1 if self.condition({(n, c) for n, cs in spec.items() for c in cs}) else 0.9


def _stats_with_outliers(acts, outliers):
    """Statistics under which the prompt's z-score is 0 everywhere except 10 at `outliers`."""
    mean = {n: v[0].clone() for n, v in acts.items()}
    for n, c in outliers:
        mean[n][c] -= 10.0
    return nemo.NeuronStats(mean, {n: torch.ones_like(v) for n, v in mean.items()}, 1)


def test_initial_selection_keeps_the_official_order_once_each(pipe):
    layer = nemo.value_layers(pipe.unet)[1]
    acts = nemo.activations(pipe, [PROMPT])
    ranked = acts[layer][0].argsort(descending=True).tolist()
    t1, t2, t3 = ranked[:3]
    others = sorted(set(range(len(ranked))) - {t1, t2, t3})
    # outliers: the second neuron by activation (top-k picks it too) and the first and last others
    outliers = sorted({others[0], t2, others[-1]})
    stats = _stats_with_outliers(acts, [(layer, c) for c in outliers])
    # memorization is removed only once the three top neurons are off: k reaches 3
    checker = ConditionChecker(lambda off: {(layer, t1), (layer, t2), (layer, t3)} <= off)
    spec, theta, k, found, _ = nemo.initial_selection(pipe, PROMPT, stats, checker)
    assert found and k == 3
    # z-outliers by channel index, then the top-k by activation; t2 once, where it came first
    assert spec[layer] == outliers + [t1, t3]


def test_refined_set_follows_the_official_order(pipe):
    """The refinement's result depends on the order it tries the neurons in: with 'o or t1 off'
    and t2 needed, the official order [o, t1, t2] lets o go first and keeps t1; the list sorted by
    channel (o > t1) would let t1 go first and keep o."""
    layer = nemo.value_layers(pipe.unet)[1]
    acts = nemo.activations(pipe, [PROMPT])
    ranked = acts[layer][0].argsort(descending=True).tolist()
    t1, t2 = ranked[:2]
    o = max(set(range(len(ranked))) - {t1, t2})
    if o < t1:  # the test needs an outlier past the top neuron's channel
        pytest.skip("top neuron is the layer's last channel")
    stats = _stats_with_outliers(acts, [(layer, o)])

    def memorization_removed(off):
        return (layer, t2) in off and bool({(layer, o), (layer, t1)} & off)

    checker = ConditionChecker(memorization_removed)
    spec, theta, k, found, thr = nemo.initial_selection(pipe, PROMPT, stats, checker)
    assert found and k == 2
    assert nemo.refine(spec, checker, thr) == {layer: [t1, t2]}
    assert spec[layer] == [o, t1, t2]


def test_initial_selection_schedule(pipe):
    layers = nemo.value_layers(pipe.unet)
    stats = nemo.neuron_stats(
        pipe,
        [
            "a red circle on a blue background",
            "a white square on a black background",
            "a green ring on a yellow background",
        ],
    )
    acts = nemo.activations(pipe, [PROMPT])
    top = int(acts[layers[1]][0].argsort(descending=True)[2])  # third-highest in layer 1
    hist = []
    spec, theta, k, found, thr = nemo.initial_selection(
        pipe, PROMPT, stats, FakeChecker([(layers[1], top)]), history=hist
    )
    assert found and thr == 0.5
    assert top in spec[layers[1]]
    assert [h["theta"] for h in hist][:3] == [5.0, 4.75, 4.5]
    assert [h["k"] for h in hist][:3] == [0, 1, 2]
    assert k <= 3 and theta == 5.0 - 0.25 * k


def test_search_stops_at_theta_one_and_refines_against_the_last_ssim(pipe):
    """Official stop: θ falls only while above 1; once it reaches 1 (k = 16) the search ends on the
    last selection tried (θ = 1.25, k = 15) and the refinement runs anyway, against that selection's
    SSIM, so a prompt the threshold is never reached for still gets its neurons."""
    layers = nemo.value_layers(pipe.unet)
    stats = nemo.neuron_stats(
        pipe,
        [
            "a red circle on a blue background",
            "a white square on a black background",
            "a green ring on a yellow background",
        ],
    )
    acts = nemo.activations(pipe, [PROMPT])
    top = int(acts[layers[2]][0].argsort(descending=True)[5])  # in the selection from k = 6 on
    # the needed neuron lowers the SSIM, but never to θ_mem
    checker = FakeChecker([(layers[2], top)], theta_mem=0.5, removed=0.7, kept=0.9, noise=1e-4)
    hist = []
    spec, theta, k, found, thr = nemo.initial_selection(pipe, PROMPT, stats, checker, history=hist)
    assert not found
    assert (theta, k) == (1.25, 15) and len(hist) == 16
    assert [h["theta"] for h in hist][-2:] == [1.5, 1.25] and min(h["theta"] for h in hist) > 1
    assert thr == pytest.approx(hist[-1]["ssim"], abs=1e-4) and thr > checker.theta_mem
    refined = nemo.refine(spec, checker, thr)
    assert refined == {layers[2]: [top]}


def test_localize_end_to_end_on_random_model(pipe):
    """A random model's noise differences barely move when neurons are off: the search runs to
    θ = 1 and the relaxed refinement still returns the neurons that lower the SSIM most."""
    stats = nemo.neuron_stats(
        pipe,
        [
            "a red circle on a blue background",
            "a white square on a black background",
            "a green ring on a yellow background",
            "a black cross on a white background",
        ],
    )
    van = nemo.noise_differences(pipe, PROMPT, range(3), guidance_scale=0)
    theta_mem = float(nemo.seed_agreement(van).min()) - 1e-3  # every seed kept
    loc = nemo.localize(pipe, PROMPT, stats, theta_mem=theta_mem, num_seeds=3)
    assert loc.guidance_scale == nemo.SEARCH_GUIDANCE == 0.0
    assert loc.seeds_kept == [0, 1, 2] and not loc.skipped
    assert loc.relaxed and (loc.theta, loc.k) == (1.25, 15)
    assert 0 < loc.n_neurons <= nemo.count(loc.initial)
    blk = nemo.noise_differences(pipe, PROMPT, range(3), guidance_scale=0, spec=loc.neurons)
    assert float(nemo.ssim(van, blk).max()) < loc.threshold
    j = loc.to_json()
    json.dumps(j)
    assert j["relaxed"] and j["guidance_scale"] == 0.0
    assert count_hooks(pipe.unet) == 0


def test_random_like(pipe):
    layers = nemo.value_layers(pipe.unet)
    spec = {layers[0]: [1, 2], layers[2]: [5]}
    rnd = nemo.random_like(pipe.unet, spec, seed=3)
    assert {k: len(v) for k, v in rnd.items()} == {layers[0]: 2, layers[2]: 1}
    assert not set(rnd[layers[0]]) & {1, 2}
