"""ZeroGPU's process model, in parts: the stand-in `spaces` (tests/helpers/zerogpu) forks a worker
per marked call and lets nothing but pickled values and files out of it; what a worker computes for
everyone (NeMo's statistics) is kept on disk for the next worker and the main process; the preload
setting names what loads at start. What the main process loads and shows for its workers:
tests/unit/test_zerogpu_main_process.py."""

from __future__ import annotations

import copy
import importlib
import sys

import pytest
import torch

from tests.conftest import ROOT


def stand_in_spaces():
    """The stand-in `spaces` (tests/helpers/zerogpu), importable while a module's tests run."""
    sys.path.insert(0, str(ROOT / "tests" / "helpers" / "zerogpu"))
    try:
        yield importlib.import_module("spaces")
    finally:
        sys.path.remove(str(ROOT / "tests" / "helpers" / "zerogpu"))
        sys.modules.pop("spaces", None)


@pytest.fixture(scope="module")
def spaces():
    yield from stand_in_spaces()


KEPT: dict = {}


def test_a_forked_worker_returns_pickled_values_and_keeps_nothing(spaces):
    @spaces.GPU(duration=10)
    def remember(x):
        KEPT["x"] = x
        return {"got": x, "kept": dict(KEPT), "t": torch.arange(3)}

    out = remember([1, 2])
    assert out["got"] == [1, 2] and out["kept"] == {"x": [1, 2]} and torch.equal(out["t"], torch.arange(3))
    assert KEPT == {}  # the worker's memory died with it

    @spaces.GPU(duration=10)
    def stream(n):
        for i in range(n):
            yield i * 2
        raise ValueError("the end")

    got = []
    with pytest.raises(ValueError, match="the end"):  # an exception travels back as itself
        for x in stream(3):
            got.append(x)
    assert got == [0, 2, 4]

    @spaces.GPU(duration=10)
    def outer(x):
        return inner(x) + 1  # a marked call inside a worker runs directly

    @spaces.GPU(duration=10)
    def inner(x):
        return x * 10

    assert outer(2) == 21


def test_a_worker_may_not_return_a_tensor_off_the_cpu(spaces):
    @spaces.GPU(duration=10)
    def meta():
        return torch.empty(2, device="meta")

    with pytest.raises(RuntimeError, match="cannot leave a ZeroGPU worker"):
        meta()


def tiny_unet_pipe():
    """Just what the statistics read: a UNet with one down-block value layer, no text encoder."""
    from types import SimpleNamespace

    from torch import nn

    torch.manual_seed(0)
    unet = nn.Module()
    unet.down_blocks = nn.ModuleList([nn.Module()])
    unet.down_blocks[0].attn2 = nn.Module()
    unet.down_blocks[0].attn2.to_v = nn.Linear(4, 6, bias=False)
    return SimpleNamespace(unet=unet, text_encoder=None)


def test_nemo_statistics_computed_once_are_found_on_disk_by_the_next_process(monkeypatch, tmp_path):
    from backend.core.presets import Preset
    from backend.nemo import core, service

    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.delenv("WORKBENCH_NEMO_STATS", raising=False)
    computed = []

    def neuron_stats(pipe, prompts):  # a stand-in computation: what matters is how often it runs
        computed.append(len(prompts))
        w = pipe.unet.down_blocks[0].attn2.to_v.weight.detach()
        return core.NeuronStats(
            {"down_blocks.0.attn2.to_v": w.sum(1) * len(prompts)},
            {"down_blocks.0.attn2.to_v": w.abs().sum(1) + 1},
            len(prompts),
        )

    monkeypatch.setattr(core, "neuron_stats", neuron_stats)
    pipe = tiny_unet_pipe()

    def fresh(pipe=pipe):  # what a new worker (or the main process) holds before its first request
        return service.MemoModel(
            preset=Preset("memorization", "hub", "owner/sd", "diffusers.StableDiffusionPipeline"),
            pipe=pipe,
            folder=None,
            info={"non_memorized": ["a dog", "a cat", "a tree"]},
            theta_mem=0.5,
            guidance_scale=4.0,
            num_seeds=3,
            num_inference_steps=4,
        )

    first = fresh().stats()
    second = fresh().stats()
    assert computed == [3] and second.n_prompts == 3
    for k in first.mean:
        assert torch.equal(first.mean[k], second.mean[k]) and torch.equal(first.std[k], second.std[k])
    other = fresh(copy.deepcopy(pipe))
    with torch.no_grad():
        other.pipe.unet.down_blocks[0].attn2.to_v.weight.mul_(2)
    other.stats()  # other weights: computed afresh, not read from the first model's file
    assert computed == [3, 3]


@pytest.mark.parametrize(
    "setting, zerogpu, want",
    [
        ("", False, []),
        ("", True, ["relevance", "math_neurons"]),
        ("none", True, []),
        ("all", False, ["relevance", "math_neurons"]),
        ("math_neurons", False, ["math_neurons"]),
        ("owner/lm", False, ["math_neurons"]),
    ],
)
def test_the_preload_setting_names_what_loads_at_start(monkeypatch, setting, zerogpu, want):
    from backend.core import preload
    from backend.core import presets as P

    monkeypatch.setattr(preload, "_LOADERS", {"relevance": None, "math_neurons": None})
    monkeypatch.setattr(
        P,
        "_REGISTRY",
        {
            "relevance": [
                P.Preset("relevance", "hub", "owner/mamba", "transformers.MambaForCausalLM"),
                P.Preset("relevance", "zoo", "mamba", "transformers.MambaForCausalLM"),
            ],
            "math_neurons": [P.Preset("math_neurons", "hub", "owner/lm", "transformers.LlamaForCausalLM")],
            "memorization": [P.Preset("memorization", "hub", "owner/sd", "diffusers.StableDiffusionPipeline")],
        },
    )
    monkeypatch.setattr("backend.core.zerogpu.spaces_available", lambda: zerogpu)
    assert [p.tab for p in preload.wanted("hub", setting)] == want


def test_preload_skips_what_does_not_fit_the_budget(monkeypatch):
    from backend.core import preload
    from backend.core import presets as P

    loaded = []
    monkeypatch.setattr(preload, "_LOADERS", {"relevance": loaded.append})
    presets_ = [P.Preset("relevance", "hub", f"owner/m{i}", "transformers.MambaForCausalLM") for i in range(3)]
    monkeypatch.setattr(P, "_REGISTRY", {"relevance": presets_})
    sizes = {"owner/m0": 600, "owner/m1": 600, "owner/m2": 300}
    monkeypatch.setattr(preload, "_size", lambda p: sizes[p.path_or_id])
    monkeypatch.setenv("WORKBENCH_MODEL_BUDGET", "1000")
    assert preload.run("hub", "all") == ["relevance:owner/m0", "relevance:owner/m2"]
    assert loaded == [presets_[0], presets_[2]]
