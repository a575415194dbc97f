"""Contrasting two image sets (backend.sae.contrast): the statistics on small synthetic tables, the
pooling convention shared with the feature index, the zoo's scene recipes, and refusals."""

from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import stats

from backend.core import bounds
from backend.sae import contrast as C
from backend.sae import contrast_scenes as CS
from backend.sae import scenes as S
from backend.sae.index import FeatureIndex, IndexBuilder
from backend.sae.organism import Organism

F = 20


def sparse(rng, n, f=F, rate=0.4, scale=1.0):
    return (rng.random((n, f)) < rate) * rng.exponential(scale, (n, f))


def org_of(n_features=F, **kw) -> Organism:
    return Organism("test", Path("."), sae_info={"n_latents": n_features}, model_id="test", **kw)


def test_a_feature_planted_in_a_only_is_found_first_and_significant():
    rng = np.random.default_rng(0)
    a, b = sparse(rng, 30), sparse(rng, 30)
    a[:, 7] = rng.exponential(3.0, 30) + 0.5  # fires on every image of A, strongly
    b[:, 7] = 0.0
    out = C.contrast_stats(a, b, rows=F)
    top = out["rows"][0]
    assert top["feature"] == 7 and top["significant"] and top["q"] < 0.05 and top["direction"] == "A"
    assert top["effect"] == pytest.approx(1.0) and top["rate_a"] == 1.0 and top["rate_b"] == 0.0
    assert top["diff"] == pytest.approx(a[:, 7].mean()) and top["mean_b"] == 0.0
    # (the other features are alike in A and B; BH bounds the share of false discoveries, not their number)
    assert out["n_significant"] <= 2, [r for r in out["rows"] if r["significant"]]
    # the set's images where it fires most, best first
    assert top["top_a"] == [int(i) for i in np.argsort(-a[:, 7])[:5]] and top["top_b"] == []


def test_identical_sets_and_splits_of_one_distribution_give_nothing_significant():
    rng = np.random.default_rng(1)
    a = sparse(rng, 40)
    same = C.contrast_stats(a, a.copy(), rows=F)
    assert same["n_significant"] == 0 and all(r["effect"] == pytest.approx(0.0) for r in same["rows"])
    hits = 0
    for seed in range(20):
        r = np.random.default_rng(100 + seed)
        hits += C.contrast_stats(sparse(r, 40), sparse(r, 40))["n_significant"] > 0
    assert hits <= 2, hits


def test_p_and_q_are_scipys_mann_whitney_and_benjamini_hochberg_per_feature():
    rng = np.random.default_rng(2)
    a, b = sparse(rng, 25), sparse(rng, 31, rate=0.6, scale=1.5)
    a[:, 3] = b[:, 3] = 0.0  # never fires: left out of the test and of the correction's count
    out = C.contrast_stats(a, b, rows=F, sort="p")
    rows = {r["feature"]: r for r in out["rows"]}
    assert out["n_tested"] == F - 1 and rows[3]["p"] is None and rows[3]["q"] is None and not rows[3]["tested"]
    tested = [f for f in range(F) if f != 3]
    p = np.array([stats.mannwhitneyu(a[:, f], b[:, f], method="asymptotic").pvalue for f in tested])
    q = stats.false_discovery_control(p, method="bh")
    for f, pf, qf in zip(tested, p, q):
        assert rows[f]["p"] == pytest.approx(pf, rel=1e-12) and rows[f]["q"] == pytest.approx(qf, rel=1e-12)
        u = stats.mannwhitneyu(a[:, f], b[:, f], method="asymptotic").statistic
        assert rows[f]["effect"] == pytest.approx(2 * u / (25 * 31) - 1)
    assert [r["feature"] for r in out["rows"]][-1] == 3  # untested features come last
    assert [r["p"] for r in out["rows"][:-1]] == sorted(r["p"] for r in out["rows"][:-1])


def test_rows_sort_by_effect_or_difference_and_are_cut():
    rng = np.random.default_rng(3)
    a, b = sparse(rng, 20), sparse(rng, 20)
    by_effect = C.contrast_stats(a, b, rows=5)["rows"]
    assert len(by_effect) == 5
    assert [abs(r["effect"]) for r in by_effect] == sorted((abs(r["effect"]) for r in by_effect), reverse=True)
    by_diff = C.contrast_stats(a, b, rows=F, sort="diff")["rows"]
    assert [abs(r["diff"]) for r in by_diff] == sorted((abs(r["diff"]) for r in by_diff), reverse=True)
    # a column order does not change the ranking
    perm = rng.permutation(F)
    again = C.contrast_stats(a[:, perm], b[:, perm], rows=5)["rows"]
    assert [int(perm[r["feature"]]) for r in again] == [r["feature"] for r in by_effect]


