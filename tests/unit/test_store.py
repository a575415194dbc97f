"""The model store (backend.core.store): loading once, integrity checks, sizes, the budget and LRU eviction, views."""

import dataclasses
import threading
import time

import numpy as np
import pytest
import torch
from torch import nn

from backend.core import interventions as iv
from backend.core import store
from tests.helpers.tiny import TinyMLP

MB = 10**6


@pytest.fixture(autouse=True)
def own_store(monkeypatch):
    """Each test sees an empty store (the models other tests loaded are put back afterwards)."""
    monkeypatch.setenv("WORKBENCH_MODEL_BUDGET", "none")
    with store._GUARD:
        saved = list(store._MODELS.items())
        store._MODELS.clear()
        store._STATS["peak_bytes"] = 0
    yield
    with store._GUARD:
        store._MODELS.clear()
        store._MODELS.update(saved)
        assert not store._IN_USE, "a hold outlived its scope or call"


def block(mb: float, seed: int = 0) -> nn.Module:
    """A module of exactly `mb` megabytes of float32 parameters."""
    torch.manual_seed(seed)
    m = nn.Module()
    m.w = nn.Parameter(torch.randn(int(mb * MB) // 4))
    return m


def test_get_or_load_loads_once_under_concurrency(monkeypatch):
    monkeypatch.setenv("WORKBENCH_CHECK_WEIGHTS", "1")
    calls = []

    def loader():
        calls.append(1)
        time.sleep(0.05)
        return TinyMLP(seed=3)

    got = []
    threads = [threading.Thread(target=lambda: got.append(store.get_or_load("unit:mlp", loader))) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and all(m is got[0] for m in got)
    assert "unit:mlp" in store.loaded()


def test_integrity_check_sees_hooks_and_changed_weights(monkeypatch):
    monkeypatch.setenv("WORKBENCH_CHECK_WEIGHTS", "1")
    model = store.get_or_load("unit:mlp2", lambda: TinyMLP(seed=4))
    with iv.zero_channels(model, "fc1", [0]):
        assert any("hook" in p for p in store.integrity_problems())
    assert store.integrity_problems() == []
    orig = model.fc2.bias[0].item()
    with torch.no_grad():
        model.fc2.bias[0] += 1
    try:
        assert any("weights differ" in p for p in store.integrity_problems())
    finally:
        with torch.no_grad():
            model.fc2.bias[0] = orig
    mask = torch.ones_like(model.fc1.weight, dtype=torch.bool)
    with iv.scale_weights(model, {"fc1.weight": mask}, 1.1):
        assert store.integrity_problems()
    assert store.integrity_problems() == []


@pytest.mark.parametrize(
    "text,expected",
    [
        ("8GB", 8 * 10**9),
        ("1.5GiB", int(1.5 * 2**30)),
        ("512 MB", 512 * MB),
        ("1234", 1234),
        ("2mib", 2 * 2**20),
        (" none ", None),
        ("", None),
        ("inf", None),
        (3000, 3000),
    ],
)
def test_parse_bytes(text, expected):
    assert store.parse_bytes(text) == expected


@pytest.mark.parametrize("bad", ["8 parsecs", "-1GB", "GB", "1e9"])
def test_parse_bytes_refuses_nonsense(bad):
    with pytest.raises(ValueError, match="not a size"):
        store.parse_bytes(bad)


def test_default_budget_is_a_share_of_memory(monkeypatch):
    monkeypatch.delenv("WORKBENCH_MODEL_BUDGET")
    assert 10**8 < store.budget_bytes() == store.default_budget()


def test_bytes_count_each_storage_once_in_modules_pipelines_and_holders():
    mlp = TinyMLP(seed=0)
    params = sum(p.numel() * 4 for p in mlp.parameters())
    assert store.nbytes_of(mlp) == params
    tied = nn.Sequential(nn.Embedding(10, 6), nn.Linear(6, 10, bias=False))
    tied[1].weight = tied[0].weight  # a tied head shares its storage: counted once
    assert store.nbytes_of(tied) == 10 * 6 * 4
    tied.register_buffer("scale", torch.ones(5, dtype=torch.float16))
    assert store.nbytes_of(tied) == 10 * 6 * 4 + 10

    class Pipe:  # diffusers keeps its modules in `components`
        def __init__(self):
            self.components = {"unet": mlp, "tokenizer": object(), "vae": tied}

    assert store.nbytes_of(Pipe()) == params + 250

    @dataclasses.dataclass
    class Loaded:  # how services keep a model with its tokenizer and held-out data
        model: nn.Module
        tok: object
        held: dict

    held = {"x": np.zeros((10, 10), dtype=np.float32), "view": None}
    held["view"] = held["x"][:5]  # a view of the same array is not counted again
    assert store.nbytes_of(Loaded(mlp, object(), held)) == params + 400
    assert store.nbytes_of({"vocab": {"a": 1}}) == 0


def test_lru_eviction_keeps_the_recently_used(monkeypatch):
    monkeypatch.setenv("WORKBENCH_MODEL_BUDGET", "2.5MB")
    store.get_or_load("unit:a", lambda: block(1))
    store.get_or_load("unit:b", lambda: block(1))
    store.get_or_load("unit:a", lambda: pytest.fail("a is loaded"))  # a is now the most recent
    store.get_or_load("unit:c", lambda: block(1))
    assert list(store.loaded()) == ["unit:a", "unit:c"]  # b was the least recently used
    store.get_or_load("unit:tok", lambda: {"vocab": {"x": 1}})  # no tensors: nothing to evict for
    store.get_or_load("unit:d", lambda: block(1))
    assert list(store.loaded()) == ["unit:c", "unit:tok", "unit:d"]
    s = store.stats()
    assert s["resident_bytes"] == 2 * MB and s["peak_bytes"] == 3 * MB  # budget + the one loading


def test_a_malformed_budget_setting_says_which(monkeypatch):
    monkeypatch.setenv("WORKBENCH_MODEL_BUDGET", "lots")
    with pytest.raises(ValueError, match="WORKBENCH_MODEL_BUDGET: not a size"):
        store.get_or_load("unit:a", lambda: block(1))


def test_model_bigger_than_the_budget_loads_alone(monkeypatch, caplog):
    monkeypatch.setenv("WORKBENCH_MODEL_BUDGET", "1.5MB")
    store.get_or_load("unit:a", lambda: block(1))
    with caplog.at_level("WARNING", logger="workbench"):
        store.get_or_load("unit:big", lambda: block(2))
    assert list(store.loaded()) == ["unit:big"]
    assert "larger than the model budget" in caplog.text


def test_size_hint_makes_room_before_loading(monkeypatch):
    monkeypatch.setenv("WORKBENCH_MODEL_BUDGET", "2.5MB")
    store.get_or_load("unit:a", lambda: block(1))
    store.get_or_load("unit:b", lambda: block(1))
    store.reset_peak()
    seen = []
    store.get_or_load("unit:c", lambda: block(1), size_hint=MB, progress=lambda f, m: seen.append((f, m)))
    assert store.stats()["peak_bytes"] <= 2.5 * MB  # a went before c loaded
    assert list(store.loaded()) == ["unit:b", "unit:c"]
    assert [f for f, _ in seen] == [0.0, 1.0] and "unit:c" in seen[-1][1]


def test_eviction_listener_and_reload_keeps_integrity_check(monkeypatch):
    monkeypatch.setenv("WORKBENCH_CHECK_WEIGHTS", "1")
    monkeypatch.setenv("WORKBENCH_MODEL_BUDGET", "1.5MB")
    gone = []
    store.on_evict(gone.append)
    try:
        first = store.get_or_load("unit:a", lambda: block(1, seed=1))
        store.get_or_load("unit:b", lambda: block(1, seed=2))
        assert gone == ["unit:a"]
        again = store.get_or_load("unit:a", lambda: block(1, seed=1))
        assert again is not first and gone == ["unit:a", "unit:b"]
        assert store.integrity_problems() == []
        with torch.no_grad():
            again.w[0] += 1
        assert store.integrity_problems() == ["unit:a: weights differ from the loaded ones"]
    finally:
        store._EVICT_LISTENERS.remove(gone.append)


def test_an_evicted_model_someone_else_keeps_is_reported(monkeypatch, caplog):
    monkeypatch.setenv("WORKBENCH_MODEL_BUDGET", "1.5MB")
    monkeypatch.setattr(store, "_COLLECT_BYTES", 0)  # collect and check after every eviction
    kept = store.get_or_load("unit:kept", lambda: block(1))  # a service caching the model itself
    with caplog.at_level("WARNING", logger="workbench"):
        store.get_or_load("unit:freed", lambda: block(1))  # evicts kept, which the test still holds
        store.get_or_load("unit:c", lambda: block(1))  # evicts freed: nobody else holds it
    assert store.stats()["retained_after_eviction"] == ["unit:kept"]
    assert "unit:kept, but it is still referenced elsewhere" in caplog.text and "unit:freed" not in caplog.text
    del kept
    store._STATS["retained"].clear()


def test_lru_order_holds_in_a_plain_dict(monkeypatch):
    monkeypatch.setattr(store, "_MODELS", {})  # as tests that give their module a store of its own do
    monkeypatch.setenv("WORKBENCH_MODEL_BUDGET", "2.5MB")
    for mid in ("unit:a", "unit:b", "unit:a", "unit:c"):
        store.get_or_load(mid, lambda: block(1))
    assert list(store.loaded()) == ["unit:a", "unit:c"]


def test_a_model_over_the_budget_stays_loaded_until_another_is_needed(monkeypatch):
    monkeypatch.setenv("WORKBENCH_MODEL_BUDGET", "1.5MB")
    loads = []

    def big():
        loads.append("big")
        return block(2)

    with store.request_scope():
        first = store.get_or_load("unit:big", big)
        assert any("larger than the model budget" in n and "unit:big" in n for n in store.notes())
    for _ in range(3):  # the next requests find it loaded: no reload, nothing more to say
        with store.request_scope():
            assert store.get_or_load("unit:big", big) is first
            assert store.notes() == []
    assert loads == ["big"] and list(store.loaded()) == ["unit:big"]
    assert "larger than the model budget" in store.stats()["models"][0]["note"]
    resident_while_loading = []

    def small():
        resident_while_loading.append(store.stats()["resident_bytes"])
        return block(1)

    store.get_or_load("unit:small", small)  # another model is needed: big makes room first
    assert list(store.loaded()) == ["unit:small"] and resident_while_loading == [0]
    assert store.notes() == []  # outside a request there is no one to tell


def test_views_are_per_name_counted_beside_their_model_and_leave_with_it(monkeypatch):
    monkeypatch.setenv("WORKBENCH_MODEL_BUDGET", "none")
    made = []

    def derive(name, extra):
        def make(model):
            made.append(name)
            return {"model": model, "name": name, "extra": torch.zeros(extra // 4)}

        return make

    a = store.get_view("unit:m", "tab-a", lambda: block(1), derive("a", 1000))
    b = store.get_view("unit:m", "tab-b", lambda: pytest.fail("loaded once"), derive("b", 400))
    assert store.get_view("unit:m", "tab-a", lambda: block(1), derive("a", 1000)) is a
    assert a["name"] == "a" and b["name"] == "b" and a["model"] is b["model"] and made == ["a", "b"]
    (entry,) = store.stats()["models"]
    assert entry["views"] == ["tab-a", "tab-b"] and entry["bytes"] == MB and entry["view_bytes"] == 1400
    assert store.stats()["resident_bytes"] == MB + 1400
    assert store.evict("unit:m") and store.stats()["models"] == []
    store.get_view("unit:m", "tab-a", lambda: block(1), derive("a", 1000))
    assert made == ["a", "b", "a"]  # derived afresh for the reloaded model
