import threading
import time

import torch

from backend.core import interventions as iv
from backend.core import store
from tests.helpers.tiny import TinyMLP
import pytest


@pytest.fixture(autouse=True)
def forget_unit_models():
    yield
    with store._GUARD:
        for k in [k for k in store._MODELS if k.startswith("unit:")]:
            del store._MODELS[k]


def test_get_or_load_loads_once_under_concurrency(monkeypatch):
    monkeypatch.setenv("WORKBENCH_CHECK_WEIGHTS", "1")
    calls = []

    def loader():
        calls.append(1)
        time.sleep(0.05)
        return TinyMLP(seed=3)

    got = []
    threads = [threading.Thread(target=lambda: got.append(store.get_or_load("unit:mlp", loader)))
               for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and all(m is got[0] for m in got)
    assert "unit:mlp" in store.loaded()
    assert store.integrity_problems() == []


def test_integrity_check_sees_hooks_and_changed_weights(monkeypatch):
    monkeypatch.setenv("WORKBENCH_CHECK_WEIGHTS", "1")
    model = store.get_or_load("unit:mlp2", lambda: TinyMLP(seed=4))
    with iv.zero_channels(model, "fc1", [0]):
        assert any("hook" in p for p in store.integrity_problems())
    assert store.integrity_problems() == []
    orig = model.fc2.bias[0].item()
    with torch.no_grad():
        model.fc2.bias[0] += 1
    try:
        assert any("weights differ" in p for p in store.integrity_problems())
    finally:
        with torch.no_grad():
            model.fc2.bias[0] = orig
    mask = torch.ones_like(model.fc1.weight, dtype=torch.bool)
    with iv.scale_weights(model, {"fc1.weight": mask}, 1.1):
        assert store.integrity_problems()
    assert store.integrity_problems() == []
