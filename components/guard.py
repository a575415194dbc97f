"""Every event handler of the app is wrapped so that bad input becomes a clear message in the UI.

`gr.Error` passes through. The exceptions a backend raises for invalid input (ValueError, KeyError,
IndexError, PresetError) or for a spent time budget (JobTooLong) become `gr.Error` with their
message. Anything else is a defect: it is
logged with its traceback, counted in INTERNAL_ERRORS (the fuzz and load tests assert it stays 0)
and shown as a short, non-revealing message — the server keeps serving either way.
"""
from __future__ import annotations

import functools
import inspect
import logging
import os
import threading

import gradio as gr

from backend.core.limits import JobTooLong, budget
from backend.core.presets import PresetError

log = logging.getLogger("workbench")
INPUT_ERRORS = (ValueError, KeyError, IndexError, PresetError)
INTERNAL_ERRORS: list[str] = []
_LOCK = threading.Lock()
# Every request runs under a time budget that long backend loops check (backend.core.limits).
JOB_SECONDS = float(os.environ.get("WORKBENCH_JOB_SECONDS", "300"))


def _translate(exc: BaseException, where: str) -> BaseException:
    if isinstance(exc, gr.Error):
        return exc
    if isinstance(exc, (JobTooLong, *INPUT_ERRORS)):
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        return gr.Error(str(msg) or type(exc).__name__)
    log.exception("internal error in %s", where)
    with _LOCK:
        INTERNAL_ERRORS.append(f"{where}: {type(exc).__name__}: {exc}")
    return gr.Error(f"Internal error ({type(exc).__name__}) while running {where}; the input was "
                    "not changed and the server keeps running.")


def guarded(fn):
    """Wrap a handler of any kind (function, coroutine, generator, async generator)."""
    where = getattr(fn, "__qualname__", repr(fn))
    if inspect.isasyncgenfunction(fn):
        @functools.wraps(fn)
        async def agen(*a, **k):
            try:  # no budget: a stream's steps may run in different contexts; streams stop themselves
                async for x in fn(*a, **k):
                    yield x
            except Exception as e:
                raise _translate(e, where) from e
        return agen
    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def gen(*a, **k):
            try:
                yield from fn(*a, **k)
            except Exception as e:
                raise _translate(e, where) from e
        return gen
    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def coro(*a, **k):
            try:
                with budget(JOB_SECONDS):
                    return await fn(*a, **k)
            except Exception as e:
                raise _translate(e, where) from e
        return coro

    @functools.wraps(fn)
    def plain(*a, **k):
        try:
            with budget(JOB_SECONDS):
                return fn(*a, **k)
        except Exception as e:
            raise _translate(e, where) from e
    return plain


def guard_events(demo: gr.Blocks) -> gr.Blocks:
    for block_fn in demo.fns.values():
        if block_fn.fn is not None and not getattr(block_fn.fn, "_wb_guarded", False):
            block_fn.fn = guarded(block_fn.fn)
            block_fn.fn._wb_guarded = True
    return demo
