"""Load progress: inside `load_progress(report)` (components.serving.guard opens one per request) every
model load tells `report(fraction, message)` as its weight files are read, named as a person reads
the model (backend.core.store sets the model being loaded; prefetch reports its shards)."""

from __future__ import annotations

import contextvars
import re
from contextlib import contextmanager
from typing import Callable

REPORT: contextvars.ContextVar[Callable[[float, str], None] | None] = contextvars.ContextVar(
    "workbench_load_report", default=None
)
LOADING_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar("workbench_loading_model", default=None)


@contextmanager
def load_progress(report: Callable[[float, str], None] | None):
    """Tell `report(fraction, message)` about every model load inside the block."""
    token = REPORT.set(report)
    try:
        yield
    finally:
        REPORT.reset(token)


def display_name(model_id: str) -> str:
    """A model id as a person reads it: "zoo:math-llama@main" → "math-llama", a local folder by its
    name, a hub repo by owner/name (a revision other than main kept); a shared weights entry's class
    suffix ("…|MambaForCausalLM", backend.core.weights) is not part of the name."""
    m = re.fullmatch(r"(zoo|hub|local):(.+?)(?:@main)?", model_id.split("|")[0])
    if not m:
        return model_id
    source, name = m.groups()
    return name.rstrip("/").rpartition("/")[2] if source == "local" else name


def reporting() -> bool:
    """Whether a load now has someone to report to (loaders skip the work of reporting otherwise)."""
    return REPORT.get() is not None


def report_shards(done: int, total: int, fraction: float) -> None:
    """A loader's progress through its weight files: shard `done` of `total` is being read."""
    report = REPORT.get()
    if report is not None:
        name = display_name(LOADING_ID.get() or "the model")
        report(fraction, f"loading {name} ({done} of {total} shard{'s' * (total != 1)})")
