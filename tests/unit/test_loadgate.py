"""backend.core.loadgate: a model load never runs beside a model computation, with no deadlock when
a computation itself loads."""

import threading
import time

from backend.core import loadgate
from tests.helpers.until import until


def _parked(t: threading.Thread, seconds: float = 0.2) -> bool:
    """The thread is still blocked after `seconds`: what it waits for has not let it through."""
    t.join(seconds)
    return t.is_alive()


def test_a_load_waits_for_running_computations_and_they_wait_for_it():
    log = []
    computing, end_compute = threading.Event(), threading.Event()
    loaded, end_load, late_arrived = threading.Event(), threading.Event(), threading.Event()

    def compute():
        with loadgate.computing():
            computing.set()
            log.append("compute start")
            assert end_compute.wait(10)
            log.append("compute end")

    def load():
        with loadgate.loading():
            log.append("load")
            loaded.set()
            assert end_load.wait(10)
            log.append("load end")

    def late_compute():
        late_arrived.set()
        with loadgate.computing():
            log.append("late compute")

    t = threading.Thread(target=compute)
    t.start()
    assert computing.wait(10)
    tl = threading.Thread(target=load)
    tl.start()
    until(lambda: loadgate._STATE["pending"] == 1, what="the load waiting for the computation")
    assert log == ["compute start"]  # the load waits while the computation runs
    end_compute.set()
    assert loaded.wait(10)
    late = threading.Thread(target=late_compute)
    late.start()
    assert late_arrived.wait(10)
    assert _parked(late) and log == ["compute start", "compute end", "load"]  # it waits for the load
    end_load.set()
    for th in (t, tl, late):
        th.join(10)
        assert not th.is_alive()
    assert log == ["compute start", "compute end", "load", "load end", "late compute"]
    assert loadgate._STATE == {"computing": 0, "loading": False, "pending": 0}


def test_a_computation_that_loads_gives_its_hold_up_and_loads_nest():
    with loadgate.computing():
        with loadgate.loading():  # its own hold does not block it
            with loadgate.loading():  # a loader that loads another model
                pass
    assert loadgate._STATE["loading"] is False


def test_a_stream_holds_the_gate_per_step_only():
    seen = []

    def steps():
        for i in range(3):
            seen.append(loadgate._STATE["computing"])
            yield i

    out = []
    for x in loadgate.gated_iter(steps()):
        out.append((x, loadgate._STATE["computing"]))
    assert seen == [1, 1, 1] and [c for _, c in out] == [0, 0, 0]


def test_a_computation_waiting_for_a_busy_model_lets_another_model_load():
    """Model calls queue per model on the model's lock. A call that waits there computes nothing, so
    a load of another model goes ahead at once instead of waiting for both calls; the waiting call
    takes its hold back (after that load) when its turn comes."""
    import torch

    from backend.core.interventions import model_lock

    model = torch.nn.Linear(2, 2)
    log, holding, waiting = [], threading.Event(), threading.Event()
    release = threading.Event()

    def first():  # computes on the model for a while
        with loadgate.computing(), model_lock(model):
            holding.set()
            release.wait(10)
            log.append("first done")

    def second():  # the same model: waits for the first
        with loadgate.computing():
            waiting.set()
            with model_lock(model):
                log.append("second runs")

    def load():
        with loadgate.loading():  # waits for the first call only
            log.append("load")

    a, b, tl = threading.Thread(target=first), threading.Thread(target=second), threading.Thread(target=load)
    a.start()
    assert holding.wait(10)
    b.start()
    assert waiting.wait(10)
    # the waiting call holds no part of the gate: it gives its hold up while it waits for the lock
    until(lambda: loadgate._STATE["computing"] == 1, what="the waiting call giving its hold up")
    tl.start()
    until(lambda: loadgate._STATE["pending"] == 1, what="the load waiting")
    assert _parked(tl) and log == []  # the load waits for the first call
    release.set()
    for t in (a, b, tl):
        t.join(10)
        assert not t.is_alive()
    assert log == ["first done", "load", "second runs"], log
    assert loadgate._STATE == {"computing": 0, "loading": False, "pending": 0}


