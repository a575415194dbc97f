"""Every event handler of the app is wrapped so that bad input becomes a clear message in the UI.

`gr.Error` passes through. The exceptions a backend raises for invalid input (ValueError, KeyError,
IndexError, PresetError) or for a spent time budget (JobTooLong) become `gr.Error` with their
message. Anything else is a defect: it is
logged with its traceback, counted in INTERNAL_ERRORS (the fuzz and load tests assert it stays 0)
and shown as a short, non-revealing message — the server keeps serving either way.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import logging
import os
import threading
from dataclasses import dataclass, field
from typing import Any

import gradio as gr

from backend.core import costs, limits, loadgate, picker, preload, store
from backend.core.bounds import call_cap
from backend.core.limits import JobTooLong, budget
from backend.core.presets import PresetError
from backend.core.store import load_progress, request_scope
from backend.core.streamscope import scoped_aiter, scoped_iter
from backend.core.zerogpu import gpu, in_main, spaces_available
from components.serving import fair_queue
from components.serving.turns import in_session_order

from components.common import MODEL_GROUP, model_concurrency

log = logging.getLogger("workbench")
INPUT_ERRORS = (ValueError, KeyError, IndexError, PresetError)
INTERNAL_ERRORS: list[str] = []
_LOCK = threading.Lock()
# Every request runs under a time budget that long backend loops check (backend.core.limits).
JOB_SECONDS = float(os.environ.get("WORKBENCH_JOB_SECONDS", "300"))


def job_seconds() -> float:
    """A request's time limit: WORKBENCH_JOB_SECONDS, or the per-call cap where that is shorter
    (a call the cap lets start must not run past it either)."""
    cap = call_cap()
    return min(JOB_SECONDS, cap) if cap else JOB_SECONDS


def _translate(exc: BaseException, where: str) -> BaseException:
    # Refused input is routine: one log line, not Gradio's full traceback for every bad value.
    if isinstance(exc, gr.Error):
        log.info("input refused in %s: %s", where, str(exc.message)[:200])
        exc.print_exception = False
        return exc
    if isinstance(exc, (JobTooLong, *INPUT_ERRORS)):
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        log.info("input refused in %s: %s", where, str(msg)[:200])
        return gr.Error(str(msg) or type(exc).__name__, print_exception=False)
    log.exception("internal error in %s", where)
    with _LOCK:
        INTERNAL_ERRORS.append(f"{where}: {type(exc).__name__}: {exc}")
    return gr.Error(
        f"Internal error ({type(exc).__name__}) while running {where}; the input was "
        "not changed and the server keeps running."
    )


# Notes raised inside a marked handler travel back with its result (`_Noted`) and are shown by the
# main process: a toast raised in a ZeroGPU worker would reach no page.
_CARRY: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("workbench_notes_carry", default=None)


def show_notes(notes: list[str]) -> None:
    """What the model store wants a request's user to know (a model kept alone over the budget)."""
    carry = _CARRY.get()
    if carry is not None:
        carry.extend(notes)
        return
    for note in notes:
        gr.Warning(note)


@dataclass
class _Noted:
    """A marked handler's result (or stream item) with the notes raised while computing it and the
    models its process had to load (a worker's: the main process mirrors them), with the presets of
    the user's own models among them."""

    value: Any
    notes: list[str]
    loads: list[str]
    own: list = field(default_factory=list)
    costs: list = field(default_factory=list)  # the times the worker measured (backend.core.costs)


# The call's deadline crosses into a ZeroGPU worker as an argument (a context variable stays in the
# main process); time.monotonic is the machine's clock, the same in every process.
_DEADLINE_KW = "_wb_deadline"


def _with_deadline(k: dict) -> dict:
    deadline = limits.deadline()
    return k if deadline is None else {**k, _DEADLINE_KW: (deadline, limits.limit_s())}


def _carrying(fn):
    """Inside the ZeroGPU mark: collect the notes and the worker's loads with each result, under the
    deadline the call brought (its time limit counts from when it was made, wait included)."""

    def noted(step, deadline=(None, None)):
        carry, count, timed = [], store.load_count(), costs.count()
        token = _CARRY.set(carry)
        try:
            with limits.until(*deadline):
                value = step()
        finally:
            _CARRY.reset(token)
        if in_main():
            return _Noted(value, carry, [])
        loads = store.loads_since(count)
        return _Noted(value, carry, loads, picker.checked_own(loads), costs.since(timed))

    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def gen(*a, **k):
            deadline = k.pop(_DEADLINE_KW, (None, None))
            it = fn(*a, **k)
            try:
                while True:
                    try:
                        yield noted(lambda: next(it), deadline)
                    except StopIteration:
                        return
            finally:
                it.close()

        return gen

    @functools.wraps(fn)
    def plain(*a, **k):
        deadline = k.pop(_DEADLINE_KW, (None, None))
        return noted(lambda: fn(*a, **k), deadline)

    return plain


def _deliver(noted: _Noted):
    """In the main process: show the notes, load what the worker needed (backend.core.preload)."""
    show_notes(noted.notes)
    costs.merge(noted.costs)
    if noted.loads:
        preload.mirror(noted.loads, noted.own)
    return noted.value


