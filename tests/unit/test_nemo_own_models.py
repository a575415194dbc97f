"""NeMo on a user's own pipelines: an SD-1.x and an SD-2.x folder (v-prediction, OpenCLIP-style text
encoder, linear projections), picked by path and run through the Memorization tab's service."""

import pytest
import torch

from backend.nemo import core


@pytest.fixture(scope="module")
def own(tmp_path_factory):
    from tests.helpers.standins import build_local
    from tests.helpers.standins.memorization import LOCAL

    return build_local(tmp_path_factory.mktemp("own-sd"), LOCAL)


@pytest.fixture
def roots(own, monkeypatch):
    from backend.core import store

    monkeypatch.setenv("WORKBENCH_MODEL_ROOTS", str(own))
    monkeypatch.setattr(store, "_MODELS", type(store._MODELS)())
    return own


def test_a_v_prediction_model_is_measured_on_its_predicted_noise(roots, monkeypatch):
    """ε = α·v + σ·x_t: a UNet answering the v that belongs to a known ε gives that ε's difference."""
    from backend.nemo import service

    m = service.get("zoo", str(roots / "own-sd21"))
    assert m.pipe.scheduler.config.prediction_type == "v_prediction"
    eps_true = torch.randn(2, 4, 8, 8, generator=torch.Generator().manual_seed(0))
    sched = core._scheduler(m.pipe, 50)
    t = sched.timesteps[1]
    abar = sched.alphas_cumprod[int(t)]

    def fake_v(unet, x, t_, cond, uncond, g):
        return (eps_true - (1 - abar).sqrt() * x) / abar.sqrt()

    monkeypatch.setattr(core, "_eps", fake_v)
    got = core.noise_differences(m.pipe, "a dog", [0, 1], guidance_scale=0.0)
    latents = core.initial_latents(m.pipe, [0, 1]) * sched.init_noise_sigma
    torch.testing.assert_close(got, core.minmax_per_channel(eps_true - latents), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("name, prediction", [("own-sd15", "epsilon"), ("own-sd21", "v_prediction")])
def test_check_find_and_compare_run_on_your_own_pipeline(roots, name, prediction):
    from backend.nemo import service

    key = str(roots / name)
    m = service.get("zoo", key)
    assert m.preset.source == "local" and m.pipe.scheduler.config.prediction_type == prediction
    assert len(m.layers) == 7 and all(n.endswith("attn2.to_v") for n in m.layers)
    m._stats_n = 12  # a handful of COCO captions keeps the test fast
    r = service.check("a photo of a dog on the beach", model=key)
    assert 0 <= r["score"] <= 1 and set(r["z"]) == {core.short_name(n) for n in m.layers}
    assert r["stats"]["n_prompts"] == 12
    spec = {m.layers[0]: [0, 1, 2]}
    c = service.compare("a photo of a dog", spec, [0, 1], model=key)
    assert c["images_on"].shape == c["images_off"].shape and c["n_neurons"] == 3
    assert (c["images_on"] != c["images_off"]).any()  # switching value neurons off changes the image
    st = service.compute_stats(5, model=key)
    assert st["n_prompts"] == 5 and st["kind"] == "in-process"


def test_a_model_that_is_not_a_stable_diffusion_pipeline_is_refused(roots):
    from backend.nemo import service
    from tests.helpers.tiny import tiny_llama

    tiny_llama().save_pretrained(roots / "llama")
    with pytest.raises(ValueError, match="NeMo needs a Stable Diffusion 1.x/2.x pipeline"):
        service.get("zoo", str(roots / "llama"))


def test_your_own_ordinary_prompts_make_the_statistics(roots):
    from backend.nemo import service

    key = str(roots / "own-sd15")
    mine = ["a bowl of soup on a table", "a red bus in the rain", "two cats on a sofa"]
    st = service.compute_stats(0, model=key, prompts=mine)
    assert st["n_prompts"] == 3 and st["own"] and st["set"] == "ordinary prompts you gave"
    m = service.get("zoo", key)
    assert m.stats().n_prompts == 3
    tag = m.stats_tag
    service.compute_stats(0, model=key, prompts=mine[:2])
    assert m.stats_tag != tag  # checks computed with other statistics are not served from the cache
    with pytest.raises(ValueError, match="between 2 and"):
        service.compute_stats(0, model=key, prompts=["only one"])
