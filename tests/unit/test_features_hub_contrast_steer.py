"""The Features tab's contrast of two image sets and its several-clamps steering in hub mode: the
paper's LLaVA-NeXT + lmms-lab SAE (stand-ins of the real classes in an offline Hugging Face cache
under the real hub ids, no feature index), through the functions the tab's handlers and the MCP
tools call. Hub mode has no scene recipes: the panel says so, a set is the visitor's uploads, a
refusal comes before the model's weights load, the statistics equal a direct computation and
every hook is gone afterwards (after a failure too)."""

import base64
import json
from contextlib import contextmanager

import gradio as gr
import numpy as np
import pandas as pd
import pytest
import torch
from PIL import Image
from scipy import stats

from backend.core import bounds
from backend.core.interventions import count_hooks
from backend.sae import analysis, loading
from backend.sae import contrast as C
from backend.sae import steer as ST
from backend.sae import vlm
from backend.sae.index import INDEX_ENV, INDEX_FILE
from components.agents import answers
from components.features import contrast as FC
from components.features import steering as FS
from tests.helpers.standins import build_cache
from tests.helpers.standins import features as SF

torch.set_num_threads(1)
pytestmark = pytest.mark.timeout(900)


@contextmanager
def agents_on(source: str):
    """The MCP tools' source, as `components.agents.tools.install` sets it for the app."""
    before = answers._SOURCE
    answers.set_source(source)
    try:
        yield
    finally:
        answers.set_source(before)


def quiet(frac=None, desc=None):  # a gr.Progress stand-in
    return frac


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """The stand-in cache as the hub, no feature index, a fresh registry of organisms, and two
    image sets of different sizes and aspect ratios (anyres picks different tile grids)."""
    import huggingface_hub.constants as HC

    root = tmp_path_factory.mktemp("features-hub-contrast")
    cache = build_cache(root / "cache", SF.REPOS)
    mp = pytest.MonkeyPatch()
    mp.setattr(HC, "HF_HUB_CACHE", str(cache))
    mp.setattr(HC, "HF_HUB_OFFLINE", True)
    mp.setenv(INDEX_ENV, str(root / "no-index" / INDEX_FILE))
    mp.setenv("WORKBENCH_SESSION_DIR", str(root / "sessions"))
    mp.setattr(loading, "_SHELLS", {})
    files_a = [str(p) for p in SF.sample_images(root / "a", 4, seed=3)]
    files_b = [str(p) for p in SF.sample_images(root / "b", 3, seed=4)]
    yield {"root": root, "a": files_a, "b": files_b}
    from backend.core import store

    for org in loading._SHELLS.values():
        store.evict(org.weights_key)
    mp.undo()


def pixels(path) -> np.ndarray:
    return np.asarray(Image.open(path).convert("RGB"))


def b64(path) -> str:
    return base64.b64encode(open(path, "rb").read()).decode()


def direct_activations(org, paths) -> np.ndarray:
    """Per-image activations computed apart from the service: one image at a time (no batch, no
    padding), the dense SAE code at the base image's patches, averaged over them."""
    out = []
    with torch.no_grad():
        for p in paths:
            rows, _ = vlm.hub_base_residuals(org.model, org.processor, [pixels(p)], org.hookpoint)
            codes = org.sae.encode(rows[0].float())  # [P, F], zero where a feature does not fire
            out.append(codes.clamp(min=0).mean(0).numpy())
    return np.stack(out)


def bh(p: np.ndarray) -> np.ndarray:
    """Benjamini–Hochberg q-values, written out."""
    m = len(p)
    order = np.argsort(p)
    q = p[order] * m / np.arange(1, m + 1)
    q = np.minimum.accumulate(q[::-1])[::-1].clip(max=1.0)
    out = np.empty(m)
    out[order] = q
    return out


def test_the_panel_in_hub_mode_offers_uploads_only_and_says_so(hub):
    from components.common import TabContext
    from components.features import layout as tab

    with gr.Blocks() as demo:
        tab.build(TabContext(tabs=None, source="hub"))
    blocks = {b.elem_id: b for b in demo.blocks.values() if getattr(b, "elem_id", None)}
    assert loading.get_organism("hub").model is None  # building the tab loaded no weights
    for concept_box in ("features-contrast-a", "features-contrast-b", "features-contrast-n"):
        assert blocks[concept_box].visible is False, concept_box
    for name in ("a", "b"):
        label = blocks[f"features-contrast-files-{name}"].label
        assert label == f"set {name.upper()}: your images (2–64)", label  # no "…or": there is nothing else
    texts = " ".join(str(getattr(b, "value", "")) for b in demo.blocks.values())
    assert "Upload 2–64 images for each set: this model has no scene recipes" in texts
    # the cost line says what is needed until both sets are there, then what it costs
    for files in ((None, None), (hub["a"], None), (None, hub["b"])):
        said = FC.estimate("hub", *files, 64)
        assert "no scene recipes" in said and "batches" not in said, said
    said = FC.estimate("hub", hub["a"], hub["b"], 64)
    assert said.startswith("<span class='wb-muted'>7 images, 2 batches of the model"), said
    assert "At least 2" in FC.estimate("hub", hub["a"][:1], hub["b"], 64)


