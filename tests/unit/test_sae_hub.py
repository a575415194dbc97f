"""The Features tab's hub preset (LLaVA-NeXT-8B + lmms-lab SAE at model.layers.24) on stand-ins of
both repositories in an offline Hugging Face cache under the real ids: anyres image positions, the
feature index built in-process (progress, cancel) and by the sharded job's command line, feature
pages over an image folder, analysis and steering (image_sizes), through the service and the tab's
handlers."""

import html
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from PIL import Image

from backend.core import presets as P
from backend.core.interventions import count_hooks
from backend.sae import analysis, hub_index, loading, organism, pages
from backend.sae import steer as ST
from backend.sae import vlm
from backend.sae.index import INDEX_ENV, INDEX_FILE, Cancelled, FeatureIndex, ImageSource
from tests.conftest import ROOT
from tests.helpers.standins import build_cache, cache_env, digest, put
from tests.helpers.standins import features as SF

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """The stand-in cache as the hub, an image folder, and the hub organism loaded from them."""
    import huggingface_hub.constants as HC

    root = tmp_path_factory.mktemp("features-hub")
    cache = build_cache(root / "cache", SF.REPOS)
    images = root / "images"
    SF.sample_images(images, 6)
    mp = pytest.MonkeyPatch()
    mp.setattr(HC, "HF_HUB_CACHE", str(cache))
    mp.setattr(HC, "HF_HUB_OFFLINE", True)
    mp.setenv(INDEX_ENV, str(root / "index" / INDEX_FILE))
    org = loading.load_hub()
    yield {"root": root, "cache": cache, "images": images, "org": org}
    mp.undo()


def picture(hub, i=1):
    return np.asarray(Image.open(sorted(hub["images"].glob("*.png"))[i]).convert("RGB"))


def test_hub_preset_is_registered():
    hub = P.active("features", "hub")
    assert hub.path_or_id == "llava-hf/llama3-llava-next-8b-hf"
    assert hub.extra == {"sae": "lmms-lab/llama3-llava-next-8b-hf-sae-131k", "hookpoint": "model.layers.24"}
    assert hub.model_class == "transformers.LlavaNextForConditionalGeneration"
    assert P.active("features", "zoo").path_or_id == "llava-scenes"


def test_standins_are_real_classes_and_deterministic(hub, tmp_path):
    org = hub["org"]
    assert type(org.model).__name__ == "LlavaNextForConditionalGeneration"
    assert type(org.processor).__name__ == "LlavaNextProcessor" and org.processor.image_processor.image_grid_pinpoints
    pieces = org.tokenizer.tokenize("a person standing close to an elephant")
    assert "Ġperson" in pieces and "Ġelephant" in pieces  # byte-level BPE with English words
    assert org.tokenizer.pad_token is None or org.tokenizer.pad_token == org.tokenizer.eos_token
    assert org.hookpoint == "model.language_model.layers.24"
    assert org.sae.n_latents == SF.N_LATENTS and org.sae.cfg.hookpoint == "model.layers.24"
    snap = put(tmp_path, SF.SAE_ID, SF.build_sae)
    assert sorted(p.name for p in snap.iterdir() if p.is_dir()) == ["model.layers.24", "model.layers.8"]
    assert digest(snap) == digest(put(tmp_path / "again", SF.SAE_ID, SF.build_sae))