def test_tiny_sets_say_nothing_can_be_significant():
    rng = np.random.default_rng(4)
    out = C.contrast_stats(sparse(rng, 2) + 1, sparse(rng, 2))
    assert out["smallest_p"] > 0.05 and not out["can_be_significant"] and out["n_significant"] == 0
    assert C.smallest_p(64, 64) < 1e-20


@pytest.mark.parametrize(
    "a_shape, b_shape, words",
    [
        ((0, F), (5, F), "set A is empty"),
        ((5, F), (0, F), "set B is empty"),
        ((1, F), (5, F), "set A holds 1 images; The number of images in a set must be a whole number between 2 and 64"),
        ((65, F), (5, F), "set A holds 65 images"),
        ((5, F), (5, F + 1), "different feature widths (20 and 21)"),
        ((5,), (5, F), "must be a table of images × features"),
    ],
)
def test_bad_sets_are_refused_with_a_message(a_shape, b_shape, words):
    with pytest.raises(ValueError) as e:
        C.contrast_stats(np.ones(a_shape), np.ones(b_shape))
    assert words in str(e.value)


def test_bad_settings_and_values_are_refused():
    a = np.ones((4, F))
    for kw, words in (
        ({"rows": 0}, "The number of features listed"),
        ({"top_images": 17}, "top images"),
        ({"sort": "size"}, "sort must be one of"),
        ({"alpha": 1.5}, "alpha"),
    ):
        with pytest.raises(ValueError, match=words):
            C.contrast_stats(a, a, **kw)
    bad = a.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        C.contrast_stats(bad, a)
    with pytest.raises(ValueError, match="set B has 21 features per image but the SAE has 20"):
        C.contrast(org_of(), a, np.ones((4, F + 1)))


def test_pooling_is_the_index_score_and_the_index_gives_back_what_it_holds():
    """Per-image activations are the mean over the image's patches, the score the index ranks by: an
    index holding every image (top_k = n) stores exactly `pooled`; a smaller one knows its top lists,
    and every image of a feature that fired on fewer images than it keeps."""
    torch.manual_seed(0)
    n, P, k = 10, 9, 3
    vals = torch.rand(n, P, k) * (torch.rand(n, P, k) < 0.7)
    idx = torch.stack([torch.randperm(F)[:k] for _ in range(n * P)]).reshape(n, P, k)
    idx[..., 0] = torch.where(torch.rand(n, P) < 0.5, 0, idx[..., 0])  # feature 0 common, 19 rarer
    mean = C.pooled(vals, idx, F)
    full = IndexBuilder(F, P, top_k=n)
    full.update(vals, idx)
    t = full.tensors()
    for f in range(F):
        for i, s in zip(t["top_ids"][f].tolist(), t["top_scores"][f].tolist()):
            if i >= 0:
                assert s == pytest.approx(float(mean[i, f]), abs=1e-6)
    small = IndexBuilder(F, P, top_k=3)
    small.update(vals, idx)
    org = org_of(index=FeatureIndex(small.tensors(), {"grid": 3, "n_images": n}))
    got = C.index_activations(org, list(range(n)))
    exact = mean.numpy()
    assert np.allclose(got.acts[got.known], exact[got.known], atol=1e-6)
    assert (exact[~got.known] <= got.ceiling[None].repeat(n, 0)[~got.known] + 1e-6).all()
    fired = (exact > 0).sum(0)
    assert got.known[:, fired < 3].all() and not got.complete
    with pytest.raises(ValueError, match="image ids must be in 0..9"):
        C.index_activations(org, [10])


def test_an_empty_or_oversized_image_set_is_refused_before_any_model_call():
    org = org_of()  # no model: a refusal must come first
    with pytest.raises(ValueError, match="empty"):
        C.image_activations(org, [])
    with pytest.raises(ValueError, match="between 2 and 64"):
        C.image_activations(org, [np.zeros((8, 8, 3), np.uint8)] * 65)
    with pytest.raises(ValueError, match="set B is empty"):
        C.contrast_images(org, [np.zeros((8, 8, 3), np.uint8)] * 2, [])


