"""Waiting for a state in another thread of the same process, never for a fixed time: a pause long
enough on a quiet machine is too short on a loaded one, and an order that rests on it is hoped for."""

from __future__ import annotations

import time
from typing import Callable


def until(condition: Callable[[], object], timeout: float = 10.0, what: str = "the condition") -> None:
    """Return as soon as `condition()` is true; fail the test if it is not within `timeout` s."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout:g} s")
        time.sleep(0.002)
