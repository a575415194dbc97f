import asyncio
import contextvars
import dataclasses
import random
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
    threads = [threading.Thread(target=lambda: got.append(store.get_or_load("unit:mlp", loader)))
               for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and all(m is got[0] for m in got)
    assert "unit:mlp" in store.loaded()


@pytest.mark.parametrize("view", [False, True])
def test_model_calls_that_wait_for_the_same_first_load_do_not_hold_it_up(monkeypatch, view):
    """Several model calls at once may need the same model first: one loads it, the others wait for
    that load. Waiting, they compute nothing, so the load (which waits for running computations,
    backend.core.loadgate) goes ahead at once instead of at the gate's time limit."""
    from backend.core import loadgate

    monkeypatch.setattr(loadgate, "WAIT_S", 30.0)
    started = threading.Event()

    def announce(fraction, message):  # the first load tells of its start before it takes the gate
        if fraction == 0.0 and not started.is_set():
            started.set()
            time.sleep(0.5)  # the others are computing and waiting for this load by now

    def call(progress=None):
        with loadgate.computing():  # as components.guard runs every model call
            if view:
                got.append(store.get_view("unit:shared", "tab", lambda: TinyMLP(seed=4), lambda m: ("view", m),
                                          progress=progress))
            else:
                got.append(store.get_or_load("unit:shared", lambda: TinyMLP(seed=4), progress=progress))

    got = []
    t0 = time.perf_counter()
    first = threading.Thread(target=call, args=(announce,))
    first.start()
    started.wait()
    others = [threading.Thread(target=call) for _ in range(3)]
    for t in others:
        t.start()
    for t in [first, *others]:
        t.join(60)
    took = time.perf_counter() - t0
    assert len(got) == 4 and all(g is got[0] or g == got[0] for g in got)
    assert took < 10, f"the load waited for the calls that waited for it ({took:.1f} s)"
    assert loadgate._STATE == {"computing": 0, "loading": False, "pending": 0}
    assert store.integrity_problems() == []


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


def test_a_running_requests_intervention_is_not_a_problem_until_it_outlives_the_request():
    # The Overview may be refreshed while another user's request has its hooks on a shared model.
    model = store.get_or_load("unit:mlp3", lambda: TinyMLP(seed=5))
    with store.request_scope():
        store.get_or_load("unit:mlp3", lambda: pytest.fail("loaded"))
        with iv.zero_channels(model, "fc1", [0]):
            assert store.integrity_problems() == []
            leaked = iv.zero_channels(model, "fc1", [1])
            leaked.__enter__()  # a hook its request forgets to remove
    try:
        assert store.integrity_problems() == ["unit:mlp3: 1 hook(s) left on the model"]
    finally:
        leaked.__exit__(None, None, None)
    assert store.integrity_problems() == []


@pytest.mark.parametrize("text,expected", [
    ("8GB", 8 * 10**9), ("1.5GiB", int(1.5 * 2**30)), ("512 MB", 512 * MB), ("1234", 1234),
    ("2mib", 2 * 2**20), (" none ", None), ("", None), ("inf", None), (3000, 3000)])
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


def test_model_in_use_by_a_request_is_not_evicted(monkeypatch):
    monkeypatch.setenv("WORKBENCH_MODEL_BUDGET", "1.5MB")
    with store.request_scope():
        a = store.get_or_load("unit:a", lambda: block(1))
        with store.request_scope():  # a nested scope joins the outer one
            pass
        store.get_or_load("unit:b", lambda: block(1))
        assert set(store.in_use()) == {"unit:a", "unit:b"}
        done = []
        other = threading.Thread(target=lambda: done.append(store.get_or_load("unit:c", lambda: block(1))))
        other.start()
        other.join()  # another caller loads c: a and b are held, so nothing can go
        assert store.get_or_load("unit:a", lambda: block(1)) is a
        assert set(store.loaded()) == {"unit:a", "unit:b", "unit:c"}
    # the scope ended: back within budget, the least recently used (b, then c; a was used last) went
    assert store.in_use() == {}
    assert list(store.loaded()) == ["unit:a"]


def test_threads_started_with_the_request_context_share_its_scope(monkeypatch):
    monkeypatch.setenv("WORKBENCH_MODEL_BUDGET", "1.5MB")
    with store.request_scope():
        ctx = contextvars.copy_context()  # what a handler hands to its worker threads
        t = threading.Thread(target=ctx.run, args=(store.get_or_load, "unit:a", lambda: block(1)))
        t.start()
        t.join()
        assert store.in_use() == {"unit:a": 1}  # held by the request, not just during the call
        store.get_or_load("unit:b", lambda: block(1))
        assert set(store.loaded()) == {"unit:a", "unit:b"}
    assert list(store.loaded()) == ["unit:b"]


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


def test_concurrent_requests_never_lose_a_model_they_hold(monkeypatch):
    """Threads hold request scopes over random models under a budget of two: every model a request
    got stays the same object until its scope ends, and the store is back within budget after."""
    monkeypatch.setenv("WORKBENCH_MODEL_BUDGET", "2MB")
    ids = [f"unit:m{i}" for i in range(6)]
    loads, errors = [], []

    def loader(i):
        def load():
            loads.append(i)
            time.sleep(0.002)
            return block(1, seed=i)
        return load

    def request(seed):
        rng = random.Random(seed)
        try:
            for _ in range(15):
                with store.request_scope():
                    got = {}
                    for _ in range(3):
                        i = rng.randrange(len(ids))
                        m = store.get_or_load(ids[i], loader(i))
                        assert got.setdefault(i, m) is m, "a held model was evicted and reloaded"
                        held = set(store.loaded())
                        assert {ids[j] for j in got} <= held
                        with store._GUARD:  # over budget only by what requests hold
                            extra = sum(e["bytes"] for k, e in store._MODELS.items() if store._IN_USE.get(k))
                            assert store._resident_locked() <= 2 * MB + extra
                        time.sleep(0.001)
        except AssertionError as e:
            errors.append(e)

    threads = [threading.Thread(target=request, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert store.in_use() == {}
    assert store.stats()["resident_bytes"] <= 2 * MB
    assert len(loads) > len(ids)  # the budget forced reloads: eviction really ran


def test_guarded_handlers_hold_their_models_for_the_whole_request(monkeypatch):
    from components import guard

    monkeypatch.setenv("WORKBENCH_MODEL_BUDGET", "1.5MB")

    def push_out():  # another caller's load, which would evict anything not held
        store.get_or_load("unit:other", lambda: block(1))
        store.evict("unit:other")

    def in_thread(fn):  # a thread started plainly does not share the request's scope
        t = threading.Thread(target=fn)
        t.start()
        t.join()

    def plain():
        m = store.get_or_load("unit:a", lambda: block(1))
        in_thread(push_out)
        return store.get_or_load("unit:a", lambda: block(1)) is m

    def gen():
        m = store.get_or_load("unit:a", lambda: block(1))
        yield 1
        push_out()  # this step may run in another thread: the hold must survive
        yield store.get_or_load("unit:a", lambda: block(1)) is m

    async def coro():
        m = store.get_or_load("unit:a", lambda: block(1))
        await asyncio.to_thread(push_out)
        return store.get_or_load("unit:a", lambda: block(1)) is m

    async def agen():
        m = store.get_or_load("unit:a", lambda: block(1))
        yield 1
        await asyncio.to_thread(push_out)
        yield store.get_or_load("unit:a", lambda: block(1)) is m

    assert guard.guarded(plain)() is True
    steps = guard.guarded(gen)()
    assert next(steps) == 1
    in_thread(lambda: store.get_or_load("unit:x", lambda: block(1)))  # between two steps of the stream
    assert "unit:a" in store.loaded()
    assert list(steps) == [True]
    assert asyncio.run(guard.guarded(coro)()) is True

    async def drain():
        return [x async for x in guard.guarded(agen)()]

    assert asyncio.run(drain()) == [1, True]
    assert store.in_use() == {}
    store.get_or_load("unit:y", lambda: block(1))  # nothing held now: a can go
    assert "unit:a" not in store.loaded()


def test_a_failed_or_abandoned_request_releases_its_models(monkeypatch):
    import gradio as gr

    from components import guard

    monkeypatch.setenv("WORKBENCH_MODEL_BUDGET", "1.5MB")

    def fails():
        store.get_or_load("unit:a", lambda: block(1))
        raise ValueError("bad input")

    def stream():
        store.get_or_load("unit:b", lambda: block(1))
        yield 1
        yield 2

    with pytest.raises(gr.Error, match="bad input"):
        guard.guarded(fails)()
    assert store.in_use() == {}
    steps = guard.guarded(stream)()
    assert next(steps) == 1 and store.in_use() == {"unit:b": 1}
    steps.close()  # the client went away mid-stream
    assert store.in_use() == {}
    assert list(store.loaded()) == ["unit:b"]  # a, released by the failed request, made room for b


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


def test_every_kind_of_handler_shows_the_over_budget_notice_once_per_load(monkeypatch):
    from components import guard

    monkeypatch.setenv("WORKBENCH_MODEL_BUDGET", "1.5MB")
    shown = []
    monkeypatch.setattr(guard.gr, "Warning", shown.append)

    def plain():
        store.get_or_load("unit:big-plain", lambda: block(2))

    def gen():
        yield 1
        store.get_or_load("unit:big-gen", lambda: block(2))
        yield 2

    async def coro():
        store.get_or_load("unit:big-coro", lambda: block(2))

    async def agen():
        store.get_or_load("unit:big-agen", lambda: block(2))
        yield 1

    async def drain():
        return [x async for x in guard.guarded(agen)()]

    guard.guarded(plain)()
    guard.guarded(plain)()  # loaded already: no second notice
    assert list(guard.guarded(gen)()) == [1, 2]
    asyncio.run(guard.guarded(coro)())
    asyncio.run(drain())
    assert [n.split(" ")[0] for n in shown] == ["unit:big-plain", "unit:big-gen", "unit:big-coro", "unit:big-agen"]
    assert all("(2 MB) is larger than the model budget (1.5 MB)" in n for n in shown)
