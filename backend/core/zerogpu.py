"""A shim for Hugging Face ZeroGPU.

`@gpu(duration=...)` is `spaces.GPU(duration=...)` when the `spaces` package is installed (on a
ZeroGPU Space) and the identity otherwise, so the same function runs unchanged on a laptop, in CI
and on a Space. `duration` may be a number of seconds or a callable of the function's arguments
that estimates them (ZeroGPU accepts both). Every marked function carries `gpu_marked` and
`gpu_duration` and is listed in `MARKED`, so a test can check that the tabs' entry points are marked
(`is_marked`) and what they would ask for (`estimate`).

The rules for ZeroGPU: a model goes to its device when it is loaded (in the store's loader), never
inside a marked function; marked functions return CPU tensors, numpy arrays or plain Python values.
(The zoo loaders keep their tiny models on the CPU; docs/benchmarks.md lists what a GPU deployment
still has to move.) Under ZeroGPU a marked function called from the main process runs in a GPU worker
process: its arguments and results are pickled (so no lambdas, locks or models as arguments at the
outermost marked call) and what it caches stays in that worker; a marked function called from inside
another marked function runs directly. The outermost mark therefore belongs on the Gradio handler,
and the service-level marks give each computation's estimate (and cover callers outside Gradio).
components.serving.guard.guard_events puts that outermost mark on every model-touching handler.

What a worker loads or computes dies with it. So the checkpoints load in the main process at start
(backend.core.preload, WORKBENCH_PRELOAD), where every worker inherits them, and what a worker
computes for everyone is written to disk for the main process and later workers (NeMo's statistics,
a feature index). A call waits for the main process's loads in progress before its worker forks
(`_after_loads`); a registered checkpoint the call names, and a user's own model its model pick
names, are loaded in the main process before it forks (preload.ahead, preload.own), and one a worker
had to load all the same is then loaded in the main process for the next worker (preload.mirror).
`in_main()` tells the two processes apart: the notes a handler raises in a worker travel back with
its result and the main process shows them, and a handler that keeps state for later calls (a
visitor's own data set) runs in the main process (components.serving.guard: `_carrying`, `_delivering`,
`main_only`). tests/helpers/zerogpu holds a stand-in `spaces` whose GPU forks a child per call,
with pickled arguments and results, to test this on any machine (tests/hub/test_zerogpu_process.py).
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import io
import math
import os
import pickle
import time
from typing import Callable, ParamSpec, TypeVar, overload

from . import costs, limits, spaces_pkg
from .bounds import call_cap, check_cost


def spaces_available() -> bool:
    return spaces_pkg.available()


_MAIN_PID = os.getpid()  # the server's process: ZeroGPU's workers are forked from it


def in_main() -> bool:
    """Whether this is the server's own process, not a GPU worker forked from it. What a worker
    holds in memory dies with it, so only the main process keeps state and talks to the page."""
    return os.getpid() == _MAIN_PID


def _after_loads(g: Callable) -> Callable:
    """`g` (a `spaces.GPU` call) started only once no model is loading in the main process: a fork
    taken mid-load would copy a half-built model and a held load lock, and the worker would wait on
    that lock forever (or load the model again itself) instead of inheriting the finished model."""
    from .store import wait_for_loads

    if inspect.isgeneratorfunction(g):

        @functools.wraps(g)
        def gen(*args, **kwargs):
            if in_main():
                wait_for_loads()
            yield from g(*args, **kwargs)

        return gen

    @functools.wraps(g)
    def call(*args, **kwargs):
        if in_main():
            wait_for_loads()
        return g(*args, **kwargs)

    return call


MAX_DURATION = 300  # seconds: the longest a single estimate asks for
MARKED: dict[str, float | Callable] = {}  # "module.qualname" → duration, for every marked function


_RAW = contextvars.ContextVar("workbench_gpu_raw", default=False)  # `capped` unrounded, unbounded


def capped(seconds: float, lo: float = 10, hi: float = MAX_DURATION) -> float:
    """An estimate rounded up to whole seconds within [lo, hi] (unrounded under `_RAW`)."""
    if _RAW.get():
        return float(seconds)
    return int(min(hi, max(lo, -(-float(seconds) // 1))))


def _safe(duration: float | Callable, default: float = 60) -> float | Callable:
    """A callable estimate that never raises: bad inputs are the function's to report, not the
    scheduler's, so an estimator that cannot read them asks for `default` seconds."""
    if not callable(duration):
        return duration

    @functools.wraps(duration)
    def estimate_(*args, **kwargs):
        try:
            return float(duration(*args, **kwargs))
        except Exception:
            return default

    return estimate_


