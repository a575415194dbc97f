"""The Features tab's layout handlers called as plain functions on the zoo, with no app running:
what each answers for its outputs, in their order, and the refusals in the tab's words (gr.Error)."""

from __future__ import annotations

from types import SimpleNamespace

import gradio as gr
import pandas as pd
import pytest

from backend.sae import analysis, loading, pages
from components.features import handlers as H
from components.features.pages import firing_columns


@pytest.fixture(scope="module")
def org():
    return loading.get_organism("zoo")


def test_a_typed_feature_gets_its_own_default_clamp(org):
    assert H.clamp_for("zoo", 3) == analysis.default_clamp_value(org, 3)
    assert H.clamp_for("zoo", 5) == analysis.default_clamp_value(org, 5)
    assert H.clamp_for("zoo", org.n_features) == gr.skip() and H.clamp_for("zoo", None) == gr.skip()


def test_a_clicked_row_opens_its_feature_and_a_bad_row_is_refused(org):
    rows = pd.DataFrame({"feature": [7, 2], "label": ["a", "b"]})
    page = H.pick_row("zoo", rows, SimpleNamespace(index=[1, 0]))
    assert len(page) == 12 and "Feature 2 ·" in page[0]
    assert "Feature 7 ·" in H.pick_row("zoo", rows.values.tolist(), SimpleNamespace(index=0))[0]
    with pytest.raises(gr.Error, match="Pick a row of the feature list"):
        H.pick_row("zoo", rows, SimpleNamespace(index=[5, 0]))


def test_the_zoo_shows_its_planted_concepts(org):
    out = H.planted_views("zoo")
    assert len(out) == 10
    explain, concepts, suppress, sort, query = out[:5]
    assert concepts["visible"] is True and suppress["visible"] is True
    assert suppress["value"] == analysis.steering_defaults(org)["suppress"]
    assert sort["value"] == "IoU" and "IoU" in sort["choices"] and query["label"] == "search concept"


def test_a_new_model_blanks_the_last_analysis_and_steering(org):
    out = H.cleared("zoo")
    assert len(out) == 9 and out[1] == out[7] == H.AGAIN
    assert list(out[3].columns) == firing_columns(org) and out[3].empty


def test_the_first_view_is_the_top_feature_page(org):
    top = pages.feature_table(org, "", "iou")[0]["feature"]
    out = H.first_view("zoo", top)
    assert len(out) == 12 and f"Feature {top} ·" in out[0]
    assert out[-3:] != (gr.skip(),) * 3  # no link: the ids and clamp value follow the page


def test_the_zoo_tab_opens_on_a_clamp_that_works_on_the_first_scene(org):
    """The tab opens on the feature its steering was calibrated for (red), with that feature's clamp
    value, so the first "Generate" on the first held-out scene (a green circle) names the feature's
    concept where the caption without the clamp did not."""
    from backend.sae import scenes as S
    from components.features.steering import scene_picker

    d = analysis.steering_defaults(org)
    red = d["feature"]
    assert red == int(org.summary["steering"]["colour_features"]["red"])
    img = S.render(org.heldout_specs[int(scene_picker(org)["value"])])[0]
    r = analysis.steer_caption(
        org, img, red, analysis.default_clamp_value(org, red), positions=d["positions"], suppress_family=d["suppress"]
    )
    assert r["names_concept"] == {"baseline": False, "steered": True}, r
    assert r["edited_positions"] > 0
