"""A selective scan that is fast in both directions.

The recurrence of a Mamba layer is h_t = Ā_t ⊙ h_{t-1} + b_t (b_t = B̄_t u_t), y_t = Σ_n C_t[n] h_t[n].
transformers' reference loop records every time step in the autograd graph, so its backward is a long
Python loop of tiny ops. Here the linear recurrence is one autograd Function: the forward writes all
states into one preallocated buffer (one fused `addcmul` per step, no graph), and the backward runs
the adjoint recurrence g_t = ∂L/∂h_t + Ā_{t+1} ⊙ g_{t+1} the same way, giving
∂L/∂b_t = g_t and ∂L/∂Ā_t = g_t ⊙ h_{t-1} in two whole-tensor ops. Time runs along the first axis so
every step touches contiguous memory.

That loop is still one kernel launch per step, so on a GPU it is launch-bound, far above the memory
floor; on CUDA, when Triton is installed, both directions run as one kernel each instead
(scan_triton.py). CPU tensors, and any run with WORKBENCH_SCAN=loop (to compare the two), keep the loop.
"""

from __future__ import annotations

import torch

from backend.lrp import scan_triton


class _LinearRecurrence(torch.autograd.Function):
    """h[t] = a[t] * h[t-1] + b[t] along dim 0, with h[-1] = 0. a, b: [L, ...]."""

    @staticmethod
    def forward(ctx, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a = a.contiguous()
        b = b.contiguous()
        if a.dtype == b.dtype and scan_triton.usable(a, b):
            h = scan_triton.forward(a, b)
            ctx.save_for_backward(a, h)
            return h
        h = torch.empty_like(b)
        h[0] = b[0]
        for t in range(1, b.shape[0]):
            torch.addcmul(b[t], a[t], h[t - 1], out=h[t])
        ctx.save_for_backward(a, h)
        return h

    @staticmethod
    def backward(ctx, gh: torch.Tensor):
        a, h = ctx.saved_tensors
        gh = gh.contiguous()
        if gh.dtype == a.dtype and scan_triton.usable(a, h, gh):
            g, grad_a = scan_triton.backward(a, h, gh, ctx.needs_input_grad[0])
            return grad_a, (g if ctx.needs_input_grad[1] else None)
        g = torch.empty_like(gh)
        n = gh.shape[0]
        g[n - 1] = gh[n - 1]
        for t in range(n - 2, -1, -1):
            torch.addcmul(gh[t], a[t + 1], g[t + 1], out=g[t])
        grad_a = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_a = torch.zeros_like(a)
            grad_a[1:] = g[1:] * h[:-1]
        if ctx.needs_input_grad[1]:
            grad_b = g
        return grad_a, grad_b


def linear_recurrence(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """All states of h[t] = a[t]·h[t-1] + b[t] (time on dim 0), differentiable in a and b."""
    if a.shape != b.shape:
        a = a.expand_as(b)
    return _LinearRecurrence.apply(a, b)


def selective_scan(
    u: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None = None,
    *,
    detach_ssm: bool = False,
    return_parts: bool = False,
):
    """Mamba's selective scan, the same arithmetic as transformers' slow path.

    u, dt: [batch, L, d_inner] (dt after bias and softplus); A: [d_inner, N] (negative);
    B, C: [batch, L, N]; D: [d_inner]. Returns y: [batch, L, d_inner].
    With `detach_ssm` the discretised Ā, B̄ and C are cut from the graph (MambaLRP's SSM rule), so
    y is linear in u along every remaining gradient path.
    """
    if detach_ssm:
        dt, B, C = dt.detach(), B.detach(), C.detach()
    # time first: [L, batch, d_inner, N]
    dt_t = dt.transpose(0, 1).float()
    dA = torch.exp(dt_t[..., None] * A.float())
    dBu = (dt_t * u.transpose(0, 1).float())[..., None] * B.transpose(0, 1).float()[:, :, None, :]
    h = linear_recurrence(dA, dBu)
    y = torch.einsum("lbdn,lbn->lbd", h, C.transpose(0, 1).float()).transpose(0, 1)
    y_ssm = y
    if D is not None:
        y = y + u.float() * D.float()
    if return_parts:
        return y, y_ssm
    return y
