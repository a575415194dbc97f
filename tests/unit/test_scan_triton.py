"""The Triton recurrence path: CPU / WORKBENCH_SCAN=loop keep the loop; the kernel (interpreted) matches it."""

import importlib.util
import os
import subprocess
import sys

import pytest
import torch

from backend.lrp import scan_triton
from backend.lrp.scan import linear_recurrence


def _naive(a, b):
    h, out = torch.zeros_like(b[0]), []
    for t in range(b.shape[0]):
        h = a[t] * h + b[t]
        out.append(h)
    return torch.stack(out)


def test_cpu_tensors_and_the_loop_switch_take_the_loop_path(monkeypatch):
    g = torch.Generator().manual_seed(0)
    a = torch.rand(9, 3, 4, generator=g, dtype=torch.float64)
    b = torch.randn(9, 3, 4, generator=g, dtype=torch.float64)
    assert not scan_triton.usable(a, b)  # CPU tensors never take the kernel
    monkeypatch.setenv("WORKBENCH_SCAN", "loop")
    assert not scan_triton.usable(a, b)
    assert torch.allclose(linear_recurrence(a, b), _naive(a, b), rtol=1e-12, atol=1e-15)


_SCRIPT = r"""
import torch
from backend.lrp import scan_triton as st
from backend.lrp.scan import linear_recurrence
torch.manual_seed(0)
for L, shape in [(37, (2, 3, 5)), (1, (7,)), (20, (45,))]:
    a = (torch.rand(L, *shape, dtype=torch.float64) * 0.98 + 0.01).requires_grad_()
    b = torch.randn(L, *shape, dtype=torch.float64).requires_grad_()
    h = linear_recurrence(a, b)
    gh = torch.randn_like(h)
    ga, gb = torch.autograd.grad(h, (a, b), gh)
    h2, g2, ga2 = (torch.full_like(h, float("nan")) for _ in range(3))
    st._launch(a.detach(), b.detach(), h2, h2, None, False, 16, 8, 4)
    st._launch(a.detach(), gh, h.detach(), g2, ga2, True, 16, 8, 4)
    for x, y in ((h2, h), (g2, gb), (ga2, ga)):
        assert torch.allclose(x, y, rtol=1e-10, atol=1e-12), (L, shape, (x - y).abs().max())
print("ok")
"""


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="Triton not installed")
@pytest.mark.timeout(300)
def test_kernel_matches_the_loop_in_the_interpreter():
    # a fresh process: TRITON_INTERPRET is read when the kernel is defined
    env = dict(os.environ, TRITON_INTERPRET="1", WORKBENCH_SCAN="loop")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    r = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, cwd=root, capture_output=True, text=True, timeout=280)
    if "only 0-dimensional arrays can be converted" in r.stderr:  # triton 3.6 interpreter vs numpy 2.4
        pytest.skip("the Triton interpreter cannot run a runtime-bounded loop with this numpy")
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-2000:]
