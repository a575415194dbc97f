"""The Features organism (committed weights, never retrained): the captioner captions held-out scenes,
the SAE reconstructs with live latents, its features localise the planted concepts, and clamping a
colour feature steers the caption."""

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from backend.core.presets import ZOO_ROOT as _ZOO_ROOT
from backend.sae import explain as E
from backend.sae import analysis, loading
from backend.sae import scenes as S
from backend.sae import steer as ST
from backend.sae import vlm
from backend.sae.index import FeatureIndex, build_index
from backend.sae.train import evaluate
from backend.zoo import zoo_path
from backend.zoo.manifest import verify

torch.set_num_threads(1)

if not (_ZOO_ROOT / "llava-scenes-sae" / "manifest.json").exists():  # weights not committed yet
    pytest.skip("the Features organism is not built", allow_module_level=True)

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def org():
    return loading.load_zoo()


def test_checksums():
    assert verify(zoo_path("llava-scenes")) == []
    assert verify(zoo_path("llava-scenes-sae")) == []


def test_captioner_names_held_out_attributes(org):
    specs = org.heldout_specs[:96]
    imgs = np.stack([S.render(s)[0] for s in specs])
    preds = vlm.generate_captions(org.model, org.tokenizer, imgs)
    acc = {
        k: np.mean([S.attribute_accuracy(p, s)[k] for p, s in zip(preds, specs)])
        for k in ("colour", "shape", "texture", "position", "exact")
    }
    assert acc["colour"] >= 0.95, acc
    assert acc["shape"] >= 0.9, acc
    assert acc["position"] >= 0.95, acc
    assert acc["exact"] >= 0.75, acc


def test_processor_matches_the_training_inputs(org):
    spec = org.heldout_specs[0]
    img = S.render(spec)[0]
    enc = org.processor(images=[img], text=["<image> describe"], return_tensors="pt")
    assert torch.equal(enc["input_ids"], vlm.prompt_ids(org.tokenizer, org.model, 1))
    torch.testing.assert_close(enc["pixel_values"], vlm.pixel_values(img[None]))


def test_sae_reconstructs_held_out_activations_with_live_latents(org):
    rng = np.random.default_rng(999)
    specs = [S.sample_spec(rng) for _ in range(160)]
    imgs = np.stack([S.render(s)[0] for s in specs])
    x = torch.cat([h.reshape(-1, h.shape[-1]) for _, h in vlm.residuals(org.model, org.tokenizer, imgs, org.hookpoint)])
    ev = evaluate(org.sae, x)
    assert ev["fvu"] <= 0.15, ev
    assert ev["dead_fraction"] <= 0.10, ev


@pytest.fixture(scope="module")
def explanations(org):
    return E.explain_all(org.index, org.index_specs)


def test_features_localise_planted_concepts(org, explanations):
    loc = E.localisation_summary(explanations)
    for c in S.COLOURS:
        assert loc[c]["iou"] >= 0.6, (c, loc[c])
    for c in S.SHAPES:
        assert loc[c]["iou"] >= 0.4, (c, loc[c])
    # the stored labels are what the explainer computes from the stored index
    for f, e in explanations.items():
        assert org.labels[str(f)]["label"] == e.label


def test_top_images_beat_random_images_3x(org, explanations):
    """The paper's statistic: a feature's label IoU on its top-5 images against random images. The paper
    draws 5 random images per feature; on this organism that estimate spreads from 2.4 to 4.6 over
    draws (5th to 95th percentile of 100), so the test takes the mean it estimates, over all of 256
    random scenes (measured 3.18; 3.15 and 3.19 on two other sets of 256)."""
    rng = np.random.default_rng(7)
    specs = [S.sample_spec(rng) for _ in range(256)]
    imgs = np.stack([S.render(s)[0] for s in specs])
    g = org.index.grid
    maps = []
    for _, h in vlm.residuals(org.model, org.tokenizer, imgs, org.hookpoint):
        z = org.sae.encode(h[:, vlm.image_slice(org.model)])
        maps.append(z.permute(0, 2, 1).reshape(z.shape[0], -1, g, g))
    stat = E.random_baseline(org.index, explanations, specs, torch.cat(maps), top_n_features=50, n_random=len(specs))
    assert stat["top5_iou"] >= 3 * stat["random_iou"], stat


# Steering protocol (the same in the recipe's record, summary.json "steering"): the colour's feature
# (strongest carrier among the features labelled with it), clamped after LM layer 0 at the image
# patches where it or the other colours' features fire (the objects), those features zeroed, at the
# per-colour value chosen on a calibration split (never on held-out scenes); held-out scenes
# heldout[100:] without the colour, first 12 per colour.
# The computation is deterministic (same captions at 1 or 2 threads, batched or one by one): the spread
# seen earlier (red 0.58..0.92) came from the organism being rebuilt in the shared tree between runs
# (red's feature went from 7, best IoU, to 10), which the recorded protocol result below now catches.
# Measured by the recipe (25 held-out scenes per colour, the first ones of heldout.json without the
# colour; multiples calibrated per colour on 80 calibration scenes: 1 x max activation for every
# colour): 1.0 for every colour (this test's 12 scenes: 1.0 for every colour). The target is
# 0.8 for every colour.
N_TEST = 12
TEST_START = 100


