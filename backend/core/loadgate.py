"""Model loads never overlap model computations of this process.

Several model calls run side by side (components.common: one queue, several at once), but loading a
checkpoint is not safe beside a running computation: transformers' loader changes process-wide
torch state while it builds a model (a computation in another thread then saw meta tensors).
So a load waits until no computation runs and computations wait while a load runs; a
computation that itself needs a model gives up its own hold while it loads (no deadlock).
Computations hold the gate per call, or per step of a stream (`gated_iter`), so a long stream
lets a load through between steps. A wait at the gate ends at the request's deadline (backend.core.
limits): a call stopped there has computed and loaded nothing.
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


def _too_long(what: str) -> limits.JobTooLong:
    return limits.JobTooLong(f"{what} ran past {limits.limit_words()} while other requests' model loads and "
                             "computations went first, and was stopped; try again when the server is less busy")


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


@contextmanager
def loading():
    if _IN_LOAD.get():  # a loader that loads another model (an SAE's base model) holds the gate already
        yield
        return
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
        with _COND:
            _HELD.set(0)  # back in the queue as a new computation would be
            while not _may_compute():
                _COND.wait()
            _HELD.set(mine)
            _STATE["computing"] += mine


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
