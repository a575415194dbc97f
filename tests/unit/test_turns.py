"""One visitor's model calls in one tab keep their order (components.serving.turns): with several model
calls at once, a quick later call must not overtake a slow earlier one of the same page, and other
visitors are not held up."""
import threading
import time
from types import SimpleNamespace

from gradio.context import LocalContext

from components.serving.turns import TURNS, in_session_order


def _as(session, fn, *a):
    """Run `fn` as Gradio does for an event of `session` (the request set in the handler's context)."""
    LocalContext.request.set(SimpleNamespace(session_hash=session))
    try:
        return fn(*a)
    finally:
        LocalContext.request.set(None)


def _race(sessions, tab="math_neurons"):
    done = []

    def work(name, seconds):
        time.sleep(seconds)
        done.append(name)
        return name

    fn = in_session_order(work, tab)
    threads = []
    for (session, name, seconds) in sessions:
        t = threading.Thread(target=_as, args=(session, fn, name, seconds))
        t.start()
        threads.append(t)
        time.sleep(0.05)  # the order in which the calls arrive
    for t in threads:
        t.join()
    return done


def test_a_later_quick_call_of_the_same_page_waits_for_the_earlier_slow_one():
    assert _race([("A", "slow", 0.6), ("A", "quick", 0.0)]) == ["slow", "quick"]
    assert TURNS.waiting() == 0  # nothing left behind


def test_another_visitor_is_not_held_up():
    assert _race([("A", "slow", 0.6), ("B", "quick", 0.0)]) == ["quick", "slow"]


def test_the_same_visitor_in_another_tab_is_not_held_up():
    done = []
    slow = in_session_order(lambda: (time.sleep(0.6), done.append("math")), "math_neurons")
    quick = in_session_order(lambda: done.append("adapters"), "adapters")
    t = threading.Thread(target=_as, args=("A", slow))
    t.start()
    time.sleep(0.05)
    _as("A", quick)
    t.join()
    assert done == ["adapters", "math"]


def test_many_calls_are_served_first_come_first_served():
    assert _race([("A", f"c{i}", 0.2 if i % 2 == 0 else 0.0) for i in range(6)]) == [f"c{i}" for i in range(6)]


def test_a_stream_holds_its_turn_until_it_ends_and_a_failure_releases_it():
    def stream(n):
        for i in range(n):
            time.sleep(0.1)
            yield i

    ordered = in_session_order(stream, "adapters")
    seen = []
    t = threading.Thread(target=_as, args=("A", lambda: seen.extend(ordered(4))))
    t.start()
    time.sleep(0.05)
    _as("A", in_session_order(lambda: seen.append("after"), "adapters"))
    t.join()
    assert seen == [0, 1, 2, 3, "after"]

    def boom():
        raise ValueError("refused")
    try:
        _as("A", in_session_order(boom, "adapters"))
    except ValueError:
        pass
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