def _ahead(tab: str, a, k, pick: tuple[str, int] | None = None) -> None:
    """Under ZeroGPU, in the main process: load the registered checkpoint a call names, and the
    user's own model its model pick names (`pick`: the picker's tab and the pick's position among the
    arguments), before its worker forks (backend.core.preload.ahead, .own), so the worker inherits
    them. A note of that load (a model over the budget) is shown here, as the worker will not load it,
    and the load is reported on the request's progress bar, as a load in the handler would be."""
    if not (spaces_available() and in_main()):
        return
    with request_scope() as scope, load_progress(_load_reporter()):
        preload.ahead(tab, [*a, *k.values()])
        if pick is not None and pick[1] < len(a):
            preload.own(pick[0], a[pick[1]])
        show_notes(scope.notes)


def pick_position(block_fn) -> tuple[str, int] | None:
    """Where an event's model pick (the box of components.inputs.model_picker, or the Features tab's source
    state, marked with its tab) sits among the handler's positional arguments, as Gradio passes
    them (its special arguments, such as a gr.Request or gr.Progress, inserted at their parameters'
    places); None without exactly one."""
    from gradio.helpers import special_args

    marked = [
        (i, c.wb_pick_tab)
        for i, c in enumerate(block_fn.inputs or [])
        if isinstance(getattr(c, "wb_pick_tab", None), str)
    ]
    if len(marked) != 1 or block_fn.inputs_as_dict:
        return None
    (index, tab), slots = marked[0], [object() for _ in block_fn.inputs]
    try:
        args, _, event_index, *_ = special_args(block_fn.fn, list(slots))
        at = next(j for j, v in enumerate(args) if v is slots[index])
    except Exception:  # noqa: BLE001 - a signature Gradio reads otherwise: the worker loads the pick
        return None
    # the event's data (gr.SelectData and kin) is inserted only when an event brings it
    return tab, at + 1 if event_index is not None and event_index <= at else at


def _delivering(fn, tab: str, pick: tuple[str, int] | None = None):
    """Outside the ZeroGPU mark: unwrap each `_Noted` result."""
    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def gen(*a, **k):
            _ahead(tab, a, k, pick)
            it = fn(*a, **_with_deadline(k))
            try:
                for noted in it:
                    yield _deliver(noted)
            finally:
                it.close()  # a page that stops the stream stops the worker's too

        return gen

    @functools.wraps(fn)
    def plain(*a, **k):
        _ahead(tab, a, k, pick)
        return _deliver(fn(*a, **_with_deadline(k)))

    return plain


def main_only(fn):
    """A model handler that must run in the main process under ZeroGPU, never in a worker: what it
    keeps (a visitor's own data set, registered with its model's bench) must outlive the call, and
    the model it loads there is inherited by every later worker."""
    fn.main_only = True
    return fn


def _load_reporter():
    """The request's progress bar, for the model store's load messages ("loading <model> (n of N
    shards)"): a first request of a tab otherwise waits for its model in silence. A Progress made
    here reaches the event's bar through Gradio's request context; outside a request it does nothing."""
    bar = gr.Progress()
    # the end of a load is not the end of the request: its message stays without a full bar
    return lambda fraction, message: bar(None if fraction >= 1 else fraction, desc=message)


def _reporting(it, report):
    """Iterate a stream with the load reporter set at each step (steps may run in other threads)."""
    return loadgate.each_step(it, lambda: load_progress(report))


def guarded(fn):
    """Wrap a handler of any kind (function, coroutine, generator, async generator). Each call runs
    in a model-store request scope, so no model it uses is evicted before it ends; the scope's notes
    are shown in the tab, and any model load it waits for is reported on its progress bar."""
    where = getattr(fn, "__qualname__", repr(fn))
    if inspect.isasyncgenfunction(fn):

        @functools.wraps(fn)
        async def agen(*a, **k):
            try:  # no budget: the app's streams are synchronous (an async one is no model call)
                async for x in scoped_aiter(fn(*a, **k), show_notes):
                    yield x
            except Exception as e:
                raise _translate(e, where) from e

        return agen
    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def gen(*a, **k):
            limit = job_seconds()  # one deadline over all the stream's steps, whatever thread runs them
            try:
                steps = limits.stepwise(fn(*a, **k), limits.deadline_after(limit), limit)
                yield from scoped_iter(_reporting(steps, _load_reporter()), show_notes)
            except Exception as e:
                raise _translate(e, where) from e

        return gen
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def coro(*a, **k):
            try:
                with budget(job_seconds()), request_scope() as scope:
                    out = await fn(*a, **k)
                    show_notes(scope.notes)
                    return out
            except Exception as e:
                raise _translate(e, where) from e

        return coro

    @functools.wraps(fn)
    def plain(*a, **k):
        try:
            with budget(job_seconds()), request_scope() as scope, load_progress(_load_reporter()):
                out = fn(*a, **k)
                show_notes(scope.notes)
                return out
        except Exception as e:
            raise _translate(e, where) from e

    return plain