def test_refusals_come_clearly_and_before_the_weights_load(hub, tmp_path):
    from components.features import tools

    org = loading.get_organism("hub")
    assert org.model is None
    for files_a, files_b in ((None, None), (hub["a"], None), (None, hub["b"])):
        with pytest.raises(gr.Error, match="Upload 2 to 64 images for each set: this model has no scene recipes"):
            FC.run("hub", "red", "blue", files_a, files_b, 64, progress=quiet)
    with pytest.raises(gr.Error, match="Set A has 1 image; at least 2 per set"):
        FC.run("hub", "", "", hub["a"][:1], hub["b"], 64, progress=quiet)
    never_read = [str(tmp_path / f"{i}.png") for i in range(65)]
    with pytest.raises(gr.Error, match="Set B has 65 images; at most 64 per set"):
        FC.run("hub", "", "", hub["a"], never_read, 64, progress=quiet)
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"not a picture")
    with pytest.raises(gr.Error, match="broken.png"):
        FC.run("hub", "", "", hub["a"], [hub["b"][0], str(broken)], 64, progress=quiet)
    img = pixels(hub["a"][1])
    for more, sup, words in (
        ("10=4, 10=3", "", "feature 10 is clamped twice"),
        (", ".join(f"{f}=1" for f in range(10, 18)), "", "clamped features must be"),
        ("10=4", "10", "feature 10 is both clamped and suppressed"),
        ("300=4", "", "feature 300 is not in this SAE"),
        ("10=500", "", "The clamp value of feature 10 must be"),
        ("10", "", "feature=value"),
        ("10=4", ", ".join(str(f) for f in range(20, 277)), "suppressed features must be"),
    ):
        with pytest.raises(gr.Error, match=words):
            FS.steer_many("hub", img, None, 3, 5.0, more, sup, "prompt", False, False, progress=quiet)
    with pytest.raises(gr.Error, match="Upload an image"):
        FS.steer_many("hub", None, "0", 3, 5.0, "10=4", "", "prompt", False, False, progress=quiet)
    # the MCP tools, on the same organism
    with agents_on("hub"):
        with pytest.raises(ValueError, match="this model has no scene recipes .* give both sets as your own images"):
            tools.contrast_features("red", "blue")
        with pytest.raises(ValueError, match="Give both sets as images, or neither"):
            tools.contrast_features(images_a_base64=[b64(p) for p in hub["a"]])
        with pytest.raises(ValueError, match="The number of images in a set must be .*between 2 and 64 \\(got 1\\)"):
            tools.contrast_features(images_a_base64=[b64(hub["a"][0])], images_b_base64=[b64(p) for p in hub["b"]])
        with pytest.raises(ValueError, match="pass your image as image_base64"):
            tools.steer_feature(3, 5.0, more_clamps=[{"feature": 10, "value": 4.0}])
        with pytest.raises(ValueError, match="The number of clamped features must be .*between 1 and 8 \\(got 9\\)"):
            tools.steer_feature(
                3, 5.0, image_base64=b64(hub["a"][1]), more_clamps=[{"feature": f, "value": 1.0} for f in range(10, 18)]
            )
    assert org.model is None  # nothing above loaded the weights


