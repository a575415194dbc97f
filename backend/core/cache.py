"""Result/activation caches bounded in bytes (LRU), with hit/miss statistics.

Keys are built by `make_key(model_id, inputs, settings, revision=...)`: a sha256 over a canonical
encoding, so a cached result is reused only for the same model, revision, input and settings.
"""

from __future__ import annotations

import hashlib
import json
import sys
import threading
import weakref
from collections import OrderedDict
from typing import Any, Callable, TypeVar

import numpy as np
import torch

_ALL: "weakref.WeakSet[ByteLRUCache]" = weakref.WeakSet()
T = TypeVar("T")


def nbytes(value: Any) -> int:
    """Approximate resident size of a cached value; tensors and arrays count their buffers."""
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return len(value)
    if isinstance(value, str):
        return len(value.encode("utf-8", "surrogatepass"))
    if isinstance(value, dict):
        return sum(nbytes(k) + nbytes(v) for k, v in value.items()) + 64
    if isinstance(value, (list, tuple, set, frozenset)):
        return sum(nbytes(v) for v in value) + 56
    if hasattr(value, "__dict__") and not isinstance(value, type):
        return nbytes(vars(value)) + 48
    return sys.getsizeof(value)


def _encode(obj: Any, h: "hashlib._Hash") -> None:
    if isinstance(obj, torch.Tensor):
        t = obj.detach().cpu().contiguous()
        h.update(f"T{t.dtype}{tuple(t.shape)}".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    elif isinstance(obj, np.ndarray):
        a = np.ascontiguousarray(obj)
        h.update(f"A{a.dtype}{a.shape}".encode())
        h.update(a.tobytes())
    elif isinstance(obj, (bytes, bytearray)):
        h.update(b"B" + bytes(obj))
    elif isinstance(obj, dict):
        h.update(b"{")
        for k in sorted(obj, key=repr):
            _encode(k, h)
            _encode(obj[k], h)
        h.update(b"}")
    elif isinstance(obj, (list, tuple)):
        h.update(b"[" if isinstance(obj, list) else b"(")
        for v in obj:
            _encode(v, h)
        h.update(b"]")
    elif isinstance(obj, (set, frozenset)):
        _encode(sorted(obj, key=repr), h)
    else:
        h.update(json.dumps(obj, default=repr).encode("utf-8", "surrogatepass"))


def make_key(model_id: str, inputs: Any, settings: Any = None, *, revision: str | None = None) -> str:
    h = hashlib.sha256()
    _encode(("model", model_id, revision, "inputs", inputs, "settings", settings), h)
    return h.hexdigest()


class ByteLRUCache:
    """A thread-safe LRU mapping whose total `nbytes` never exceeds `max_bytes`.

    A value larger than the whole budget is computed and returned but not stored.
    """

    def __init__(self, max_bytes: int, name: str = "cache"):
        if max_bytes <= 0:
            raise ValueError("max_bytes must be positive")
        self.max_bytes = int(max_bytes)
        self.name = name
        self._data: OrderedDict[str, tuple[Any, int]] = OrderedDict()
        self._lock = threading.Lock()
        self.bytes = 0
        self.hits = self.misses = self.evictions = 0
        _ALL.add(self)

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: str) -> bool:
        return key in self._data

    def get(self, key: str, default: Any = None) -> Any:
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                self.hits += 1
                return self._data[key][0]
            self.misses += 1
            return default

    def put(self, key: str, value: Any) -> bool:
        size = nbytes(value)
        with self._lock:
            if key in self._data:
                self.bytes -= self._data.pop(key)[1]
            if size > self.max_bytes:
                return False
            while self.bytes + size > self.max_bytes and self._data:
                _, (_, old) = self._data.popitem(last=False)
                self.bytes -= old
                self.evictions += 1
            self._data[key] = (value, size)
            self.bytes += size
            return True

    def get_or_compute(self, key: str, compute: Callable[[], T]) -> T:
        sentinel = object()
        value = self.get(key, sentinel)
        if value is sentinel:
            value = compute()
            self.put(key, value)
        return value

    def discard(self, key: str) -> None:
        """Drop `key`'s entry, if there is one."""
        with self._lock:
            if key in self._data:
                self.bytes -= self._data.pop(key)[1]

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self.bytes = 0

    def stats(self) -> dict[str, Any]:
        total = self.hits + self.misses
        return {
            "name": self.name,
            "entries": len(self._data),
            "bytes": self.bytes,
            "max_bytes": self.max_bytes,
            "hits": self.hits,
            "misses": self.misses,
            "evictions": self.evictions,
            "hit_rate": self.hits / total if total else 0.0,
        }


def all_caches() -> list[ByteLRUCache]:
    return sorted(_ALL, key=lambda c: c.name)
