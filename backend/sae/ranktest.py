"""The Mann–Whitney U test of many features at once, in torch, so that it runs where the activations
are: `scipy.stats.mannwhitneyu` computes the same numbers on the host only, and at a hub SAE's width
(131,072 features × 128 images) it was 2.2 s of a 4.3 s contrast on an H200 machine
(benchmarks/sae_fullsize.py), where sorting the columns on the GPU takes milliseconds. The contrast
uses it on a CUDA device and scipy elsewhere; tests/unit/test_sae_ranktest.py holds the two equal.

Same definition as scipy's `method="asymptotic"` with its defaults: U of the first sample from average
ranks (ties share their mean rank), the normal approximation with the tie correction of the variance
and a continuity correction of 0.5, two-sided.
"""

from __future__ import annotations

import math

import torch

CHUNK = 16384  # columns per pass: bounds the float64 work tensors (about 15 × 128 × CHUNK × 8 B)


def _columns(x: torch.Tensor, n1: int) -> tuple[torch.Tensor, torch.Tensor]:
    n, F = x.shape
    v, order = x.sort(dim=0)
    starts = torch.ones_like(v, dtype=torch.bool)
    starts[1:] = v[1:] != v[:-1]
    group = starts.cumsum(0) - 1  # tie group of each sorted value, per column
    pos = torch.arange(n, dtype=torch.float64, device=x.device)[:, None].expand(n, F)
    first = torch.zeros_like(v).scatter_reduce_(0, group, pos, "amin", include_self=False)
    last = torch.zeros_like(v).scatter_reduce_(0, group, pos, "amax", include_self=False)
    ranks = ((first + last) / 2 + 1).gather(0, group)  # 1-based average ranks, in sorted order
    u1 = (ranks * (order < n1)).sum(0) - n1 * (n1 + 1) / 2
    sizes = last - first + 1
    real = torch.arange(n, device=x.device)[:, None] <= group[-1:]  # the groups each column has
    ties = ((sizes**3 - sizes) * real).sum(0)
    return u1, ties


def mann_whitney(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """U of `a` and the two-sided p-value per column of a [n1, F] and b [n2, F], as float64 on their
    device. A column constant over both samples has no variance: its p is 1, as scipy's (the contrast
    leaves such features out of the test)."""
    n1, n2 = a.shape[0], b.shape[0]
    n = n1 + n2
    us, ties = [], []
    for i in range(0, a.shape[1], CHUNK):
        x = torch.cat([a[:, i : i + CHUNK], b[:, i : i + CHUNK]]).to(torch.float64)
        u, t = _columns(x, n1)
        us.append(u)
        ties.append(t)
    u1, tie = torch.cat(us), torch.cat(ties)
    sd = torch.sqrt(n1 * n2 / 12 * ((n + 1) - tie / (n * (n - 1))))
    u = torch.maximum(u1, n1 * n2 - u1)
    z = (u - n1 * n2 / 2 - 0.5) / sd
    p = torch.special.erfc(z / math.sqrt(2)).clamp(0, 1)  # 2 × the normal's upper tail
    return u1, p
