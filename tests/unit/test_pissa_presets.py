"""The Adapters tab's presets: zoo default, Llama/Mistral-class hub checkpoints through the same
from_pretrained loader (exercised on tiny models saved to tmp_path), service-level input checks."""

import pytest
import torch

from backend.core import presets
from backend.core.presets import PresetError, load_pretrained
from backend.pissa import PRESETS, TAB, adapt, error_reduction_ratio, linear_layers
from backend.pissa import conversion, service
from tests.helpers.tiny import tiny_llama

torch.set_num_threads(1)


def test_presets_registered():
    assert presets.active(TAB, "zoo").path_or_id == "pissa-toy"
    hub = [p for p in PRESETS if p.source == "hub"]
    classes = {p.model_class for p in hub}
    assert {"transformers.LlamaForCausalLM", "transformers.MistralForCausalLM"} <= classes
    assert presets.active(TAB, "hub").source == "hub"
    for p in hub:
        assert presets.validate_hub_id(p.path_or_id) == p.path_or_id


def _tiny_mistral():
    from transformers import MistralConfig, MistralForCausalLM

    torch.manual_seed(0)
    cfg = MistralConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    return MistralForCausalLM(cfg).eval()


@pytest.mark.parametrize(
    "make,cls",
    [(lambda: tiny_llama(seed=1), "transformers.LlamaForCausalLM"), (_tiny_mistral, "transformers.MistralForCausalLM")],
)
def test_hub_class_loads_through_the_preset_loader(tmp_path, make, cls):
    model = make()
    folder = tmp_path / "checkpoint"
    model.save_pretrained(folder, safe_serialization=True)
    loaded = load_pretrained(cls, str(folder), roots=[tmp_path]).eval()
    ids = torch.randint(0, 64, (2, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(loaded(input_ids=ids).logits, model(input_ids=ids).logits)
    # the PiSSA machinery runs on it unchanged
    names = linear_layers(loaded)
    assert any(n.endswith("q_proj") for n in names)
    w = loaded.get_submodule(next(n for n in names if n.endswith("o_proj"))).weight
    assert error_reduction_ratio(w, 4, "qpissa", 1) > 0
    with torch.no_grad():
        pm = adapt(loaded, "pissa", rank=4, niter=4)
        assert torch.allclose(pm(input_ids=ids).logits, model(input_ids=ids).logits, atol=1e-5)


def test_loader_refuses_outside_roots_and_pickles(tmp_path):
    model = tiny_llama(seed=2)
    folder = tmp_path / "ckpt"
    model.save_pretrained(folder, safe_serialization=True)
    with pytest.raises(PresetError):
        load_pretrained("transformers.LlamaForCausalLM", str(folder), roots=[tmp_path / "elsewhere"])
    pick = tmp_path / "pickled"
    pick.mkdir()
    torch.save(model.state_dict(), pick / "pytorch_model.bin")
    (pick / "config.json").write_text((folder / "config.json").read_text())
    with pytest.raises(PresetError):
        load_pretrained("transformers.LlamaForCausalLM", str(pick), roots=[tmp_path])
    with pytest.raises(PresetError):
        load_pretrained("transformers.LlamaForCausalLM", str(folder), roots=[tmp_path], trust_remote_code=True)


def test_service_rejects_bad_input():
    with pytest.raises(service.ServiceError):
        service.preset_for("no-such-model")
    with pytest.raises(service.ServiceError):
        service.layer_analysis("pissa-toy", "fc9", 4)
    with pytest.raises(service.ServiceError):
        service.layer_analysis("pissa-toy", "head", 11)  # head is 10 × 128
    with pytest.raises(service.ServiceError):
        service.layer_analysis("pissa-toy", "fc2", 4, init="olora")
    with pytest.raises(service.ServiceError):
        list(service.race_stream("pissa-toy", service.RaceConfig(methods=("sgd",))))
    with pytest.raises(service.ServiceError):
        conversion.conversion_demo("pissa-toy", 8, steps=0)


def test_layer_analysis_is_cached_and_leaves_the_model_alone():
    model = service.get_model("pissa-toy")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    a = service.layer_analysis("pissa-toy", "fc1", 4)
    assert service.layer_analysis("pissa-toy", "fc1", 4) is a
    assert a["reconstruction_rel_error"] <= 1e-5 and a["init_output_rel_gap"] <= 1e-5
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_conversion_rank_is_bounded_by_the_layer_it_adapts():
    """Issue 26: rank 32 on fc2 (128 × 128) was refused with "between 1 and 10 for a (10, 128)
    layer", the bound of the head, a layer the user had not picked."""
    r = conversion.conversion_demo("pissa-toy", 32, steps=2, layer="fc2")
    assert r["layers"] == ["fc2"] and r["rank"] == 32 and r["converted_rank"] == 64
    assert r["same_outputs"], r
    with pytest.raises(service.ServiceError, match=r"between 1 and 10 for the \(10, 128\) layer head"):
        conversion.conversion_demo("pissa-toy", 32, steps=2, layer="head")
    with pytest.raises(service.ServiceError, match="no adaptable linear layer 'fc9'"):
        conversion.conversion_demo("pissa-toy", 8, steps=2, layer="fc9")
    # the race's layers (no layer named): the narrowest of those, named
    with pytest.raises(service.ServiceError, match=r"between 1 and 10 for the \(10, 128\) layer head"):
        conversion.conversion_demo("pissa-toy", 32, steps=2)
