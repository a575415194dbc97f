"""Mamba's hidden attention matrices (Ali et al., 2024) and the two attention baselines.

Unrolling the selective scan, channel d of a layer computes y_t = Σ_{s≤t} α_{t,s} u_s with

    α[d, t, s] = Σ_n C_t[n] · exp(A[d, n] · (Δ_{s+1} + … + Δ_t)[d]) · Δ_s[d] · B_s[n],

a causal "attention" per channel. Both baselines are non-negative:

- ``attnroll``: attention rollout over layers of the channel-mean |α| (plus identity for the residual),
  rows normalised;
- ``mambaattr``: the same rollout of the channel-mean ReLU(α ⊙ ∂f/∂α), the gradient-weighted
  hidden attention (∂f/∂α[d,t,s] = ∂f/∂y[d,t] · u[d,s]).
"""

from __future__ import annotations

import torch


def alpha(u_dt, cum, A, B, C) -> torch.Tensor:
    """The hidden attention α [batch, t, s, d] of channels given by `cum` (cumulative Δ, [b, L, d]),
    `u_dt` (Δ, [b, L, d]) and A [d, N]; zero above the diagonal."""
    L = cum.shape[1]
    causal = torch.ones(L, L, dtype=torch.bool, device=cum.device).tril()
    diff = (cum[:, :, None, :] - cum[:, None, :, :]).masked_fill(~causal[None, :, :, None], 0.0)
    out = torch.zeros(diff.shape, dtype=torch.float32, device=cum.device)
    for n in range(A.shape[1]):
        out += torch.exp(diff * A[:, n].float()) * (C[:, :, None, n, None] * B[:, None, :, n, None]).float()
    out = out * u_dt[:, None, :, :].float()
    return out.masked_fill(~causal[None, :, :, None], 0.0)


def hidden_attention(u, dt, A, B, C, *, grad_y=None, chunk: int = 64) -> torch.Tensor:
    """Channel-mean hidden attention [batch, L, L] of one layer.

    u, dt: [batch, L, D]; A: [D, N]; B, C: [batch, L, N]. Without grad_y returns mean_d |α|;
    with grad_y ([batch, L, D], ∂f/∂y of the scan output) returns mean_d ReLU(α·grad_y[t]·u[s]).
    Channels are processed in chunks so a large layer does not hold D×L×L×N at once.
    """
    Bsz, L, D = u.shape
    cum = torch.cumsum(dt.float(), dim=1)  # [b, L, D]
    out = torch.zeros(Bsz, L, L, dtype=torch.float32, device=u.device)
    for d0 in range(0, D, chunk):
        sl = slice(d0, min(D, d0 + chunk))
        a = alpha(dt[:, :, sl], cum[:, :, sl], A[sl], B, C)
        if grad_y is None:
            out += a.abs().sum(-1)
        else:
            w = a * grad_y[:, :, None, sl].float() * u[:, None, :, sl].float()
            out += w.clamp(min=0).sum(-1)
    return out / D


def rollout(layers: list[torch.Tensor], position: int = -1) -> torch.Tensor:
    """Attention rollout: Π_l normalise(Ã_l + I), read at row `position`. layers: [batch, L, L]."""
    Bsz, L, _ = layers[0].shape
    eye = torch.eye(L, dtype=torch.float32, device=layers[0].device).expand(Bsz, L, L)
    joint = eye.clone()
    for att in layers:
        att = att.float()
        att = att / att.sum(-1, keepdim=True).clamp_min(1e-12)  # rows of the layer's mixing
        a = 0.5 * att + 0.5 * eye
        joint = a @ joint
    return joint[:, position, :]
