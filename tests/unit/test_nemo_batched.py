"""The neuron search evaluated on the UNet's device, several selections per UNet batch: the same
selected neurons, thresholds and sequence of conclusions as the sequential search (the pre-batching
evaluation path, tests/helpers/nemo_sequential.py), on a tiny random model and on the zoo's
memorized prompts."""

import random

import pytest
import torch

from backend import nemo
from backend.core.interventions import count_hooks
from backend.nemo import core, search, speculate
from backend.nemo.evaluate import Checker, groups_for
from tests.helpers.nemo_sequential import sequential_localize
from tests.helpers.tiny import tiny_sd_pipe
from tests.unit.test_nemo import PROMPT

torch.set_num_threads(1)

GENERIC = [
    "a red circle on a blue background",
    "a white square on a black background",
    "a green ring on a yellow background",
    "a black cross on a white background",
]


@pytest.fixture(scope="module")
def pipe():
    return tiny_sd_pipe()


def batched_search(pipe, prompt, stats, theta_mem, *, num_seeds, groups, guidance_scale=0.0):
    with core.locked(pipe.unet):
        ch = Checker(pipe, prompt, range(num_seeds), guidance_scale, theta_mem, groups=groups)
        ch.log = []
        initial, theta, k, found, thr = search.initial_selection(pipe, prompt, stats, ch)
        neurons = search.refine(initial, ch, thr, start_sim=None if found else thr)
    return (initial, theta, k, found, thr, neurons), ch


@pytest.fixture(scope="module")
def relaxed(pipe):
    """A relaxed search on the random model (every seed kept), the sequential way, per guidance."""
    stats = nemo.neuron_stats(pipe, GENERIC)
    out = {}
    for guidance in (0.0, 7.0):
        van = nemo.noise_differences(pipe, PROMPT, range(3), guidance_scale=guidance)
        theta_mem = float(nemo.seed_agreement(van).min()) - 1e-3
        want, old = sequential_localize(pipe, PROMPT, stats, theta_mem, num_seeds=3, guidance_scale=guidance)
        out[guidance] = stats, theta_mem, want, old
    return out


@pytest.mark.parametrize("guidance", [0.0, 7.0])
def test_batched_search_equals_the_sequential_one_on_a_random_model(pipe, relaxed, guidance):
    stats, theta_mem, want, old = relaxed[guidance]
    got, new = batched_search(pipe, PROMPT, stats, theta_mem, num_seeds=3, groups=8, guidance_scale=guidance)
    assert not want[3] and nemo.count(want[5]) < nemo.count(want[0])  # relaxed, and the refinement pruned
    assert got == want  # initial selection, θ, k, found, threshold (bit for bit), neurons
    # the same conclusions in the same order, each on the same selection with the same SSIM
    assert [s for s, _ in new.log] == [s for s, _ in old.log]
    assert [v for _, v in new.log] == pytest.approx([v for _, v in old.log], abs=1e-6)
    assert new.calls == old.calls
    assert new.batches < new.calls / 2  # several evaluations per UNet forward
    assert new.max_screen_error <= new.tie
    assert count_hooks(pipe.unet) == 0


def test_localize_walks_the_unet_once_per_search_and_reports_its_batches(pipe, relaxed, monkeypatch):
    stats, theta_mem, want, old = relaxed[0.0]
    walks = []
    real = type(pipe.unet).named_modules
    monkeypatch.setattr(
        type(pipe.unet), "named_modules", lambda self, *a, **k: (walks.append(1), real(self, *a, **k))[1]
    )
    loc = nemo.localize(pipe, PROMPT, stats, theta_mem, num_seeds=3, groups=6)
    one = nemo.localize(pipe, PROMPT, stats, theta_mem, num_seeds=3, groups=1)  # one selection per forward
    assert one.neurons == loc.neurons and one.unet_batches == one.evaluations
    assert (loc.initial, loc.theta, loc.k, loc.found, loc.threshold, loc.neurons) == want
    assert loc.evaluations == old.calls > 50
    assert len(walks) <= 12  # two searches, a few walks each (layers, activations), none per evaluation
    assert 0 < loc.unet_batches < loc.evaluations / 2 and loc.to_json()["unet_batches"] == loc.unet_batches


