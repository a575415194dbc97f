"""The Features tab in hub mode builds from metadata (the SAE's cfg, the model's config, the index) and
loads the VLM and SAE weights at the first request that needs them; an SAE is found in a hub repo by
its hookpoint in any spelling (or by the hook name a differently named folder's cfg records), and
only that folder is fetched. Stand-ins of the real repositories in an offline Hugging Face cache."""

import fnmatch
import shutil
from pathlib import Path

import gradio as gr
import numpy as np
import pytest
import torch

from backend.core import store
from backend.sae import analysis, loading
from backend.sae import format_info
from backend.sae.index import INDEX_ENV, INDEX_FILE
from backend.sae.formats import load as load_sae
from backend.sae.sae import JumpReLUSAE, ReLUSAE, SAEFormatError
from tests.helpers.standins import build_cache
from tests.helpers.standins import features as SF

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    import huggingface_hub.constants as HC

    root = tmp_path_factory.mktemp("features-lazy")
    cache = build_cache(root / "cache", SF.REPOS)
    mp = pytest.MonkeyPatch()
    mp.setattr(HC, "HF_HUB_CACHE", str(cache))
    mp.setattr(HC, "HF_HUB_OFFLINE", True)
    mp.setenv(INDEX_ENV, str(root / "index" / INDEX_FILE))
    yield cache
    mp.undo()


def snapshot(cache, repo=SF.SAE_ID) -> Path:
    return next((cache / f"models--{repo.replace('/', '--')}" / "snapshots").iterdir())


@pytest.fixture
def fresh():
    """No hub organism or weights left from another test, before and after."""

    def clear():
        for org in list(loading._SHELLS.values()):
            store.evict(org.weights_key)
        loading._SHELLS.clear()

    clear()
    yield
    clear()


def test_building_the_tab_in_hub_mode_loads_no_weights(cache, fresh, monkeypatch):
    from transformers import LlavaNextForConditionalGeneration

    from components.features import layout as tab
    from components.features import steering as feature_steering
    from components.common import TabContext

    loads = []
    real = LlavaNextForConditionalGeneration.from_pretrained.__func__
    monkeypatch.setattr(
        LlavaNextForConditionalGeneration,
        "from_pretrained",
        classmethod(lambda cls, *a, **k: loads.append("vlm") or real(cls, *a, **k)),
    )
    monkeypatch.setattr(loading, "load_sae", lambda *a, **k: loads.append("sae") or load_sae(*a, **k))
    with gr.Blocks() as demo:
        tab.build(TabContext(tabs=None, source="hub"))
    org = loading.get_organism("hub")
    assert loads == [] and org.model is None and org.sae is None and org.weights_key not in store.loaded()
    # the summary describes the SAE from its cfg: size and k, never "k = None"
    texts = " ".join(str(getattr(b, "value", "")) for b in demo.blocks.values())
    assert f"{SF.N_LATENTS} latents (topk, k = {SF.K})" in texts
    assert "base image" in analysis.positions_text(org)  # anyres, from the model's config alone
    # the first request that needs the model loads it (with a progress message), once
    seen = []
    img = np.zeros((40, 56, 3), np.uint8)
    img[5:20, 10:30] = (200, 40, 40)
    feature_steering.analyse("hub", img, None, progress=lambda frac, desc=None: seen.append(desc))
    assert loads == ["vlm", "sae"] and any("loading the model" in (d or "") for d in seen)
    assert org.model is not None and org.weights_key in store.loaded()
    assert org.hookpoint == "model.language_model.layers.24"
    feature_steering.steer("hub", img, None, 3, 5.0, "image", False, False, progress=lambda *a, **k: None)
    assert loads == ["vlm", "sae"]
    # evicted by the store's budget: the organism lets go, and the next request loads again
    assert store.evict(org.weights_key) and org.model is None and org.sae is None
    analysis.analyse_image(org, img[:, :40])
    assert loads == ["vlm", "sae", "vlm", "sae"]


