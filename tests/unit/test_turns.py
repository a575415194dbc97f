"""One visitor's model calls in one tab keep their order (components.serving.turns): with several model
calls at once, a quick later call must not overtake a slow earlier one of the same page, and other
visitors are not held up."""

import threading
import time
from types import SimpleNamespace

import pytest
from gradio.context import LocalContext

from components.serving.turns import TURNS, in_session_order
from tests.helpers.until import until


def _as(session, fn, *a):
    """Run `fn` as Gradio does for an event of `session` (the request set in the handler's context)."""
    LocalContext.request.set(SimpleNamespace(session_hash=session))
    try:
        return fn(*a)
    finally:
        LocalContext.request.set(None)


def _race(calls, tab="math_neurons"):
    """Each call (session, name, seconds) sent once the one before it has arrived (holds its turn,
    waits for it, or, another visitor's, has ended); the first holds its turn until all have
    arrived, so a later call could overtake it, were the turns not kept."""
    done, release = [], threading.Event()

    def work(name, seconds, first):
        if first:
            assert release.wait(10)
        time.sleep(seconds)  # how long the call computes
        done.append(name)
        return name

    fn = in_session_order(work, tab)
    threads = []
    for i, (session, name, seconds) in enumerate(calls):
        t = threading.Thread(target=_as, args=(session, fn, name, seconds, i == 0))
        t.start()
        threads.append(t)
        until(lambda n=i + 1: TURNS.waiting() + len(done) >= n, what=f"the call {name} arriving")
    release.set()
    for t in threads:
        t.join(10)
        assert not t.is_alive()
    return done


def test_a_later_quick_call_of_the_same_page_waits_for_the_earlier_slow_one():
    assert _race([("A", "slow", 0.0), ("A", "quick", 0.0)]) == ["slow", "quick"]
    assert TURNS.waiting() == 0  # nothing left behind


def test_another_visitor_is_not_held_up():
    """B's call ends while A's still holds A's turn (ordering them by their ends raced: under load B's
    thread could be inside its call, counted as arrived, when A was released and ended first)."""
    done, release = [], threading.Event()

    def work(name):
        if name == "slow":
            assert release.wait(10)
        done.append(name)

    fn = in_session_order(work, "math_neurons")
    a = threading.Thread(target=_as, args=("A", fn, "slow"))
    a.start()
    until(lambda: TURNS.waiting() >= 1, what="A's call holding its turn")
    b = threading.Thread(target=_as, args=("B", fn, "quick"))
    b.start()
    b.join(10)
    assert not b.is_alive() and done == ["quick"]  # ended, A still waiting on its release
    release.set()
    a.join(10)
    assert not a.is_alive() and done == ["quick", "slow"]
    assert TURNS.waiting() == 0


def test_the_same_visitor_in_another_tab_is_not_held_up():
    done, holding, release = [], threading.Event(), threading.Event()

    def slow_math():
        holding.set()
        assert release.wait(10)
        done.append("math")

    slow = in_session_order(slow_math, "math_neurons")
    quick = in_session_order(lambda: done.append("adapters"), "adapters")
    t = threading.Thread(target=_as, args=("A", slow))
    t.start()
    assert holding.wait(10)  # the math call holds its turn
    _as("A", quick)  # returns while the math call still runs
    assert done == ["adapters"]
    release.set()
    t.join(10)
    assert done == ["adapters", "math"] and TURNS.waiting() == 0


def test_many_calls_are_served_first_come_first_served():
    assert _race([("A", f"c{i}", 0.05 if i % 2 == 0 else 0.0) for i in range(6)]) == [f"c{i}" for i in range(6)]
    assert TURNS.waiting() == 0


def test_a_stream_holds_its_turn_until_it_ends_and_a_failure_releases_it():
    streaming, release = threading.Event(), threading.Event()

    def stream(n):
        for i in range(n):
            if i == 1:  # the first step is out: the stream holds its turn
                streaming.set()
                assert release.wait(10)
            else:
                time.sleep(0.02)  # a step's work
            yield i

    ordered = in_session_order(stream, "adapters")
    seen = []
    t = threading.Thread(target=_as, args=("A", lambda: seen.extend(ordered(4))))
    t.start()
    assert streaming.wait(10)
    after = threading.Thread(target=_as, args=("A", in_session_order(lambda: seen.append("after"), "adapters")))
    after.start()
    until(lambda: TURNS.waiting() == 2, what="the later call waiting for its turn")
    release.set()
    for th in (t, after):
        th.join(10)
        assert not th.is_alive()
    assert seen == [0, 1, 2, 3, "after"]

    def boom():
        raise ValueError("refused")

    with pytest.raises(ValueError, match="refused"):
        _as("A", in_session_order(boom, "adapters"))
    assert _as("A", in_session_order(lambda: "next", "adapters")) == "next"
    assert TURNS.waiting() == 0


def test_a_call_outside_any_session_takes_no_turn():
    assert in_session_order(lambda: 7, "adapters")() == 7


def test_a_calls_time_limit_covers_its_wait_behind_the_same_pages_calls():
    """Three 1-s calls sent at once from one page under a 1.5-s limit: the first runs, the second
    is stopped at its limit counted from when it was sent (not from the end of its wait), the third's
    limit passes while it waits and it does not run at all. Each ends within its limit (+ a step)."""
    from backend.core import limits
    from backend.core.limits import JobTooLong

    def work(name):
        for _ in range(10):
            limits.check(name)
            time.sleep(0.1)
        return name

    fn = in_session_order(work, "adapters", lambda: 1.5)
    sent = threading.Barrier(3)
    ended = {}

    def call(name):
        sent.wait()
        t0 = time.monotonic()
        try:
            ended[name] = (_as("A", fn, name), time.monotonic() - t0)
        except JobTooLong as e:
            ended[name] = (str(e), time.monotonic() - t0)

    threads = [threading.Thread(target=call, args=(f"c{i}",)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    results = sorted(ended.values(), key=lambda r: r[1])
    assert sum(r in ("c0", "c1", "c2") for r, _ in results) == 1  # one ran to its end
    assert sum("was not run" in r for r, _ in results) == 1  # one never got its turn in time
    assert sum("ran past" in r for r, _ in results) == 1  # one was stopped at its limit
    assert all(s <= 1.5 + 0.3 for _, s in results), results
    assert TURNS.waiting() == 0
