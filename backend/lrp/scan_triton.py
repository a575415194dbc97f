"""Triton kernels for the linear recurrence h[t] = a[t]·h[t-1] + b[t] (time on dim 0) and its adjoint.

The loop in scan.py launches one kernel per time step; at 512 tokens that is launch-bound, far from
the memory floor (read a, b; write h). Here each program owns BLOCK channels of the flattened channel
axis C (time stride C) for all L steps and keeps the state in registers. A sequential step per load
would leave the GPU waiting on memory latency, so time is taken in tiles of CHUNK steps: the tile is
loaded at once (many loads in flight), scanned with `tl.associative_scan` over (a, b) pairs, and the
carried state enters as h = A_cum·state + B_cum. The adjoint g[t] = gh[t] + a[t+1]·g[t+1] is the same
recurrence read backwards with a shifted by one step (a[L] = 0), so one kernel serves both, and the
backward also writes ∂L/∂a[t] = g[t]·h[t-1] in the same pass. Offsets are int64: t·C passes 2^31 at
full size. The defaults (BLOCK 128, CHUNK 32, 2 warps) were the best of a sweep on an H100
(benchmarks/scan_check.py --sweep): ~2.8 TB/s at C = 4096·16, L = 512. Triton is optional: without it
(or without CUDA) scan.py keeps its loop.
"""

import os

import torch

try:
    import triton
    import triton.language as tl
except Exception:  # noqa: BLE001 - any import failure means "no Triton path"
    triton = None

_DTYPES = (torch.float32, torch.float64)


def available() -> bool:
    """Triton importable and a CUDA device present."""
    return triton is not None and torch.cuda.is_available()


def usable(*tensors: torch.Tensor) -> bool:
    """Whether scan.py should take the Triton path for these tensors (WORKBENCH_SCAN=loop forces the loop)."""
    if os.environ.get("WORKBENCH_SCAN", "").lower() == "loop" or not available():
        return False
    return all(t.is_cuda and t.dtype in _DTYPES for t in tensors)


if triton is not None:

    @triton.jit
    def _combine(a1, b1, a2, b2):
        return a1 * a2, b1 * a2 + b2

    @triton.jit
    def _scan_kernel(
        a_ptr,
        b_ptr,
        h_ptr,
        g_ptr,
        ga_ptr,
        L,
        C,
        n_chunks,
        BLOCK: tl.constexpr,
        CHUNK: tl.constexpr,
        REVERSE: tl.constexpr,
        HAS_GA: tl.constexpr,
    ):
        # forward: b = b, h = out.  reverse: b = gh, h = saved states (for grad_a), g = out.
        cols = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK).to(tl.int64)
        cmask = cols < C
        r = tl.arange(0, CHUNK)
        state = tl.zeros([BLOCK], dtype=a_ptr.dtype.element_ty)
        for k in range(0, n_chunks):
            i = (k * CHUNK + r).to(tl.int64)  # position in scan order
            valid = i < L
            if REVERSE:
                t = L - 1 - i
                ta = t + 1
            else:
                t = i
                ta = t
            m = valid[:, None] & cmask[None, :]
            off = t[:, None] * C + cols[None, :]
            a = tl.load(a_ptr + ta[:, None] * C + cols[None, :], mask=m & (ta < L)[:, None], other=0.0)
            a = tl.where(m, a, 1.0)  # identity past the end so the last row carries the state
            if not REVERSE:
                a = tl.where((t == 0)[:, None], 0.0, a)  # h[-1] = 0 exactly, whatever a[0] is
            b = tl.load(b_ptr + off, mask=m, other=0.0)
            A, B = tl.associative_scan((a, b), 0, _combine)
            h = A * state[None, :] + B
            out = g_ptr if REVERSE else h_ptr
            tl.store(out + off, h, mask=m)
            if HAS_GA:
                hp = tl.load(h_ptr + off - C, mask=m & (t > 0)[:, None], other=0.0)
                tl.store(ga_ptr + off, h * hp, mask=m)
            state = tl.sum(tl.where((r == CHUNK - 1)[:, None], h, 0.0), axis=0)


def _launch(a, b, h, g, ga, reverse, block=128, chunk=32, warps=2):
    L = b.shape[0]
    C = b.numel() // max(L, 1)
    if L == 0 or C == 0:
        return
    grid = (triton.cdiv(C, block),)
    _scan_kernel[grid](
        a,
        b,
        h,
        g,
        ga,
        L,
        C,
        triton.cdiv(L, chunk),
        BLOCK=block,
        CHUNK=chunk,
        REVERSE=reverse,
        HAS_GA=ga is not None,
        num_warps=warps,
    )


def forward(a: torch.Tensor, b: torch.Tensor, *, block: int = 128, chunk: int = 32, warps: int = 2) -> torch.Tensor:
    """All states h (same shape as b). a, b contiguous, same shape and dtype."""
    h = torch.empty_like(b)
    _launch(a, b, h, h, None, False, block, chunk, warps)
    return h


def backward(
    a: torch.Tensor,
    h: torch.Tensor,
    gh: torch.Tensor,
    want_grad_a: bool = True,
    *,
    block: int = 128,
    chunk: int = 32,
    warps: int = 2,
):
    """(g, grad_a): g[t] = gh[t] + a[t+1]·g[t+1]; grad_a[t] = g[t]·h[t-1], grad_a[0] = 0 (or None)."""
    g = torch.empty_like(gh)
    ga = torch.empty_like(a) if want_grad_a else None
    _launch(a, gh, h, g, ga, True, block, chunk, warps)
    return g, ga
