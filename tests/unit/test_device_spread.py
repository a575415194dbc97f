"""A model too large for one GPU is spread over several with accelerate, and the methods still run
on a model that carries accelerate's dispatch hooks.

CI has no GPU: the decision is tested with the GPUs' free memory given, and the methods on a model
dispatched with accelerate's hooks on every block (one device here; on several GPUs the same hooks
also move activations between them)."""

import pytest
import torch

from backend.core import device as D
from backend.core import presets as P


@pytest.fixture
def cuda(monkeypatch):
    monkeypatch.delenv("WORKBENCH_DEVICE_MAP", raising=False)
    monkeypatch.setattr(D, "pick_device", lambda: torch.device("cuda"))


def test_spread_only_what_does_not_fit_one_gpu(cuda, monkeypatch):
    two = [10 * 10**9, 12 * 10**9]
    assert D.spread_kwargs(5 * 10**9, free=two) == {}
    got = D.spread_kwargs(14 * 10**9, free=two)
    assert got["device_map"] == "auto"
    assert got["max_memory"] == {0: int(0.85 * two[0]), 1: int(0.85 * two[1])}  # no "cpu" / "disk": no offload
    assert D.spread_kwargs(14 * 10**9, free=two, pipeline=True)["device_map"] == "balanced"
    assert D.spread_kwargs(14 * 10**9, free=two[:1]) == {}  # one GPU: nothing to spread over
    assert D.spread_kwargs(None, free=two) == {}  # size unknown: one GPU, as before
    monkeypatch.setenv("WORKBENCH_DEVICE_MAP", "auto")
    assert D.spread_kwargs(1, free=two)["device_map"] == "auto"
    monkeypatch.setenv("WORKBENCH_DEVICE_MAP", "off")
    assert D.spread_kwargs(14 * 10**9, free=two) == {}


def test_no_spreading_on_a_cpu(monkeypatch):
    monkeypatch.setattr(D, "pick_device", lambda: torch.device("cpu"))
    assert D.spread_kwargs(10**15, free=[1, 1]) == {}


def test_place_leaves_a_spread_model_where_accelerate_put_it(cuda):
    class Spread(torch.nn.Linear):
        hf_device_map = {"a": 0, "b": 1}

        def to(self, *a, **k):
            raise AssertionError("a spread model must not be moved")

    m = Spread(2, 2)
    assert D.spread(m) and D.place(m) is m
    m.hf_device_map = {"": 0}
    assert not D.spread(m)


def test_load_preset_spreads_a_model_too_large_for_one_gpu(cuda, tmp_path, monkeypatch):
    from tests.helpers.tiny import tiny_llama

    monkeypatch.setenv("WORKBENCH_MODEL_ROOTS", str(tmp_path))
    tiny_llama(seed=0).save_pretrained(tmp_path / "llama")
    preset = P.custom_preset("math_neurons", str(tmp_path / "llama"), "transformers.LlamaForCausalLM")
    seen = {}
    monkeypatch.setattr(P, "_several_gpus", lambda: True)
    monkeypatch.setattr(D, "gpu_free_bytes", lambda: [1000, 1000])  # the weights take ~100 KB
    monkeypatch.setattr(P, "load_pretrained", lambda cls, loc, **kw: seen.update(kw) or "model")
    assert P.load_preset(preset) == "model"
    assert seen["device_map"] == "auto" and seen["max_memory"] == {0: 850, 1: 850}
    seen.clear()
    P.load_preset(preset, size_hint=100)  # the caller's size (from modelcheck) wins: it fits
    assert "device_map" not in seen


def _dispatched(model):
    from accelerate import dispatch_model

    names = ["model.embed_tokens", "model.rotary_emb", "model.norm", "lm_head"]
    names += [f"model.layers.{i}" for i in range(len(model.model.layers))]
    return dispatch_model(model, device_map={n: "cpu" for n in names}, force_hooks=True)


def test_methods_run_unchanged_on_a_model_under_accelerate_hooks():
    from backend.core.store import hooks_on
    from backend.mathneuro import core as mn
    from backend.pissa.decompose import pissa_split
    from tests.helpers.tiny import tiny_llama

    plain, spread = tiny_llama(seed=3), _dispatched(tiny_llama(seed=3))
    assert hasattr(spread.model.layers[0], "_hf_hook")  # accelerate's hook wraps every block
    g = torch.Generator().manual_seed(0)
    math_texts = [torch.randint(0, 64, (9,), generator=g) for _ in range(4)]
    other = [torch.randint(0, 64, (7,), generator=g) for _ in range(4)]
    want = mn.identify(plain, math_texts, other, 0.1)
    got = mn.identify(spread, math_texts, other, 0.1)
    assert want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want)
    assert mn.count(got) > 0

    ids = torch.randint(0, 64, (1, 6), generator=g)
    before = spread(ids).logits
    with mn.scaled(spread, got, 0.0):
        pruned = spread(ids).logits
    assert not torch.allclose(pruned, before)
    assert torch.equal(spread(ids).logits, before)  # written back bit-exactly
    assert hooks_on(spread) == 0  # the methods' own hooks are gone; accelerate's are not torch hooks

    w = spread.model.layers[1].mlp.down_proj.weight
    a, b = pissa_split(w, 4), pissa_split(plain.model.layers[1].mlp.down_proj.weight, 4)
    assert torch.allclose(a.residual, b.residual)
