"""A feature's label says how well it holds: its IoU beside it, "weak" under the paper's mean IoU,
"broad" for a feature that fires on a large share of all patches, and no label at all under the
concept explainer's floor. Checked on the zoo's own labels, whichever features they are."""

from __future__ import annotations

import pytest

from backend.sae.label_quality import NO_CONCEPT_IOU, WEAK_IOU, quality, with_quality


def test_words_beside_a_label():
    assert with_quality({"label": "green", "score": 0.1091}) == "green (weak: IoU 0.11)"
    assert (
        with_quality({"label": "square", "score": 0.7865}, 0.43) == "square (IoU 0.79; broad: fires on 43% of patches)"
    )
    assert with_quality({"label": "red", "score": 0.62}, 0.05) == "red (IoU 0.62)"
    assert with_quality({"label": "circle", "score": 0.0022}) == "no concept (best guess circle, IoU 0.00)"
    assert with_quality({"label": "", "score": 0.0}, unlabelled="?") == "?"
    assert quality({"label": "a dog", "explainer": "model"}) == "named by the model, not scored"


@pytest.fixture(scope="module")
def org():
    from backend.sae import loading

    return loading.get_organism("zoo")


def _zoo_features(org, keep) -> list[int]:
    """The zoo features whose label (dict) and density pass `keep`, in id order."""
    density = org.index.tensors["density"]
    return [int(f) for f in sorted(org.labels, key=int) if keep(org.labels[f], float(density[int(f)]))]


def test_the_zoo_tab_shows_weak_broad_and_unfounded_labels_as_such(org):
    from components.features import pages as feature_pages
    from components.features.figures import label_shown

    weak = _zoo_features(org, lambda lab, d: lab.get("label") and NO_CONCEPT_IOU <= lab["score"] < WEAK_IOU)
    assert weak, "the zoo has labels under the paper's mean IoU"
    lab = org.labels[str(weak[0])]
    words = f"weak: IoU {lab['score']:.2f}"
    assert label_shown(org, weak[0]).startswith(f"{lab['label']} ({words}")
    table = feature_pages.list_features("zoo", lab["label"], "IoU")
    assert any(str(c).startswith(f"{lab['label']} ({words}") for c in table["concept"])
    header = feature_pages.open_feature("zoo", weak[0])[0]
    assert "wb-weak" in header and words in header
    # a feature firing on a quarter of all patches says so whatever its IoU (the zoo's broad ones are
    # mostly under the explainer's floor, shown as no concept, so this may check none)
    for f in _zoo_features(org, lambda lab, d: lab.get("label") and lab["score"] >= NO_CONCEPT_IOU and d >= 0.25):
        assert "; broad: fires on " in label_shown(org, f), f
    unfounded = _zoo_features(org, lambda lab, d: lab.get("label") and lab["score"] < NO_CONCEPT_IOU)
    assert unfounded, "the zoo has features whose best concept explains nothing"
    for f in unfounded:
        assert label_shown(org, f).startswith("no concept (best guess "), f
