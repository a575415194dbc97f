"""A model load reports "loading <model> (n of N shards)" to whoever waits for it (the UI's progress
bar through components.serving.guard), and loads exactly what it loaded before."""

import json

import pytest
import torch
from safetensors.torch import save_file

from backend.core import prefetch, presets, store


@pytest.fixture()
def sharded(tmp_path):
    """A tiny Llama saved in several safetensors shards, as the papers' checkpoints come."""
    from tests.helpers.tiny import tiny_llama

    model = tiny_llama(layers=3)
    folder = tmp_path / "sharded-llama"
    model.save_pretrained(folder, max_shard_size="40KB")
    shards = sorted(folder.glob("model-*.safetensors"))
    assert len(shards) >= 3, [p.name for p in shards]
    return folder, model, len(shards)


def test_load_reports_each_shard_then_the_end(sharded):
    from transformers import LlamaForCausalLM

    folder, model, n = sharded
    model_id, name = "local:/models/sharded-llama@main", "sharded-llama"
    reports = []
    try:
        with store.load_progress(lambda f, msg: reports.append((f, msg))):
            loaded = store.get_or_load(
                model_id, lambda: presets.load_pretrained(LlamaForCausalLM, folder, roots=[folder.parent])
            )
        messages = [m for _, m in reports]
        assert messages[0] == f"loading {name}"
        assert messages[1 : 1 + n] == [f"loading {name} ({i} of {n} shards)" for i in range(1, n + 1)]
        assert messages[-1].startswith(f"loaded {name} in ")
        fractions = [f for f, _ in reports]
        assert fractions == sorted(fractions) and fractions[-1] == 1.0 and max(fractions[:-1]) < 1.0
        for (name, a), b in zip(model.state_dict().items(), loaded.state_dict().values()):
            assert torch.equal(a, b), name
        # a second request finds it loaded: nothing to report
        reports.clear()
        with store.load_progress(lambda f, msg: reports.append((f, msg))):
            assert store.get_or_load(model_id, lambda: pytest.fail("loaded twice")) is loaded
        assert reports == []
    finally:
        store.evict(model_id)


def test_without_a_listener_nothing_is_read_ahead(sharded, monkeypatch):
    from transformers import LlamaForCausalLM

    folder, _, _ = sharded
    reads = []
    monkeypatch.setattr(prefetch, "read_shards", lambda *a, **k: reads.append(a))
    assert not store.reporting()
    presets.load_pretrained(LlamaForCausalLM, folder, roots=[folder.parent])
    assert reads == []


def test_pipeline_shards_skip_left_out_components_and_variants(tmp_path):
    (tmp_path / "model_index.json").write_text(json.dumps({"unet": ["diffusers", "UNet2DConditionModel"]}))
    for sub, name in [
        ("unet", "diffusion_pytorch_model.safetensors"),
        ("unet", "diffusion_pytorch_model.fp16.safetensors"),
        ("text_encoder", "model.safetensors"),
        ("safety_checker", "model.safetensors"),
    ]:
        (tmp_path / sub).mkdir(exist_ok=True)
        save_file({"w": torch.zeros(2)}, str(tmp_path / sub / name))
    got = [p.relative_to(tmp_path).as_posix() for p in prefetch.shard_files(tmp_path, skip=["safety_checker"])]
    assert got == ["text_encoder/model.safetensors", "unet/diffusion_pytorch_model.safetensors"]
    reports = []
    with store.load_progress(lambda f, msg: reports.append(msg)):
        assert prefetch.read_shards(str(tmp_path), skip=["safety_checker"]) == 2
    assert reports == ["loading the model (1 of 2 shards)", "loading the model (2 of 2 shards)"]


def test_display_names():
    assert store.display_name("zoo:math-llama@main") == "math-llama"
    assert store.display_name("hub:state-spaces/mamba-130m-hf@main") == "state-spaces/mamba-130m-hf"
    assert store.display_name("hub:owner/name@v2") == "owner/name@v2"
    assert store.display_name("local:/data/models/my-mamba@main") == "my-mamba"
    assert store.display_name("zoo:mamba-sentiment@main|MambaForCausalLM") == "mamba-sentiment"
    assert store.display_name("features:hub:a/b|c/d|layers.3") == "features:hub:a/b|c/d|layers.3"