def test_anyres_layout_and_stopped_pass_match_the_full_forward(hub):
    org = hub["org"]
    imgs = [picture(hub, 0), picture(hub, 1)]  # 40×40 and 30×70: different tile grids
    h, inputs, lays = vlm.hub_residuals(org.model, org.processor, imgs, org.hookpoint)
    g = org.model.config.vision_config.image_size // org.model.config.vision_config.patch_size
    for row, lay in enumerate(lays):
        n_img = int((inputs["input_ids"][row] == org.model.config.image_token_index).sum())
        th, tw = lay.tile_shape
        assert len(lay.base) == g * g and len(lay.tiles) == th * tw and len(lay.newlines) == th
        assert n_img == g * g + th * (tw + 1) and lay.base.max() < lay.tiles.min()  # base image first
    assert lays[0].tile_shape != lays[1].tile_shape
    with torch.no_grad():  # one image at a time, the whole model: layer 24's output is hidden_states[25]
        for row, im in enumerate(imgs):
            one = vlm.hub_inputs(org.model, org.processor, [im])
            full = org.model(**one, output_hidden_states=True).hidden_states[25][0]
            n = one["input_ids"].shape[1]
            torch.testing.assert_close(h[row, :n], full, rtol=1e-4, atol=1e-5)  # right padding: same rows
    # the index's pass: the LM on the prefix up to the base image's last patch gives the same base rows
    base, blays = vlm.hub_base_residuals(org.model, org.processor, imgs, org.hookpoint)
    assert base.shape == (2, g * g, h.shape[-1]) and [b.base.tolist() for b in blays] == [b.base.tolist() for b in lays]
    for row, lay in enumerate(lays):
        torch.testing.assert_close(base[row], h[row, lay.base], rtol=1e-4, atol=1e-5)


def test_no_index_says_what_to_run(hub, tmp_path, monkeypatch):
    monkeypatch.setenv(INDEX_ENV, str(tmp_path / "none" / INDEX_FILE))
    org = loading.load_hub()
    assert org.index is None and org.label_source == organism.NO_LABELS
    cmd = hub_index.index_command(org, "photos/")
    assert cmd.startswith("accelerate launch -m backend.precompute.sae_index --source hub")
    # shown to visitors: no server folder in it
    assert "--image-folder photos/" in cmd and "--out OUT" in cmd and str(tmp_path) not in cmd
    with pytest.raises(ValueError, match="build one: accelerate launch"):
        pages.feature_page(org, 0)
    assert pages.feature_table(org) == []
    # a torn or foreign file where the setting points: not used, and the tab says why
    bad = tmp_path / "bad" / INDEX_FILE
    bad.parent.mkdir()
    bad.write_bytes(b"not a safetensors file")
    monkeypatch.setenv(INDEX_ENV, str(bad))
    torn = loading.load_hub()
    assert torn.index is None and bad.name in torn.index_note and str(bad.parent) not in torn.index_note
    from components.features.pages import no_index_html

    assert "found but not used" in no_index_html(torn)
    # without the setting a build goes beside the Hugging Face cache (HF_HOME), never into a snapshot
    monkeypatch.delenv(INDEX_ENV)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    out = loading.load_hub().index_out
    assert out.name == INDEX_FILE and (tmp_path / "hf-home") in out.parents


def test_analyse_and_steer_with_image_sizes(hub):
    org = hub["org"]
    img = picture(hub, 1)
    out = analysis.analyse_image(org, img, top_n=4)
    g = org.model.config.vision_config.image_size // org.model.config.vision_config.patch_size
    assert out["features"] and all(m.shape == (g, g) for m in out["maps"].values())
    assert out["tile_maps"] and {m.shape for m in out["tile_maps"].values()} == {(4, 10)}
    assert "base image" in out["positions"] and "newline" in out["positions"]
    assert out["image"].shape == img.shape  # anyres: the picture keeps its size
    f = out["features"][0]["feature"]
    n0 = count_hooks(org.model)
    res = analysis.steer_caption(org, img, f, 40.0)
    assert res["baseline"] != res["steered"] and res["well_formed"] is None
    assert count_hooks(org.model) == n0
    # "image" positions = every image token (base, tiles, newlines): text logits move, hooks gone
    inputs = vlm.hub_inputs(org.model, org.processor, [img])
    with torch.no_grad():
        base = org.model(**inputs).logits
        with ST.clamp_feature(
            org.model,
            org.sae,
            "model.layers.24",
            f,
            40.0,
            positions="image",
            image_positions=vlm.image_layout(org.model, inputs["input_ids"][0], inputs["image_sizes"][0]).image,
        ):
            steered = org.model(**inputs).logits
        again = org.model(**inputs).logits
    assert not torch.allclose(base, steered)
    torch.testing.assert_close(base, again)
    assert count_hooks(org.model) == n0
    with pytest.raises(ValueError, match="at most"):
        analysis.analyse_image(org, np.zeros((5000, 8, 3), np.uint8))