def test_the_cost_is_told_before_starting():
    zoo = C.contrast_cost(org_of(), 64, 64)
    assert zoo["images"] == zoo["forward_passes"] == 128 and zoo["batches"] == 2 and 0 < zoo["seconds"] < 10
    hub = C.contrast_cost(org_of(source="hub"), 64, 10)
    assert hub["batches"] == 16 + 3 and hub["seconds"] > 30
    # the rank test is milliseconds at the zoo's width and seconds at a hub SAE's (131,072 features)
    assert zoo["statistics_seconds"] < 0.01
    wide = C.contrast_cost(org_of(n_features=131072, source="hub"), 64, 64)
    assert wide["statistics_seconds"] > 1 and wide["seconds"] > hub["seconds"] + wide["statistics_seconds"] - 1
    with pytest.raises(ValueError, match="between 2 and 64"):
        C.contrast_cost(org_of(), 1, 64)


# ---------------------------------------------------------------------------------- scene recipes
def scene_org():
    rng = np.random.default_rng(5)
    return org_of(
        heldout_specs=[S.sample_spec(rng) for _ in range(120)],
        labels={
            "3": {"label": "red", "score": 0.8, "scores": {"red": 0.8}},
            "4": {"label": "red", "score": 0.1, "scores": {"red": 0.1}},
            "9": {"label": "striped", "score": 0.7, "scores": {"striped": 0.7, "circle": 0.6}},
        },
    )


def test_scene_sets_filter_by_concept_and_keep_the_sets_apart():
    org = scene_org()
    sets = CS.scene_sets(org, "red", "blue", n=10)
    assert len(sets["ids_a"]) == 10 and len(sets["ids_b"]) == 10
    for i in sets["ids_a"]:
        cols = {o["colour"] for o in org.heldout_specs[i]["objects"]}
        assert "red" in cols and "blue" not in cols
    for i in sets["ids_b"]:
        cols = {o["colour"] for o in org.heldout_specs[i]["objects"]}
        assert "blue" in cols and "red" not in cols
    both = CS.scene_sets(org, "red", "blue", n=64, exclusive=False)
    assert set(both["ids_a"]) & set(both["ids_b"]) and both["available_a"] > sets["available_a"]
    one = CS.scene_sets(org, "striped red circle", "plain blue", n=64)
    assert all(
        any(
            o["colour"] == "red" and o["shape"] == "circle" and o["texture"] == "striped"
            for o in org.heldout_specs[i]["objects"]
        )
        for i in one["ids_a"]
    )
    assert CS.parse_filter("Red  top left") == ("red", "top left")


def test_unknown_concepts_and_empty_sets_are_refused_naming_what_is_known():
    org = scene_org()
    with pytest.raises(ValueError) as e:
        CS.scene_sets(org, "purple", "blue")
    assert "unknown concept 'purple'" in str(e.value) and "colour: red, green, blue, yellow" in str(e.value)
    assert "shape: circle, square, triangle" in str(e.value)
    with pytest.raises(ValueError, match="names two colours"):
        CS.parse_filter("red blue")
    with pytest.raises(ValueError, match="different filters"):
        CS.scene_sets(org, "red", "red")
    with pytest.raises(ValueError, match="name a concept"):
        CS.scene_sets(org, "", "red")
    with pytest.raises(ValueError, match=r"set A \(red blue\)|names two"):
        CS.scene_sets(org, "red blue", "green")
    tiny = org_of(
        heldout_specs=[
            {
                "objects": [
                    {"colour": "red", "shape": "circle", "texture": "plain", "position": "top left", "box": [0, 0, 10]}
                ]
            }
        ]
        * 3
    )
    with pytest.raises(ValueError, match=r"set B \(blue\) matches 0 of the 3 heldout scenes"):
        CS.scene_sets(tiny, "red", "blue")
    with pytest.raises(ValueError, match="scene source"):
        CS.scene_sets(org, "red", "blue", source="web")


def test_a_concepts_planted_features_are_its_labelled_ones_else_its_best_match():
    org = scene_org()
    assert CS.concept_features(org, "red") == [3]  # 4 is labelled red at IoU 0.1 only
    assert CS.concept_features(org, "circle") == [9]  # no feature labelled circle: the best IoU
    assert CS.concept_features(org, "triangle") == []
    with pytest.raises(ValueError, match="unknown concept"):
        CS.concept_features(org, "hexagon")


def test_ranges_are_declared_once():
    assert (bounds.CONTRAST_IMAGES.lo, bounds.CONTRAST_IMAGES.hi) == (2, 64)
    assert bounds.STEER_CLAMPS.hi == 8 and bounds.CONTRAST_ROWS.hi == 500