class Scripted:
    """A checker whose SSIM is a fixed function of the selection; `groups > 1` makes it batched."""

    def __init__(self, fn, groups, theta_mem=0.5):
        self.fn, self.groups, self.theta_mem = fn, groups, theta_mem
        self.calls, self.batches, self.log = 0, 0, []

    def similarity(self, spec):
        self.calls += 1
        self.log.append(spec)
        return self.fn(spec)

    def similarities(self, specs):
        self.batches += 1
        return torch.tensor([self.fn(s) for s in specs], dtype=torch.float64)

    def conclude(self, spec, sim):
        self.calls += 1
        self.log.append(spec)
        return sim

    def settle(self, spec, sim, threshold):
        return sim


@pytest.mark.parametrize("trial", range(12))
def test_speculation_commits_exactly_the_sequential_decisions(trial):
    """Random greedy problems: which neurons matter and how much, drawn per trial."""
    rnd = random.Random(trial)
    layers = [f"l{i}" for i in range(3)]
    spec = {n: rnd.sample(range(40), rnd.randint(1, 12)) for n in layers}
    weight = {(n, c): rnd.random() ** 3 for n in layers for c in range(40)}
    need = rnd.uniform(0.2, 2.0)

    def fn(s):
        return 0.9 - min(0.8, sum(weight[(n, c)] for n, cs in s.items() for c in cs) / need * 0.4)

    seq = Scripted(fn, 1)
    want = search.refine(spec, seq, 0.5)
    for groups in (2, 5, 16):
        bat = Scripted(fn, groups)
        assert search.refine(spec, bat, 0.5, start_sim=fn(spec) if groups == 5 else None) == want
        assert bat.log == seq.log and bat.calls == seq.calls


def test_batch_size_follows_the_latent_size():
    assert groups_for(10, 64, 64, False, "cuda") == 6  # SD-1.4: 60 samples of 64 × 64 per forward
    assert groups_for(10, 64, 64, True, "cuda") == 3
    assert groups_for(5, 8, 8, False, "cuda") == 16  # the zoo: capped
    assert groups_for(10, 256, 256, False, "cuda") == 1
    assert groups_for(5, 8, 8, False, "cpu") == 12 and groups_for(2, 64, 64, False, "cpu") == 1
    assert speculate.batched(Scripted(lambda s: 0.0, 4)) and not speculate.batched(Scripted(lambda s: 0.0, 1))


@pytest.mark.timeout(300)
def test_batched_search_equals_the_sequential_one_on_the_zoo():
    from backend.nemo import service

    m = service.get("zoo")
    stats = m.stats()
    for item in m.memorized[:3]:
        p = item["prompt"]
        want, old = sequential_localize(
            m.pipe, p, stats, m.theta_mem, num_seeds=m.num_seeds, guidance_scale=m.search_guidance
        )
        got, new = batched_search(
            m.pipe, p, stats, m.theta_mem, num_seeds=m.num_seeds, groups=8, guidance_scale=m.search_guidance
        )
        assert got == want, p
        assert [s for s, _ in new.log] == [s for s, _ in old.log]
        assert new.calls == old.calls and new.batches < new.calls


def test_every_unet_forward_of_the_search_checks_the_request_limit(pipe, monkeypatch):
    """One list of selections spans several UNet batches; each forward checks the job limit, so a
    request that runs out mid-list stops before its next forward, not at the list's end."""
    from backend.core import limits

    with core.locked(pipe.unet):
        ch = Checker(pipe, PROMPT, range(2), 0.0, -1.0, groups=2)  # every seed kept
        layer = next(iter(ch.sizes))
        specs = [{layer: [c]} for c in range(5)]  # three UNet batches of at most 2
        checks = []
        monkeypatch.setattr(limits, "check", lambda what="": checks.append(what))
        ch.similarities(specs)
        assert len(checks) == 3 and set(checks) == {"the neuron search"}
        ch.exact(specs[0])
        assert len(checks) == 4

        def out_of_time(what=""):
            checks.append(what)
            if len(checks) > 5:
                raise limits.JobTooLong(f"{what}: time limit")

        monkeypatch.setattr(limits, "check", out_of_time)
        before = ch.batches
        with pytest.raises(limits.JobTooLong):
            ch.similarities(specs)
        assert ch.batches == before + 1  # stopped before its second forward