def test_a_waiting_load_goes_before_computations_that_start_later():
    """With several model calls at once there is nearly always one running: a load that waits lets
    the running ones finish, and later computations queue behind it, so it never waits for a
    stream of new ones (a computation already holding the gate, a stream's step, goes on)."""
    log = []
    a_runs, release = threading.Event(), threading.Event()

    def a():
        with loadgate.computing():
            a_runs.set()
            release.wait(10)
            with loadgate.computing():  # nested: never blocked by the pending load
                log.append("a nested")
        log.append("a done")

    def load():
        with loadgate.loading():
            log.append("load")

    def b():
        with loadgate.computing():
            log.append("b")

    ta = threading.Thread(target=a)
    ta.start()
    a_runs.wait()
    tl = threading.Thread(target=load)
    tl.start()
    until(lambda: loadgate._STATE["pending"] == 1, what="the load waiting")
    tb = threading.Thread(target=b)
    tb.start()
    assert _parked(tb) and log == []  # b waits behind the pending load
    release.set()
    for t in (ta, tl, tb):
        t.join(10)
    assert log == ["a nested", "a done", "load", "b"], log
    assert loadgate._STATE == {"computing": 0, "loading": False, "pending": 0}


def test_a_long_loop_lets_a_waiting_load_through_between_its_steps():
    """A load waited for a whole long call (a 15 s held-out evaluation), and a short call that came
    after the load waited with it. Now the loop gives up its hold between two steps while the load
    runs, and the short call runs after the load, long before the loop ends; the loop's time for
    that wait is not counted as a step's."""
    from backend.core import limits

    log, started = [], threading.Event()

    def long_loop():
        with loadgate.computing():
            steps = limits.Steps("the loop")
            for _i in steps.each(range(20)):
                started.set()
                time.sleep(0.05)
            log.append(("loop end", time.monotonic()))
            assert steps.longest < 0.5  # the load's 0.3 s wait counted in no step

    def load():
        with loadgate.loading():
            log.append(("load", time.monotonic()))
            time.sleep(0.3)

    def short():
        with loadgate.computing():
            log.append(("short", time.monotonic()))

    tl = threading.Thread(target=long_loop)
    tl.start()
    started.wait(5)
    t0 = time.monotonic()
    threads = [threading.Thread(target=load)]
    threads[0].start()
    while not loadgate._STATE["pending"] and not loadgate._STATE["loading"]:
        time.sleep(0.005)
    threads.append(threading.Thread(target=short))
    threads[1].start()
    for t in [tl, *threads]:
        t.join(10)
    at = dict(log)
    assert [name for name, _ in sorted(log, key=lambda x: x[1])] == ["load", "short", "loop end"], log
    assert at["load"] - t0 < 0.2  # one step, not the loop's 1 s
    assert loadgate._STATE == {"computing": 0, "loading": False, "pending": 0}


def test_a_load_is_not_begun_without_the_time_it_took_last_time():
    """A load cannot be stopped midway: one that began just before the request's deadline ran past
    it (a generation 2.8 s past a 15 s limit). With its last duration known, it is refused when the
    time left would not hold it, and the gate stays as it was."""
    import pytest

    from backend.core import limits

    with limits.budget(0.5), pytest.raises(limits.JobTooLong) as e:
        with loadgate.loading(2.0, "sd-memo"):
            raise AssertionError("begun")
    assert "Loading sd-memo took 2.0 s last time, more than the 0.5 s left of its time limit of 0.5 s" in str(e.value)
    with limits.budget(5.0), loadgate.loading(2.0, "sd-memo"):  # time enough
        pass
    with loadgate.loading(2.0, "sd-memo"):  # no deadline: never refused
        pass
    assert loadgate._STATE == {"computing": 0, "loading": False, "pending": 0}


def test_a_wait_for_a_busy_model_ends_at_the_deadline():
    """A call queued on a model's lock behind another request's computation is stopped at its
    deadline, holding neither the lock nor any part of the gate."""
    import pytest
    import torch

    from backend.core import limits
    from backend.core.interventions import model_lock

    from tests.helpers.elsewhere import held_elsewhere

    model = torch.nn.Linear(2, 2)
    with held_elsewhere(lambda: model_lock(model)):
        t0 = time.monotonic()
        with limits.budget(0.3), pytest.raises(limits.JobTooLong, match="another request's computation"):
            with loadgate.computing(), model_lock(model):
                raise AssertionError("ran")
        assert 0.3 <= time.monotonic() - t0 < 1.5
    with model_lock(model):  # free again
        pass
    assert loadgate._STATE == {"computing": 0, "loading": False, "pending": 0}
