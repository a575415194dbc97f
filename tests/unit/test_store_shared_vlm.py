"""One store entry per weights beyond the language models: the same LLaVA picked in Features (with
an SAE) and typed into Adapters is loaded once, at one precision, one entry counted once against
the budget, and both tabs work on it, in either order, for the paper's checkpoint (its stand-in in
an offline hub cache) and a user's own folder. Memorization's Stable Diffusion pipeline is one
entry of its weights too, with the tab's settings as its view."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from backend.core import store, weights
from tests.helpers.standins import build_cache, build_local, use_cache
from tests.helpers.standins import features as SF

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def places(tmp_path_factory):
    cache = build_cache(tmp_path_factory.mktemp("hf") / "hub", SF.REPOS)
    roots = build_local(tmp_path_factory.mktemp("own"), {k: SF.LOCAL[k] for k in ("own-llava15", "own-llava15-sae")})
    return cache, roots


@pytest.fixture
def env(places, monkeypatch, tmp_path):
    from backend.sae import loading
    from backend.sae.index import INDEX_ENV, INDEX_FILE

    cache, roots = places
    use_cache(monkeypatch, cache)  # an empty store too
    monkeypatch.setattr(loading, "_SHELLS", {})
    monkeypatch.setenv("WORKBENCH_MODEL_ROOTS", str(roots))
    monkeypatch.setenv("WORKBENCH_MODEL_BUDGET", "1GB")
    monkeypatch.setenv(INDEX_ENV, str(tmp_path / "index" / INDEX_FILE))
    return roots


PLACES = {
    "hub": (SF.MODEL_ID, SF.SAE_ID, "model.layers.24", "LlavaNextForConditionalGeneration"),
    "own-folder": ("own-llava15", "own-llava15-sae", "layers.2", "LlavaForConditionalGeneration"),
}


def features(vlm, sae, hook):
    from backend.sae import analysis, loading

    org = loading.get_organism(loading.own_source(vlm, sae, hook), model=True)
    img = np.zeros((40, 56, 3), np.uint8)
    img[5:20, 10:30] = (200, 40, 40)
    out = analysis.analyse_image(org, img)
    assert out and org.sae is not None and org.processor is not None
    return org.model


def adapters(vlm, *_):
    from backend.pissa import service

    layers = service.layer_names(vlm)
    layer = next(n for n in layers if "language_model" in n and n.endswith("q_proj"))
    out = service.layer_analysis(vlm, layer, 2)
    assert out["rank"] == 2 and out["reconstruction_rel_error"] <= 1e-5
    return service.get_model(vlm)


ORDERS = {"features-first": (features, adapters, features), "adapters-first": (adapters, features, adapters)}


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("where", PLACES)
def test_a_llava_in_features_and_adapters_is_one_store_entry(env, where, order):
    vlm, sae, hook, cls = PLACES[where]
    if where == "own-folder":
        vlm, sae = str(env / vlm), str(env / sae)
    models = [step(vlm, sae, hook) for step in ORDERS[order]]
    assert all(m is models[0] for m in models)  # the very same weights in both tabs
    s = store.stats()
    assert len(s["models"]) == 1, s
    entry = s["models"][0]
    assert entry["id"].endswith(f"|{cls}") and entry["bytes"] == store.nbytes_of(models[0]) > 0
    # the SAE is the Features view's own bytes, counted in the same entry
    assert any(v.startswith("features:") for v in entry["views"]) and entry["view_bytes"] > 0
    assert s["resident_bytes"] == entry["bytes"] + entry["view_bytes"]
    # one precision whichever tab loaded it: the stand-ins are saved in float16, which a CPU runs slowly
    assert {p.dtype for p in models[0].parameters()} == {torch.float32}


def test_the_features_organism_lets_go_when_its_shared_weights_are_evicted(env):
    from backend.pissa import service
    from backend.sae import loading

    vlm, sae, hook = str(env / "own-llava15"), str(env / "own-llava15-sae"), "layers.2"
    model = adapters(vlm)
    org = loading.get_organism(loading.own_source(vlm, sae, hook), model=True)
    assert org.model is model and org.weights_key == weights.key(service.preset_for(vlm))
    assert store.evict(org.weights_key) and org.model is None and org.sae is None
    assert features(vlm, sae, hook) is not model  # loaded again, once
    assert len(store.stats()["models"]) == 1


def test_memorization_pipeline_is_one_entry_of_its_weights(env):
    from backend.nemo import service

    m = service.get("zoo")
    (entry,) = store.stats()["models"]
    assert entry["id"] == weights.key(m.preset) and entry["id"].endswith("|StableDiffusionPipeline")
    assert entry["views"] == ["memorization"] and entry["bytes"] == store.nbytes_of(m.pipe) > 0
    assert entry["view_bytes"] == 0  # the tab's view adds settings, not tensors
    assert weights.model(m.preset) is m.pipe and service.get("zoo") is m
    assert m.pipe.scheduler.config.steps_offset == 1 and m.pipe.safety_checker is None
    assert not any(p.requires_grad for _, mod in store.modules_of(m.pipe) for p in mod.parameters())
