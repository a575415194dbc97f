"""The model store's byte budget: WORKBENCH_MODEL_BUDGET read as a size ("8GB", "512MiB", a plain
number of bytes, "none" for no limit), by default 80 % of the GPU's memory or 60 % of the machine's
RAM without one (backend.core.store explains how the budget is kept)."""

from __future__ import annotations

import os
import re
from functools import lru_cache

import torch

_UNITS = {
    "": 1,
    "b": 1,
    "k": 10**3,
    "kb": 10**3,
    "m": 10**6,
    "mb": 10**6,
    "g": 10**9,
    "gb": 10**9,
    "t": 10**12,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}


def parse_bytes(text: str | int | float) -> int | None:
    """ "8GB" → 8e9, "1.5GiB", "512 MB", 1234 → bytes; "none" / "inf" / "" → None (no limit)."""
    if isinstance(text, (int, float)):
        return int(text)
    s = str(text).strip().lower()
    if s in ("", "none", "inf", "unlimited"):
        return None
    m = re.fullmatch(r"(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)", s)
    if not m or m.group(2) not in _UNITS:
        raise ValueError(f"not a size: {text!r} (expected e.g. 8GB, 512MiB or a number of bytes)")
    return int(float(m.group(1)) * _UNITS[m.group(2)])


def gpu_budget(total_memory: int) -> int:
    """The default budget on a GPU of `total_memory` bytes: 80 % of it, the rest left to activations."""
    return int(0.8 * total_memory)


@lru_cache(maxsize=1)
def default_budget() -> int:
    from . import spaces_pkg
    from .device import pick_device

    # No CUDA query under ZeroGPU: its main process must not initialise the GPU.
    if pick_device().type == "cuda" and not spaces_pkg.available():
        return gpu_budget(torch.cuda.get_device_properties(0).total_memory)
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not POSIX: 16 GB is a laptop's
        ram = 16 * 10**9
    return int(0.6 * ram)


def budget_bytes() -> int | None:
    """The budget now (read at every check, so a test or an operator can change it)."""
    setting = os.environ.get("WORKBENCH_MODEL_BUDGET")
    try:
        return default_budget() if setting is None else parse_bytes(setting)
    except ValueError as e:
        raise ValueError(f"WORKBENCH_MODEL_BUDGET: {e}") from None


def fmt_bytes(n: int | None) -> str:
    return "unlimited" if n is None else f"{n / 1e9:.2f} GB" if n >= 10**8 else f"{n / 1e6:.3g} MB"
