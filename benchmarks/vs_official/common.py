"""What every comparison shares: alternated timing, a result row, the official repository on
sys.path for the length of a block, and their CUDA calls kept on the CPU."""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

NEMO_REPO = "localizing_memorization_in_diffusion_models"


def alternate(work: Callable, official: Callable, repeats: int) -> tuple[float, float, object, object]:
    """Median seconds of each, run in turns so that a change of machine load hits both alike;
    returns the last results too."""
    tw, to = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        ro = official()
        to.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        rw = work()
        tw.append(time.perf_counter() - t0)
    return statistics.median(tw), statistics.median(to), rw, ro


def row(method: str, case: str, work_s: float, off_s: float, diff: str, note: str = "") -> dict:
    return {
        "method": method,
        "case": case,
        "work_s": work_s,
        "off_s": off_s,
        "ratio": work_s / off_s,
        "diff": diff,
        "note": note,
    }


@contextlib.contextmanager
def official_path(folder: Path):
    """Their repository first on sys.path (their modules are named `utils`, `hooks`, ...), and
    their relative file paths resolved from it; both undone afterwards."""
    saved_path, saved_mods, cwd = list(sys.path), set(sys.modules), os.getcwd()
    sys.path.insert(0, str(folder))
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(cwd)
        sys.path[:] = saved_path
        for name in set(sys.modules) - saved_mods:
            mod = sys.modules[name]
            if str(getattr(mod, "__file__", "") or "").startswith(str(folder)):
                del sys.modules[name]


@contextlib.contextmanager
def cuda_calls_on_cpu():
    """Glue (device): their `tensor.cuda()` calls stay where the tensor is when no GPU is lent."""
    if torch.cuda.is_available():
        yield
        return
    saved = torch.Tensor.cuda
    torch.Tensor.cuda = lambda self, *a, **k: self
    try:
        yield
    finally:
        torch.Tensor.cuda = saved