def test_index_in_process_with_progress_and_cancel_equals_the_job(hub):
    org = hub["org"]
    src = ImageSource.folder(hub["images"])
    out = hub["root"] / "index" / INDEX_FILE
    with pytest.raises(Cancelled):  # cancelled after the first batch: nothing written, nothing installed
        seen = []
        hub_index.build_hub_index(
            org, src, batch_size=2, progress=lambda d, n: seen.append(d), should_stop=lambda: bool(seen)
        )
    assert seen == [2] and not out.exists() and org.index is None
    steps = []
    idx = hub_index.build_hub_index(org, src, batch_size=2, progress=lambda d, n: steps.append((d, n)))
    assert steps == [(2, 6), (4, 6), (6, 6)] and out.exists() and org.index is idx
    assert idx.meta["n_images"] == 6 and idx.meta["source"]["files"] == src.files
    assert idx.tensors["top_maps"].shape[1:] == (16, 16) and idx.meta["grid"] == 4

    # The sharded job's command line, one process, 3 chunks of one batch each: the same file
    job_out = hub["root"] / "job"
    env = {**os.environ, **cache_env(hub["cache"]), "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "backend.precompute.sae_index",
            "--source",
            "hub",
            "--image-folder",
            str(hub["images"]),
            "--out",
            str(job_out),
            "--chunk",
            "2",
            "--batch",
            "2",
            "--cpu",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout.strip().splitlines()[-1])["written"] == str(job_out / INDEX_FILE)
    job = FeatureIndex.load(job_out / INDEX_FILE)
    for k in idx.tensors:
        assert torch.equal(job.tensors[k], idx.tensors[k]), k
    assert job.meta["source"] == idx.meta["source"] and job.meta["positions"] == idx.meta["positions"]

    # a feature page over the folder's images, maps stretched over each picture's own shape
    f = int(idx.tensors["density"].argmax())
    page = pages.feature_page(org, f)
    assert page["top"] and {t["caption"] for t in page["top"]} <= set(src.files)
    assert all(m.shape == im.shape[:2] for m, im in zip(page["maps"], page["images"]))
    assert page["labelled_by"] == organism.NO_LABELS and page["label"] == ""
    rows = pages.feature_table(org)
    assert {r["feature"] for r in rows} == {int(i) for i in (idx.tensors["fire_count"] > 0).nonzero().flatten()}

    # a fresh load finds the file where the setting names it
    assert loading.load_hub().index_path == out


def test_paths_outside_allowed_roots_are_refused(hub, monkeypatch):
    snap = hub["cache"] / "models--llava-hf--llama3-llava-next-8b-hf" / "snapshots"
    folder = next(snap.iterdir())
    monkeypatch.delenv("WORKBENCH_MODEL_ROOTS", raising=False)
    with pytest.raises(P.PresetError):
        loading.load_hub(str(folder), SF.SAE_ID, "model.layers.24")


class _Request:  # what the tab's build and cancel handlers read from gr.Request
    session_hash = "test-hub-session"


