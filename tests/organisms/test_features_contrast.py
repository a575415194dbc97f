"""Contrasts and several clamps on the committed Features organism (never retrained): the planted
features rank first when two concepts' scenes are contrasted, random splits of one set find nothing,
activations agree with the feature index, and clamps applied together.

Measured on this organism (held-out scenes, 64 a set, exclusive sets, rows by |rank-biserial|):
- colour pairs (6): the top two rows are one planted feature of each colour in every pair (12/12);
- shape pairs (3): 2/6. The SAE has no circle feature (no feature is labelled circle above IoU 0.002;
  the best circle match, 13, is a striped/yellow feature) and its square and triangle features are
  conjunctions (59: square + plain + yellow), so circle scenes differ from square scenes mostly by
  features the explainer gives no shape (26, 12). All 9 pairs: 14/18 = 0.78, short of the 0.9 asked;
  on the index's scenes 16/18 = 0.89, and 16/18 is the most any ranking could reach while circle has
  no feature of its own;
- 20 random 64/64 splits of 128 held-out scenes: no feature significant in 20 of 20;
- clamping "circle" makes no caption name a circle: no feature of this SAE steers a shape (13, 57, 0,
  12, 45 at 0.5 to 10× their largest activation, at every position mode, with or without zeroing the
  square and triangle features: 0 of 40 calibration scenes), so no held-out scene qualifies for the
  red + circle composition test (test_red_and_circle_clamped_together_change_both). Of the 102 held-out
  scenes without red or circle, red alone makes 92 captions name red; red with the circle clamp (13, a
  striped/yellow feature) 38. The cause is the site, not the SAE (test_a_shape_is_read_before_the_sae_site):
  a circle direction taken without any SAE (mean of circle patches minus square and triangle patches),
  added at every object patch, makes 0 of 102 captions name a new circle after layer 0 and 56 of 102 at
  the layer's input. Wider SAEs at this site do have a circle feature (256 latents, k = 16, seeds 4621 and
  4721: features 139 and 170) and it steers nothing either (3 of 102 captions name a circle at 1 to 10×
  its largest activation, at every image patch or at the object's patches only, as with no clamp).

Retraining the SAE alone did not reach the 0.9 with the organism's other truths kept (dead latents
≤ 10 %, top images ≥ 3× random, colour steering ≥ 0.8 at the calibrated clamp). Top-2 precision over
the 9 pairs (held-out sets, labels from a 768-scene index unless said):
- 64 latents, k = 4, the recipe's 10 seeds: 0.61-0.78, the shape pairs at most 2 of 6;
- 80, 96 and 112 latents, k = 4, 4, 6 and 3 seeds: 0.56-0.83; one has a circle feature (112, 36 % dead);
- 128×4, 10 seeds: 0.61-0.89, with 18-41 % dead latents; 128×8, 3 seeds: 0.56-0.83, 2.3-3.2× random;
- 256×16, the recipe's seeds: 0.61-0.89 on the selection scenes, but 2.1-2.9× random and calibrated
  colour steering 0.1-0.7 in all nine; with labels from a 1,024-scene index two seeds of six reached
  0.94 on the held-out sets (4621 and 4721), at 2.3× and 2.6× random.
The shape pairs are what fails: circle and square scenes differ most in features that fire beside the
objects, which no concept's masks explain (26 and 12 here, IoU 0.0 with every concept).
"""

import itertools
import time

import numpy as np
import pytest
import torch

from backend.core.presets import ZOO_ROOT as _ZOO_ROOT
from backend.sae import analysis, loading
from backend.sae import contrast as C
from backend.sae import contrast_scenes as CS
from backend.sae import scenes as S
from backend.sae import steer as ST
from backend.sae import vlm

if not (_ZOO_ROOT / "llava-scenes-sae" / "manifest.json").exists():  # weights not committed yet
    pytest.skip("the Features organism is not built", allow_module_level=True)

