"""One visitor's model calls in one tab run in the order they were made.

All tabs' model calls share one queue of several calls at once (components.common), and calls on
the same model take turns on its lock — but a lock hands itself to any waiter, and a quick call
overtakes a slow one. Within one page that is wrong: pick a model, then upload your own data, and
the earlier, slower result could land last and replace the newer one. So the calls of one browser
session in one tab take numbered turns, first come first served; other visitors, and the same
visitor's other tabs, are not held up by them.
"""
from __future__ import annotations

import functools
import inspect
import threading
from contextlib import contextmanager


class Turns:
    """First-come-first-served turns per key (a ticket lock: each caller draws the next number and
    waits until it is served)."""

    def __init__(self):
        self._cv = threading.Condition()
        self._drawn: dict[object, int] = {}
        self._served: dict[object, int] = {}

    @contextmanager
    def turn(self, key):
        with self._cv:
            ticket = self._drawn.get(key, 0)
            self._drawn[key] = ticket + 1
            while self._served.get(key, 0) != ticket:
                self._cv.wait()
        try:
            yield
        finally:
            with self._cv:
                self._served[key] = ticket + 1
                if self._served[key] == self._drawn[key]:  # nobody waits: forget the key
                    del self._served[key], self._drawn[key]
                self._cv.notify_all()

    def waiting(self) -> int:
        with self._cv:
            return sum(self._drawn[k] - self._served.get(k, 0) for k in self._drawn)


TURNS = Turns()


def _session() -> str | None:
    """The browser session of the event being run (Gradio sets it for the handler's call)."""
    from gradio.context import LocalContext

    request = LocalContext.request.get(None)
    return getattr(request, "session_hash", None)


def in_session_order(fn, tab: str):
    """`fn`, a model handler of `tab`, run in its session's turn (a stream holds the turn until it
    ends or is stopped). A call outside any session (a direct call, a test) takes no turn."""
    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def gen(*a, **k):
            session = _session()
            if session is None:
                yield from fn(*a, **k)
                return
            with TURNS.turn((session, tab)):
                yield from fn(*a, **k)
        return gen

    @functools.wraps(fn)
    def plain(*a, **k):
        session = _session()
        if session is None:
            return fn(*a, **k)
        with TURNS.turn((session, tab)):
            return fn(*a, **k)
    return plain
