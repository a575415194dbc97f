"""backend.core.limits.Steps: a loop ends before a step that would pass its deadline, not one step
after it; without a deadline it never stops; an inner budget or a fixed deadline is the one held."""

import re
import threading
import time

import pytest

from backend.core import limits


def _loop(n: int, step_s: float, steps: limits.Steps) -> list[int]:
    done = []
    for i in steps.each(range(n)):
        time.sleep(step_s)
        done.append(i)
    return done


def test_a_loop_stops_before_the_step_that_would_pass_the_deadline():
    done = []
    t0 = time.monotonic()
    with limits.budget(1.0):
        with pytest.raises(limits.JobTooLong) as e:
            for i in limits.Steps("the sweep").each(range(100)):
                time.sleep(0.3)
                done.append(i)
    took = time.monotonic() - t0
    # 0.3 s steps in 1 s: at 0.6 s, 0.4 s left < 1.25 x 0.3 + 0.25 s, so two run (one on a machine
    # so loaded that a step takes 0.45 s)
    assert done in ([0, 1], [0])
    assert took < 1.0  # ended inside the limit, where check() alone ends after it (1.2 s)
    assert f"the sweep was stopped after {len(done)} step" in str(e.value)
    assert "time limit of 1 s" in str(e.value)


def test_plain_check_overruns_by_a_step_where_steps_does_not():
    """The old way, for the record: check() alone lets the step that passes the deadline run."""
    t0 = time.monotonic()
    with limits.budget(0.5), pytest.raises(limits.JobTooLong):
        for _ in range(100):
            limits.check("the sweep")
            time.sleep(0.2)
    assert time.monotonic() - t0 > 0.5


def test_no_deadline_never_stops_and_results_are_the_same():
    steps = limits.Steps("the sweep")
    assert _loop(30, 0.0, steps) == list(range(30))
    assert steps.done == 30 and steps.left() is None
    with limits.budget(60):  # a limit far off: the same result
        assert _loop(30, 0.0, limits.Steps("the sweep")) == list(range(30))


def test_a_deadline_already_passed_stops_before_the_first_step():
    with limits.budget(1e-6):
        time.sleep(0.001)
        with pytest.raises(limits.JobTooLong, match="ran past its time limit"):
            _loop(3, 0.0, limits.Steps("the sweep"))


def test_nested_in_an_outer_budget_the_earlier_deadline_holds():
    with limits.budget(60):
        t0 = time.monotonic()
        with limits.budget(0.5), pytest.raises(limits.JobTooLong):
            _loop(100, 0.1, limits.Steps("the inner loop"))
        assert time.monotonic() - t0 < 0.5  # the inner budget's, before its deadline
        assert _loop(3, 0.0, limits.Steps("the outer loop")) == [0, 1, 2]  # the outer one still runs
    with limits.budget(0.5):
        t0 = time.monotonic()
        with limits.budget(60), pytest.raises(limits.JobTooLong, match="time limit of 0.5 s"):
            _loop(100, 0.1, limits.Steps("the inner loop"))  # an inner budget never outlasts the outer
        assert time.monotonic() - t0 < 0.5


def test_a_loop_run_again_under_one_deadline_guesses_its_first_step_from_the_last():
    """A sweep runs one evaluation per factor: the evaluation's first batch is guessed from the
    batches of the evaluation before it."""
    with limits.budget(1.0):
        _loop(1, 0.4, limits.Steps("the evaluation"))  # one step of 0.4 s, counted at the loop's end
        steps = limits.Steps("the evaluation")
        with pytest.raises(limits.JobTooLong):
            _loop(1, 0.4, steps)  # 0.6 s left < 1.25 x 0.4 + 0.25
        assert steps.done == 0
        assert _loop(1, 0.0, limits.Steps("another loop")) == [0]  # its own kind has no steps yet


def test_a_fixed_deadline_holds_in_a_thread_of_its_own():
    deadline = time.monotonic() + 0.5
    done, errors = [], []

    def work():
        steps = limits.Steps("the race", deadline, 0.5)
        while steps.next_fits():  # the race's way: a stop predicate
            time.sleep(0.1)
            done.append(1)
        errors.append(steps.message())

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert time.monotonic() <= deadline
    assert 1 <= len(done) <= 4 and "time limit of 0.5 s" in errors[0]


def test_a_wait_at_the_load_gate_ends_at_the_deadline():
    """A model call waiting for other requests' loads and computations is stopped at its deadline
    (a race and a generation waited past it there), and leaves the gate as it found it."""
    from backend.core import loadgate
    from tests.helpers.elsewhere import held_elsewhere

    with held_elsewhere(loadgate.loading):
        t0 = time.monotonic()
        with limits.budget(0.3), pytest.raises(limits.JobTooLong, match="time limit of 0.3 s"):
            with loadgate.computing():
                pass
        assert 0.3 <= time.monotonic() - t0 < 1.5
    with loadgate.computing():  # unbounded without a deadline, and the gate is free again
        pass
    assert loadgate._STATE == {"computing": 0, "loading": False, "pending": 0}


def test_a_call_measured_longer_than_the_time_left_is_not_started():
    """A single step longer than the whole limit is not begun: its measured cost (backend.core.costs)
    refuses it before it starts; without a measure, or with time enough, it runs."""
    from backend.core import costs
    from backend.core.zerogpu import gpu

    ran = []

    @gpu(duration=5)
    def one_long_step(x):
        ran.append(x)
        time.sleep(0.3)
        return x

    costs.clear()
    with limits.budget(0.2):
        assert one_long_step(1) == 1  # never measured: it runs (a step is not stopped midway)
    assert one_long_step(1) == 1  # measured: 0.3 s
    with limits.budget(0.2), pytest.raises(limits.JobTooLong) as e:
        one_long_step(1)
    assert re.search(
        r"estimated at 0\.\d s from the times measured on this server, more than the 0\.[12] s left", str(e.value)
    ), str(e.value)
    assert ran == [1, 1]  # nothing computed
    with limits.budget(5):
        assert one_long_step(1) == 1
    costs.clear()