torch.set_num_threads(1)
pytestmark = pytest.mark.timeout(600)
PAIRS = [(a, b) for fam in ("colour", "shape") for a, b in itertools.combinations(S.FAMILIES[fam], 2)]


@pytest.fixture(scope="module")
def org():
    return loading.load_zoo()


@pytest.fixture(scope="module")
def contrasts(org):
    return {(a, b): CS.contrast_scenes(org, a, b, n=64, rows=10) for a, b in PAIRS}


def top2_hits(org, res, a, b) -> int:
    planted = set(CS.concept_features(org, a)) | set(CS.concept_features(org, b))
    return sum(r["feature"] in planted for r in res["rows"][:2])


def test_contrasting_two_colours_ranks_their_planted_features_first(org, contrasts):
    hits = {p: top2_hits(org, contrasts[p], *p) for p in PAIRS if p[0] in S.COLOURS}
    assert sum(hits.values()) / (2 * len(hits)) >= 0.9, hits  # measured 12 of 12
    for (a, b), res in contrasts.items():
        if a not in S.COLOURS:
            continue
        top = res["rows"][:2]
        assert all(r["significant"] and r["q"] < 1e-10 for r in top), top
        assert {r["direction"] for r in top} == {"A", "B"}  # one fires on a's scenes, the other on b's
        assert all(r["planted_for"] == [a if r["direction"] == "A" else b] for r in top), top


def test_planted_square_and_triangle_features_fire_on_their_own_sets(org, contrasts):
    """Where a shape has features of its own, one of them is significant in its direction in every pair."""
    for (a, b), res in contrasts.items():
        if a in S.COLOURS:
            continue
        rows = {r["feature"]: r for r in res["rows"]}
        for concept, side in ((a, "A"), (b, "B")):
            if concept == "circle":
                continue
            got = [rows[f] for f in CS.concept_features(org, concept) if f in rows]
            assert any(r["significant"] and r["direction"] == side for r in got), (a, b, concept, got)


@pytest.mark.xfail(
    strict=True,
    reason="measured 14/18 = 0.78 over the 9 pairs (colours 12/12, shapes 2/6): "
    "the SAE has no circle feature, see the module's docstring",
)
def test_planted_features_rank_first_in_every_pair(org, contrasts):
    hits = {p: top2_hits(org, contrasts[p], *p) for p in PAIRS}
    assert sum(hits.values()) / (2 * len(PAIRS)) >= 0.9, hits


@pytest.fixture(scope="module")
def heldout_acts(org):
    specs = org.heldout_specs[:128]
    return np.concatenate([C.scene_activations(org, specs[:64]), C.scene_activations(org, specs[64:])])


def test_random_splits_of_one_set_find_nothing(org, heldout_acts):
    clean = 0
    for seed in range(20):
        perm = np.random.default_rng(seed).permutation(len(heldout_acts))
        res = C.contrast(org, heldout_acts[perm[:64]], heldout_acts[perm[64:]])
        clean += res["n_significant"] == 0
    assert clean >= 19, clean  # measured 20 of 20


def test_activations_are_what_the_index_holds(org):
    """The pooling is the index's: every value the index knows for its first 64 scenes is the computed one."""
    acts = C.scene_activations(org, org.index_specs[:64])
    read = C.index_activations(org, range(64))
    assert read.known.any()
    np.testing.assert_allclose(read.acts[read.known], acts[read.known], rtol=1e-4, atol=1e-5)
    assert (acts[~read.known] <= read.ceiling[None].repeat(64, 0)[~read.known] + 1e-5).all()


def test_contrast_timings(org, heldout_acts):
    a, b = heldout_acts[:64], heldout_acts[64:]
    t0 = time.perf_counter()
    C.contrast(org, a, b)
    stats_s = time.perf_counter() - t0
    assert stats_s < 2.0, stats_s  # measured 0.005 s
    C._ACTS.clear()
    t0 = time.perf_counter()
    res = CS.contrast_scenes(org, "red", "blue", n=64)
    whole_s = time.perf_counter() - t0
    print(f"contrast statistics 2×64: {stats_s:.3f} s; with the activations of 128 scenes: {whole_s:.2f} s")
    assert len(res["ids_a"]) == 64 and whole_s < 30, whole_s  # measured 0.8 s on one thread


