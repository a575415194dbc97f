import os
from pathlib import Path

import pytest
import torch

from backend.core import presets
from backend.core.presets import Preset, PresetError, load_pretrained
from tests.helpers.tiny import tiny_llama


@pytest.mark.parametrize(
    "repo_id",
    [
        "state-spaces/mamba-130m-hf",
        "CompVis/stable-diffusion-v1-4",
        "meta-llama/Llama-3.2-1B-Instruct",
        "lmms-lab/llama3-llava-next-8b-hf-sae-131k",
        "a/b",
        "user_1/model.v2",
    ],
)
def test_valid_hub_ids(repo_id):
    assert presets.validate_hub_id(repo_id) == repo_id


@pytest.mark.parametrize(
    "repo_id",
    [
        "",
        "gpt2",
        "a/b/c",
        "../etc/passwd",
        "owner/..",
        "owner/.hidden",
        "-owner/x",
        "owner/x y",
        "owner/x;rm -rf",
        "https://huggingface.co/a/b",
        "owner/" + "x" * 200,
        "owner\\name",
        "a/b\n",
        None,
        42,
    ],
)
def test_invalid_hub_ids_are_refused(repo_id):
    with pytest.raises(PresetError):
        presets.validate_hub_id(repo_id)


def test_local_paths_confined_to_roots(tmp_path):
    root = tmp_path / "models"
    (root / "ok").mkdir(parents=True)
    outside = tmp_path / "secret"
    outside.mkdir()
    assert presets.validate_local_path(root / "ok", [root]) == (root / "ok").resolve()
    for bad in [outside, root / ".." / "secret", root / "ok" / ".." / ".." / "secret", Path("/etc")]:
        with pytest.raises(PresetError, match="outside"):
            presets.validate_local_path(bad, [root])
    (root / "link").symlink_to(outside)  # a symlink out of the root is an escape too
    with pytest.raises(PresetError, match="outside"):
        presets.validate_local_path(root / "link", [root])
    with pytest.raises(PresetError, match="no model"):
        presets.validate_local_path(root / "missing", [root])
    with pytest.raises(PresetError):
        presets.validate_local_path("bad\x00path", [root])


def test_resolve_tells_paths_from_hub_ids(tmp_path):
    (tmp_path / "m").mkdir()
    assert presets.resolve(str(tmp_path / "m"), [tmp_path]) == str((tmp_path / "m").resolve())
    assert presets.resolve("owner/name") == "owner/name"
    with pytest.raises(PresetError):
        presets.resolve("./../../etc", [tmp_path])


def test_load_pretrained_roundtrip_safetensors_only(tmp_path):
    model = tiny_llama()
    model.save_pretrained(tmp_path / "tiny")
    assert (tmp_path / "tiny" / "model.safetensors").exists()
    loaded = load_pretrained("transformers.LlamaForCausalLM", tmp_path / "tiny", roots=[tmp_path])
    ids = torch.tensor([[1, 2, 3, 4]])
    assert torch.equal(model(ids).logits, loaded(ids).logits)


def test_pickle_checkpoints_and_remote_code_are_refused(tmp_path):
    model = tiny_llama()
    folder = tmp_path / "pickled"
    model.save_pretrained(
        folder, safe_serialization=False
    ) if "safe_serialization" in model.save_pretrained.__code__.co_varnames else model.save_pretrained(folder)
    for f in folder.glob("*.safetensors"):
        torch.save({k: v for k, v in model.state_dict().items()}, folder / "pytorch_model.bin")
        f.unlink()
    assert not list(folder.glob("*.safetensors")) and list(folder.glob("*.bin"))
    with pytest.raises(PresetError, match="pickle"):
        load_pretrained("transformers.LlamaForCausalLM", folder, roots=[tmp_path])
    with pytest.raises(PresetError, match="trust_remote_code"):
        load_pretrained("transformers.LlamaForCausalLM", folder, roots=[tmp_path], trust_remote_code=True)
    with pytest.raises(PresetError, match="not from"):
        load_pretrained("os.system", folder, roots=[tmp_path])


def test_source_selection(monkeypatch):
    monkeypatch.delenv("WORKBENCH_PRESET", raising=False)
    assert presets.active_source([]) == "zoo"
    monkeypatch.setenv("WORKBENCH_PRESET", "hub")
    assert presets.active_source([]) == "hub"
    assert presets.active_source(["--preset", "zoo"]) == "zoo"
    assert presets.active_source(["--preset=hub"]) == "hub"
    with pytest.raises(PresetError):
        presets.active_source(["--preset", "cloud"])


def test_registry_active_falls_back_to_zoo(monkeypatch):
    monkeypatch.setattr(presets, "_REGISTRY", {})
    z = presets.register(Preset("t", "zoo", "tiny", "transformers.LlamaForCausalLM"))
    assert presets.active("t", "hub") is z
    h = presets.register(Preset("t", "hub", "owner/name", "transformers.LlamaForCausalLM"))
    assert presets.active("t", "hub") is h and presets.active("t", "zoo") is z
    assert presets.presets("t") == [z, h]
    with pytest.raises(PresetError):
        presets.register(Preset("t", "hub", "not an id", "transformers.LlamaForCausalLM"))
    with pytest.raises(PresetError):
        presets.register(Preset("t", "zoo", "x", "pickle.loads"))
    with pytest.raises(PresetError):
        presets.active("missing-tab")


def test_env_extends_roots(monkeypatch, tmp_path):
    monkeypatch.setenv("WORKBENCH_MODEL_ROOTS", str(tmp_path))
    assert tmp_path.resolve() in presets.allowed_roots()
    assert presets.ZOO_ROOT.resolve() in presets.allowed_roots()
    assert os.fspath(presets.ZOO_ROOT).endswith(os.path.join("assets", "zoo"))


def test_a_name_too_long_for_the_file_system_is_a_clear_refusal_not_an_os_error():
    """The endpoint fuzz typed 50 emoji triples as a model name: Path.exists raised OSError (file
    name too long) inside the picker, a handler defect instead of a message."""
    from backend.core import picker

    name = "🔬🧠💥" * 50  # 600 bytes in UTF-8, over the 255 a file name may hold
    assert presets.looks_local(name) is False
    with pytest.raises(PresetError, match="outside the allowed model folders"):
        presets.resolve("/" + name)
    with pytest.raises(ValueError, match="unknown model"):
        picker.resolve(name, [], "memorization", default=None, tab="memorization")
