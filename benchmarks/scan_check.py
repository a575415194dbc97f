"""Triton linear recurrence vs the per-step loop on CUDA: correctness, speed, bandwidth vs the bytes floor.

Run on a GPU machine: `python -m benchmarks.scan_check [--sweep]`. Floors: forward reads a, b and writes
h (3·L·C·4 bytes); backward reads a, gh, h and writes g, grad_a (5·L·C·4). Exits 1 if a check fails;
prints "skipped: ..." and exits 0 without Triton or CUDA.
"""

import argparse
import os
import sys

import torch

from backend.lrp import scan_triton
from backend.lrp.scan import linear_recurrence

SIZES = [(512, 1 * 4096 * 16), (512, 1 * 1536 * 16), (333, 2 * 77 * 16 + 5)]


def _rel(x, y):
    return ((x.double() - y.double()).norm() / y.double().norm().clamp_min(1e-30)).item()


def _loop(a, b, gh):
    os.environ["WORKBENCH_SCAN"] = "loop"
    try:
        a, b = a.clone().requires_grad_(), b.clone().requires_grad_()
        h = linear_recurrence(a, b)
        ga, gb = torch.autograd.grad(h, (a, b), gh)
        return h.detach(), gb, ga
    finally:
        os.environ.pop("WORKBENCH_SCAN")


def _triton_poisoned(a, b, gh):
    h, g, ga = (torch.full_like(b, float("nan")) for _ in range(3))
    scan_triton._launch(a, b, h, h, None, False)
    scan_triton._launch(a, gh, h, g, ga, True)
    return h, g, ga


def _bench(fn):
    import triton.testing

    return triton.testing.do_bench(fn, return_mode="median")  # ms


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sweep", action="store_true", help="also time BLOCK/CHUNK/warps variants")
    args = ap.parse_args()
    if not scan_triton.available():
        print("skipped: Triton or CUDA not available")
        return 0
    dev = torch.device("cuda")
    torch.manual_seed(0)
    rows, ok = [], True
    for L, C in SIZES:
        a = torch.rand(L, C, device=dev) * 0.98 + 0.01
        b = torch.randn(L, C, device=dev)
        gh = torch.randn(L, C, device=dev)
        ref = _loop(a, b, gh)
        got = _triton_poisoned(a, b, gh)
        errs = [_rel(x, y) for x, y in zip(got, ref)]
        aw, bw = a.clone().requires_grad_(), b.clone().requires_grad_()
        hw = linear_recurrence(aw, bw)  # the path scan.py takes by default
        errs.append(max(_rel(x, y) for x, y in zip((hw.detach(), *torch.autograd.grad(hw, (bw, aw), gh)), ref)))
        good = all(e < 1e-5 for e in errs) and all(torch.isfinite(x).all() for x in got)
        ok &= good
        print(
            f"L={L} C={C}: rel err h {errs[0]:.1e} g {errs[1]:.1e} grad_a {errs[2]:.1e} "
            f"wired {errs[3]:.1e} -> {'ok' if good else 'FAIL'}"
        )
        h = ref[0]
        os.environ["WORKBENCH_SCAN"] = "loop"
        lf = _bench(lambda: linear_recurrence(a, b))
        lb = _bench(lambda: _loop_bwd(a, h, gh))
        os.environ.pop("WORKBENCH_SCAN")
        tf = _bench(lambda: scan_triton.forward(a, b))
        tb = _bench(lambda: scan_triton.backward(a, h, gh))
        fb, bb = 3 * L * C * 4, 5 * L * C * 4
        rows.append((L, C, lf, tf, fb / tf / 1e6, lb, tb, bb / tb / 1e6))
        if args.sweep and L == 512:
            for blk in (32, 64, 128, 256):
                for ch in (16, 32):
                    for w in (1, 2, 4):
                        t = _bench(lambda: scan_triton.forward(a, b, block=blk, chunk=ch, warps=w))
                        print(f"  sweep fwd BLOCK={blk} CHUNK={ch} warps={w}: {t:.3f} ms {fb / t / 1e6:.0f} GB/s")
    print(f"\ndevice: {torch.cuda.get_device_name()}  (ms = median; GB/s vs the bytes floor)")
    print(
        f"{'L':>4} {'C':>6} | {'fwd loop':>8} {'triton':>7} {'x':>6} {'GB/s':>6} | "
        f"{'bwd loop':>8} {'triton':>7} {'x':>6} {'GB/s':>6}"
    )
    for L, C, lf, tf, fbw, lb, tb, bbw in rows:
        print(
            f"{L:>4} {C:>6} | {lf:8.3f} {tf:7.3f} {lf / tf:6.1f} {fbw:6.0f} | "
            f"{lb:8.3f} {tb:7.3f} {lb / tb:6.1f} {bbw:6.0f}"
        )
    print("checks:", "ok" if ok else "FAILED")
    return 0 if ok else 1


def _loop_bwd(a, h, gh):
    """The loop path's backward alone (the adjoint recurrence and grad_a), as _LinearRecurrence runs it."""
    g = torch.empty_like(gh)
    g[-1] = gh[-1]
    for t in range(gh.shape[0] - 2, -1, -1):
        torch.addcmul(gh[t], a[t + 1], g[t + 1], out=g[t])
    ga = torch.zeros_like(a)
    ga[1:] = g[1:] * h[:-1]
    return g, ga


if __name__ == "__main__":
    sys.exit(main())