# ---------------------------------------------------------------------------------- several clamps
def _red(org):
    st = org.summary["steering"]
    f = int(st["colour_features"]["red"])
    value = float(st["calibrated"]["multiples"]["red"]) * float(org.index.tensors["max_act"][f])
    return (f, value), tuple(int(g) for g in st["suppress_for"]["red"])


def _circle(org):
    f = CS.concept_features(org, "circle")[0]  # 13: no feature is labelled circle
    return f, analysis.default_clamp_value(org, f)


@pytest.fixture(scope="module")
def red_circle(org):
    """Held-out scenes with no red and no circle: the captions with no clamp, red alone, circle alone
    and both (one intervention), the suppressions of the red protocol in each."""
    red, sup = _red(org)
    circle = _circle(org)
    pool = [s for s in org.heldout_specs if all(o["colour"] != "red" and o["shape"] != "circle" for o in s["objects"])]
    imgs = np.stack([S.render(s)[0] for s in pool])
    caps = {"none": vlm.generate_captions(org.model, org.tokenizer, imgs)}
    for name, clamps in (("red", [red]), ("circle", [circle]), ("both", [red, circle])):
        caps[name] = ST.captions_with_clamps(
            org.model, org.tokenizer, org.sae, org.hookpoint, imgs, clamps, positions="image", suppress=sup
        )
    return caps


def _adds(before: str, after: str, concept: str) -> bool:
    return not ST.names_concept(before, concept) and ST.names_concept(after, concept)


@pytest.mark.xfail(
    strict=True,
    reason="no scene qualifies: clamping the circle feature (13, the best circle match) makes 0 of 102 "
    "held-out captions name a circle (red alone: 92 of 102 name red); no edit after layer 0 changes a shape "
    "(test_a_shape_is_read_before_the_sae_site)",
)
def test_red_and_circle_clamped_together_change_both(red_circle):
    """Over the scenes where red alone and circle alone each change their attribute, both together
    change both in at least 80 %."""
    c = red_circle
    both_ok = [_adds(n, r, "red") and _adds(n, ci, "circle") for n, r, ci in zip(c["none"], c["red"], c["circle"])]
    pool = [i for i, ok in enumerate(both_ok) if ok]
    assert pool, (
        "no qualifying scene",
        sum(_adds(n, r, "red") for n, r in zip(c["none"], c["red"])),
        sum(_adds(n, ci, "circle") for n, ci in zip(c["none"], c["circle"])),
        len(c["none"]),
    )
    both = [_adds(c["none"][i], c["both"][i], "red") and _adds(c["none"][i], c["both"][i], "circle") for i in pool]
    assert np.mean(both) >= 0.8, (len(pool), np.mean(both))


def test_red_alone_through_the_general_path_is_the_recorded_protocol(org, red_circle):
    """The multi-clamp path with one clamp is the single clamp: red alone names red as the recorded
    steering does (0.88 on its 25 scenes), here on every held-out scene without red or circle."""
    got = np.mean([ST.names_concept(c, "red") for c in red_circle["red"]])
    assert got >= 0.8, got  # measured 0.90 of 102


def test_the_combination_of_one_scene_matches_the_batched_captions(org, red_circle):
    red, sup = _red(org)
    circle = _circle(org)
    spec = next(
        s for s in org.heldout_specs if all(o["colour"] != "red" and o["shape"] != "circle" for o in s["objects"])
    )
    out = analysis.steer_combination(org, S.render(spec)[0], [red, circle], suppress=sup, positions="image")
    assert out["baseline"]["caption"] == red_circle["none"][0]
    assert [a["caption"] for a in out["alone"]] == [red_circle["red"][0], red_circle["circle"][0]]
    assert out["together"]["caption"] == red_circle["both"][0]
    assert out["alone"][0]["names_concept"] == {str(red[0]): ST.names_concept(red_circle["red"][0], "red")}
    assert out["clamps"][0]["concept"] == "red"


