"""What a stored model weighs: the nn.Modules of a model or pipeline, the bytes of the tensors a
stored value holds (each storage once, on any device), a fingerprint of its weights and the hooks
left on it (backend.core.store counts and checks its entries with these)."""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any, Iterator

import numpy as np
import torch
from torch import nn


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


def _leaves(obj: Any, depth: int = 3, seen: set | None = None) -> Iterator[Any]:
    """Tensors and arrays of a stored value: modules, pipelines and the containers or dataclasses
    services keep them in (a few levels deep, a few hundred items per container; tokenizers are
    neither and count as nothing)."""
    seen = set() if seen is None else seen
    if id(obj) in seen or obj is None or isinstance(obj, (str, bytes, int, float, bool)):
        return
    seen.add(id(obj))
    if isinstance(obj, (torch.Tensor, np.ndarray)):
        yield obj
        return
    found = False
    for _, module in modules_of(obj):
        found = True
        yield from module.parameters()
        yield from module.buffers()
    if found or depth == 0:
        return
    if isinstance(obj, dict):
        values = list(obj.values())[:256]
    elif isinstance(obj, (list, tuple)):
        values = list(obj[:256])
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        values = [getattr(obj, f.name, None) for f in dataclasses.fields(obj)]
    else:
        return
    for v in values:
        yield from _leaves(v, depth - 1, seen)


def _storages(obj: Any) -> Iterator[tuple[tuple, int]]:
    """(storage key, bytes) of every tensor or array a stored value holds (repeats included)."""
    for t in _leaves(obj):
        if isinstance(t, np.ndarray):
            key, n = ("numpy", id(t if t.base is None else t.base)), t.nbytes
        elif t.device.type == "meta":
            continue
        else:
            try:
                st = t.untyped_storage()
                key, n = (str(t.device), st.data_ptr()), st.nbytes()
            except (RuntimeError, NotImplementedError):  # tensor subclasses without a plain storage
                key, n = (str(t.device), id(t)), t.numel() * t.element_size()
        yield key, n


def nbytes_of(obj: Any, besides: Any = None) -> int:
    """Bytes of the tensors a stored value holds, each storage counted once (any device); with
    `besides`, only those it does not share with that value (a view's own bytes beside its model)."""
    seen = {key for key, _ in _storages(besides)} if besides is not None else set()
    total = 0
    for key, n in _storages(obj):
        if key not in seen:
            seen.add(key)
            total += n
    return total


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