# WORKBENCH_ZEROGPU_CHECK=1: without `spaces`, the outermost marked call pickles its arguments and
# its result (every item of a generator) as ZeroGPU would, so the boundary is tested on any machine.
_CHECK = os.environ.get("WORKBENCH_ZEROGPU_CHECK", "") not in ("", "0")
_INSIDE = contextvars.ContextVar("workbench_gpu_inside", default=False)
BOUNDARY_CHECKS = {"calls": 0}  # outermost marked calls checked so far (tests read it)


class BoundaryError(TypeError):
    """What ZeroGPU could not pickle across its worker boundary."""


class _CpuOnly(pickle.Pickler):
    """Pickles as ZeroGPU does, and refuses a tensor off the CPU (a worker's GPU memory does not
    reach the main process)."""

    def reducer_override(self, obj):
        import torch

        if isinstance(obj, torch.Tensor) and obj.device.type != "cpu":
            raise TypeError(f"a tensor on {obj.device}: return CPU values")
        return NotImplemented


def _check_pickle(what: str, name: str, obj) -> None:
    try:
        _CpuOnly(io.BytesIO()).dump(obj)
    except Exception as e:
        raise BoundaryError(
            f"{name}: its {what} cannot cross the ZeroGPU worker boundary ({type(e).__name__}: {e})"
        ) from e


def _checked_call(name: str, f: Callable, args, kwargs):
    if not _CHECK or _INSIDE.get():
        return f(*args, **kwargs)
    _check_pickle("arguments", name, (args, kwargs))
    BOUNDARY_CHECKS["calls"] += 1
    token = _INSIDE.set(True)
    try:
        out = f(*args, **kwargs)
    finally:
        _INSIDE.reset(token)
    _check_pickle("result", name, out)
    return out


def _checked_gen(name: str, f: Callable, args, kwargs):
    if not _CHECK or _INSIDE.get():
        yield from f(*args, **kwargs)
        return
    _check_pickle("arguments", name, (args, kwargs))
    BOUNDARY_CHECKS["calls"] += 1
    it = f(*args, **kwargs)
    try:
        while True:
            token = _INSIDE.set(True)  # set around each step only: the caller runs between steps
            try:
                item = next(it)
            except StopIteration:
                return
            finally:
                _INSIDE.reset(token)
            _check_pickle("yielded value", name, item)
            yield item
    finally:
        it.close()  # a consumer that stops early closes the inner generator too (its finally runs)


def _units(duration, args, kwargs) -> float:
    """The work a call's ZeroGPU formula counts for it: the formula before rounding and bounds."""
    if not callable(duration):
        return float(duration)
    token = _RAW.set(True)
    try:
        return float(duration(*args, **kwargs))
    finally:
        _RAW.reset(token)


