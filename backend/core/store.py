"""Models loaded once per process and shared by every request (read-only; see interventions).

With WORKBENCH_CHECK_WEIGHTS=1 (set by the api tests) a fingerprint of every model's weights is
taken at load time, so a check after each request can prove that no weight changed and no hook
was left behind.
"""
from __future__ import annotations

import hashlib
import os
import threading
import time
from typing import Any, Callable, Iterator

import torch
from torch import nn

_MODELS: dict[str, dict[str, Any]] = {}
_GUARD = threading.Lock()
_LOADING: dict[str, threading.Lock] = {}


def modules_of(obj: Any) -> Iterator[tuple[str, nn.Module]]:
    """The nn.Modules inside a model or a pipeline (diffusers keeps them as attributes)."""
    if isinstance(obj, nn.Module):
        yield "", obj
        return
    components = getattr(obj, "components", None)
    if isinstance(components, dict):
        for name, comp in components.items():
            if isinstance(comp, nn.Module):
                yield name, comp


def fingerprint(obj: Any) -> str:
    h = hashlib.sha256()
    for prefix, module in modules_of(obj):
        for name, t in sorted(module.state_dict().items()):
            h.update(f"{prefix}.{name}{tuple(t.shape)}{t.dtype}".encode())
            t = t.detach().cpu().contiguous()
            h.update(t.view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def hooks_on(obj: Any) -> int:
    from .interventions import count_hooks

    return sum(count_hooks(m) for _, m in modules_of(obj))


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
        entry = {"model": model, "load_s": time.perf_counter() - t0}
        if os.environ.get("WORKBENCH_CHECK_WEIGHTS") == "1":
            entry["fingerprint"] = fingerprint(model)
        with _GUARD:
            _MODELS[model_id] = entry
        return model


def loaded() -> dict[str, float]:
    """model id → seconds its load took."""
    with _GUARD:
        return {k: v["load_s"] for k, v in _MODELS.items()}


def items() -> list[tuple[str, Any]]:
    with _GUARD:
        return [(k, v["model"]) for k, v in _MODELS.items()]


def integrity_problems() -> list[str]:
    """Hooks left on, or weights changed since load, for every model loaded so far."""
    with _GUARD:
        entries = list(_MODELS.items())
    problems = []
    for model_id, e in entries:
        n = hooks_on(e["model"])
        if n:
            problems.append(f"{model_id}: {n} hook(s) left on the model")
        if "fingerprint" in e and fingerprint(e["model"]) != e["fingerprint"]:
            problems.append(f"{model_id}: weights differ from the loaded ones")
    return problems
