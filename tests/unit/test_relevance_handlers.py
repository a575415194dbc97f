"""The Relevance tab's handlers called as plain functions on the zoo, with no app running: what each
answers for its outputs, in their order, and the refusals in the tab's words (gr.Error)."""

from __future__ import annotations

import gradio as gr
import numpy as np
import pytest

from components.relevance import handlers as H

TEXT = "the plot was dull but the cast was brilliant and the music was lovely"
METHODS = ["mambalrp", "gi"]
RULES = ["norm", "silu", "ssm", "gate"]


@pytest.fixture(scope="module")
def explained():
    return H.explain("zoo", TEXT, METHODS, RULES, "", True)


def test_explain_answers_heatmap_bars_conservation_files_and_result(explained):
    heat, bars, cons, jpath, ppath, res = explained
    # the zoo's prompt format: <bos>, the words, "sentiment:"
    assert res["tokens"] == ["<bos>", *TEXT.split(), "sentiment:"] and res["template_positions"] == [0, 15]
    assert res["methods"] == METHODS and heat.count("wb-token") == len(res["tokens"]) * len(METHODS)
    assert [t.name for t in bars.data] == ["MambaLRP", "Gradient×Input"]
    assert "| MambaLRP |" in cons
    assert jpath.endswith(".json") and ppath.endswith(".png")
    # MambaLRP conserves: its relevance sums to the explained logit
    assert res["sum_relevance"]["mambalrp"] == pytest.approx(res["logit"], rel=1e-3)


def test_pin_draws_both_on_one_scale_and_unpin_clears(explained):
    res = explained[-1]
    last = H.describe(TEXT, METHODS, ["norm", "silu", "gate"], "", None)  # the SSM rule ablated
    kept, heat, pinned = H.pin("zoo", last, res, False)
    assert kept == last and "Pinned" in pinned and "without SSM" in pinned and "wb-relevance-heatmap" in heat
    none, heat_again, cleared = H.unpin(res, False)
    assert none is None and cleared == "" and "wb-relevance-heatmap" in heat_again
    with pytest.raises(gr.Error, match="Explain a text first"):
        H.pin("zoo", None, None, False)


def test_bars_follow_the_template_toggle(explained):
    res = explained[-1]
    without, with_template = H.redraw_bars(res, True, False), H.redraw_bars(res, True, True)
    n_words = len(res["tokens"]) - len(res["template_positions"])
    assert len(without.data[0].x) == n_words and len(with_template.data[0].x) == len(res["tokens"])
    assert isinstance(H.redraw_bars(None, True, False), type(gr.skip()))


def test_refusals_come_before_any_model_load():
    with pytest.raises(gr.Error):
        H.explain("zoo", "", METHODS, RULES, "", True)
    with pytest.raises(gr.Error):
        H.explain("zoo", TEXT, ["nope"], RULES, "", True)
    # a bound is refused in its own words (the guard shows a ValueError's text as the tab's message)
    with pytest.raises(ValueError, match="held-out sentences must be a whole number between 20 and 240"):
        H.heldout("zoo", "zoo", METHODS, 10_000)
    with pytest.raises(ValueError, match="held-out example"):
        H.example_image(-1)


def test_heldout_table_then_a_sentence_by_its_row():
    table, curves, scatter, note, res = H.heldout("zoo", "zoo", METHODS, 20)
    assert res["n"] == 20 and res["source"] == "zoo" and "held-out sentences" in note
    assert [row[0] for row in table] == ["MambaLRP", "Gradient×Input", "Random"]
    update, view, csv = H.sentence_table(res)
    assert update["visible"] is True and view == "" and str(csv).endswith("sentences.csv")
    first = update["value"].iloc[0].tolist()
    shown = H.open_sentence(res, True, first)
    assert "wb-relevance-heatmap" in shown
    assert isinstance(H.open_sentence(res, True, ["not a number"]), type(gr.skip()))


def test_held_choices_follow_the_picked_model():
    sets, row = H.held_choices("zoo", None)
    assert sets["value"] == "zoo" and row["visible"] is False


def test_longrange_marks_each_methods_top_tokens():
    from backend.lrp import service as svc

    text = svc.longrange_example()
    heat, plot, data = H.longrange("zoo", False, text, METHODS)
    assert set(data["top_tokens"]) == set(METHODS) and all(len(v) == 10 for v in data["top_tokens"].values())
    # every method's ten tokens are drawn (labelled and unlabelled points are separate traces)
    assert "wb-relevance-heatmap" in heat and sum(len(t.x) for t in plot.data) == 10 * len(METHODS)


def test_image_example_and_its_explanation():
    img = H.example_image(0)
    assert img.dtype == np.uint8 and img.shape[0] == img.shape[1] == 160
    fig, md, path = H.explain_image(img, METHODS, RULES)
    assert md.startswith("**Prediction:**") and "Σ relevance" in md and str(path).endswith(".png")
    # the input, then each method's map over a faint copy of the input
    assert [type(t).__name__ for t in fig.data] == ["Image"] + ["Image", "Heatmap"] * len(METHODS)
