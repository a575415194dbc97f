import importlib
import sys
import types

import torch

from backend.core import device


def test_cpu_machine_picks_cpu_fp32():
    device.pick_device.cache_clear()
    dev = device.pick_device()
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert dev.type in (expected, "mps")
    if dev.type == "cpu":
        assert device.pick_dtype(dev) == torch.float32
    assert device.pick_dtype(torch.device("cpu"), prefer_half=True) == torch.float32
    assert "cpu" in device.describe() or dev.type != "cpu"


def test_device_override(monkeypatch):
    monkeypatch.setenv("WORKBENCH_DEVICE", "meta")
    device.pick_device.cache_clear()
    try:
        assert device.pick_device().type == "meta"
    finally:
        monkeypatch.delenv("WORKBENCH_DEVICE")
        device.pick_device.cache_clear()


def test_gpu_shim_is_identity_without_spaces():
    from backend.core import zerogpu as shim

    @shim.gpu(duration=lambda n: n * 2)
    def double(n):
        return 2 * n

    assert not shim.spaces_available()
    assert double(21) == 42 and double.__name__ == "double"
    assert double.gpu_duration(3) == 6
    assert shim.gpu(lambda: 7)() == 7


def test_gpu_shim_uses_spaces_when_present(monkeypatch):
    calls = []
    fake = types.ModuleType("spaces")

    def GPU(duration=60):
        def deco(f):
            calls.append(duration)
            f.marked = True
            return f
        return deco

    fake.GPU = GPU
    monkeypatch.setitem(sys.modules, "spaces", fake)
    import backend.core.zerogpu as shim
    shim = importlib.reload(shim)
    try:
        @shim.gpu(duration=30)
        def f():
            return 1

        assert shim.spaces_available() and f.marked and calls == [30]
    finally:
        monkeypatch.delitem(sys.modules, "spaces")
        importlib.reload(shim)
