"""Models loaded once per process and shared by every request (read-only; see interventions)."""
from __future__ import annotations

import threading
import time
from typing import Any, Callable

_MODELS: dict[str, dict[str, Any]] = {}
_GUARD = threading.Lock()
_LOADING: dict[str, threading.Lock] = {}


def get_or_load(model_id: str, loader: Callable[[], Any]) -> Any:
    """Load `model_id` once; concurrent first callers wait for the same load."""
    with _GUARD:
        if model_id in _MODELS:
            return _MODELS[model_id]["model"]
        lock = _LOADING.setdefault(model_id, threading.Lock())
    with lock:
        with _GUARD:
            if model_id in _MODELS:
                return _MODELS[model_id]["model"]
        t0 = time.perf_counter()
        model = loader()
        with _GUARD:
            _MODELS[model_id] = {"model": model, "load_s": time.perf_counter() - t0}
        return model


def loaded() -> dict[str, float]:
    """model id → seconds its load took."""
    with _GUARD:
        return {k: v["load_s"] for k, v in _MODELS.items()}


def items() -> list[tuple[str, Any]]:
    with _GUARD:
        return [(k, v["model"]) for k, v in _MODELS.items()]
