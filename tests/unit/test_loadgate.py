"""backend.core.loadgate: a model load never runs beside a model computation, with no deadlock when
a computation itself loads."""
import threading
import time

from backend.core import loadgate


def test_a_load_waits_for_running_computations_and_they_wait_for_it():
    log = []
    started = threading.Event()

    def compute():
        with loadgate.computing():
            started.set()
            log.append("compute start")
            time.sleep(0.3)
            log.append("compute end")

    t = threading.Thread(target=compute)
    t.start()
    started.wait()
    with loadgate.loading():
        log.append("load")
        def late_compute():
            with loadgate.computing():
                log.append("late compute")

        late = threading.Thread(target=late_compute)
        late.start()
        time.sleep(0.2)
        log.append("load end")
    t.join()
    late.join()
    assert log == ["compute start", "compute end", "load", "load end", "late compute"]
    assert loadgate._STATE == {"computing": 0, "loading": False}


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