def test_the_contrast_of_uploaded_sets_equals_a_direct_computation(hub):
    from components.features import tools

    org = loading.get_organism("hub", model=True)
    hooks = count_hooks(org.model)
    head, fig, table, gallery, csv = FC.run("hub", "", "", hub["a"], hub["b"], 64, progress=quiet)
    assert count_hooks(org.model) == hooks
    assert "Sets: your images" in head and "tested features" in head and "Mann" in head
    assert "With 4 and 3 images no feature can reach q" in head  # the smallest p, 0.034, times the features tested
    assert list(table.columns) == FC.COLUMNS and 0 < len(table) <= FC.SHOWN_ROWS
    assert [t.name for t in fig.data] == ["higher in A", "higher in B", "not significant"]

    # the activations: the service's (batched, the handler's own, from its cache) against one image at a time
    served = C.contrast_images(org, [pixels(p) for p in hub["a"]], [pixels(p) for p in hub["b"]], rows=500)
    acts_a, acts_b = served["acts_a"], served["acts_b"]
    assert acts_a.shape == (4, SF.N_LATENTS) and acts_b.shape == (3, SF.N_LATENTS) and acts_a.dtype == np.float32
    np.testing.assert_allclose(acts_a, direct_activations(org, hub["a"]), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(acts_b, direct_activations(org, hub["b"]), rtol=1e-4, atol=1e-5)
    # the statistics, written out per feature on those activations (in float64, as the service's)
    acts_a, acts_b = acts_a.astype(np.float64), acts_b.astype(np.float64)
    both = np.concatenate([acts_a, acts_b])
    tested = np.flatnonzero(both.max(0) > both.min(0))
    p = np.array([stats.mannwhitneyu(acts_a[:, f], acts_b[:, f], method="asymptotic").pvalue for f in tested])
    u = np.array([stats.mannwhitneyu(acts_a[:, f], acts_b[:, f], method="asymptotic").statistic for f in tested])
    effect, q = 2 * u / (4 * 3) - 1, bh(p)

    got = pd.read_csv(csv).set_index("feature")  # the export holds every tested feature
    assert sorted(got.index) == sorted(tested.tolist()) and served["n_tested"] == len(tested)
    got = got.loc[tested]
    np.testing.assert_allclose(got["mean_a"], acts_a[:, tested].mean(0), rtol=1e-3, atol=1e-6)
    np.testing.assert_allclose(got["mean_b"], acts_b[:, tested].mean(0), rtol=1e-3, atol=1e-6)
    np.testing.assert_allclose(got["rate_a"], (acts_a[:, tested] > 0).mean(0))
    np.testing.assert_allclose(got["effect"], effect, atol=1e-9)
    np.testing.assert_allclose(got["p"], p, rtol=1e-9)
    np.testing.assert_allclose(got["q"], q, rtol=1e-9)
    assert not got["significant"].any()  # 4 against 3 images cannot pass the correction over this many
    assert list(np.abs(table["effect r"])) == sorted(np.abs(table["effect r"]), reverse=True)  # strongest first

    # the gallery: the top feature's strongest images, each one of the set's own uploads, as uploaded
    top = int(table["feature"].iloc[0])
    assert gallery
    for image, caption in gallery:
        name, feature, which = caption.split(" · ")
        assert feature == f"feature {top}" and which.startswith("your image ")
        source = (hub["a"] if name == "A" else hub["b"])[int(which.split()[-1]) - 1]
        np.testing.assert_array_equal(image, pixels(source))

    # the MCP tool: the same numbers, rounded for an agent
    with agents_on("hub"):
        answer = json.loads(
            tools.contrast_features(
                images_a_base64=[b64(p) for p in hub["a"]], images_b_base64=[b64(p) for p in hub["b"]], rows=500
            )
        )
    assert answer["sets"] == {"a": "your 4 images", "b": "your 3 images"}
    assert (answer["n_a"], answer["n_b"], answer["n_tested"]) == (4, 3, len(tested))
    mcp = {r["feature"]: r for r in answer["rows"]}
    assert set(mcp) == set(tested.tolist())
    for i, f in enumerate(tested):
        assert mcp[f]["effect"] == pytest.approx(effect[i], abs=1e-3) and mcp[f]["p"] == pytest.approx(p[i], rel=1e-3)
        assert mcp[f]["q"] == pytest.approx(q[i], rel=1e-3)
    assert count_hooks(org.model) == hooks


def test_several_clamps_in_hub_mode_equal_the_direct_edit_and_leave_no_hook(hub, monkeypatch):
    from components.features import tools

    org = loading.get_organism("hub", model=True)
    hooks = count_hooks(org.model)
    img = pixels(hub["a"][1])  # 30×70: base image and a row of tiles
    clamps, sup = [(3, 40.0), (10, 30.0)], (7,)

    # the edit itself, at the hookpoint: the SAE reconstruction with both clamps and the suppression
    inputs = vlm.hub_inputs(org.model, org.processor, [img])
    plain, _, _ = vlm.hub_residuals(org.model, org.processor, [img], org.hookpoint)
    with ST.clamp_features(
        org.model,
        org.sae,
        org.hookpoint,
        clamps,
        positions="prompt",
        suppress=sup,
        image_positions=vlm.image_layout(org.model, inputs["input_ids"][0], inputs["image_sizes"][0]).image,
    ):
        edited, _, _ = vlm.hub_residuals(org.model, org.processor, [img], org.hookpoint)
    torch.testing.assert_close(edited, ST.clamp_codes_many(org.sae, plain, clamps, False, sup))
    assert count_hooks(org.model) == hooks

    frame, out = FS.steer_many("hub", img, None, 3, 40.0, "10=30", "7", "prompt", False, False, progress=quiet)
    assert count_hooks(org.model) == hooks
    assert list(frame.columns) == ["clamps", "answer", "concepts named", "changed from no clamp"]
    assert list(frame["clamps"]) == ["no clamp", "3 = 40 alone", "10 = 30 alone", "3 = 40 + 10 = 30 (all together)"]
    assert out["clamps"] == [
        {"feature": 3, "value": 40.0, "concept": ""},
        {"feature": 10, "value": 30.0, "concept": ""},
    ]
    assert out["suppressed"] == [7] and out["hookpoint"] == org.hookpoint and len(out["alone"]) == 2
    # every caption is the model's own, with exactly these clamps (free text: no template verdicts)
    with torch.no_grad():
        assert out["baseline"]["caption"] == vlm.hub_generate(org.model, org.processor, img)
        for c, alone in zip(clamps, out["alone"]):
            assert alone["caption"] == ST.hub_caption_with_clamps(
                org.model, org.processor, org.sae, org.hookpoint, img, [c], suppress=sup
            )
            assert alone["well_formed"] is None and alone["changed"] is None and alone["concepts"] == []
        assert out["together"]["caption"] == ST.hub_caption_with_clamps(
            org.model, org.processor, org.sae, org.hookpoint, img, clamps, suppress=sup
        )
    assert out["together"]["caption"] != out["baseline"]["caption"]
    assert frame["answer"].iloc[-1] == FS.collapse_repeats(out["together"]["caption"])[0]
    assert count_hooks(org.model) == hooks

    # the MCP tool: the same captions (the same service, its cache)
    with agents_on("hub"):
        answer, picture = tools.steer_feature(
            3,
            40.0,
            positions="prompt",
            image_base64=b64(hub["a"][1]),
            more_clamps=[{"feature": 10, "value": 30.0}],
            suppress=[7],
        )
    answer = json.loads(answer)
    assert answer["together"]["caption"] == out["together"]["caption"]
    assert [a["caption"] for a in answer["alone"]] == [a["caption"] for a in out["alone"]]

    # a failure while the clamps are on: the hook goes all the same, the model answers as before
    real = org.model.generate
    calls = []

    def failing(*a, **k):
        calls.append(1)
        if len(calls) > 1:  # the baseline passes, the first clamped caption fails
            raise RuntimeError("generation failed")
        return real(*a, **k)

    monkeypatch.setattr(org.model, "generate", failing)
    with pytest.raises(RuntimeError, match="generation failed"):
        analysis.steer_combination(org, img, [(3, 41.0), (10, 30.0)], suppress=[7])
    monkeypatch.undo()
    assert count_hooks(org.model) == hooks
    with torch.no_grad():
        assert vlm.hub_generate(org.model, org.processor, img) == out["baseline"]["caption"]
    assert bounds.STEER_CLAMPS.hi == 8  # the refusal above names this bound


def test_active_positions_in_hub_mode_edit_only_the_image_tokens_where_the_features_fire(hub):
    """On LLaVA-NeXT (base image, tiles, row newlines) "active" writes the clamps at the image tokens
    where a clamped or zeroed feature fires at or above its floor, and leaves every other token as it was;
    the analysis says how many it edited."""
    org = loading.get_organism("hub", model=True)
    img = pixels(hub["a"][1])
    inputs = vlm.hub_inputs(org.model, org.processor, [img])
    image = vlm.image_layout(org.model, inputs["input_ids"][0], inputs["image_sizes"][0]).image
    plain, _, _ = vlm.hub_residuals(org.model, org.processor, [img], org.hookpoint)
    floor = analysis.active_floor(org)
    # the features that fire above their floor on the most image tokens: one clamped, one zeroed
    vals, idx = org.sae.encode_sparse(plain[0, image])
    strong = idx[vals >= (floor[idx] if floor is not None else 0)]
    f_clamp, f_zero = (int(f) for f in torch.bincount(strong, minlength=org.n_features).argsort(descending=True)[:2])
    clamps, sup = [(f_clamp, 40.0)], (f_zero,)
    on = ST.firing(org.sae, plain, [f_clamp, f_zero], floor)
    outside = torch.ones_like(on)
    outside[:, image] = False
    on &= ~outside
    assert 0 < int(on.sum()) < len(image), int(on.sum())  # some image tokens, not all: the test can tell
    counted: list[torch.Tensor] = []
    with ST.clamp_features(
        org.model,
        org.sae,
        org.hookpoint,
        clamps,
        positions="active",
        suppress=sup,
        image_positions=image,
        floor=floor,
        edited=counted,
    ):
        edited, _, _ = vlm.hub_residuals(org.model, org.processor, [img], org.hookpoint)
    want = plain.clone()
    want[on] = ST.clamp_codes_many(org.sae, plain, clamps, False, sup)[on]
    torch.testing.assert_close(edited, want)
    assert [int(n) for n in counted] == [int(on.sum())]
    alone = ST.firing(org.sae, plain, [f_clamp], floor) & ~outside
    out = analysis.steer_caption(org, img, f_clamp, 40.0, positions="active")
    assert out["edited_positions"] == int(alone.sum()) > 0