def _steer_setting(org, colour):
    st = org.summary["steering"]
    best = st["sweep"][st["best"]]
    cal = st.get("calibrated", {})
    f = int(st["colour_features"][colour])
    mult = float(cal.get("multiples", {}).get(colour, best["multiple"]))
    sup = {colour: tuple(analysis.family_rivals(org, f))} if best["suppress_other_colours"] else None
    return f, mult * float(org.index.tensors["max_act"][f]), best["positions"], sup


@pytest.mark.parametrize("colour", list(S.COLOURS))
def test_clamping_a_colour_feature_steers_the_caption(org, colour):
    """The recorded intervention re-run on held-out scenes that do not contain the colour."""
    f, value, positions, sup = _steer_setting(org, colour)
    res = ST.steering_success(
        org.model,
        org.tokenizer,
        org.sae,
        org.hookpoint,
        org.heldout_specs[TEST_START:],
        {colour: f},
        {colour: value},
        positions=positions,
        n=N_TEST,
        suppress_for=sup,
        floor=analysis.active_floor(org),
    )
    got = res[colour]["success"]
    tp = org.summary["steering"].get("test_protocol")
    if tp:  # the build ran this exact protocol: a different number means a changed organism or code path
        assert (tp["start"], tp["n"]) == (TEST_START, N_TEST)
        want = tp["success"]["calibrated"][colour]
        assert abs(got - want) <= 1 / N_TEST + 1e-9, (colour, got, want, res)
    assert got >= 0.8, res


def test_steering_is_deterministic(org):
    """Greedy generation with the clamp is a pure function of organism, scenes and setting: the same
    captions twice, at 1 and 2 threads, batched or scene by scene."""
    f, value, positions, sup = _steer_setting(org, "blue")
    specs = [s for s in org.heldout_specs[TEST_START:] if all(o["colour"] != "blue" for o in s["objects"])][:6]
    imgs = np.stack([S.render(s)[0] for s in specs])

    def run(threads, one_by_one):
        prev = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            batches = [imgs[i : i + 1] for i in range(len(imgs))] if one_by_one else [imgs]
            return sum(
                (
                    ST.steered_captions(
                        org.model,
                        org.tokenizer,
                        org.sae,
                        org.hookpoint,
                        b,
                        f,
                        value,
                        positions=positions,
                        suppress=sup["blue"] if sup else (),
                        floor=analysis.active_floor(org),
                    )
                    for b in batches
                ),
                [],
            )
        finally:
            torch.set_num_threads(prev)

    first = run(1, False)
    assert run(1, False) == first
    assert run(2, False) == first
    assert run(1, True) == first


def test_clamping_at_every_prompt_position_is_measured(org):
    """The paper's placement is part of the stored measurement, split into its image and text halves
    beside the objects' patches, with the reason: the reconstruction alone keeps the captions, a clamp
    written on every image patch makes the caption repeat the concept, one on the objects swaps it."""
    st = org.summary["steering"]
    assert any(v["positions"] == "prompt" for v in st["sweep"].values())
    assert any(v["positions"] == "prompt" for v in st["comparison"]["sweep"].values())
    pl = st["placement"]["clamp"]
    low = {m: min(v["success"] for v in r.values()) for m, r in pl.items()}
    malformed = {m: np.mean([v["malformed"] for v in r.values()]) for m, r in pl.items()}
    assert st["default_positions"] == "active" and low["active"] >= 0.8, low  # measured 1.0 for every colour
    assert max(low["prompt"], low["image"], low["text"]) <= 0.2, low  # measured 0.0 each
    assert malformed["prompt"] >= 0.5 and malformed["image"] >= 0.5, malformed  # measured 0.94, 0.94
    # The SAE reconstruction alone at every prompt position (no clamp) keeps the captions right
    # (measured 0.98), so what breaks the paper's placement is the clamp, not the reconstruction.
    rec = st["placement"]["reconstruction_only_prompt"]
    assert rec["colour_acc"] >= 0.9 and rec["malformed"] <= 0.05, rec
    assert "every image patch" in st["placement"]["why"] and "objects" in st["placement"]["why"]


def test_index_cli_rebuilds_the_stored_statistics(org, tmp_path):
    out = tmp_path / "idx.safetensors"
    r = subprocess.run(
        [sys.executable, "-m", "backend.sae.cli", "build", "--n-images", "128", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=240,
        env={**__import__("os").environ, "OMP_NUM_THREADS": "1"},
    )
    assert r.returncode == 0, r.stderr[-2000:]
    rebuilt = FeatureIndex.load(out)
    assert rebuilt.meta["n_images"] == 128 and json.loads(r.stdout)["written"] == str(out)
    local = build_index(org.model, org.tokenizer, org.sae, org.index_specs[:128], hookpoint=org.hookpoint)
    for key in ("top_ids", "fire_count", "hist"):
        assert torch.equal(rebuilt.tensors[key], local.tensors[key]), key
    # stored index: same layout, loaded without recomputation
    assert org.index.tensors["top_maps"].shape[1:] == (16, org.index.grid**2)
    assert org.index.meta["n_images"] == len(org.index_specs)
