"""A forward pass over a transformers Mamba model's own weights, with MambaLRP's rules as switches.

Every rule leaves the forward values unchanged and only cuts gradient paths, so Gradient×Input on
this graph is the LRP explanation (Jafari et al., 2024):

- ``norm``: RMSNorm with its normaliser 1/rms(x) detached (the "LN rule");
- ``silu``: SiLU as x·stopgrad(σ(x)), after the causal conv and on the gate;
- ``ssm``:  the discretised Ā, B̄ and C of the selective scan detached, so the scan (D-skip
  included) is linear in its input along the remaining paths;
- ``gate``: after the multiplicative gate, y ← ½y + stopgrad(½y) (the half rule).

With no rules it is the plain model (used for training the organisms, for Gradient×Input and the
other gradient baselines). Linear and conv layers are LRP-0 (plain gradient); optionally the
generalised γ rule on in_proj / out_proj / conv1d (``gamma``), as the paper uses for Vision Mamba.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import torch
import torch.nn.functional as F

RULES = ("norm", "silu", "ssm", "gate")


def normalise_rules(rules: Iterable[str] | None) -> frozenset[str]:
    rules = frozenset(RULES if rules is None else rules)
    unknown = rules - set(RULES)
    if unknown:
        raise ValueError(f"unknown LRP rule(s) {sorted(unknown)}; choose from {list(RULES)}")
    return rules


@dataclass
class Capture:
    """Optional per-layer tensors recorded during the forward (for hidden-attention methods)."""

    u: list = field(default_factory=list)  # SSM input after conv + SiLU  [B, L, D]
    dt: list = field(default_factory=list)  # step after softplus          [B, L, D]
    B: list = field(default_factory=list)  # [B, L, N]
    C: list = field(default_factory=list)  # [B, L, N]
    y_ssm: list = field(default_factory=list)  # scan output before D-skip    [B, L, D]


def _rms_norm(norm, x: torch.Tensor, detach: bool) -> torch.Tensor:
    x = x.float()
    scale = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon)
    if detach:
        scale = scale.detach()
    return norm.weight * (x * scale)


def _silu(x: torch.Tensor, rule: bool) -> torch.Tensor:
    if rule:
        return x * torch.sigmoid(x).detach()
    return F.silu(x)


def _gamma_linear(x: torch.Tensor, weight: torch.Tensor, bias, gamma: float) -> torch.Tensor:
    """Generalised LRP-γ for a linear map, as a gradient trick: forward = plain output,
    backward = the γ-rule (positive and negative contributions boosted by γ on their own side)."""
    out = F.linear(x, weight, bias)
    wp, wn = weight.clamp(min=0), weight.clamp(max=0)
    xp, xn = x.clamp(min=0), x.clamp(max=0)
    pos = F.linear(xp, weight + gamma * wp) + F.linear(xn, weight + gamma * wn)
    neg = F.linear(xp, weight + gamma * wn) + F.linear(xn, weight + gamma * wp)
    z = torch.where(out.detach() >= 0, pos, neg)
    return z * (out / z.clamp_min(1e-12).where(z >= 0, z.clamp_max(-1e-12))).detach()


def mixer_forward(
    mixer, x: torch.Tensor, rules: frozenset, *, gamma: float = 0.0, capture: Capture | None = None
) -> torch.Tensor:
    """One MambaMixer on x [B, L, H] (already normalised), over the mixer's own parameters."""
    from .scan import selective_scan

    L = x.shape[1]
    if gamma:
        xz = _gamma_linear(x, mixer.in_proj.weight, mixer.in_proj.bias, gamma)
    else:
        xz = mixer.in_proj(x)
    xs, z = xz.chunk(2, dim=-1)  # [B, L, D] each
    w = mixer.conv1d.weight  # [D, 1, K]
    xc = xs.transpose(1, 2)
    if gamma:
        conv = _gamma_conv(xc, w, mixer.conv1d.bias, gamma)
    else:
        conv = F.conv1d(xc, w, mixer.conv1d.bias, padding=w.shape[-1] - 1, groups=w.shape[0])
    u = _silu(conv[..., :L].transpose(1, 2), "silu" in rules)
    dt_r, B, C = torch.split(
        mixer.x_proj(u), [mixer.time_step_rank, mixer.ssm_state_size, mixer.ssm_state_size], dim=-1
    )
    if hasattr(mixer, "b_layernorm"):
        # FalconMamba normalises Δ (before dt_proj), B and C with weightless RMS norms. They sit on the
        # SSM parameters' branch, which MambaLRP's "ssm" rule detaches as a whole (the scan is then
        # linear in u), so they need no rule of their own and conservation is unchanged. (Being
        # scale-invariant in u_t, that branch's Gradient x Input sums to zero by Euler's theorem, so on
        # FalconMamba the total is conserved even without the SSM rule; tests/unit/test_lrp_falcon_mamba.)
        dt_r, B, C = mixer.dt_layernorm(dt_r), mixer.b_layernorm(B), mixer.c_layernorm(C)
    dt = F.softplus(F.linear(dt_r, mixer.dt_proj.weight).float() + mixer.dt_proj.bias.float())
    A = -torch.exp(mixer.A_log.float())
    y, y_ssm = selective_scan(u, dt, A, B, C, mixer.D, detach_ssm="ssm" in rules, return_parts=True)
    if capture is not None:
        capture.u.append(u)
        capture.dt.append(dt)
        capture.B.append(B)
        capture.C.append(C)
        capture.y_ssm.append(y_ssm)
    y = y * _silu(z, "silu" in rules)
    if "gate" in rules:
        y = 0.5 * y + (0.5 * y).detach()
    y = y.to(x.dtype)
    if gamma:
        return _gamma_linear(y, mixer.out_proj.weight, mixer.out_proj.bias, gamma)
    return mixer.out_proj(y)


