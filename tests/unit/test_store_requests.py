"""The model store under requests: request scopes hold their models, concurrent calls, guarded handlers."""

import asyncio
import contextvars
import random
import threading
import time

import pytest

from backend.core import interventions as iv
from backend.core import store
from tests.helpers.tiny import TinyMLP
from tests.unit.test_store import MB, block, own_store  # noqa: F401  (own_store: the autouse fixture)


@pytest.mark.parametrize("view", [False, True])
def test_model_calls_that_wait_for_the_same_first_load_do_not_hold_it_up(monkeypatch, view):
    """Several model calls at once may need the same model first: one loads it, the others wait for
    that load. Waiting, they compute nothing, so the load (which waits for running computations,
    backend.core.loadgate) goes ahead at once instead of at the gate's time limit."""
    from backend.core import loadgate

    monkeypatch.setattr(loadgate, "WAIT_S", 30.0)
    started = threading.Event()
    others_in = threading.Barrier(4)  # the three other calls computing, and the first load

    def announce(fraction, message):  # the first load tells of its start before it takes the gate
        if fraction == 0.0 and not started.is_set():
            started.set()
            others_in.wait(10)  # the others compute and ask for this model now

    def call(progress=None):
        with loadgate.computing():  # as components.serving.guard runs every model call
            if progress is None:
                others_in.wait(10)
            if view:
                got.append(
                    store.get_view(
                        "unit:shared", "tab", lambda: TinyMLP(seed=4), lambda m: ("view", m), progress=progress
                    )
                )
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
    from components.serving import guard

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

    from components.serving import guard

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


def test_every_kind_of_handler_shows_the_over_budget_notice_once_per_load(monkeypatch):
    from components.serving import guard

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
