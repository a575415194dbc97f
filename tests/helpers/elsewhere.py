"""Another request holding something (a model load, a model's lock) while a test's own call runs."""

from __future__ import annotations

import contextlib
import threading


@contextlib.contextmanager
def held_elsewhere(hold, release_after_s: float | None = None):
    """Run `with hold():` in another thread until the block ends (or `release_after_s` passed);
    yields once the other thread holds it."""
    held, release = threading.Event(), threading.Event()

    def other_request():
        with hold():
            held.set()
            release.wait(10)

    t = threading.Thread(target=other_request, daemon=True)
    t.start()
    assert held.wait(5), "the other request never got hold"
    timer = threading.Timer(release_after_s, release.set) if release_after_s is not None else None
    if timer is not None:
        timer.start()
    try:
        yield
    finally:
        if timer is not None:
            timer.cancel()
        release.set()
        t.join()
