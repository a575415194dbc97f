"""What the model picker and the loaders say before and after a load: damaged weights refused from
their headers, a size cap written with the digits it needs, a diffusers model folder that is not a
pipeline, the Space policy's hint matching what loads, hub checkpoints that are not downloaded while
offline, and a user's SAE checked against the model's width and its index found by any spelling of
its hookpoint."""

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from backend.core import modelcheck as mc
from backend.core import picker
from backend.core import presets as P
from backend.core.modelcheck import ModelCheckError


@pytest.fixture
def root(tmp_path, monkeypatch):
    for name in ("SPACE_ID", "WORKBENCH_CUSTOM_MODELS", "WORKBENCH_CUSTOM_OWNERS", "WORKBENCH_CUSTOM_MAX_GB"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "models").mkdir()
    monkeypatch.setenv("WORKBENCH_MODEL_ROOTS", str(tmp_path / "models"))
    picker.forget()
    yield tmp_path / "models"
    picker.forget()


def llama_folder(folder):
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama"}))
    save_file({"w": torch.zeros(1000)}, str(folder / "model.safetensors"))
    return folder


def test_a_truncated_weights_file_is_refused_by_the_check_and_by_the_load(root):
    folder = llama_folder(root / "cut")
    weights = folder / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) - 1000])
    with pytest.raises(ModelCheckError, match="model.safetensors is incomplete: .* of the .* its header announces"):
        mc.check_model(str(folder), "adapters")
    assert "incomplete" in picker.check_line(str(folder), [], "adapters")
    # damaged after the check (or a listed checkpoint): the loader's error names the file's state too
    with pytest.raises(ModelCheckError, match="cannot load .*cut: a weights file is damaged"):
        with picker.loading(str(folder)):
            load_file(str(weights))


def test_a_small_size_cap_is_written_with_its_digits(root, monkeypatch):
    from components.inputs.model_picker import custom_hint

    folder = llama_folder(root / "big")  # 4,000 bytes of weights
    monkeypatch.setenv("WORKBENCH_CUSTOM_MAX_GB", "0.000002")
    with pytest.raises(ModelCheckError, match=r"4.00 KB, 1.0K parameters; the cap is 2e-06 GB"):
        mc.check_model(str(folder), "adapters")
    monkeypatch.setenv("WORKBENCH_CUSTOM_MAX_GB", "0.05")
    assert "up to 0.05 GB" in custom_hint()
    assert mc.gb_words(int(20e9)) == "20 GB" and mc.gb_words(int(0.5e9)) == "0.5 GB"


def test_a_diffusers_model_folder_is_not_taken_for_a_pipeline(root):
    unet = root / "unet"
    unet.mkdir()
    (unet / "config.json").write_text(
        json.dumps(
            {
                "_class_name": "UNet2DConditionModel",
                "_diffusers_version": "0.42.1",
                "block_out_channels": [32, 64],
                "cross_attention_dim": 32,
                "down_block_types": ["CrossAttnDownBlock2D", "DownBlock2D"],
            }
        )
    )
    save_file({"w": torch.zeros(4)}, str(unet / "diffusion_pytorch_model.safetensors"))
    with pytest.raises(
        ModelCheckError,
        match="UNet2DConditionModel is one diffusers model, not a pipeline: "
        "pick the Stable Diffusion pipeline's folder",
    ) as e:
        mc.check_model(str(unet), "memorization")
    assert "remote code" not in str(e.value)
    with pytest.raises(ModelCheckError, match="UNet2DConditionModel is a diffusers model: the math neurons tab"):
        mc.check_model(str(unet), "math_neurons")


def test_on_a_space_the_hint_says_what_loads(root, monkeypatch):
    from components.inputs.model_picker import custom_hint

    folder = llama_folder(root / "mine")
    monkeypatch.setenv("SPACE_ID", "someone/workbench")
    hint = custom_hint()
    assert f"a folder under {root.resolve()}" in hint and "hub id" not in hint, hint
    mc.allowed_custom(str(folder))  # and it does load
    with pytest.raises(ModelCheckError, match="off on this Space"):
        mc.allowed_custom("someone/else")
    monkeypatch.setenv("WORKBENCH_CUSTOM_OWNERS", "friends")
    assert "a hub id of friends or a folder under" in custom_hint()
    monkeypatch.delenv("WORKBENCH_CUSTOM_OWNERS")
    monkeypatch.setenv("WORKBENCH_MODEL_ROOTS", "")
    assert custom_hint() == "Custom models are off on this Space (its owner can allow them)."


