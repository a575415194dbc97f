"""Measured costs of the marked computations, for truthful estimates under the per-call cap.

The ZeroGPU durations (backend.core.zerogpu) are allowances with a wide margin: what a worker may
use on an H100 at full size, at least 10 s. Held against WORKBENCH_CALL_CAP_S they refused the
smallest settings (a NeMo search of 0.3 s asked for 240 s). So every marked call is timed, and its
estimate comes from what calls of the same computation on the same model took:

1. the same setting measured before: the largest of its last few times;
2. another setting of the same computation and model: the largest measured seconds per unit of the
   ZeroGPU formula's work (its duration before rounding and bounds) times this call's units, so a
   formula must count the work a call does (a Memorization generation without neurons runs half
   the generations of one with them, and counted as the same it was estimated at twice its time);
3. nothing measured yet: no estimate, the call runs, stopped by the cap's time budget
   (backend.core.limits) if it takes longer, and that time becomes its measure.

Calls that loaded a model are not counted (the load is paid once, not per call); a call stopped at
its time limit counts as just over the time it was given, so the same setting is refused at the cap
next time (a refusal needs an estimate over the cap).
The largest of recent times, not their mean, so that a result served from a cache never makes a
computation look cheap. Entries are kept per process; under ZeroGPU the main process merges those a
worker measured (`since`, `merge`: components.serving.guard carries them back with the result).
"""

from __future__ import annotations

import dataclasses
import threading
from collections import defaultdict, deque

KEEP = 5  # recent measures kept per entry
_LOCK = threading.Lock()
_EXACT: dict[tuple, deque] = defaultdict(lambda: deque(maxlen=KEEP))  # (name, model, setting) → seconds
_RATE: dict[tuple, deque] = defaultdict(lambda: deque(maxlen=KEEP))  # (name, model) → seconds per unit
_LOG: list[tuple] = []  # every record, for a worker's records to travel to the main process
_LOG_MAX = 10_000


def model_of(args, kwargs) -> str:
    """The model a call runs on, as far as its arguments name it: a registry key (the first argument,
    or `model=` / `key=`), a bench's or a loaded preset's key; "" when none is named."""
    for v in (kwargs.get("model"), kwargs.get("key"), args[0] if args else None):
        if isinstance(v, str) and v:
            return v[:80]
        for attr in ("model_id", "key"):
            got = getattr(v, attr, None)
            if isinstance(got, str) and got:
                return got[:80]
        preset_key = getattr(getattr(v, "preset", None), "key", None)
        if isinstance(preset_key, str):
            return preset_key
    return ""


def _part(v, depth: int = 0):
    if isinstance(v, (bool, int, float)) or v is None:
        return v
    if isinstance(v, str):
        return v if len(v) <= 40 else ("text", len(v) // 200)  # a long text's cost grows with its length
    if dataclasses.is_dataclass(v) and not isinstance(v, type) and depth < 2:
        return tuple(_part(getattr(v, f.name), depth + 1) for f in dataclasses.fields(v))
    if isinstance(v, (list, tuple)) and depth < 2:
        return tuple(_part(x, depth + 1) for x in v[:32]) + ((len(v),) if len(v) > 32 else ())
    return type(v).__name__


def setting_of(args, kwargs) -> tuple:
    """A hashable summary of a call's settings: numbers and short texts as they are, long texts by
    length, objects (models, callbacks, arrays) by type."""
    return tuple(_part(a) for a in args) + tuple((k, _part(v)) for k, v in sorted(kwargs.items()))


def record(name: str, model: str, setting: tuple, units: float, seconds: float) -> None:
    with _LOCK:
        _EXACT[(name, model, setting)].append(seconds)
        if units > 0:
            _RATE[(name, model)].append(seconds / units)
        _LOG.append((name, model, setting, units, seconds))
        if len(_LOG) > _LOG_MAX:
            del _LOG[: len(_LOG) - _LOG_MAX]


def estimate(name: str, model: str, setting: tuple, units: float) -> float | None:
    """Seconds this call is expected to take, or None when nothing of its kind was measured."""
    with _LOCK:
        exact = _EXACT.get((name, model, setting))
        if exact:
            return max(exact)
        rate = _RATE.get((name, model))
        if rate and units > 0:
            return max(rate) * units
    return None


def count() -> int:
    with _LOCK:
        return len(_LOG)


def since(n: int) -> list[tuple]:
    """The records made after the first `n` (a worker's, to send back)."""
    with _LOCK:
        return list(_LOG[n:])


def merge(records: list[tuple]) -> None:
    for rec in records:
        record(*rec)


def clear() -> None:
    with _LOCK:
        _EXACT.clear()
        _RATE.clear()
        _LOG.clear()
