"""MathNeuro's top-K selection, batched: the masks of every weight matrix from their input norms.

One rule for every path: a matrix keeps its int(K·N) largest scores S = |W|·‖X‖ (flattened), and
where scores equal to the K-th largest are more than the places left, those with the lowest flat
positions (a stable descending sort's first int(K·N)). `torch.topk`'s own choice among ties is
unspecified (the CPU's differs from the GPU's), so the K-th value comes from topk and the ties are
resolved here.

On a GPU the per-matrix selection is hundreds of topk calls with k in the hundreds of thousands (224
for a 1B model and two sample sets); here the matrices of one shape and device are scored and
selected together, both sample sets at once (`|W|` computed once for both), in chunks of at most
`CHUNK` scores, and the masks are packed to bits on the device so that one eighth of them crosses to
the host, where they are unpacked (numpy's unpackbits, in threads: it releases the GIL).
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Mapping

import numpy as np
import torch
from torch import nn

CHUNK = 1 << 26  # float32 scores selected in one call (256 MB; a 1B model's largest group is 4.3 GB)
_BIT_WEIGHTS = torch.tensor([128, 64, 32, 16, 8, 4, 2, 1], dtype=torch.uint8)  # np.packbits' order


def check_k(top_k: float) -> float:
    top_k = float(top_k)
    if not (0.0 < top_k <= 1.0) or math.isnan(top_k):
        raise ValueError(f"top_k is a fraction in (0, 1] (0.15 means the top 15 %), not {top_k!r}")
    return top_k


def importance(weight: torch.Tensor, norm: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """S = |W| · ‖X‖ in float32 (broadcast over output rows); `norm` may hold several sets
    ([sets, in]), giving [sets, out, in]. The bf16 → float32 widening is exact, so promoting in the
    product gives the values of `|W|.float() * ‖X‖` without a float32 copy of |W|."""
    n = norm.to(weight.device, torch.float32)
    a = weight.detach().abs()
    if a.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        a = a.float()
    return torch.mul(a, n[..., None, :] if n.dim() > 1 else n[None, :], out=out)


def top_rows(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Bool [g, N]: per row of `scores` [g, N], its k largest entries, ties to the lowest positions."""
    g, n = scores.shape
    if k <= 0:
        return torch.zeros((g, n), dtype=torch.bool, device=scores.device)
    if k >= n:
        return torch.ones((g, n), dtype=torch.bool, device=scores.device)
    kth = scores.topk(k, dim=1, sorted=False).values.amin(1, keepdim=True)
    above = scores > kth
    tie = scores == kth
    left = k - above.sum(1, keepdim=True, dtype=torch.int32)
    return above.logical_or_(tie.logical_and_(tie.cumsum(1, dtype=torch.int32) <= left))


def top_fraction(scores: torch.Tensor, top_k: float) -> torch.Tensor:
    """Bool mask of the top `top_k` fraction of a matrix's entries (flattened): int(K·N) entries,
    rounded down as the paper's code counts them (a matrix smaller than 1/K gets none)."""
    k = int(check_k(top_k) * scores.numel())
    return top_rows(scores.reshape(1, -1), k).view(scores.shape)


def _groups(weights: Mapping[str, torch.Tensor]) -> list[list[str]]:
    by: dict[tuple, list[str]] = {}
    for name, w in weights.items():
        by.setdefault((tuple(w.shape), w.device, w.dtype), []).append(name)
    return list(by.values())


def pack(mask: torch.Tensor) -> torch.Tensor:
    """Bits of a bool tensor (flattened, padded with zeros to a multiple of 8) as uint8, in
    np.packbits' order, computed where the mask lives."""
    flat = mask.reshape(-1).view(torch.uint8)
    pad = -flat.numel() % 8
    if pad:
        flat = torch.cat([flat, flat.new_zeros(pad)])
    w = _BIT_WEIGHTS.to(flat.device)
    return (flat.view(-1, 8) * w).sum(1, dtype=torch.uint8)


def select_masks(
    model: nn.Module, norms: Mapping[str, torch.Tensor], top_k: float, minus: Mapping[str, torch.Tensor] | None = None
) -> dict[str, torch.Tensor]:
    """Host bool masks {"<layer>.weight": top-K of S under `norms`, less the top-K under `minus`},
    equal to `top_fraction` per matrix (ties included)."""
    check_k(top_k)
    mods = dict(model.named_modules())
    weights = {name: mods[name].weight for name in norms}
    packed: list[tuple[list[str], torch.Tensor]] = []
    for names in _groups(weights):
        w0 = weights[names[0]]
        n = w0.numel()
        k = int(top_k * n)
        sets = 1 if minus is None else 2
        per = max(1, CHUNK // (n * sets))
        for i in range(0, len(names), per):
            part = names[i : i + per]
            if minus is None:
                nm = torch.stack([norms[x].to(w0.device) for x in part])[:, None]
            else:
                nm = torch.stack([torch.stack([norms[x].to(w0.device), minus[x].to(w0.device)]) for x in part])
            s = torch.empty((len(part), sets, *w0.shape), dtype=torch.float32, device=w0.device)
            for j, x in enumerate(part):
                importance(weights[x], nm[j], out=s[j])
            top = top_rows(s.view(-1, n), k).view(len(part), sets, n)
            mask = top[:, 0] if minus is None else top[:, 0].logical_and_(top[:, 1].logical_not_())
            packed.append((part, pack(mask)))
    return _unpack(packed, weights)


def _unpack(packed, weights) -> dict[str, torch.Tensor]:
    # one device→host copy of all the bits, then the masks unpacked in threads
    host = torch.cat([p for _, p in packed]).cpu().numpy() if packed else np.zeros(0, np.uint8)
    jobs, at = [], 0
    for names, p in packed:
        n = weights[names[0]].numel()
        for j, name in enumerate(names):
            # a group's masks are packed back to back: mask j starts at bit j·n of the group
            jobs.append((name, at, j * n, n))
        at += p.numel()

    def one(job):
        name, start, bit, n = job
        lo, hi = start + bit // 8, start + (bit + n + 7) // 8
        bits = np.unpackbits(host[lo:hi], count=(hi - lo) * 8)[bit % 8 : bit % 8 + n]
        return name, torch.from_numpy(bits.view(np.bool_)).view(weights[name].shape)

    threads = max(1, min(len(jobs), os.cpu_count() or 1, 16))
    with ThreadPoolExecutor(threads) as ex:
        out = dict(ex.map(one, jobs))
    return {f"{name}.weight": out[name] for name in weights}
