"""Single-matrix PiSSA facts: spectrum, PiSSA factors (through peft), LoftQ on CPU, error ratios.

Naming follows peft: for a weight W of shape (out, in), `lora_A` is (r, in), `lora_B` is (out, r),
and the adapter adds `scaling · B @ A`. PiSSA sets B @ A to the top-r singular part of W (with
scaling 1: B = U_r S_r^½, A = S_r^½ V_rᵀ) and freezes W_res = W − B @ A.

Quantized variants (W ≈ Q + B @ A, Q = nf4(·) dequantized):
- QLoRA:  Q = nf4(W), B @ A = 0.
- LoftQ-T (peft's loop, on CPU): Q₁ = nf4(W); then T times: B @ A = SVD_r(W − Q), and while
  iterations remain Q = nf4(W − B @ A).
- QPiSSA-T (the PiSSA authors' loop): B @ A = SVD_r(W) (the PiSSA factors), Q = nf4(W − B @ A);
  T − 1 more times: B @ A = SVD_r(W − Q), Q = nf4(W − B @ A).
Error-reduction ratio = 1 − ‖W − (Q + B @ A)‖_* / ‖W − nf4(W)‖_*  (nuclear norm; QLoRA is 0).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..core.bounds import PISSA_ITERS, Range, check_whole
from .nf4 import BLOCK_SIZE, nf4_roundtrip

METHODS = ("qlora", "loftq", "qpissa")


def _as_matrix(weight) -> torch.Tensor:
    w = weight.detach() if isinstance(weight, torch.Tensor) else torch.as_tensor(weight)
    if w.dim() != 2:
        raise ValueError(f"expected a 2-D weight matrix, got shape {tuple(w.shape)}")
    if w.numel() == 0:
        raise ValueError("empty weight matrix")
    return w.to(torch.float32)


def _check_rank(rank: int, w: torch.Tensor) -> int:
    return check_whole(Range(f"The rank r of a {tuple(w.shape)} matrix", 1, min(w.shape)), rank)


def singular_spectrum(weight) -> torch.Tensor:
    """Singular values of a weight matrix, descending (float32)."""
    return torch.linalg.svdvals(_as_matrix(weight))


def low_rank(m: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(A, B) with B @ A the best rank-r approximation of m (full SVD; B = U S^½, A = S^½ Vᵀ)."""
    u, s, vh = torch.linalg.svd(m, full_matrices=False)
    root = s[:rank].sqrt()
    return root[:, None] * vh[:rank], u[:, :rank] * root[None, :]


@dataclass
class PissaSplit:
    lora_A: torch.Tensor  # (r, in)
    lora_B: torch.Tensor  # (out, r)
    residual: torch.Tensor  # (out, in), the frozen W_res
    scaling: float

    def principal(self) -> torch.Tensor:
        return self.scaling * self.lora_B @ self.lora_A


@torch.no_grad()
def pissa_split(weight, rank: int, init: str = "pissa", alpha: float | None = None, seed: int = 0) -> PissaSplit:
    """PiSSA factors of one matrix, initialised by peft (`init` = "pissa" or "pissa_niter_N"; the
    fast SVD's random probes are drawn from `seed`, so results are reproducible)."""
    from peft import LoraConfig, inject_adapter_in_model

    w = _as_matrix(weight)
    rank = _check_rank(rank, w)
    if not (init == "pissa" or init.startswith("pissa_niter_")):
        raise ValueError(f"init must be 'pissa' or 'pissa_niter_N', got {init!r}")
    # peft annotates lora_alpha as an int, yet takes any number (its scaling is alpha / r), and
    # spells pissa_niter_N as the literal "pissa_niter_[number of iters]"
    cfg = LoraConfig(
        r=rank,
        lora_alpha=alpha if alpha is not None else rank,  # type: ignore[arg-type]
        init_lora_weights=init,  # type: ignore[arg-type]
        target_modules=["layer"],
    )
    with torch.random.fork_rng(devices=[w.device] if w.is_cuda else []):
        torch.manual_seed(seed)
        holder = nn.Module()
        holder.layer = nn.Linear(w.shape[1], w.shape[0], bias=False, device="meta")
        holder.layer.weight = nn.Parameter(w.clone(), requires_grad=False)
        inject_adapter_in_model(cfg, holder)
    # peft's LoRA Linear: torch types its adapters (in ModuleDicts) as Tensor | Module
    layer: Any = holder.layer
    return PissaSplit(
        lora_A=layer.lora_A["default"].weight.detach().clone(),
        lora_B=layer.lora_B["default"].weight.detach().clone(),
        residual=layer.base_layer.weight.detach().clone(),
        scaling=float(layer.scaling["default"]),
    )


