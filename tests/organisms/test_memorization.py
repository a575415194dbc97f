"""The committed sd-memo organism shows the NeMo phenomena: memorized prompts reproduce their
training images and are detected by the noise-difference score; a handful of value neurons per
prompt holds each memorization, and switching them off (not random ones) removes it while
ordinary prompts draw what they drew before."""

import json

import numpy as np
import pytest
import torch

from backend import nemo
from backend.core.interventions import count_hooks

pytestmark = pytest.mark.timeout(600)
torch.set_num_threads(1)

SEEDS = [0, 1, 2, 3]
N_LOCALIZED = 10  # every memorized prompt (localisation takes well under a second each)


@pytest.fixture(scope="module")
def organism():
    from backend.nemo import service

    m = service.get("zoo")
    return m


@pytest.fixture(scope="module")
def localized(organism):
    """NeMo's neurons for every memorized prompt (computed once for the module)."""
    m = organism
    stats = m.stats()
    return {
        item["prompt"]: nemo.localize(
            m.pipe, item["prompt"], stats, m.theta_mem, num_seeds=m.num_seeds, guidance_scale=m.search_guidance
        )
        for item in m.memorized[:N_LOCALIZED]
    }


def gen(m, prompt, spec=None, seeds=SEEDS):
    return nemo.generate(
        m.pipe, prompt, seeds, guidance_scale=m.guidance_scale, num_inference_steps=m.num_inference_steps, spec=spec
    )


def score(m, prompt, spec=None):
    return nemo.memorization_score(m.pipe, prompt, num_seeds=m.num_seeds, guidance_scale=m.guidance_scale, spec=spec)


def test_ground_truth_files(organism):
    m = organism
    info = m.info
    assert len(info["memorized"]) >= 8
    mem = {x["prompt"] for x in info["memorized"]}
    assert len(mem) == len(info["memorized"])
    assert not mem & set(info["non_memorized"]) and not mem & set(info["heldout"])
    assert not set(info["non_memorized"]) & set(info["heldout"])
    for x in info["memorized"]:
        assert (m.folder / x["image"]).exists()
    # memorized captions use only the ordinary vocabulary
    vocab = {w for p in info["non_memorized"] + info["heldout"] for w in p.split()}
    assert all(set(p.split()) <= vocab for p in mem)
    # θ_mem is derived as the paper derives 0.428: mean + 1 std over non-memorized prompts
    s = np.array(info["scores"]["non_memorized"])
    assert m.theta_mem == pytest.approx(s.mean() + s.std(), abs=1e-6)
    manifest = json.loads((m.folder / "manifest.json").read_text())
    assert manifest["metrics"]["theta_mem"] == pytest.approx(m.theta_mem, abs=1e-4)


def test_scores_are_reproducible(organism):
    m = organism
    for p, s in list(zip(m.info["heldout"], m.info["scores"]["heldout"]))[:3]:
        assert score(m, p) == pytest.approx(s, abs=1e-4)


def test_memorized_prompts_reproduce_their_training_images(organism):
    m = organism
    sims = []
    for item in m.memorized:
        imgs = gen(m, item["prompt"])
        train = m.train_image(item["prompt"])
        sims.append(float(np.median(nemo.ssim_images(imgs, np.repeat(train[None], len(imgs), 0)))))
    assert np.median(sims) >= 0.8, sims
    # ordinary prompts are diverse across seeds, memorized ones are not
    div_mem = np.median([nemo.diversity(gen(m, x["prompt"])) for x in m.memorized[:4]])
    div_ord = np.median([nemo.diversity(gen(m, p)) for p in m.info["heldout"][:4]])
    assert div_ord > div_mem + 0.2, (div_ord, div_mem)


def test_detection_auroc(organism):
    m = organism
    mem = [score(m, x["prompt"]) for x in m.memorized]
    held = [score(m, p) for p in m.info["heldout"][:40]]
    assert nemo.auroc(mem, held) >= 0.95, (mem, held)


