"""Model loads never overlap model computations of this process.

Several model calls run side by side (components.common: one queue, several at once), but loading a
checkpoint is not safe beside a running computation: transformers' loader changes process-wide
torch state while it builds a model (a computation in another thread then saw meta tensors).
So a load waits until no computation runs and computations wait while a load runs; a
computation that itself needs a model gives up its own hold while it loads (no deadlock).
Computations hold the gate per call, or per step of a stream (`gated_iter`), so a long stream
lets a load through between steps. A wait at the gate ends at the request's deadline (backend.core.
limits): a call stopped there has computed and loaded nothing. A load is not begun when its last
measured duration would not end within the time left. A long loop lets a waiting load through
between its steps (`let_loads_through`, called by limits.Steps), so a load never waits for a whole
long call, nor do the short calls queued behind that load.
"""

from __future__ import annotations

import contextvars
import threading
import time
from contextlib import contextmanager
from typing import Callable, ContextManager, Iterator

from . import limits

WAIT_S = 60.0
_COND = threading.Condition()
_STATE = {"computing": 0, "loading": False, "pending": 0}
_HELD: contextvars.ContextVar[int] = contextvars.ContextVar("wb_computing_held", default=0)
_IN_LOAD: contextvars.ContextVar[bool] = contextvars.ContextVar("wb_in_load", default=False)


def _may_compute() -> bool:  # caller holds _COND
    # a load waiting for the gate goes first: with several model calls at once it would otherwise
    # wait until none runs; a caller that computes already (a stream inside a handler) goes on
    return not _STATE["loading"] and (not _STATE["pending"] or _HELD.get() > 0)


def _no_time(expected_s: float, what: str) -> limits.JobTooLong:
    left = max(limits.remaining() or 0.0, 0.0)
    return limits.JobTooLong(
        f"Loading {what} took {expected_s:.1f} s last time, more than the {left:.1f} s left "
        f"of {limits.limit_words()}, so it was not begun; try again when the server is "
        "less busy. Nothing was computed."
    )


def _too_long(what: str) -> limits.JobTooLong:
    return limits.JobTooLong(
        f"{what} ran past {limits.limit_words()} while other requests' model loads and "
        "computations went first, and was stopped; try again when the server is less busy"
    )


@contextmanager
def computing():
    stop_at = limits.deadline()
    with _COND:
        while not _may_compute():
            if limits.past(stop_at):
                raise _too_long("the wait for a model load")
            _COND.wait(timeout=None if stop_at is None else max(0.01, stop_at - time.monotonic()))
        _STATE["computing"] += 1
    token = _HELD.set(_HELD.get() + 1)
    try:
        yield
    finally:
        _HELD.reset(token)
        with _COND:
            _STATE["computing"] -= 1
            _COND.notify_all()


# A load's measured duration must fit the time left with this much to spare (as a loop's step:
# backend.core.limits.STEP_SLACK, STEP_MARGIN_S): a load cannot be stopped midway.
LOAD_SLACK = 1.25
LOAD_MARGIN_S = 0.25


def _fits(expected_s: float | None) -> bool:
    left = limits.remaining()
    return left is None or not expected_s or left >= expected_s * LOAD_SLACK + LOAD_MARGIN_S


