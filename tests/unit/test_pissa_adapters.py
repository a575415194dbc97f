"""Model-level adapters through peft on a tiny random Llama: init equivalence, quantized variants,
PiSSA→LoRA conversion, the shared model left untouched."""

import pytest
import torch

from backend.pissa import (
    LMTask,
    RaceConfig,
    adapt,
    convert_pissa_to_lora,
    default_targets,
    linear_layers,
    loftq_cpu,
    race,
    reconstruction_error,
)
from backend.pissa.nf4 import LEVELS
from backend.pissa.race import make_run, train_step
from tests.helpers.tiny import tiny_llama

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def llama():
    return tiny_llama(seed=0, hidden=32, layers=2)


@pytest.fixture(scope="module")
def ids():
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, 64, (4, 12), generator=g)


def _snapshot(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_linear_layers_and_targets(llama):
    names = linear_layers(llama)
    assert "lm_head" not in names and len(names) == 2 * 7
    assert default_targets(llama) == ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@pytest.mark.parametrize("method,kw", [("lora", {}), ("pissa", {}), ("pissa", {"niter": 4})])
def test_adapter_output_at_init_equals_base(llama, ids, method, kw):
    before = _snapshot(llama)
    with torch.no_grad():
        ref = llama(input_ids=ids).logits
        pm = adapt(llama, method, rank=4, **kw)
        out = pm(input_ids=ids).logits
    assert torch.allclose(out, ref, atol=1e-5, rtol=1e-5)
    if method == "pissa":
        assert reconstruction_error(pm, llama) <= 1e-5
    after = _snapshot(llama)
    assert all(torch.equal(before[k], after[k]) for k in before)  # the shared model is untouched


def test_alpha_other_than_rank_keeps_equivalence(llama, ids):
    with torch.no_grad():
        pm = adapt(llama, "pissa", rank=4, alpha=8)
        assert torch.allclose(pm(input_ids=ids).logits, llama(input_ids=ids).logits, atol=1e-5)


def _on_nf4_grid(w: torch.Tensor) -> bool:
    blocks = w.reshape(-1, 64)
    m = blocks.abs().amax(dim=1, keepdim=True)
    normed = blocks / m.clamp_min(1e-30)
    return bool(((normed[..., None] - LEVELS).abs().min(dim=-1).values < 1e-5).all())


def test_quantized_variants_put_base_weights_on_the_nf4_grid(llama):
    errs = {}
    for method in ("qlora", "loftq", "qpissa"):
        pm = adapt(llama, method, rank=4, iters=2)
        worst = 0.0
        for name, layer in pm.named_modules():
            if (
                hasattr(layer, "lora_A")
                and hasattr(layer, "get_base_layer")
                and "default" in getattr(layer, "lora_A", {})
            ):
                w = layer.get_base_layer().weight.detach()
                assert _on_nf4_grid(w), f"{method}: {name} base weight is not NF4"
        with torch.no_grad():
            worst = reconstruction_error(pm, llama)
        errs[method] = worst
    assert errs["qpissa"] < errs["qlora"] and errs["loftq"] < errs["qlora"]


def test_loftq_adapter_matches_cpu_loftq(llama):
    pm = adapt(llama, "loftq", rank=4, iters=1, alpha=8)
    layer = pm.base_model.model.model.layers[0].self_attn.q_proj
    w = llama.model.layers[0].self_attn.q_proj.weight
    q, a, b = loftq_cpu(w, 4, 1)
    assert torch.allclose(layer.get_base_layer().weight, q)
    assert torch.allclose(layer.get_delta_weight("default"), b @ a, atol=1e-6)


def test_bad_method_and_rank(llama):
    with pytest.raises(ValueError):
        adapt(llama, "dora", rank=4)
    with pytest.raises(ValueError):
        adapt(llama, "pissa", rank=0)


def test_pissa_to_lora_conversion_gives_the_same_outputs(llama, ids):
    seqs = torch.randint(0, 64, (32, 10), generator=torch.Generator().manual_seed(1))
    task = LMTask(llama, seqs)
    run = make_run(task, "pissa", seed=0, rank=4, alpha=4, lr=1e-2)
    from peft import get_peft_model_state_dict

    initial = {k: v.clone() for k, v in get_peft_model_state_dict(run.model).items()}
    for _ in range(5):
        train_step(task, run, 8)
    run.model.eval()
    converted, rank = convert_pissa_to_lora(run.model, initial, llama)
    assert rank == 8
    with torch.no_grad():
        trained = run.model(input_ids=ids).logits
        conv = converted(input_ids=ids).logits
        base = llama(input_ids=ids).logits
    assert not torch.allclose(trained, base, atol=1e-3)  # training changed the model
    assert torch.allclose(conv, trained, atol=1e-4)
    # the converted LoRA sits on the ORIGINAL weights
    q = converted.base_model.model.model.layers[0].self_attn.q_proj.get_base_layer().weight
    assert torch.equal(q, llama.model.layers[0].self_attn.q_proj.weight)


def test_lm_race_streams_events_and_stops(llama):
    seqs = torch.randint(0, 64, (32, 10), generator=torch.Generator().manual_seed(2))
    task = LMTask(llama, seqs)
    events = list(race(task, RaceConfig(methods=("lora", "pissa", "full"), seeds=(0, 1), steps=3, rank=4, batch=4)))
    setup = [e for e in events if "setup" in e]
    assert [e["setup"] for e in setup] == list(range(1, 7)) and setup[0]["of"] == 6
    steps = [e for e in events if "step" in e]
    assert len(steps) == 3 * 2 * 3
    assert {e["method"] for e in steps} == {"lora", "pissa", "full"}
    assert all(e["loss"] > 0 and e["grad_norm"] >= 0 for e in steps)
    done = events[-1]
    assert done["done"] and not done["stopped"]
    tp = done["summary"]["trainable_params"]
    assert tp["lora"] == tp["pissa"] < tp["full"]
    # the stop flag ends the race early and says so
    calls = {"n": 0}

    def stop():
        calls["n"] += 1
        return calls["n"] > 4

    events = list(race(task, RaceConfig(seeds=(0,), steps=50, rank=4, batch=4), stop=stop))
    assert events[-1]["stopped"] and len([e for e in events if "step" in e]) == 2


def test_race_config_validation(llama):
    task = LMTask(llama, torch.zeros(4, 5, dtype=torch.long))
    for cfg in (
        RaceConfig(methods=("adam",)),
        RaceConfig(methods=()),
        RaceConfig(seeds=()),
        RaceConfig(steps=0),
        RaceConfig(lr=5.0),
    ):
        with pytest.raises(ValueError):
            next(race(task, cfg))


def test_race_that_cannot_fit_is_refused_before_any_copy(llama, monkeypatch):
    """Each run trains its own copy: a race whose copies exceed the free memory (a 7B model's 2 methods
    x 3 seeds) is refused up front, naming how many seeds would fit, instead of running out of memory."""
    import importlib

    R = importlib.import_module("backend.pissa.race")  # the package exports the function `race` too
    task = LMTask(llama, torch.zeros(4, 5, dtype=torch.long))
    base = sum(p.numel() * p.element_size() for p in llama.parameters())
    cfg = RaceConfig(methods=("lora", "pissa"), seeds=(0, 1, 2), steps=2, rank=4, batch=2)
    assert R.race_bytes(llama, cfg) >= 6 * base
    full = RaceConfig(methods=("full",), seeds=(0,), steps=2)
    assert R.race_bytes(llama, full) > 4 * base  # float32 master weights, gradients and Adam moments
    copies = []
    monkeypatch.setattr(R, "clone_model", lambda m: copies.append(m) or m)
    monkeypatch.setattr(R, "available_bytes", lambda device: int(2.5 * base / 0.9))
    with pytest.raises(ValueError, match=r"6 model copies.*at most 1 seed with these methods fit"):
        next(race(task, cfg))
    monkeypatch.setattr(R, "available_bytes", lambda device: base)
    with pytest.raises(ValueError, match="not even one seed"):
        next(race(task, cfg))
    assert copies == []
    monkeypatch.setattr(R, "available_bytes", lambda device: 100 * base)
    assert "setup" in next(race(task, RaceConfig(seeds=(0,), steps=1, rank=4, batch=2)))