def _capped_call(f: Callable, duration, name: str) -> Callable:
    """`f` timed (backend.core.costs), refused before it starts when the estimate from those times
    is at or over the per-call cap (backend.core.bounds), and run under the cap's time budget: a call
    never measured runs, and is stopped at the cap if it takes longer."""
    what = f"This computation ({name})"

    def start(args, kwargs, stream: bool):
        model, setting = costs.model_of(args, kwargs), costs.setting_of(args, kwargs)
        units = _units(duration, args, kwargs)
        cap = call_cap()
        guess = costs.estimate(name, model, setting, units)
        if cap is not None and guess is not None and guess > cap:
            check_cost(guess, what, measured=True)
        limits.check(name.rsplit(".", 1)[-1].replace("_", " "))  # a budget spent before it starts
        left = limits.remaining()
        if not stream and guess is not None and left is not None and guess >= left:
            # one call that alone would pass the job's limit is not started (a stream is not refused:
            # it ends at the limit with what it has)
            raise limits.JobTooLong(
                f"{what} is estimated at {guess:.1f} s from the times measured on this server, more than "
                f"the {max(left, 0):.1f} s left of {limits.limit_words()}; choose smaller settings. "
                "Nothing was computed."
            )
        given = min((x for x in (left, cap) if x is not None), default=None)
        return (name, model, setting, units, given), cap

    def done(key, t0, loads, stopped: bool) -> None:
        from .store import load_count

        if load_count() == loads:  # a model load is paid once, not by every call of this kind
            took = time.perf_counter() - t0
            # a call stopped before its limit (its next step would not have fitted) needed more
            # than the time it was given: just over it is its measure, so it is refused there next
            # time (a refusal needs an estimate over the cap)
            _, model, setting, units, given = key  # its first item is `name`
            costs.record(
                name, model, setting, units, math.nextafter(max(took, given or 0), math.inf) if stopped else took
            )

    if inspect.isgeneratorfunction(f):

        @functools.wraps(f)
        def g(*args, **kwargs):
            from .store import load_count

            key, cap = start(args, kwargs, True)
            t0, loads = time.perf_counter(), load_count()
            ok = False
            try:
                yield from limits.stepwise(f(*args, **kwargs), limits.deadline_after(cap), cap)
                ok = True
            except limits.JobTooLong:
                done(key, t0, loads, True)
                raise
            finally:
                if ok:
                    done(key, t0, loads, False)
    else:

        @functools.wraps(f)
        def g(*args, **kwargs):
            from .store import load_count

            key, cap = start(args, kwargs, False)
            t0, loads = time.perf_counter(), load_count()
            try:
                with limits.budget(cap):
                    out = f(*args, **kwargs)
            except limits.JobTooLong:
                done(key, t0, loads, True)
                raise
            done(key, t0, loads, False)
            return out

    return g


P = ParamSpec("P")
R = TypeVar("R")


@overload
def gpu(fn: Callable[P, R], *, duration: float | Callable = ..., estimate: bool = ...) -> Callable[P, R]: ...


@overload
def gpu(
    fn: None = None, *, duration: float | Callable = ..., estimate: bool = ...
) -> Callable[[Callable[P, R]], Callable[P, R]]: ...


def gpu(fn: Callable | None = None, *, duration: float | Callable = 60, estimate: bool = True):
    """`fn` marked as a GPU call, its signature kept for the type checker (the overloads above).
    `estimate=False`: `duration` is an allowance (a handler's), not an estimate of this call's
    cost, so it is not checked against the per-call cap."""
    duration = _safe(duration)

    def wrap(f: Callable) -> Callable:
        name = f"{f.__module__}.{f.__qualname__}"
        if estimate:
            f = _capped_call(f, duration, f.__qualname__)
        if spaces_pkg.spaces is not None:  # pragma: no cover
            g = _after_loads(spaces_pkg.spaces.GPU(duration=duration)(f))
        elif inspect.isgeneratorfunction(f):

            @functools.wraps(f)
            def g(*args, **kwargs):  # still a generator function, as Gradio and spaces expect
                yield from _checked_gen(name, f, args, kwargs)
        else:

            @functools.wraps(f)
            def g(*args, **kwargs):
                return _checked_call(name, f, args, kwargs)

        try:
            # a function's attributes are open; mypy sees only Callable's
            g.gpu_duration = duration  # type: ignore[attr-defined]
            g.gpu_marked = True  # type: ignore[attr-defined]
        except (AttributeError, TypeError):  # pragma: no cover - a wrapper that refuses attributes
            pass
        MARKED[name] = duration
        return g

    return wrap(fn) if fn is not None else wrap


def is_marked(fn: Callable) -> bool:
    """Whether `fn` (a function or a bound method) went through `gpu`."""
    f = getattr(fn, "__func__", fn)
    return (
        bool(getattr(f, "gpu_marked", False))
        or f"{getattr(f, '__module__', '')}.{getattr(f, '__qualname__', '')}" in MARKED
    )


def estimate(fn: Callable, *args, **kwargs) -> float:
    """The seconds `fn` asks ZeroGPU for with these arguments (bound methods: without self)."""
    f = getattr(fn, "__func__", fn)
    d = getattr(f, "gpu_duration", None)
    if d is None:
        raise ValueError(f"{getattr(f, '__qualname__', f)} is not marked with @gpu")
    if hasattr(fn, "__self__"):
        args = (fn.__self__, *args)
    return float(d(*args, **kwargs) if callable(d) else d)
