"""One visitor's model calls in one tab run in the order they were made.

All tabs' model calls share one queue of several calls at once (components.common), and calls on
the same model take turns on its lock — but a lock hands itself to any waiter, and a quick call
overtakes a slow one. Within one page that is wrong: pick a model, then upload your own data, and
the earlier, slower result could land last and replace the newer one. So the calls of one browser
session in one tab take numbered turns, first come first served; other visitors, and the same
visitor's other tabs, are not held up by them.

A call's time limit covers its wait for its turn: three races sent at once from one page took 12.5,
24.6 and 36.4 s under a 15-s limit while the wait behind the page's own earlier calls was not
counted. `in_session_order(fn, tab, limit_s)` starts the call's clock when the call is made; a call
whose limit runs out while it waits is not run (JobTooLong), and gives its place up so that the
calls behind it move on.
"""

from __future__ import annotations

import functools
import inspect
import threading
import time
from contextlib import contextmanager
from typing import Callable

from backend.core import limits
from backend.core.limits import JobTooLong


class Turns:
    """First-come-first-served turns per key (a ticket lock: each caller draws the next number and
    waits until it is served). A caller whose deadline passes while it waits gives its ticket up:
    the ticket is skipped when its number comes."""

    def __init__(self):
        self._cv = threading.Condition()
        self._drawn: dict[object, int] = {}
        self._served: dict[object, int] = {}
        self._given_up: dict[object, set[int]] = {}

    def _advance(self, key) -> None:
        """Serve past the given-up tickets at the head; forget the key once nobody holds or waits."""
        gone = self._given_up.get(key, set())
        while self._served.get(key, 0) in gone:
            gone.discard(self._served[key])
            self._served[key] += 1
        if not gone:
            self._given_up.pop(key, None)
        if self._served.get(key, 0) == self._drawn.get(key, 0):
            self._served.pop(key, None)
            self._drawn.pop(key, None)
        self._cv.notify_all()

    @contextmanager
    def turn(self, key, deadline: float | None = None, limit_s: float | None = None):
        with self._cv:
            ticket = self._drawn.get(key, 0)
            self._drawn[key] = ticket + 1
            self._served.setdefault(key, 0)
            while self._served[key] != ticket:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    self._given_up.setdefault(key, set()).add(ticket)
                    self._advance(key)
                    limit = f"its time limit of {limit_s:g} s" if limit_s else "its time limit"
                    raise JobTooLong(
                        f"This call waited behind your earlier calls in this tab past {limit} "
                        "and was not run; try again when they have ended."
                    )
                self._cv.wait(left)
        try:
            yield
        finally:
            with self._cv:
                self._served[key] = ticket + 1
                self._advance(key)

    def waiting(self) -> int:
        with self._cv:
            return sum(self._drawn[k] - self._served.get(k, 0) - len(self._given_up.get(k, ())) for k in self._drawn)


TURNS = Turns()


def _session() -> str | None:
    """The browser session of the event being run (Gradio sets it for the handler's call)."""
    from gradio.context import LocalContext

    request = LocalContext.request.get(None)
    return getattr(request, "session_hash", None)


def in_session_order(fn, tab: str, limit_s: Callable[[], float | None] | None = None):
    """`fn`, a model handler of `tab`, run in its session's turn (a stream holds the turn until it
    ends or is stopped), under a time limit of `limit_s()` seconds counted from the call, its wait
    for the turn included. A call outside any session (a direct call, a test) takes no turn."""

    def clock() -> tuple[float | None, float | None]:
        limit = limit_s() if limit_s is not None else None
        return limits.deadline_after(limit), limit

    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def gen(*a, **k):
            session = _session()
            if session is None:
                yield from fn(*a, **k)
                return
            deadline, limit = clock()
            # no context variable set around the stream: its steps may run in other threads, and
            # each step is put under the one deadline by limits.stepwise
            with TURNS.turn((session, tab), deadline, limit):
                yield from limits.stepwise(fn(*a, **k), deadline, limit)

        return gen

    @functools.wraps(fn)
    def plain(*a, **k):
        session = _session()
        if session is None:
            return fn(*a, **k)
        deadline, limit = clock()
        with limits.until(deadline, limit), TURNS.turn((session, tab), deadline, limit):
            return fn(*a, **k)

    return plain
