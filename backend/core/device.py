"""Device and dtype choice: cuda > mps > cpu, overridable with WORKBENCH_DEVICE."""
from __future__ import annotations

import os
from functools import lru_cache

import torch


@lru_cache(maxsize=None)
def pick_device() -> torch.device:
    forced = os.environ.get("WORKBENCH_DEVICE")
    if forced:
        return torch.device(forced)
    if torch.cuda.is_available():
        return torch.device("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def pick_dtype(device: torch.device | None = None, *, prefer_half: bool = True) -> torch.dtype:
    """bf16 where the hardware computes it natively, fp16 on mps, fp32 on cpu.

    The zoo models are tiny and their tests compare numbers exactly, so on the CPU we stay in fp32.
    """
    device = device or pick_device()
    if not prefer_half or device.type == "cpu":
        return torch.float32
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float16


def describe() -> str:
    dev = pick_device()
    if dev.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(dev)})"
    if dev.type == "cpu":
        return f"cpu ({os.cpu_count()} cores, torch {torch.__version__})"
    return dev.type


def place(module):
    """Move a freshly loaded model to the compute device, once, at load: on a ZeroGPU Space the
    move happens at start-up and the marked functions find the weights already there; on a CPU
    machine it does nothing."""
    dev = pick_device()
    if dev.type != "cpu" and module is not None:
        module.to(dev)
    return module


def device_of(module) -> torch.device:
    """The device of a module's first parameter (the CPU for a module without any)."""
    p = next(iter(module.parameters()), None) if module is not None else None
    return p.device if p is not None else torch.device("cpu")
