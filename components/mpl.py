"""Matplotlib for the PNG exports: pyplot is imported at the first export (at start it would cost
half a second that the first page does not need) and is used by one thread at a time."""

from __future__ import annotations

import threading
from contextlib import contextmanager

# Re-entrant: an export may draw its figure with one helper and save it with another.
_LOCK = threading.RLock()


@contextmanager
def pyplot():
    """pyplot, for this thread alone until the block ends. Matplotlib is not thread-safe: its
    mathtext parser (every log axis's tick labels) and pyplot's figure registry belong to the whole
    process, and exports of different visitors and tabs run at once (components.common's one model
    queue). Four Adapters exports at once failed with "pop from empty list" without it."""
    with _LOCK:
        import matplotlib

        matplotlib.use("Agg")  # exports render off-screen
        import matplotlib.pyplot as plt

        yield plt
