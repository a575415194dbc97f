"""How the model store waits for a load: a request that waits for another's load steps out of the
load gate (`waiting_for`), and a load in progress is marked in its context (`loading_here`,
`in_load`) so that what it runs never waits for itself. Apart from the store because none of it
touches the store's entries."""

from __future__ import annotations

import contextvars
import threading
from contextlib import contextmanager

from . import loadgate

_IN_LOAD: contextvars.ContextVar[bool] = contextvars.ContextVar("workbench_in_load", default=False)


@contextmanager
def loading_here():
    """Mark the block as part of a load, in this context (and copies of it)."""
    token = _IN_LOAD.set(True)
    try:
        yield
    finally:
        _IN_LOAD.reset(token)


def in_load() -> bool:
    """Whether this context is inside a load (`loading_here`)."""
    return _IN_LOAD.get()


@contextmanager
def waiting_for(lock: threading.Lock):
    """Hold a load's lock; a request that waits for another's load computes nothing meanwhile, so
    it steps out of the load gate (backend.core.loadgate) and that load need not wait for it."""
    if not lock.acquire(blocking=False):
        with loadgate.waiting():
            lock.acquire()
    try:
        yield
    finally:
        lock.release()