@contextmanager
def loading(expected_s: float | None = None, what: str = "the model"):
    """Hold the gate for a load: it waits until no computation runs. `expected_s`: how long this
    load took last time; a load that would not end within the request's time left is not begun."""
    if _IN_LOAD.get():  # a loader that loads another model (an SAE's base model) holds the gate already
        yield
        return
    if expected_s is not None and not _fits(expected_s):
        raise _no_time(expected_s, what)
    mine = _HELD.get()
    stop_at = limits.deadline()  # the request's: past it the load is not made
    with _COND:
        _STATE["computing"] -= mine  # this caller's own computation waits for its load
        _STATE["pending"] += 1
        # bounded: a computation that waits for something this caller holds (a model's lock) must not
        # stall both for ever; past the wait the load goes ahead, as it did before the gate
        deadline = time.monotonic() + WAIT_S
        while _STATE["loading"] or (_STATE["computing"] and time.monotonic() < deadline):
            if limits.past(stop_at):
                _STATE["pending"] -= 1
                _STATE["computing"] += mine
                _COND.notify_all()
                raise _too_long("the wait to load a model")
            until = deadline if stop_at is None else min(deadline, stop_at)
            _COND.wait(timeout=max(0.01, until - time.monotonic()))
        _STATE["pending"] -= 1
        if expected_s is not None and not _fits(expected_s):  # the wait took the time the load needs
            _STATE["computing"] += mine
            _COND.notify_all()
            raise _no_time(expected_s, what)
        _STATE["loading"] = True
    token = _IN_LOAD.set(True)
    try:
        yield
    finally:
        _IN_LOAD.reset(token)
        with _COND:
            _STATE["loading"] = False
            _STATE["computing"] += mine
            _COND.notify_all()


@contextmanager
def waiting():
    """A computation that waits for something (another request's hold on a model's lock) computes
    nothing meanwhile: its hold on the gate is given up for the wait, so a load need not wait for it,
    and taken back (after any load in progress) when the wait ends."""
    mine = _HELD.get()
    if not mine or _IN_LOAD.get():  # inside a load the hold is given up already
        yield
        return
    with _COND:
        _STATE["computing"] -= mine
        _COND.notify_all()
    try:
        yield
    finally:
        # not ended at the deadline: what was waited for (a model's lock) is held now, and the
        # caller would compute beside a load; the caller's next check sees a deadline passed
        _take_back(mine, at_deadline=False)


def _take_back(mine: int, bound_s: float | None = None, at_deadline: bool = True) -> bool:
    """Take back a hold given up (after any load in progress): back in the queue as a new computation
    would be. The wait ends at the request's deadline (the hold is taken back all the same, so the
    caller's own exit from the gate stays balanced; returns False) or after `bound_s`."""
    stop_at = limits.deadline() if at_deadline else None
    give_up = None if bound_s is None else time.monotonic() + bound_s
    late = False
    with _COND:
        _HELD.set(0)
        while not _may_compute():
            if limits.past(stop_at):
                late = True
                break
            if give_up is not None and time.monotonic() >= give_up:
                break  # as a load does after WAIT_S: a hold that blocks the load must not stall both
            ends = [t for t in (stop_at, give_up) if t is not None]
            _COND.wait(timeout=None if not ends else max(0.01, min(ends) - time.monotonic()))
        _HELD.set(mine)
        _STATE["computing"] += mine
    return not late


def let_loads_through() -> None:
    """Between two steps of a long computation: if a load waits for the gate, give up this
    computation's hold until it has loaded. Without this a load waited for the whole call (one
    held-out evaluation: 15 s), and every call queued behind the load with it."""
    mine = _HELD.get()
    if not mine or _IN_LOAD.get():
        return
    with _COND:
        if not _STATE["pending"]:
            return
        _STATE["computing"] -= mine
        _COND.notify_all()
    # bounded: the load may wait for a lock this computation holds (a view of its model). Not ended
    # at the deadline: the computation would go on (or unwind) beside the load; the loop's own check
    # after this sees the deadline.
    _take_back(mine, bound_s=WAIT_S, at_deadline=False)


limits.between_steps(let_loads_through)


def each_step(it: Iterator, context: Callable[[], ContextManager]) -> Iterator:
    """A stream with `context()` entered around each of its steps (a stream's steps may run in
    different threads, so a context entered once would not cover the next); closed when left."""
    try:
        while True:
            with context():
                try:
                    item = next(it)
                except StopIteration:
                    return
            yield item
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()


def gated_iter(it: Iterator) -> Iterator:
    """A stream whose every step is a computation."""
    return each_step(it, computing)
