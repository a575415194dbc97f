"""Similarity measures: SSIM (Gaussian window, valid positions) for noise differences and images,
pairwise-max over seeds, and the diversity of a set of generations."""

from __future__ import annotations

import itertools
import math

import numpy as np
import torch
import torch.nn.functional as F


def _gauss_window(size: int, sigma: float, device, dtype) -> torch.Tensor:
    x = torch.arange(size, device=device, dtype=dtype) - (size - 1) / 2
    g = torch.exp(-(x**2) / (2 * sigma**2))
    g = g / g.sum()
    return g[:, None] * g[None, :]


def ssim(
    a: torch.Tensor, b: torch.Tensor, *, data_range: float = 1.0, win: int = 7, sigma: float = 1.5
) -> torch.Tensor:
    """SSIM of two batches [N, C, H, W] → [N] (mean over channels and valid window positions).

    The window shrinks to the image when the image is smaller than `win` (8×8 latents use 7)."""
    if a.shape != b.shape or a.ndim != 4:
        raise ValueError(f"ssim needs two [N, C, H, W] tensors of one shape, got {tuple(a.shape)} and {tuple(b.shape)}")
    a = a.double()
    b = b.double()
    n, c, h, w = a.shape
    size = min(win, h, w)
    if size % 2 == 0:
        size -= 1
    k = _gauss_window(size, sigma, a.device, a.dtype).expand(c, 1, size, size)
    c1, c2 = (0.01 * data_range) ** 2, (0.03 * data_range) ** 2
    mu_a = F.conv2d(a, k, groups=c)
    mu_b = F.conv2d(b, k, groups=c)
    saa = F.conv2d(a * a, k, groups=c) - mu_a**2
    sbb = F.conv2d(b * b, k, groups=c) - mu_b**2
    sab = F.conv2d(a * b, k, groups=c) - mu_a * mu_b
    s = ((2 * mu_a * mu_b + c1) * (2 * sab + c2)) / ((mu_a**2 + mu_b**2 + c1) * (saa + sbb + c2))
    return s.mean(dim=(1, 2, 3)).float()


def minmax_per_channel(x: torch.Tensor) -> torch.Tensor:
    """Scale every sample and channel of [N, C, H, W] to [0, 1] (as the paper normalises noise
    differences before comparing them)."""
    lo = x.amin(dim=(2, 3), keepdim=True)
    hi = x.amax(dim=(2, 3), keepdim=True)
    return (x - lo) / (hi - lo).clamp_min(1e-12)


def pairwise_ssim(x: torch.Tensor) -> torch.Tensor:
    """SSIM of every pair (i < j) of a batch [N, C, H, W] → [N(N-1)/2]."""
    pairs = list(itertools.combinations(range(len(x)), 2))
    if not pairs:
        return torch.zeros(0)
    i = torch.tensor([p[0] for p in pairs])
    j = torch.tensor([p[1] for p in pairs])
    return ssim(x[i], x[j])


def _to_nchw(images) -> torch.Tensor:
    x = torch.as_tensor(np.asarray(images, dtype=np.float32))
    if x.ndim == 3:
        x = x[None]
    return x.permute(0, 3, 1, 2)


def ssim_images(a, b) -> np.ndarray:
    """SSIM of images [N, H, W, 3] in [0, 1] against images of the same shape → [N]."""
    return ssim(_to_nchw(a), _to_nchw(b)).numpy()


def diversity(images) -> float:
    """1 − mean pairwise SSIM of a set of generations [N, H, W, 3] (0 = all identical)."""
    x = _to_nchw(images)
    if len(x) < 2:
        return float("nan")
    return float(1.0 - pairwise_ssim(x).mean())


def auroc(pos, neg) -> float:
    """Probability that a positive scores above a negative (ties count half): scikit-learn's ROC AUC
    with memorized prompts as the positive class; NaN when either set is empty, where it is undefined."""
    from sklearn.metrics import roc_auc_score

    pos = np.asarray(pos, float).ravel()
    neg = np.asarray(neg, float).ravel()
    if not len(pos) or not len(neg):
        return math.nan
    labels = np.r_[np.ones(len(pos)), np.zeros(len(neg))]
    return float(roc_auc_score(labels, np.r_[pos, neg]))