def test_tab_handlers_in_hub_mode(hub, tmp_path, monkeypatch):
    import gradio as gr

    from components.features import layout as tab
    from components.features import index_build as feature_build
    from components.features import pages as feature_pages
    from components.features import steering as feature_steering
    from components.common import TabContext

    monkeypatch.setenv(INDEX_ENV, str(tmp_path / "tab-index" / INDEX_FILE))
    # the owner's own use: builds shared, written where the setting points (tests/api/test_visitors.py
    # has the visitors' own)
    monkeypatch.setenv("WORKBENCH_SHARED_BUILDS", "1")
    org = loading.load_hub()
    monkeypatch.setattr(loading, "get_organism", lambda source="zoo", **kw: org)
    seen = []

    def progress(frac, desc=None):
        seen.append((frac, desc))

    # no index yet: the page says what to run, the list is empty, nothing raises
    header = feature_pages.open_feature("hub", 3)[0]
    assert "No feature index yet" in header and "backend.precompute.sae_index --source hub" in header
    assert feature_pages.list_features("hub", "", "density").empty
    # the tab is built without scene controls (the hub preset has no scene set)
    with gr.Blocks():
        tab.build(TabContext(tabs=None, source="hub"))
    with pytest.raises(gr.Error, match="Upload an image"):
        feature_steering.analyse("hub", None, "0", progress=progress)

    # build from uploaded files, cancelled first (Cancel pressed as it starts), then to the end
    files = sorted(str(p) for p in hub["images"].glob("*.png"))
    assert feature_build.cancel_index(_Request()) == "No index build is running."
    cancelling = lambda frac, desc=None: feature_build.cancel_index(_Request())  # noqa: E731
    status = feature_build.build_index("hub", files, "", _Request(), progress=cancelling)[0]
    assert status.startswith("**Cancelled**") and org.index is None
    status, rows, first, summary, source = feature_build.build_index("hub", files, "", _Request(), progress=progress)
    assert source == "hub"  # shared: the session keeps the shared organism
    assert status.startswith("**Indexed 6 images**") and len(rows) and first == rows.iloc[0, 0]
    assert seen[-1][0] == 1.0 and "6/6" in seen[-1][1] and "6 images" in summary
    assert org.index is not None and org.index_path == tmp_path / "tab-index" / INDEX_FILE
    with pytest.raises(P.PresetError, match="outside the allowed"):  # a server folder must lie under the roots
        feature_build.build_index("hub", None, str(hub["images"]), _Request(), progress=progress)

    header, overlays, dimmed = feature_pages.open_feature("hub", first)[:3]
    # exact values on hover: each top image's heatmap holds the index's own per-patch activations
    hover = feature_pages.open_feature("hub", first)[8]
    heat = [t for t in hover.data if t.type == "heatmap"]
    _, maps, _ = org.index.top(first, 5)
    assert len(heat) == len(maps) and "activation %{z" in heat[0].hovertemplate
    for t, m in zip(heat, maps):
        np.testing.assert_array_equal(np.asarray(t.z, np.float32), m.numpy())
    assert f"Feature {first}" in header and "unlabelled" in header and "labels: none" in header
    assert len(overlays) == len(dimmed) >= 1
    # the model explainer on request: the loaded VLM sees the top images and names the feature
    n0 = count_hooks(org.model)
    header = feature_pages.ask_model("hub", first)[0]
    lab = org.labels[str(first)]
    assert lab["explainer"] == "model" and lab["label"] and lab["images"] >= 1 and count_hooks(org.model) == n0
    assert organism.shown_label(lab) == lab["label"] and "asked on request" in header
    assert header.split("</h3>")[0].endswith(f"{html.escape(lab['label'])}</span>")
    table = feature_pages.list_features("hub", "", "density")
    assert list(table.columns) == ["feature", "label", "density", "max act"]  # no IoU without masks
    listed = {r[0]: r for r in table.values.tolist()}
    assert listed[first][1] == lab["label"]
    with pytest.raises(gr.Error, match="Sort by one of"):
        feature_pages.list_features("hub", "", "IoU")
    saved = json.loads((tmp_path / "tab-index" / "labels.json").read_text())
    assert saved[str(first)]["label"] == lab["label"]
    again = loading.load_hub()  # a restart keeps the label
    assert again.labels[str(first)]["label"] == lab["label"] and again.label_source == organism.MODEL_LABELS
    img = picture(hub, 3)
    shown, caption, gallery, table, bar, hover = feature_steering.analyse("hub", img, None, progress=progress)
    assert [t.type for t in hover.data].count("heatmap") == min(4, len(table))
    assert caption.startswith("**Model answer:**") and "base image" in bar and "newline" in bar
    assert any("tiles" in c for _, c in gallery) and len(table)
    _, md, res = feature_steering.steer("hub", img, None, first, 5.0, "image", False, False, progress=progress)
    assert "positions: image" in md and "<table" in md and res["well_formed"] is None
    assert "well-formed" not in md


