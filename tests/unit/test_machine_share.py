"""A timing check marked `alone` waits for the tests of any other run of the suite on the machine
(tests/conftest._machine_share), and holds their next tests off until it ends."""

import os
import threading
import time
from pathlib import Path

import pytest

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


def _held_here(name: str = "machine") -> str | None:
    """How this process holds the suite's lock `name` ("READ": shared, "WRITE": alone), or None: read
    from the kernel's table of locks, so a second run of the suite holding it beside does not count."""
    inode = str(os.stat(suite._lock_path(name)).st_ino)
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if fields[1] == "FLOCK" and fields[4] == str(os.getpid()) and fields[5].rsplit(":", 1)[1] == inode:
            return fields[3]
    return None


def test_every_test_holds_the_machine_wide_lock_with_or_without_xdist():
    assert not suite.LOCKS.is_relative_to(suite.ROOT)  # one per machine, not per checkout
    assert _held_here() == "READ"  # shared: beside the other tests, never beside an alone one


@pytest.mark.alone
def test_an_alone_test_holds_the_machine_lock_alone():
    assert _held_here() == "WRITE"


@pytest.fixture(scope="module")
def module_setup_saw_the_lock():
    """Set up inside the protocol of this module's first test to use it, as a package's server is."""
    return _held_here()


def test_a_modules_fixtures_are_set_up_under_the_machine_lock(module_setup_saw_the_lock):
    # a server a package starts is load an `alone` check of another worker must not run beside
    assert module_setup_saw_the_lock == "READ"


def test_the_lock_is_taken_outside_the_test_time_limit(request):
    """The machine share wraps pytest-timeout's wrapper: a check queued behind another run's long
    test does not spend its own time limit waiting."""
    impls = request.config.pluginmanager.hook.pytest_runtest_protocol.get_hookimpls()
    ours = next(i for i, impl in enumerate(impls) if impl.plugin is suite)
    timeout = next(i for i, impl in enumerate(impls) if impl.plugin_name == "timeout")
    assert ours > timeout  # pluggy calls the later hookimpl first: ours is the outer wrapper
