"""Model calls queue per model, not per tab nor in one line: every model-touching event shares one
queue of WORKBENCH_MODEL_CONCURRENCY calls (default 4), and the model's own lock makes calls on the
same model take turns. So while a long call runs on one model, a call on another model of the same
tab completes; two visitors on the same model, one of them pruning its weights in place, each get
what they get alone (no intervention leaks); and calls that touch no model (feature pages from the
index) never wait behind model calls (tests/api/test_mcp.py)."""

from __future__ import annotations

import json
import threading
import time

import pytest

pytestmark = pytest.mark.timeout(420)
RACE = ("math-llama", ["lora", "pissa"], 5, 500, 8, 0)  # 2 methods x 5 seeds x 500 steps of an LM: minutes


def analysis(out) -> dict:
    """The /analyse endpoint's JSON export, without its timing."""
    files = out[3]
    path = [f for f in files if str(f).endswith(".json")][0]
    with open(path) as fh:
        data = json.load(fh)
    data.pop("seconds", None)
    return data


def wait_processing(job, what: str) -> float:
    while job.status().code.name not in ("PROCESSING", "ITERATING"):
        assert not job.done(), f"{what} ended before it started"
        time.sleep(0.05)
    return time.perf_counter()


def test_a_call_on_another_model_completes_during_a_long_call(app_url):
    """A fine-tuning race on the math Llama (a model call of minutes) runs; an analysis of a layer of
    the PiSSA toy, another model of the same tab, completes meanwhile with the result it gets alone
    (with one queue per tab it waited for the whole race). Calls that touch no model answer during
    such a call too: tests/api/test_mcp.py times 20 feature pages, p95 ≤ 1 s."""
    from gradio_client import Client

    from backend.pissa import service

    racer, other = Client(app_url, verbose=False), Client(app_url, verbose=False)
    layer = other.predict("pissa-toy", api_name="/layers")[0]["value"]  # warm: loaded before the race
    alone = analysis(other.predict("pissa-toy", layer, 3, "pissa", api_name="/analyse"))
    service.RESULTS.clear()  # the analysis is computed again, not read from the cache
    race = racer.submit(*RACE, api_name="/race")
    try:
        started = wait_processing(race, "the race")
        t = time.perf_counter()
        during = analysis(other.predict("pissa-toy", layer, 3, "pissa", api_name="/analyse"))
        analyse_s, at = time.perf_counter() - t, time.perf_counter() - started
        assert not race.done(), "the race ended before the other model's call: not a long call"
        while time.perf_counter() - started < 10:  # the analysis ran during a call of ≥ 10 s
            assert not race.done(), f"the race ended within {time.perf_counter() - started:.1f} s"
            time.sleep(0.2)
    finally:
        racer.predict(api_name="/race_stop")
        race.cancel()
    print(f"another model's analysis during a race: {analyse_s:.2f} s, done {at:.1f} s into the race")
    assert during == alone


def test_two_calls_on_the_same_model_take_turns_and_see_unmodified_weights(app_url, monkeypatch):
    """Visitor A asks the math Llama a question with its math neurons pruned (the weights are scaled
    in place for the call); visitor B, at the same time, analyses a layer of the same shared model in
    the Adapters tab. Both run in the one queue at once; the model's lock makes them take turns, so B
    never reads A's pruned weights and A's answers are its own: every result equals the one each
    gets alone. The lock is seen taken by both visitors' calls, never by two at once."""
    from gradio_client import Client

    from backend.core import interventions as iv
    from backend.mathneuro import service as math_service
    from backend.pissa import service as pissa_service

    a, b = Client(app_url, verbose=False), Client(app_url, verbose=False)
    q = "bob has 57 cards . he loses 19 . how many cards are left ?"
    prune = ("MathNeuro", 15, 0.0, 64)
    layer = b.predict("math-llama", api_name="/layers")[0]["value"]
    ask_alone = a.predict(q, *prune, api_name="/mn_ask")
    ranks = (1, 2, 3, 4)
    analyse_alone = {r: analysis(b.predict("math-llama", layer, r, "pissa", api_name="/analyse")) for r in ranks}
    model = math_service.bench("zoo").model
    assert pissa_service.get_model("math-llama") is model  # one shared copy

    holds: list[tuple[int, float, float]] = []  # (thread, acquired, released) on the shared model
    depth: dict[int, tuple[int, float]] = {}
    lock = iv.model_lock(model)
    real_acquire, real_release = iv.ModelLock.acquire, iv.ModelLock.release

    def acquire(self, *args, **kw):
        ok = real_acquire(self, *args, **kw)
        if ok and self is lock:
            n, t0 = depth.get(threading.get_ident(), (0, time.perf_counter()))
            depth[threading.get_ident()] = (n + 1, t0)
        return ok

    def release(self):
        if self is lock:
            me = threading.get_ident()
            n, t0 = depth[me]
            if n == 1:
                del depth[me]
                holds.append((me, t0, time.perf_counter()))
            else:
                depth[me] = (n - 1, t0)
        real_release(self)

    monkeypatch.setattr(iv.ModelLock, "acquire", acquire)
    monkeypatch.setattr(iv.ModelLock, "release", release)
    pissa_service.RESULTS.clear()
    got_ask, got_analyse, errors = [], {}, []

    def visitor_a():
        try:
            for _ in range(3):
                got_ask.append(a.predict(q, *prune, api_name="/mn_ask"))
        except Exception as e:  # reported below
            errors.append(repr(e))

    def visitor_b():
        try:
            for r in ranks:
                got_analyse[r] = analysis(b.predict("math-llama", layer, r, "pissa", api_name="/analyse"))
        except Exception as e:  # reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=visitor_a), threading.Thread(target=visitor_b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert errors == []
    assert got_ask == [ask_alone] * 3
    assert got_analyse == analyse_alone
    holders = {h[0] for h in holds}
    assert len(holders) >= 2, holds  # both visitors' calls took the model's lock
    spans = sorted(h[1:] for h in holds)
    assert all(s[1] <= n[0] for s, n in zip(spans, spans[1:])), "two calls held the model at once"