DEFAULT_GPU_SECONDS = 120  # a handler of no tab; a tab's own: components.tab.Tab.gpu_seconds


def gated(fn):
    """A model call: never beside a model load (backend.core.loadgate); a stream step by step. A
    handler with `model_unneeded(*args)` (a first view kept ahead, components.common.on_first_open)
    answers such a call at once: it waited behind the start-up's loads of other tabs' models."""
    unneeded = getattr(fn, "model_unneeded", None)
    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def gen(*a, **k):
            if unneeded is not None and unneeded(*a, **k):
                yield from fn(*a, **k)
                return
            # the stream's steps wait at the gate under its deadline (the guard inside sets the same)
            limit = job_seconds()
            try:
                yield from limits.stepwise(loadgate.gated_iter(fn(*a, **k)), limits.deadline_after(limit), limit)
            except JobTooLong as e:  # a wait at the gate, outside the guard's translation
                raise _translate(e, getattr(fn, "__qualname__", repr(fn))) from e

        return gen
    if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
        return fn  # the app's model handlers are synchronous; an async one runs ungated

    @functools.wraps(fn)
    def plain(*a, **k):
        # the job limit counts from here: a wait at the gate (behind another request's load) is
        # part of the call's time, as the user sees it (the guard inside keeps this deadline)
        if unneeded is not None and unneeded(*a, **k):
            return fn(*a, **k)
        try:
            with budget(job_seconds()), loadgate.computing():
                return fn(*a, **k)
        except JobTooLong as e:  # a wait at the gate, outside the guard's translation
            raise _translate(e, getattr(fn, "__qualname__", repr(fn))) from e

    return plain


def _translating(fn):
    """A spent time limit raised outside the guard (a wait for the visitor's turn) shown as the
    guard shows it; everything else passes as it is."""
    where = getattr(fn, "__qualname__", repr(fn))
    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def gen(*a, **k):
            try:
                yield from fn(*a, **k)
            except JobTooLong as e:
                raise _translate(e, where) from e

        return gen

    @functools.wraps(fn)
    def plain(*a, **k):
        try:
            return fn(*a, **k)
        except JobTooLong as e:
            raise _translate(e, where) from e

    return plain


def handler_tab(fn) -> str:
    """The tab a handler belongs to: the package it is defined in (components/<tab id>/, any of its
    modules); elsewhere its module's name. Its ZeroGPU allowance, its visitor's turns and the model
    pick loaded ahead are the tab's."""
    parts = (getattr(inspect.unwrap(fn), "__module__", "") or "").split(".")
    return parts[1] if len(parts) > 2 and parts[0] == "components" else parts[-1]


def tab_gpu_seconds(tab_id: str) -> int:
    from components import tab_by_id

    declared = tab_by_id(tab_id)
    return declared.gpu_seconds if declared else DEFAULT_GPU_SECONDS


def handler_gpu_seconds(fn) -> int:
    return tab_gpu_seconds(handler_tab(fn))


def guard_events(demo: gr.Blocks) -> gr.Blocks:
    """Guard every handler; mark every model-touching one (the MODEL_GROUP events) for ZeroGPU and
    put it in the one model queue, at the configured limit (components.common).

    The ZeroGPU mark sits outermost, on the handler: under ZeroGPU a marked call from the main
    process runs in a GPU worker process and its arguments are pickled, and a handler's arguments are
    UI values, whereas the services it calls take models and callbacks. The services' own marks then
    run directly inside the worker. The guard runs inside the mark, so a gr.Error travels back."""
    limit = model_concurrency()
    fair_queue.install()  # turns across visitors in the model queue (components.serving.fair_queue)
    for block_fn in demo.fns.values():
        if block_fn.concurrency_id == MODEL_GROUP:  # Gradio takes the lowest limit a group's events name
            block_fn.concurrency_limit = limit
        if block_fn.fn is None or getattr(block_fn.fn, "_wb_guarded", False):
            continue
        fn = guarded(block_fn.fn)
        sync = not (inspect.iscoroutinefunction(block_fn.fn) or inspect.isasyncgenfunction(block_fn.fn))
        if block_fn.concurrency_id == MODEL_GROUP:
            fn = gated(fn)
            if sync and not getattr(block_fn.fn, "main_only", False):
                fn = _delivering(
                    gpu(duration=handler_gpu_seconds(block_fn.fn), estimate=False)(_carrying(fn)),
                    handler_tab(block_fn.fn),
                    pick_position(block_fn),
                )
            if sync:  # in the main process, around the worker: one visitor's calls keep their order,
                # and the job limit counts from the call, its wait for its turn included
                fn = _translating(in_session_order(fn, handler_tab(block_fn.fn), job_seconds))
        # what a handler must do in the server process, around its GPU worker (the race's relay of
        # its live progress to the page, components.adapters.race_live)
        if callable(getattr(block_fn.fn, "main_process", None)):
            fn = block_fn.fn.main_process(fn)
        fn._wb_guarded = True
        block_fn.fn = fn
    return demo
