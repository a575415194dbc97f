import threading
import time

import gradio as gr
import pytest

from backend.core import limits
from components.serving import guard


def test_check_is_a_no_op_without_budget():
    assert limits.remaining() is None
    limits.check()


def test_budget_expires_and_restores():
    with limits.budget(0.05):
        limits.check()
        time.sleep(0.06)
        with pytest.raises(limits.JobTooLong, match="time limit"):
            limits.check("the race")
    assert limits.remaining() is None


def test_budgets_are_per_thread():
    seen = []
    with limits.budget(0.0001):
        time.sleep(0.001)
        t = threading.Thread(target=lambda: seen.append(limits.remaining()))
        t.start()
        t.join()
    assert seen == [None]


def test_guarded_handlers_run_under_the_job_budget(monkeypatch):
    monkeypatch.setattr(guard, "JOB_SECONDS", 0.05)

    def long_loop():
        for _ in range(100):
            time.sleep(0.01)
            limits.check("the long loop")
        return "finished"

    before = len(guard.INTERNAL_ERRORS)
    with pytest.raises(gr.Error, match="time limit"):
        guard.guarded(long_loop)()
    assert len(guard.INTERNAL_ERRORS) == before  # a spent budget is a message, not a defect


def test_long_backend_loops_stop_when_the_budget_is_spent():
    from backend.pissa import service as pissa

    with limits.budget(1e-9):
        time.sleep(0.001)
        with pytest.raises(limits.JobTooLong, match="error table"):
            pissa.error_table("pissa-toy", 7, ranks=(1, 3))
    assert pissa.error_table("pissa-toy", 7, ranks=(1, 3))["rows"]  # unbounded outside a budget
