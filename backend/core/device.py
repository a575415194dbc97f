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


def spread(module) -> bool:
    """Whether accelerate dispatched this model over more than one device (device_map)."""
    dmap = getattr(module, "hf_device_map", None)
    return isinstance(dmap, dict) and len({str(d) for d in dmap.values()}) > 1


def place(module):
    """Move a freshly loaded model to the compute device, once, at load: on a ZeroGPU Space the
    move happens at start-up and the marked functions find the weights already there; on a CPU
    machine it does nothing. A model spread over several GPUs (`spread_kwargs`) stays where
    accelerate put it."""
    dev = pick_device()
    if dev.type != "cpu" and module is not None and not spread(module):
        module.to(dev)
    return module


def gpu_free_bytes() -> list[int]:
    """Free bytes of each visible GPU (empty without CUDA)."""
    if not torch.cuda.is_available():
        return []
    return [torch.cuda.mem_get_info(i)[0] for i in range(torch.cuda.device_count())]


def spread_kwargs(
    n_bytes: int | None, *, pipeline: bool = False, free: list[int] | None = None, headroom: float = 0.85
) -> dict:
    """`from_pretrained` arguments that spread a model too large for one GPU over all of them.

    A model fits one GPU when its weights take at most `headroom` of that GPU's free memory (the
    rest is left for activations and the methods' own buffers). Otherwise, with two or more GPUs,
    accelerate places whole blocks with device_map ("auto" for transformers models, "balanced" for
    diffusers pipelines, the names each library takes), capped per GPU so that nothing is
    offloaded to the CPU or disk: the methods read weights directly (LRP rules, PiSSA's SVD,
    MathNeuro's scores), which offloaded (meta) weights would break. WORKBENCH_DEVICE_MAP=auto
    spreads every model; =off never does."""
    setting = os.environ.get("WORKBENCH_DEVICE_MAP", "").strip().lower()
    if setting in ("off", "0", "none") or pick_device().type != "cuda":
        return {}
    free = gpu_free_bytes() if free is None else free
    too_big = n_bytes is not None and bool(free) and n_bytes > headroom * free[0]
    if len(free) < 2 or not (too_big or setting == "auto"):
        return {}
    return {
        "device_map": "balanced" if pipeline else "auto",
        "max_memory": {i: int(headroom * f) for i, f in enumerate(free)},
    }


def device_of(module) -> torch.device:
    """The device of a module's first parameter (the CPU for a module without any)."""
    p = next(iter(module.parameters()), None) if module is not None else None
    return p.device if p is not None else torch.device("cpu")


def serving_threads(source: str) -> int:
    """Set torch's intra-op CPU threads for the server and return them: WORKBENCH_TORCH_THREADS, else
    one for the zoo. The zoo's models are tiny: a second thread never speeds one of their ops up, and
    on a busy machine (two cores shared with other work, two handlers at a time) every op then waits
    at a barrier for a descheduled thread: one zoo forward took 300 ms with two threads and 7-14 ms
    with one (benchmarks/ui_actions.py), which made Math's Ask 17 s and each export 12 s."""
    raw = os.environ.get("WORKBENCH_TORCH_THREADS", "").strip()
    n = int(raw) if raw.isdigit() and int(raw) > 0 else (1 if source == "zoo" else torch.get_num_threads())
    torch.set_num_threads(n)
    return n
