"""Time budgets for long jobs, so one request cannot hold the (shared) device forever.

The app gives every request a budget (`budget(seconds)`, set by components.guard from
WORKBENCH_JOB_SECONDS and the per-call cap); long loops in the backend call `check()` between steps,
which raises JobTooLong once the budget is spent. A stream keeps one deadline over all its steps
(`stepwise`), and a job that runs in a thread of its own reads it with `deadline()`. Budgets nest: an
inner one never outlasts the outer. Outside a budget `check()` does nothing, so notebooks and tests
run unbounded.
"""
from __future__ import annotations

import contextvars
import time
from contextlib import contextmanager
from typing import Iterable, Iterator

_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("wb_deadline", default=None)
_LIMIT: contextvars.ContextVar[float | None] = contextvars.ContextVar("wb_limit", default=None)


class JobTooLong(RuntimeError):
    """The request's time budget is spent."""


@contextmanager
def until(deadline: float | None, limit_s: float | None = None):
    """Run under an absolute deadline (time.monotonic), or the outer one where that is earlier.
    `limit_s`: the limit's length, for the message."""
    outer = _DEADLINE.get()
    if deadline is None or (outer is not None and outer <= deadline):
        yield
        return
    token, ltoken = _DEADLINE.set(deadline), _LIMIT.set(limit_s)
    try:
        yield
    finally:
        _DEADLINE.reset(token)
        _LIMIT.reset(ltoken)


@contextmanager
def budget(seconds: float | None):
    if seconds is None or seconds <= 0:
        yield
        return
    with until(time.monotonic() + seconds, seconds):
        yield


def deadline_after(seconds: float | None) -> float | None:
    """The deadline a budget of `seconds` starting now would have, within the current one."""
    outer = _DEADLINE.get()
    mine = None if seconds is None or seconds <= 0 else time.monotonic() + seconds
    return min((d for d in (outer, mine) if d is not None), default=None)


def deadline() -> float | None:
    return _DEADLINE.get()


def remaining() -> float | None:
    d = _DEADLINE.get()
    return None if d is None else d - time.monotonic()


def past(deadline_: float | None) -> bool:
    return deadline_ is not None and time.monotonic() >= deadline_


def stepwise(it: Iterable, deadline_: float | None, limit_s: float | None = None) -> Iterator:
    """Iterate a stream with every step under one deadline (a context variable set at one step is
    not seen at the next: steps may run in different threads)."""
    it = iter(it)
    try:
        while True:
            with until(deadline_, limit_s):
                try:
                    x = next(it)
                except StopIteration:
                    return
            yield x
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()


def limit_s() -> float | None:
    """The length of the limit in force (seconds), where one is."""
    return _LIMIT.get()


def limit_words() -> str:
    limit = _LIMIT.get()
    return f"its time limit of {limit:g} s" if limit else "its time limit"


def check(what: str = "this job") -> None:
    left = remaining()
    if left is not None and left <= 0:
        raise JobTooLong(f"{what} ran past {limit_words()} and was stopped; try smaller settings")
