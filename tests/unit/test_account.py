"""The GPU-shape account counts a toy computation's kernels, syncs, transfers and bytes exactly."""
import numpy as np
import torch

from benchmarks.account import H200, Account, account, project


def toy(w, x):
    xd = torch.as_tensor(x, dtype=torch.float32).to(w.device)  # a host list to the device: 1 H2D
    y = w @ xd                        # 1 matmul kernel, 2·4·3·2 flops
    y.view(-1).t()                    # views: no kernel
    z = torch.relu(y) + 1             # 2 kernels
    n = int((z > 1).sum())            # gt, sum + a scalar read (1 sync)
    sel = z[z > 1]                    # gt, index + a boolean index (1 sync)
    host = sel.cpu()                  # 1 D2H (+ 1 sync)
    again = host * 2                  # host work: not a kernel
    arr = z.numpy()                   # 1 D2H (+ 1 sync)
    same = z.to(w.device)             # already on the device: nothing
    back = z.to("cpu", non_blocking=True)  # 1 D2H, no sync
    return again.tolist(), n, arr, same, back


def test_toy_counts_are_exact():
    w = torch.randn(4, 3)
    acc, (vals, n, arr, same, back) = account(toy, w, [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    assert acc.ops == {"mm": 1, "relu": 1, "add": 1, "gt": 2, "sum": 1, "index": 1}
    assert (acc.kernels, acc.matmul_kernels, acc.matmul_flops) == (7, 1, 2 * 4 * 3 * 2)
    assert acc.sync_ops == {"_local_scalar_dense": 1, "boolean index": 1, ".cpu()": 1, ".numpy()": 1}
    assert acc.syncs == 4
    k = int((torch.relu(w @ torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])) + 1 > 1).sum())
    assert n == k and len(vals) == k
    assert (acc.h2d, acc.h2d_bytes) == (1, 6 * 4)
    assert (acc.d2h, acc.d2h_bytes) == (3, 4 * k + 32 + 32)
    # z is 4 × 2 float32 (32 B), its mask 8 B, the sum an int64: relu 32+32, add 32+32,
    # gt 32+8 twice, sum 8+8, index 32+8 in and 4·k out
    assert acc.other_bytes == 64 + 64 + 80 + 16 + 40 + 4 * k
    assert isinstance(arr, np.ndarray) and same is not None and torch.equal(back, same)


def test_host_factories_and_host_work_are_not_kernels_but_device_ones_are():
    w = torch.randn(8)

    def f(w):
        ids = torch.full((2, 3), 0, dtype=torch.long)   # host (no device given)
        ids[0, :2] = torch.as_tensor([5, 6])            # host work
        acc = torch.zeros(8, device=w.device)           # a device fill: 1 kernel
        acc += w                                        # 1 kernel
        return ids.to(w.device), acc                    # 1 H2D

    acc, (ids, z) = account(f, w)
    assert acc.ops == {"zeros": 1, "add_": 1} and acc.syncs == 0
    assert (acc.h2d, acc.h2d_bytes, acc.d2h) == (1, 6 * 8, 0)


def test_projection_adds_its_parts_and_scales():
    a = Account(kernels=1000, matmul_kernels=100, syncs=10, d2h_bytes=10**9, other_bytes=36 * 10**9,
                matmul_flops=6 * 10**12)
    p = project(a, H200)
    assert abs(p["matmul_s"] - 0.01) < 1e-12 and abs(p["other_kernels_s"] - 0.01) < 1e-12
    assert abs(p["total_s"] - (0.02 + 10 * H200.sync_s + 1e9 / H200.d2h)) < 1e-12
    assert a.scaled(2).kernels == 2000 and (a + a).other_bytes == 72 * 10**9