@torch.no_grad()
def loftq_cpu(weight, rank: int, iters: int = 1, block_size: int = BLOCK_SIZE):
    """LoftQ with the project's NF4: returns (Q dequantized, lora_A, lora_B), W ≈ Q + B @ A."""
    w = _as_matrix(weight)
    rank = _check_rank(rank, w)
    iters = check_whole(PISSA_ITERS, iters)
    target = w
    for i in range(iters):
        q = nf4_roundtrip(target, block_size)
        a, b = low_rank(w - q, rank)
        if i + 1 < iters:
            target = w - b @ a
    return q, a, b


@torch.no_grad()
def qpissa_cpu(weight, rank: int, iters: int = 1, block_size: int = BLOCK_SIZE, init: str = "pissa"):
    """QPiSSA: PiSSA factors (peft), NF4 of the residual, then optional alternating refinements."""
    w = _as_matrix(weight)
    rank = _check_rank(rank, w)
    iters = check_whole(PISSA_ITERS, iters)
    split = pissa_split(w, rank, init=init)
    a, b = split.lora_A, split.lora_B
    q = nf4_roundtrip(w - b @ a, block_size)
    for _ in range(iters - 1):
        a, b = low_rank(w - q, rank)
        q = nf4_roundtrip(w - b @ a, block_size)
    return q, a, b


def nuclear(m: torch.Tensor) -> float:
    return float(torch.linalg.svdvals(m.to(torch.float64)).sum())


@torch.no_grad()
def quantized_approximation(
    weight, rank: int, method: str, iters: int = 1, block_size: int = BLOCK_SIZE
) -> torch.Tensor:
    """Q + B @ A for a method in {"qlora", "loftq", "qpissa"}."""
    w = _as_matrix(weight)
    if method == "qlora":
        return nf4_roundtrip(w, block_size)
    if method == "loftq":
        q, a, b = loftq_cpu(w, rank, iters, block_size)
    elif method == "qpissa":
        q, a, b = qpissa_cpu(w, rank, iters, block_size)
    else:
        raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")
    return q + b @ a


@torch.no_grad()
def error_reduction_ratio(weight, rank: int, method: str, iters: int = 1, block_size: int = BLOCK_SIZE) -> float:
    """1 − ‖W − (nf4(W_res) + AB)‖_* / ‖W − nf4(W)‖_*  (0 for QLoRA; higher is better)."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")
    w = _as_matrix(weight)
    if method != "qlora":
        _check_rank(rank, w)
    base = nuclear(w - nf4_roundtrip(w, block_size))
    if base == 0.0:
        return 0.0  # W is exactly representable in NF4: nothing to reduce
    approx = quantized_approximation(w, rank, method, iters, block_size)
    return 1.0 - nuclear(w - approx) / base


def planted_spike(
    out: int = 256, inp: int = 256, spike_rank: int = 8, strength: float = 8.0, seed: int = 0
) -> torch.Tensor:
    """A random Gaussian matrix plus a planted low-rank spike (a few large singular values), the
    shape of trained LLM weights that PiSSA relies on."""
    g = torch.Generator().manual_seed(seed)
    noise = torch.randn(out, inp, generator=g) / inp**0.5
    u = torch.linalg.qr(torch.randn(out, spike_rank, generator=g))[0]
    v = torch.linalg.qr(torch.randn(inp, spike_rank, generator=g))[0]
    s = strength * torch.linspace(1.0, 0.5, spike_rank)
    return (noise + (u * s) @ v.T) * 0.02
