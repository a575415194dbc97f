"""Time budgets for long jobs, so one request cannot hold the (shared) device forever.

The app gives every request a budget (`budget(seconds)`, set by components.guard from
WORKBENCH_JOB_SECONDS); long loops in the backend call `check()` between steps, which raises
JobTooLong once the budget is spent. Outside a budget `check()` does nothing, so notebooks and
tests run unbounded.
"""
from __future__ import annotations

import contextvars
import time
from contextlib import contextmanager

_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("wb_deadline", default=None)


class JobTooLong(RuntimeError):
    """The request's time budget is spent."""


@contextmanager
def budget(seconds: float | None):
    if seconds is None or seconds <= 0:
        yield
        return
    token = _DEADLINE.set(time.monotonic() + seconds)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def remaining() -> float | None:
    deadline = _DEADLINE.get()
    return None if deadline is None else deadline - time.monotonic()


def check(what: str = "this job") -> None:
    left = remaining()
    if left is not None and left <= 0:
        raise JobTooLong(f"{what} ran past its time limit and was stopped; try smaller settings")