def test_an_image_dataset_indexes_like_the_same_folder(hub, tmp_path, monkeypatch):
    datasets = pytest.importorskip("datasets")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "ds-cache")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True, raising=False)
    org = hub["org"]
    folder = ImageSource.folder(hub["images"])
    ds = ImageSource.dataset(str(hub["images"]), "train", "image")  # the `imagefolder` builder, offline
    assert len(ds) == len(folder) and all(np.array_equal(ds.load(i), folder.load(i)) for i in range(len(ds)))
    a = hub_index.index_images(org, folder, batch_size=3, out=tmp_path / "a" / INDEX_FILE)
    b = hub_index.index_images(org, ds, batch_size=3, out=tmp_path / "b" / INDEX_FILE)
    for k in a.tensors:
        assert torch.equal(a.tensors[k], b.tensors[k]), k
    back = FeatureIndex.load(tmp_path / "b" / INDEX_FILE).source
    assert back.kind == "dataset" and len(back) == len(ds) and np.array_equal(back.load(2), folder.load(2))
    with pytest.raises(ValueError, match="no column"):
        ImageSource.dataset(str(hub["images"]), "train", "picture")


def test_the_hub_job_resumes_and_recomputes_when_the_folder_changes(hub, tmp_path):
    from backend.precompute import sae_index as job
    from tests.precompute.test_sharding import Solo

    class Rank1(Solo):  # process 1 of 2, killed after one chunk
        process_index, num_processes, is_main_process = 1, 2, False

    org, src = hub["org"], ImageSource.folder(hub["images"])
    with pytest.raises(SystemExit):
        job.run_hub(org, src, tmp_path / "out", chunk=1, batch=1, state=Rank1(), stop_after=1)
    parts = sorted((tmp_path / "out" / "parts").glob("*.safetensors"))
    assert [p.name for p in parts] == ["sae-index-chunk-00001.safetensors"]
    mtime = parts[0].stat().st_mtime_ns
    resumed = job.run_hub(org, src, tmp_path / "out", chunk=1, batch=1, state=Solo())
    assert parts[0].stat().st_mtime_ns == mtime  # the finished chunk was not redone
    direct = hub_index.index_images(org, src, batch_size=1, out=tmp_path / "direct" / INDEX_FILE)
    for k in direct.tensors:
        assert torch.equal(resumed.tensors[k], direct.tensors[k]), k
    # an image replaced in the folder: the parts no longer match the folder and are computed again
    Image.fromarray(np.full((33, 21, 3), 200, np.uint8)).save(hub["images"] / src.files[0])
    try:
        changed = job.run_hub(org, ImageSource.folder(hub["images"]), tmp_path / "out", chunk=1, batch=1, state=Solo())
        assert parts[0].stat().st_mtime_ns != mtime
        assert not torch.equal(changed.tensors["fire_count"], resumed.tensors["fire_count"])
    finally:
        SF.sample_images(hub["images"], 6)  # the folder as the other tests know it


def test_an_index_beside_the_sae_is_found(hub, tmp_path, monkeypatch):
    import shutil

    import huggingface_hub.constants as HC

    cache = tmp_path / "cache"
    shutil.copytree(hub["cache"], cache)
    snap = next((cache / f"models--{SF.SAE_ID.replace('/', '--')}" / "snapshots").iterdir())
    beside = snap / "model.layers.24" / INDEX_FILE
    hub_index.index_images(hub["org"], ImageSource.folder(hub["images"]), out=beside)
    monkeypatch.setattr(HC, "HF_HUB_CACHE", str(cache))
    monkeypatch.setenv(INDEX_ENV, str(tmp_path / "unset" / INDEX_FILE))  # names no file: the SAE's is used
    org = loading.load_hub()
    assert org.index_path == beside and org.index.meta["n_images"] == 6
    assert org.index_out == tmp_path / "unset" / INDEX_FILE  # a build from the tab would go to the setting
