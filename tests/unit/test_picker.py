"""The model picker's resolution: a listed preset, or the user's own model checked before loading."""

import json

import pytest
import torch
from safetensors.torch import save_file

from backend.core import picker
from backend.core import presets as P
from backend.core.modelcheck import ModelCheckError

ZOO = P.Preset("adapters", "zoo", "pissa-mlp", "transformers.LlamaForCausalLM", label="zoo · tiny")
HUB = P.Preset("adapters", "hub", "meta-llama/Llama-2-7b-hf", "transformers.LlamaForCausalLM", label="hub · 7B")


@pytest.fixture
def root(tmp_path, monkeypatch):
    for name in ("SPACE_ID", "WORKBENCH_CUSTOM_MODELS", "WORKBENCH_CUSTOM_OWNERS", "WORKBENCH_CUSTOM_MAX_GB"):
        monkeypatch.delenv(name, raising=False)
    models = tmp_path / "models"
    models.mkdir()
    monkeypatch.setenv("WORKBENCH_MODEL_ROOTS", str(models))
    return models


@pytest.fixture
def llama(root):
    from tests.helpers.tiny import tiny_llama

    tiny_llama(seed=0).save_pretrained(root / "llama")
    return root / "llama"


def test_listed_presets_resolve_by_key_id_or_label_and_empty_is_the_default():
    assert picker.resolve("", [ZOO, HUB], "adapters").preset == ZOO
    assert picker.resolve(None, [ZOO, HUB], "adapters", default=HUB).preset == HUB
    for key in (HUB.path_or_id, HUB.model_id, HUB.label):
        got = picker.resolve(key, [ZOO, HUB], "adapters")
        assert got.preset == HUB and not got.custom
    assert picker.resolve(" pissa-mlp ", [ZOO, HUB], "adapters").preset == ZOO


def test_own_folder_becomes_a_loadable_checked_preset(llama):
    got = picker.resolve(str(llama), [ZOO], "math", tab="math_neurons")
    assert got.custom and got.preset.source == P.LOCAL and got.preset.tab == "math_neurons"
    assert got.check.architecture == "LlamaForCausalLM"
    assert got.describe().startswith("your model") and "LlamaForCausalLM" in got.describe()
    model = P.load_preset(got.preset)
    assert type(model).__name__ == "LlamaForCausalLM"
    assert got.preset.model_id == f"local:{llama}@main"


def test_the_pick_line_says_when_a_model_is_larger_than_the_budget(llama, monkeypatch):
    monkeypatch.setenv("WORKBENCH_MODEL_BUDGET", "none")
    assert "budget" not in picker.check_line(str(llama), [ZOO], "adapters")
    monkeypatch.setenv("WORKBENCH_MODEL_BUDGET", "1000")
    assert "larger than the model budget (1.00 KB): it stays loaded alone" in picker.check_line(
        str(llama), [ZOO], "adapters"
    )


@pytest.mark.parametrize(
    "method, words",
    [("relevance", "MambaLRP needs a Mamba model"), ("features", "LLaVA-family"), ("memorization", "Stable Diffusion")],
)
def test_architecture_that_does_not_fit_is_refused_with_the_reason(llama, method, words):
    with pytest.raises(ModelCheckError, match=words):
        picker.resolve(str(llama), [ZOO], method)
    assert picker.check_line(str(llama), [ZOO], method).startswith("✗ LlamaForCausalLM")


def test_missing_outside_pickle_only_and_too_large_each_say_why(root, llama, tmp_path, monkeypatch):
    assert "no model at" in picker.check_line(str(root / "nothing"), [ZOO], "adapters")
    assert "outside the allowed model folders" in picker.check_line(str(tmp_path / "elsewhere"), [ZOO], "adapters")
    pickled = root / "pickled"
    pickled.mkdir()
    (pickled / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama"}))
    torch.save({"w": torch.zeros(2)}, pickled / "pytorch_model.bin")
    assert "only safetensors" in picker.check_line(str(pickled), [ZOO], "adapters")
    monkeypatch.setenv("WORKBENCH_CUSTOM_MAX_GB", "1KB")
    line = picker.check_line(str(llama), [ZOO], "adapters")
    assert "too large for this server" in line and "WORKBENCH_CUSTOM_MAX_GB" in line
    assert picker.resolve(ZOO.path_or_id, [ZOO], "adapters").preset == ZOO  # listed models are never capped


def test_remote_code_and_malformed_keys_are_refused(root):
    folder = root / "remote"
    folder.mkdir()
    (folder / "config.json").write_text(
        json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "auto_map": {"AutoModel": "x.Model"}})
    )
    save_file({"w": torch.zeros(2)}, str(folder / "model.safetensors"))
    assert "remote code" in picker.check_line(str(folder), [ZOO], "adapters")
    for bad in ("not a hub id!", "a/b/../../etc", "x" * 5000, "nul\x00byte"):
        assert picker.check_line(bad, [ZOO], "adapters").startswith("✗")


def test_custom_models_follow_the_server_policy(llama, monkeypatch):
    monkeypatch.setenv("WORKBENCH_CUSTOM_MODELS", "0")
    assert "turned off" in picker.check_line(str(llama), [ZOO], "adapters")
    monkeypatch.delenv("WORKBENCH_CUSTOM_MODELS")
    monkeypatch.setenv("SPACE_ID", "someone/workbench")
    line = picker.check_line("someone-else/model", [ZOO], "adapters")
    assert "custom models are off on this Space" in line
    assert picker.resolve(HUB.path_or_id, [ZOO, HUB], "adapters").preset == HUB  # listed: always allowed


def test_a_failed_load_becomes_a_clear_message(root):
    folder = root / "no-weights-class"
    with pytest.raises(ModelCheckError, match="cannot load hub · 7B: the hub is not reachable"):
        with picker.loading(HUB):
            raise OSError("We couldn't connect to 'https://huggingface.co' to load the files")
    local = P.Preset("adapters", P.LOCAL, str(folder), "transformers.LlamaForCausalLM", label="mine")
    with pytest.raises(ModelCheckError, match="cannot load mine: .*tokenizer"):
        with picker.loading(local):
            raise FileNotFoundError("no tokenizer files in the folder")
    with pytest.raises(KeyError):  # not a loading failure: passes through untouched
        with picker.loading(local):
            raise KeyError("x")


def test_a_custom_check_is_remembered_but_policy_changes_apply_at_once(llama, monkeypatch):
    calls = []
    real = picker.M.check_model
    monkeypatch.setattr(picker.M, "check_model", lambda *a, **k: calls.append(a) or real(*a, **k))
    first = picker.resolve(str(llama), [ZOO], "adapters")
    assert picker.resolve(str(llama), [ZOO], "adapters") == first and len(calls) == 1
    monkeypatch.setenv("WORKBENCH_CUSTOM_MODELS", "0")
    with pytest.raises(ModelCheckError, match="turned off"):
        picker.resolve(str(llama), [ZOO], "adapters")
