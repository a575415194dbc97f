"""A feature's label says how well it holds: its IoU beside it, "weak" under the paper's mean IoU,
"broad" for a feature that fires on a large share of all patches, and no label at all under the
concept explainer's floor. Checked on the zoo's own labels (features 57 "square" and 17 "yellow")."""

from __future__ import annotations

import pytest

from backend.sae.label_quality import quality, with_quality


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


def test_the_zoo_tab_shows_weak_and_broad_labels_as_such(org):
    from components.features import pages as feature_pages
    from components.features.figures import label_shown

    assert label_shown(org, 57) == "square (weak: IoU 0.14)"
    assert label_shown(org, 17).startswith("yellow (IoU 0.71; broad: fires on ")
    table = feature_pages.list_features("zoo", "square", "IoU")
    assert "square (weak: IoU 0.14)" in set(table["concept"])
    header = feature_pages.open_feature("zoo", 57)[0]
    assert "wb-weak" in header and "weak: IoU 0.14" in header
