"""The hub preset (LLaVA-NeXT-8B + lmms-lab SAE at model.layers.24) through the same loaders, on
tiny stand-ins saved locally under the hub's names (no network)."""
import numpy as np
import pytest
import torch

from backend.core import presets as P
from backend.core.interventions import count_hooks
from backend.sae import features as FT
from backend.sae import steer as ST
from backend.sae.sae import TopKSAE

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def standins(tmp_path_factory, monkeypatch_module=None):
    from transformers import (CLIPVisionConfig, LlamaConfig, LlavaNextConfig, LlavaNextForConditionalGeneration,
                              LlavaNextImageProcessorPil, LlavaNextProcessor)

    from backend.sae import vlm

    root = tmp_path_factory.mktemp("hub")
    torch.manual_seed(0)
    tok = vlm.make_tokenizer()
    grid = [[32, 32], [32, 64], [64, 32]]
    cfg = LlavaNextConfig(
        vision_config=CLIPVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                       num_attention_heads=2, image_size=32, patch_size=8),
        text_config=LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=25,
                                num_attention_heads=2, num_key_value_heads=2),
        image_token_index=tok.convert_tokens_to_ids("<image>"), image_grid_pinpoints=grid, vision_feature_layer=-1)
    model_dir = root / "llava-hf" / "llama3-llava-next-8b-hf"
    LlavaNextForConditionalGeneration(cfg).save_pretrained(model_dir)
    ip = LlavaNextImageProcessorPil(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32},
                                    image_grid_pinpoints=grid)
    LlavaNextProcessor(image_processor=ip, tokenizer=tok, patch_size=8, vision_feature_select_strategy="default",
                       num_additional_image_tokens=1).save_pretrained(model_dir)
    sae_repo = root / "lmms-lab" / "llama3-llava-next-8b-hf-sae-131k"
    sae = TopKSAE(16, 64, 8)
    with torch.no_grad():
        sae.W_enc.normal_()
    sae.save(sae_repo / "model.layers.24", layout="sparsify", hookpoint="")  # lmms-lab: one folder per hookpoint
    TopKSAE(16, 64, 8).save(sae_repo / "model.layers.8", layout="sparsify", hookpoint="")
    return root, model_dir, sae_repo


def test_hub_preset_is_registered():
    hub = P.active("features", "hub")
    assert hub.path_or_id == "llava-hf/llama3-llava-next-8b-hf"
    assert hub.extra == {"sae": "lmms-lab/llama3-llava-next-8b-hf-sae-131k", "hookpoint": "model.layers.24"}
    assert hub.model_class == "transformers.LlavaNextForConditionalGeneration"
    assert P.active("features", "zoo").path_or_id == "llava-scenes"


def test_hub_code_path_on_local_standins(standins, monkeypatch):
    root, model_dir, sae_repo = standins
    monkeypatch.setenv("WORKBENCH_MODEL_ROOTS", str(root))
    org = FT.load_hub(str(model_dir), str(sae_repo), "model.layers.24")
    assert org.hookpoint == "model.language_model.layers.24"
    assert org.sae.n_latents == 64 and org.sae.k == 8 and org.sae.cfg.hookpoint == "model.layers.24"
    img = (np.random.default_rng(0).random((32, 32, 3)) * 255).astype(np.uint8)
    codes = FT.processor_codes(org, img)
    assert codes.shape[1] == 64 and codes.shape[0] >= 16
    assert ((codes > 0).sum(-1) <= 8).all()
    out = FT.analyse_image(org, img, top_n=4)
    assert len(out["features"]) >= 1 and next(iter(out["maps"].values())).shape == (4, 4)
    # clamping at the paper's hookpoint changes the next-token logits, and leaves nothing behind
    inputs = org.processor(images=[img], text=["<image> describe"], return_tensors="pt")
    n0 = count_hooks(org.model)
    with torch.no_grad():
        base = org.model(**inputs).logits
        with ST.clamp_feature(org.model, org.sae, "model.layers.24", 3, 50.0, positions="prompt"):
            steered = org.model(**inputs).logits
        again = org.model(**inputs).logits
    assert not torch.allclose(base, steered)
    torch.testing.assert_close(base, again)
    assert count_hooks(org.model) == n0


def test_paths_outside_allowed_roots_are_refused(standins, monkeypatch):
    root, model_dir, sae_repo = standins
    monkeypatch.delenv("WORKBENCH_MODEL_ROOTS", raising=False)
    with pytest.raises(P.PresetError):
        FT.load_hub(str(model_dir), str(sae_repo), "model.layers.24")