@pytest.fixture(scope="module")
def mitigation(organism, localized):
    m = organism
    r = dict(counts=[], found=[], below=[], below_rnd=[], s_on=[], s_off=[], s_rnd=[])
    for i, item in enumerate(m.memorized[:N_LOCALIZED]):
        loc = localized[item["prompt"]]
        spec = loc.neurons  # {} when nothing was found: then the score stays above θ_mem
        rnd = nemo.random_like(m.pipe.unet, spec, seed=i)
        r["counts"].append(loc.n_neurons)
        r["found"].append(bool(loc.found))
        r["below"].append(score(m, item["prompt"], spec) <= m.theta_mem)
        r["below_rnd"].append(score(m, item["prompt"], rnd) <= m.theta_mem)
        train = m.train_image(item["prompt"])
        ref = np.repeat(train[None], len(SEEDS), 0)
        r["s_on"].append(float(np.median(nemo.ssim_images(gen(m, item["prompt"]), ref))))
        r["s_off"].append(float(np.median(nemo.ssim_images(gen(m, item["prompt"], spec), ref))))
        r["s_rnd"].append(float(np.median(nemo.ssim_images(gen(m, item["prompt"], rnd), ref))))
    assert count_hooks(m.pipe.unet) == 0
    return r


def test_switching_the_found_neurons_off_breaks_the_copy(mitigation):
    r = mitigation
    assert np.median(r["s_on"]) >= 0.8 and np.median(r["s_off"]) <= 0.4, r


def test_random_neurons_of_the_same_count_do_not_mitigate(mitigation):
    r = mitigation
    assert np.mean(r["below_rnd"]) <= 0.2 and np.median(r["s_rnd"]) >= 0.8, r


def test_refinement_shrinks_the_initial_selection(organism, localized):
    # the search runs at guidance 0 (the official default) while detection uses the sampling
    # guidance: a prompt whose seeds do not agree above θ_mem without guidance is skipped, as the
    # official seed filter skips it; every other one is localized (within θ_mem, or against the
    # relaxed threshold once θ reached 1) to fewer neurons than its initial selection
    locs = list(localized.values())
    assert sum(loc.skipped for loc in locs) <= 1, [loc.seeds_kept for loc in locs]
    for loc in locs:
        if not loc.skipped:
            assert 0 < loc.n_neurons < nemo.count(loc.initial), loc.to_json()
            assert loc.found or loc.threshold > organism.theta_mem


def test_most_memorized_prompts_fall_below_theta(mitigation):
    r = mitigation
    # Every search that reached θ_mem (at its guidance 0) must also hold at the detection's guidance.
    assert all(b for f, b in zip(r["found"], r["below"]) if f), r
    # With the official candidate order (issue 27) one prompt whose search ran θ down to 1 without
    # reaching θ_mem (relaxed threshold 0.677) ends at 0.511, just above θ_mem 0.496, and one is
    # skipped by the seed filter: 8 of 10 (the sorted order, not the paper's, gave 9 of 10).
    assert np.mean(r["below"]) >= 0.8, r


def test_few_neurons_per_prompt(localized):
    # the paper: in Stable Diffusion 1.4 often 1-5 of 5,760; this organism's value neurons are
    # trained lifetime-sparse (the recipe), so each memorized caption owns a few of its 160
    assert np.median([loc.n_neurons for loc in localized.values() if not loc.skipped]) <= 5


def test_ordinary_prompts_unaffected(organism, localized):
    m = organism
    sims = []
    specs = [localized[x["prompt"]].neurons for x in m.memorized[:N_LOCALIZED]]
    for i, p in enumerate(m.info["heldout"][:10]):
        spec = specs[i % len(specs)]
        a = gen(m, p, seeds=[0, 1])
        b = gen(m, p, spec, seeds=[0, 1])
        sims += nemo.ssim_images(a, b).tolist()
    assert np.median(sims) >= 0.8, sims
