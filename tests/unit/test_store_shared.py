"""One model, three tabs: the same Mamba picked in Relevance, Math neurons and Adapters (the paper's
hub checkpoint on its stand-in, and a user's own folder) is loaded once, is one store entry counted
once against the budget, and each tab gets its own view of it, in either order."""

from __future__ import annotations

import pytest
import torch

from backend.core import store, weights
from tests.helpers.standins import build_cache, build_local, use_cache
from tests.helpers.standins import relevance as standin

torch.set_num_threads(1)
TEXT = "the plot was dull but the cast was brilliant"


@pytest.fixture(scope="module")
def places(tmp_path_factory):
    cache = build_cache(tmp_path_factory.mktemp("hf") / "hub", {standin.HUB_1_4B: standin.REPOS[standin.HUB_1_4B]})
    roots = build_local(tmp_path_factory.mktemp("own"), {"own-mamba": standin.LOCAL["own-mamba"]})
    nonmath = tmp_path_factory.mktemp("data") / "nonmath.txt"
    nonmath.write_text(
        "\n".join(
            [
                "The sky was grey and the wind came from the sea.",
                "She read the letter twice before folding it away.",
                "A dog barked at the postman every morning.",
            ]
            * 4
        )
    )
    return cache, roots, nonmath


@pytest.fixture
def env(places, monkeypatch):
    cache, roots, nonmath = places
    use_cache(monkeypatch, cache)  # an empty store too
    monkeypatch.setenv("WORKBENCH_MODEL_ROOTS", str(roots))
    monkeypatch.setenv("WORKBENCH_MATH_NONMATH", str(nonmath))
    monkeypatch.setenv("WORKBENCH_MODEL_BUDGET", "1GB")
    return roots


def relevance(key):
    from backend.lrp import service

    m = service.load_text("hub", key)
    res = service.explain_text(m, TEXT, ["mambalrp"])
    assert len(res["tokens"]) > 3 and m.tokenizer is not None
    return m.model


def math_neurons(key):
    from backend.mathneuro import service

    b = service.bench("hub", key)
    per_layer = b.layers(service.Setting("mathneuro", 0.05, n_samples=2))
    assert per_layer and b.tok is not None
    return b.model


def adapters(key):
    from backend.pissa import service

    layers = service.layer_names(key)
    out = service.layer_analysis(key, layers[0], 2)
    assert out and service.get_tokenizer(key) is not None
    return service.get_model(key)


ORDERS = {
    "relevance-first": (relevance, math_neurons, adapters, relevance),
    "adapters-first": (adapters, math_neurons, relevance, adapters),
}


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("where", ["hub", "own-folder"])
def test_one_model_through_three_tabs_is_one_store_entry(env, where, order):
    key = standin.HUB_1_4B if where == "hub" else str(env / "own-mamba")
    models = [step(key) for step in ORDERS[order]]
    assert all(m is models[0] for m in models)  # the very same weights in every tab
    s = store.stats()
    assert len(s["models"]) == 1, s
    entry = s["models"][0]
    assert entry["id"].endswith("|MambaForCausalLM")
    assert entry["bytes"] == store.nbytes_of(models[0]) > 0
    assert s["resident_bytes"] == entry["bytes"] + entry["view_bytes"] and entry["view_bytes"] == 0
    assert {"relevance", "math_neurons", "adapters.tokenizer"} <= set(entry["views"])
    assert not any(p.requires_grad for p in models[0].parameters())


def test_a_zoo_folder_typed_as_a_path_is_the_zoo_entry():
    from backend.core import presets as P
    from backend.lrp.models import TEXT_ZOO

    typed = P.custom_preset("adapters", str(P.ZOO_ROOT / TEXT_ZOO.path_or_id), TEXT_ZOO.model_class)
    assert typed.source == P.LOCAL and weights.key(typed) == weights.key(TEXT_ZOO)


def test_views_leave_with_their_model_and_come_back_fresh(env):
    from backend.lrp import service

    first = service.load_text("hub", standin.HUB_1_4B)
    model_id = store.stats()["models"][0]["id"]
    assert store.evict(model_id) and store.stats()["models"] == []
    again = service.load_text("hub", standin.HUB_1_4B)
    assert again is not first and again.model is not first.model