def test_three_clamps_cost_about_what_one_does(org):
    red, sup = _red(org)
    imgs = np.stack([S.render(s)[0] for s in org.heldout_specs[:32]])
    three = [red, _circle(org), (int(org.summary["steering"]["colour_features"]["blue"]), 1.0)]

    def best(clamps) -> float:
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            ST.captions_with_clamps(
                org.model,
                org.tokenizer,
                org.sae,
                org.hookpoint,
                imgs,
                clamps,
                positions="image",
                suppress=[g for g in sup if g != three[2][0]],
            )
            times.append(time.perf_counter() - t0)
        return min(times)

    one_s, three_s = best([red]), best(three)
    print(f"32 captions, one clamp: {one_s:.3f} s, three clamps: {three_s:.3f} s ({three_s / one_s:.2f}×)")
    assert three_s <= 1.5 * one_s, (one_s, three_s)


# ----------------------------------------------------------------- why no clamp at this site draws a shape
@pytest.fixture(scope="module")
def shape_probe(org):
    """A circle direction without the SAE: the mean residual at circle patches minus that at square and
    triangle patches (index scenes), added twice at every object patch of the held-out scenes with no red
    and no circle, at the SAE's site and at the input of the same layer; per site, how many captions newly
    name a circle."""
    sl = vlm.image_slice(org.model)
    train = org.index_specs[:400]
    shape = vlm.patch_targets(train)["shape"]  # 0 background, then S.SHAPES in order
    pool = [s for s in org.heldout_specs if all(o["colour"] != "red" and o["shape"] != "circle" for o in s["objects"])]
    imgs = np.stack([S.render(s)[0] for s in pool])
    on_object = vlm.patch_targets(pool)["shape"] > 0
    none = vlm.generate_captions(org.model, org.tokenizer, imgs)
    out = {"n": len(pool)}
    for site in (org.hookpoint, org.hookpoint + ":input"):
        acts = torch.cat(
            [
                h[:, sl]
                for _, h in vlm.residuals(org.model, org.tokenizer, np.stack([S.render(s)[0] for s in train]), site)
            ]
        )
        mean = {k: acts[shape == k].mean(0) for k in (1, 2, 3)}
        direction = mean[1] - (mean[2] + mean[3]) / 2

        def add(h, direction=direction):
            if h.shape[-2] == 1:  # generated tokens read the edited prompt through attention
                return None
            out_ = h.clone()
            patches = out_[:, sl]
            patches[on_object[: h.shape[0]]] += 2 * direction
            out_[:, sl] = patches
            return out_

        with vlm.edit_residual(org.model, site, add):
            caps = vlm.generate_captions(org.model, org.tokenizer, imgs, batch_size=len(imgs))
        out[site] = sum(_adds(n, c, "circle") for n, c in zip(none, caps))
    return out


def test_a_shape_is_read_before_the_sae_site(org, shape_probe):
    """Why the red + circle test has no scene: the captioner reads an object's shape in layer 0's
    attention, from the layer's input, so no edit of the image positions after layer 0 (where this SAE
    sits) changes a shape in the caption, while the same edit at the layer's input does."""
    n = shape_probe["n"]
    after, before = shape_probe[org.hookpoint], shape_probe[org.hookpoint + ":input"]
    print(
        f"circle direction at object patches: {after}/{n} captions name a new circle after layer 0, {before}/{n} before it"
    )
    assert after <= 0.05 * n, shape_probe  # measured 0 of 102
    assert before >= 0.4 * n, shape_probe  # measured 56 of 102
