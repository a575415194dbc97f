"""The GPU-shape account counts a toy computation's kernels, syncs, transfers and bytes exactly."""

import numpy as np
import pytest
import torch

from benchmarks.account import account
from benchmarks.account_projection import H200, Account, project


def toy(w, x):
    xd = torch.as_tensor(x, dtype=torch.float32).to(w.device)  # a host list to the device: 1 H2D
    y = w @ xd  # 1 matmul kernel, 2·4·3·2 flops
    y.view(-1).t()  # views: no kernel
    z = torch.relu(y) + 1  # 2 kernels
    n = int((z > 1).sum())  # gt, sum + a scalar read (1 sync)
    sel = z[z > 1]  # gt, index + a boolean index (1 sync)
    host = sel.cpu()  # 1 D2H (+ 1 sync)
    again = host * 2  # host work: not a kernel
    arr = z.numpy()  # 1 D2H (+ 1 sync)
    same = z.to(w.device)  # already on the device: nothing
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
    # gt 32+8 twice, sum 8+8; the boolean index reads its mask and the k entries it writes out
    assert acc.other_bytes == 64 + 64 + 80 + 16 + 8 + 2 * 4 * k
    assert acc.op_bytes["index"] == 8 + 2 * 4 * k and acc.matmul_flops_fp32 == acc.matmul_flops
    assert isinstance(arr, np.ndarray) and same is not None and torch.equal(back, same)


def test_host_factories_and_host_work_are_not_kernels_but_device_ones_are():
    w = torch.randn(8)

    def f(w):
        ids = torch.full((2, 3), 0, dtype=torch.long)  # host (no device given)
        ids[0, :2] = torch.as_tensor([5, 6])  # host work
        acc = torch.zeros(8, device=w.device)  # a device fill: 1 kernel
        acc += w  # 1 kernel
        return ids.to(w.device), acc  # 1 H2D

    acc, (ids, z) = account(f, w)
    assert acc.ops == {"zeros": 1, "add_": 1} and acc.syncs == 0
    assert (acc.h2d, acc.h2d_bytes, acc.d2h) == (1, 6 * 8, 0)


def test_projection_adds_its_parts_and_scales():
    a = Account(
        kernels=1000, matmul_kernels=100, syncs=10, d2h_bytes=10**9, other_bytes=36 * 10**9, matmul_flops=6 * 10**12
    )
    p = project(a, H200)
    assert abs(p["matmul_s"] - 0.01) < 1e-12 and abs(p["other_kernels_s"] - 0.01) < 1e-12
    assert p["host_s"] == 0  # 1000 launches take the host less than the device's 20 ms
    assert abs(p["total_s"] - (0.02 + 10 * H200.sync_s + 1e9 / H200.d2h)) < 1e-12
    assert a.scaled(2).kernels == 2000 and (a + a).other_bytes == 72 * 10**9


def test_indexed_writes_count_the_addressed_elements_only():
    big = torch.zeros(1000, 10)

    def f(big):
        i = torch.tensor([1, 5], device=big.device)
        big.index_fill_(0, i, 1.0)  # 2 rows of 10 float32, read and written
        big.view(-1)[torch.tensor([3, 4, 7], device=big.device)] = 2.0  # 3 elements
        return big

    acc, _ = account(f, big)
    assert acc.op_bytes["index_fill_"] == 16 + 2 * 20 * 4
    assert acc.op_bytes["index_put_"] == 24 + 4 + 2 * 3 * 4  # indices, the value, 3 elements


def test_meta_flags_follow_the_flag_given_and_host_work_is_timed_when_asked():
    w = torch.empty(4, device="meta")

    def checked(w):
        if (w.min() < 0) or (w.max() > 1):  # a range check that holds on a real run
            raise ValueError("out of range")
        host = torch.ones(256, 256, dtype=torch.float64)
        return float((host @ host).sum())  # host work only: no kernel

    acc, out = account(checked, w, meta=True, flag=False, time_host=True)
    assert out == 256.0**3 and acc.syncs == 2 and acc.kernels == 4  # min, lt, max, gt
    assert acc.host_compute_s > 0 and project(acc)["host_compute_s"] == acc.host_compute_s
    acc2, _ = account(lambda: float(torch.ones(8, dtype=torch.float64).sum()), meta=True)
    assert acc2.host_compute_s == 0 and "host_compute_s" not in project(acc2)
    assert acc.scaled(2).host_compute_s == 2 * acc.host_compute_s
    with pytest.raises(ValueError, match="out of range"):  # the default flag reads True: the check raises
        account(checked, w, meta=True)
