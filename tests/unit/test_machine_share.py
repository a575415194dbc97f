"""A timing check marked `alone` waits for the tests of any other run of the suite on the machine
(tests/conftest._machine_share), and holds their next tests off until it ends."""
import threading
import time

import tests.conftest as suite


def _hold(name: str, alone: bool, entered: threading.Event, seconds: float, spans: dict):
    with suite._machine_share(alone):
        t0 = time.monotonic()
        entered.set()
        time.sleep(seconds)
        spans[name] = (t0, time.monotonic())


def _run(first_alone: bool, second_alone: bool, monkeypatch, tmp_path):
    """(first's span, second's span): the first holds its share 0.6 s, the second asks meanwhile."""
    # a folder of this test's own: the suite's folder holds this very test's shared lock
    monkeypatch.setattr(suite, "LOCKS", tmp_path)
    spans: dict = {}
    entered = threading.Event()
    a = threading.Thread(target=_hold, args=("first", first_alone, entered, 0.6, spans))
    a.start()
    assert entered.wait(10)
    b = threading.Thread(target=_hold, args=("second", second_alone, threading.Event(), 0.1, spans))
    b.start()
    a.join(10)
    b.join(10)
    return spans["first"], spans["second"]


def test_an_alone_check_waits_for_a_running_test_and_holds_off_the_next(monkeypatch, tmp_path):
    running, check = _run(False, True, monkeypatch, tmp_path)
    assert check[0] >= running[1]  # began after the running test ended
    check, following = _run(True, False, monkeypatch, tmp_path)
    assert following[0] >= check[1]  # the next test began after the alone check ended


def test_ordinary_tests_of_two_runs_go_side_by_side(monkeypatch, tmp_path):
    first, second = _run(False, False, monkeypatch, tmp_path)
    assert second[0] < first[1]  # the second began while the first still ran


def test_every_test_holds_the_machine_wide_lock_with_or_without_xdist():
    import fcntl

    assert not suite.LOCKS.is_relative_to(suite.ROOT)  # one per machine, not per checkout
    with open(suite._lock_path("machine"), "a") as f:  # this test holds it shared: no one may take it
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            taken = True
            fcntl.flock(f, fcntl.LOCK_UN)
        except BlockingIOError:
            taken = False
    assert not taken


def test_waiting_for_the_machine_does_not_count_against_the_test_time_limit(monkeypatch, tmp_path):
    """pytest-timeout's alarm (signal method) is held while a test waits for the lock, then set back
    to what was left: a check queued behind another run's long test is not timed out for it."""
    import signal

    monkeypatch.setattr(suite, "LOCKS", tmp_path)
    fired = []
    old_handler = signal.signal(signal.SIGALRM, lambda *_: fired.append(time.monotonic()))
    old_timer = signal.setitimer(signal.ITIMER_REAL, 0)  # this test's own limit, put back below
    try:
        entered, spans = threading.Event(), {}
        holder = threading.Thread(target=_hold, args=("other run", True, entered, 1.0, spans))
        holder.start()
        assert entered.wait(10)
        signal.setitimer(signal.ITIMER_REAL, 0.4)  # the test's limit: shorter than the wait
        t0 = time.monotonic()
        with suite._machine_share(False):
            waited = time.monotonic() - t0
            left = signal.getitimer(signal.ITIMER_REAL)[0]
        holder.join(10)
        assert waited >= 0.5 and fired == []  # the alarm did not go off while it waited
        assert 0.2 < left <= 0.4  # and after it, the time left is what was left before
        time.sleep(0.6)
        assert len(fired) == 1  # the limit still applies to the test itself
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old_handler)
        signal.setitimer(signal.ITIMER_REAL, *old_timer)
