"""A shim for Hugging Face ZeroGPU.

`@gpu(duration=...)` is `spaces.GPU(duration=...)` when the `spaces` package is installed (on a
ZeroGPU Space) and the identity otherwise, so the same function runs unchanged on a laptop, in CI
and on a Space. `duration` may be a number of seconds or a callable of the function's arguments
that estimates them (ZeroGPU accepts both).
"""
from __future__ import annotations

import functools
from typing import Callable

try:  # pragma: no cover - only present on Spaces
    import spaces as _spaces
except Exception:  # ImportError, or spaces failing outside a Space
    _spaces = None


def spaces_available() -> bool:
    return _spaces is not None


def gpu(fn: Callable | None = None, *, duration: float | Callable = 60):
    def wrap(f: Callable) -> Callable:
        if _spaces is not None:  # pragma: no cover
            return _spaces.GPU(duration=duration)(f)

        @functools.wraps(f)
        def plain(*args, **kwargs):
            return f(*args, **kwargs)

        plain.gpu_duration = duration
        return plain

    return wrap(fn) if fn is not None else wrap