def _gamma_conv(xc, w, bias, gamma):
    K = w.shape[-1]
    pad = K - 1
    conv = lambda inp, ww: F.conv1d(inp, ww, None, padding=pad, groups=w.shape[0])  # noqa: E731
    out = F.conv1d(xc, w, bias, padding=pad, groups=w.shape[0])
    wp, wn = w.clamp(min=0), w.clamp(max=0)
    xp, xn = xc.clamp(min=0), xc.clamp(max=0)
    pos = conv(xp, w + gamma * wp) + conv(xn, w + gamma * wn)
    neg = conv(xp, w + gamma * wn) + conv(xn, w + gamma * wp)
    z = torch.where(out.detach() >= 0, pos, neg)
    return z * (out / z.clamp_min(1e-12).where(z >= 0, z.clamp_max(-1e-12))).detach()


def backbone_forward(
    backbone, embeds: torch.Tensor, rules=(), *, gamma: float = 0.0, capture: Capture | None = None
) -> torch.Tensor:
    """transformers.MambaModel's (or FalconMambaModel's) computation from inputs_embeds to the
    final-normed hidden states."""
    rules = normalise_rules(rules)
    h = embeds
    for block in backbone.layers:
        # a model spread over several GPUs (device_map) keeps each block's weights on its own one
        h = h.to(block.norm.weight.device)
        residual = h.float() if block.residual_in_fp32 else h
        n = _rms_norm(block.norm, h, "norm" in rules).to(h.dtype)
        h = residual + mixer_forward(block.mixer, n, rules, gamma=gamma, capture=capture)
    return _rms_norm(backbone.norm_f, h.to(backbone.norm_f.weight.device), "norm" in rules)


def parts(model):
    """(backbone, head or None) of a Mamba causal LM or a bare MambaModel."""
    if hasattr(model, "backbone") and hasattr(model, "lm_head"):
        return model.backbone, model.lm_head
    if hasattr(model, "layers") and hasattr(model, "norm_f"):
        return model, None
    raise TypeError(f"not a transformers Mamba model: {type(model).__name__}")


def embed(model, input_ids: torch.Tensor) -> torch.Tensor:
    backbone, _ = parts(model)
    return backbone.embeddings(input_ids)


def lm_forward(
    model,
    input_ids: torch.Tensor | None = None,
    *,
    inputs_embeds=None,
    rules=(),
    gamma: float = 0.0,
    capture: Capture | None = None,
) -> torch.Tensor:
    """Logits [B, L, V] of a MambaForCausalLM (or hidden states of a MambaModel) with the rules."""
    backbone, head = parts(model)
    dev = backbone.embeddings.weight.device  # callers may build their ids on the host
    if inputs_embeds is None:
        assert input_ids is not None, "input_ids or inputs_embeds"
        inputs_embeds = backbone.embeddings(input_ids.to(dev))
    inputs_embeds = inputs_embeds.to(dev)
    h = backbone_forward(backbone, inputs_embeds, rules, gamma=gamma, capture=capture)
    if head is None:
        return h
    return head(h.to(head.weight.device, head.weight.dtype)).float()