def test_a_listed_checkpoint_not_downloaded_is_marked_and_refused_at_once_offline(root, tmp_path, monkeypatch):
    import huggingface_hub.constants as C

    monkeypatch.setattr(C, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setattr(C, "HF_HUB_OFFLINE", True)
    zoo = P.Preset("adapters", "zoo", "pissa-mlp", "transformers.LlamaForCausalLM", label="zoo · tiny")
    hub = P.Preset("adapters", "hub", "meta-llama/Llama-2-7b-hf", "transformers.LlamaForCausalLM", label="hub · 7B")
    assert picker.choices([zoo, hub]) == [
        ("zoo · tiny", "pissa-mlp"),
        (f"hub · 7B ({picker.NOT_CACHED})", "meta-llama/Llama-2-7b-hf"),
    ]
    with pytest.raises(
        ModelCheckError, match="cannot load hub · 7B: the hub is not reachable and it is not in the local cache"
    ):
        with picker.loading(picker.resolve(hub.path_or_id, [zoo, hub], "adapters").preset):
            raise AssertionError("the load is not tried")
    assert picker.check_line(hub.path_or_id, [zoo, hub], "adapters").startswith("✗ cannot load hub · 7B")
    monkeypatch.setattr(C, "HF_HUB_OFFLINE", False)  # online: offered plainly, fetched at load
    assert picker.choices([hub]) == [("hub · 7B", "meta-llama/Llama-2-7b-hf")]


def test_every_tab_names_its_picker_model_the_same():
    import gradio as gr

    from components.inputs import model_picker as MP

    with gr.Blocks():
        box, _ = MP.model_picker([], "memorization", elem_id="x", takes="Stable Diffusion pipeline")
    assert box.label == "Model" and box.info.startswith("Or type your own Stable Diffusion pipeline: ")
    import inspect

    assert "label" not in inspect.signature(MP.model_picker).parameters  # no tab can name it otherwise


@pytest.fixture(scope="module")
def own_llava(tmp_path_factory):
    from tests.helpers.standins import build_local
    from tests.helpers.standins import features as SF

    root = build_local(
        tmp_path_factory.mktemp("own-llava"), {k: SF.LOCAL[k] for k in ("own-llava15", "own-llava15-saelens")}
    )
    wide = root / "wide-sae" / "model.layers.2"  # an SAE of a 64-wide model
    wide.mkdir(parents=True)
    save_file(
        {
            "encoder.weight": torch.zeros(128, 64),
            "encoder.bias": torch.zeros(128),
            "W_dec": torch.zeros(128, 64),
            "b_dec": torch.zeros(64),
        },
        str(wide / "sae.safetensors"),
    )
    (wide / "cfg.json").write_text(json.dumps({"num_latents": 128, "k": 4, "d_in": 64}))
    return root


def test_an_sae_of_another_width_is_refused_at_load_and_the_index_key_is_the_hookpoint(
    own_llava, monkeypatch, tmp_path
):
    from backend.sae import loading
    from backend.sae.index import INDEX_ENV

    monkeypatch.setenv("WORKBENCH_MODEL_ROOTS", str(own_llava))
    monkeypatch.delenv(INDEX_ENV, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    vlm = str(own_llava / "own-llava15")
    with pytest.raises(
        ValueError, match="the SAE reads 64-wide activations but .*own-llava15's language model is 32 wide"
    ):
        loading.own_organism(vlm, str(own_llava / "wide-sae"), "layers.2")
    sae = str(own_llava / "own-llava15-saelens")
    a = loading.own_organism(vlm, sae, "blocks.2.hook_resid_post")
    b = loading.own_organism(vlm, sae, "layers.2")
    c = loading.own_organism(vlm, sae, "model.layers.2")
    assert a.index_out == b.index_out == c.index_out
    assert a.index_out.parent.name.endswith("__layers.2")
