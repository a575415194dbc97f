"""Time budgets for long jobs, so one request cannot hold the (shared) device forever.

The app gives every request a budget (`budget(seconds)`, set by components.serving.guard from
WORKBENCH_JOB_SECONDS and the per-call cap); long loops in the backend call `check()` between steps,
which raises JobTooLong once the budget is spent, or better `Steps(what).check()`, which also stops
before a step that would not end within it (the longest step so far is the guess). A stream keeps one deadline over all its steps
(`stepwise`), and a job that runs in a thread of its own reads it with `deadline()`. Budgets nest: an
inner one never outlasts the outer. Outside a budget `check()` does nothing, so notebooks and tests
run unbounded.
"""

from __future__ import annotations

import contextvars
import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterable, Iterator

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


# A step may take longer than the longest one before it (a loaded machine, a longer batch): the time
# left must hold the longest step so far with this much to spare before the next one starts.
STEP_SLACK = 1.25
STEP_MARGIN_S = 0.25
# The longest step of each kind of loop under each deadline, so the first step of a loop run again in
# the same request (a sweep's evaluation per factor, a search's checker per candidate) is guessed from
# the steps before it. Keyed by the deadline itself: threads that step one stream share it.
_LONGEST: dict[tuple[float, str], float] = {}
_LONGEST_LOCK = threading.Lock()


def _longest(key: tuple[float, str] | None, seen: float) -> float:
    if key is None:
        return seen
    now = time.monotonic()
    with _LONGEST_LOCK:
        out = max(seen, _LONGEST.get(key, 0.0))
        _LONGEST[key] = out
        if len(_LONGEST) > 256:  # the requests' deadlines passed are forgotten
            for k in [k for k in _LONGEST if k[0] < now]:
                del _LONGEST[k]
    return out


# What a loop lets happen between two of its steps (backend.core.loadgate lets a waiting model load
# through): registered by the modules above, which this one does not import.
_BETWEEN: list[Callable[[], None]] = []


def between_steps(fn: Callable[[], None]) -> None:
    if fn not in _BETWEEN:
        _BETWEEN.append(fn)


class Steps:
    """The steps of one loop, timed: `check()` before each step raises JobTooLong when the time left
    to the request's deadline would not hold the longest step so far (× STEP_SLACK + STEP_MARGIN_S),
    so a loop ends before its limit instead of one step after it. "So far" counts this loop's steps
    and those of earlier loops of the same `what` under the same deadline; a loop's very first step
    is not guessed (a call's measured cost refuses it before it starts: backend.core.zerogpu).
    Without a deadline it only counts. The deadline is read at each check unless one is given (a
    thread of its own), so a loop inside a shorter inner budget stops at the deadline in force."""

    def __init__(self, what: str = "this job", deadline_: float | None = None, limit_s: float | None = None):
        self.what = what
        self.deadline = deadline_
        self.limit_s = limit_s  # the limit's length, for the message
        self.done = 0
        self.longest = 0.0
        self._last: float | None = None

    def _deadline(self) -> float | None:
        return self.deadline if self.deadline is not None else _DEADLINE.get()

    def left(self) -> float | None:
        d = self._deadline()
        return None if d is None else d - time.monotonic()

    def end(self) -> float:
        """Count the step that ended now (the loop's last is counted here: no check follows it)."""
        now = time.monotonic()
        seen = 0.0
        if self._last is not None:
            seen = now - self._last
            self.done += 1
        self._last = now
        d = self._deadline()
        self.longest = max(self.longest, seen) if d is None else _longest((d, self.what), max(self.longest, seen))
        return now

    def next_fits(self) -> bool:
        """Whether the next step can start in time (always, without a deadline); counts the step
        that ended now."""
        now = self.end()
        d = self._deadline()
        if d is None:
            return True
        left = d - now
        return left > 0 and (self.longest == 0 or left >= self.longest * STEP_SLACK + STEP_MARGIN_S)

    def check(self) -> None:
        fits = self.next_fits()
        if fits and _BETWEEN:
            t0 = time.monotonic()
            for fn in _BETWEEN:
                fn()
            if time.monotonic() - t0 > 0.001:  # it waited: that is no step's time, and the time left is less
                self._last = time.monotonic()
                left = self.left()
                fits = left is None or (
                    left > 0 and (self.longest == 0 or left >= self.longest * STEP_SLACK + STEP_MARGIN_S)
                )
        check(self.what)  # the module's: a deadline passed reads as everywhere else
        if not fits:
            raise JobTooLong(self.message())

    def each(self, it: Iterable) -> Iterator:
        """The items of `it`, each a step: checked before it is handed out."""
        for x in it:
            self.check()
            yield x
        self.end()

    def message(self) -> str:
        limit = f"its time limit of {self.limit_s:g} s" if self.limit_s else limit_words()
        left = self.left()
        if left is not None and left <= 0:
            return f"{self.what} ran past {limit} and was stopped; try smaller settings"
        done = f"after {self.done} step{'s' if self.done != 1 else ''}" if self.done else "before it started"
        return (
            f"{self.what} was stopped {done}: the next (up to {self.longest:.1f} s) would have run past "
            f"{limit}; try smaller settings"
        )