def test_sae_summary_words_for_learned_sparsity(tmp_path):
    relu = ReLUSAE(8, 32, hookpoint="model.layers.3")
    relu.save(tmp_path / "relu")
    jump = JumpReLUSAE(8, 32, hookpoint="model.layers.3")
    jump.save(tmp_path / "jump")
    for folder, sae in (("relu", relu), ("jump", jump)):
        info = format_info.describe(tmp_path / folder)
        assert info["text"] == sae.describe() and "None" not in info["text"]
        assert (info["n_latents"], info["d_in"], info["k"]) == (32, 8, None)
    assert format_info.describe(snapshot_dir_of_standin(tmp_path), "layers.24")["text"] == f"topk, k = {SF.K}"


def snapshot_dir_of_standin(tmp_path) -> Path:
    folder = tmp_path / "standin-sae"
    SF.build_sae(folder)
    return folder


def fake_hub(repo_root: Path, fetched: list[str]):
    """snapshot_download / list_repo_files of a hub that holds `repo_root`: a download copies only
    the files its allow_patterns match (as the hub does), into a fresh folder."""
    dest = repo_root.parent / (repo_root.name + "-downloaded")
    files = sorted(p.relative_to(repo_root).as_posix() for p in repo_root.rglob("*") if p.is_file())

    def snapshot_download(repo_id, allow_patterns=None, **kw):
        for f in files:
            if allow_patterns is None or any(fnmatch.fnmatch(f, pat) for pat in allow_patterns):
                (dest / f).parent.mkdir(parents=True, exist_ok=True)
                if not (dest / f).exists():
                    shutil.copyfile(repo_root / f, dest / f)
                    fetched.append(f)
        dest.mkdir(exist_ok=True)
        return str(dest)

    return snapshot_download, (lambda repo_id, **kw: list(files))


@pytest.mark.parametrize("spelling", ["layers.24", "model.language_model.layers.24", "blocks.24.hook_resid_post"])
def test_a_hookpoint_alias_fetches_that_folder_only(tmp_path, monkeypatch, spelling):
    import huggingface_hub

    repo = snapshot_dir_of_standin(tmp_path)
    fetched: list[str] = []
    download, listing = fake_hub(repo, fetched)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", download)
    monkeypatch.setattr(huggingface_hub, "list_repo_files", listing)
    root, sub, entry = loading.sae_location(SF.SAE_ID, spelling, weights=False)
    assert sub == "model.layers.24" and fetched == ["model.layers.24/cfg.json"]
    assert format_info.describe_entry(entry)["n_latents"] == SF.N_LATENTS  # the shell's metadata, no weights
    root, sub, _ = loading.sae_location(SF.SAE_ID, spelling, weights=True)
    assert fetched == ["model.layers.24/cfg.json", "model.layers.24/sae.safetensors"]
    got = load_sae(root, hookpoint=sub)
    want = load_sae(repo, hookpoint="model.layers.24")
    assert torch.equal(got.W_dec, want.W_dec) and got.cfg.hookpoint == "model.layers.24"
    with pytest.raises(SAEFormatError, match="no SAE for hookpoint 'layers.3'"):
        loading.sae_location(SF.SAE_ID, "layers.3", weights=False)


def test_a_saelens_repo_with_other_folder_names_is_matched_by_its_recorded_hook(tmp_path, monkeypatch):
    import huggingface_hub

    repo = tmp_path / "saelens-repo"
    for layer in (8, 24):  # folders named for the run, the hook name only inside cfg.json
        ReLUSAE(16, 64, hookpoint=f"blocks.{layer}.hook_resid_post").save(repo / f"run-{layer}-resid")
    fetched: list[str] = []
    download, listing = fake_hub(repo, fetched)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", download)
    monkeypatch.setattr(huggingface_hub, "list_repo_files", listing)
    root, sub, entry = loading.sae_location("someone/saes", "model.layers.24", weights=True)
    assert sub == "run-24-resid" and format_info.describe_entry(entry)["text"] == "relu"
    weights = [f for f in fetched if f.endswith(".safetensors")]
    assert weights == ["run-24-resid/sae_weights.safetensors"]  # the other layer's weights stay on the hub
    assert load_sae(root, hookpoint=sub).cfg.hookpoint == "model.layers.24"
