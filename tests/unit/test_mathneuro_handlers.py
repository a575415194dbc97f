"""The Math neurons tab's handlers called as plain functions on the zoo, with no app running: what
each answers for its outputs, in their order, and the refusals in the tab's words (gr.Error)."""

from __future__ import annotations

import gradio as gr
import pytest

from components.math_neurons import handlers as H
from components.math_neurons.words import ASK_EXAMPLES

DEFAULT = ("MathNeuro", H.DEFAULTS["k"], H.DEFAULTS["factor"], H.DEFAULTS["n"])


@pytest.fixture(scope="module")
def shown():
    return H.live("zoo", *DEFAULT)


def test_live_answers_card_figure_samples_layers_and_the_shown_numbers(shown):
    card, fig, rows, layers, desc = shown
    assert desc["method"] == "mathneuro" and (desc["k"], desc["factor"], desc["n"]) == (3, 0.0, 64)
    # the organism's planted truth: pruning the math-specific weights breaks math, not the rest
    assert desc["math"] < desc["base_math"] - 0.3 and desc["nonmath"] >= desc["base_nonmath"] - 0.05
    assert "MathNeuro set pruned" in card and "K = 3 %" in card
    assert [t.name for t in fig.data] == ["unmodified", "now: MathNeuro, K 3 %, pruned"]
    assert {r[0] for r in rows} == {"math", "non-math"} and all(r[4].endswith(("✓", "✗")) for r in rows)
    assert layers.data  # the per-layer counts of the selected weights


def test_pin_keeps_the_shown_numbers_and_unpin_clears(shown):
    desc = shown[-1]
    kept, fig = H.pin(desc)
    assert kept == desc and len(fig.data) == 3 and fig.data[2].name.startswith("pinned: ")
    none, fig = H.unpin(desc)
    assert none is None and len(fig.data) == 2
    with pytest.raises(gr.Error, match="Nothing to pin yet"):
        H.pin(None)
    assert H.unpin(None)[1] == gr.skip()


def test_a_refusal_puts_the_shown_setting_back_in_the_boxes(shown):
    desc = {**shown[-1], "k": 7, "factor": 1.1, "n": 16}
    assert [u["value"] for u in H.restore(desc)] == [7, 1.1, 16]
    assert [u["value"] for u in H.restore(None)] == [H.DEFAULTS[k] for k in ("k", "factor", "n")]
    with pytest.raises(gr.Error, match="K must be between 1 % and 30 %"):
        H.check("MathNeuro", 31, 0.0, 64)
    with pytest.raises(gr.Error, match="Unknown method"):
        H.check("Magic", 3, 0.0, 64)


def test_ask_answers_before_and_after_and_refuses_empty_or_long_questions():
    out = H.ask("zoo", ASK_EXAMPLES["zoo"][0], *DEFAULT)
    assert "<b>unmodified:</b>" in out and "<b>modified:</b>" in out
    with pytest.raises(gr.Error, match="Type a question first"):
        H.ask("zoo", "  ", *DEFAULT)
    with pytest.raises(gr.Error, match="too long"):
        H.ask("zoo", "x" * 401, *DEFAULT)


def test_words_follow_the_model_and_keep_a_question_the_user_typed():
    explain, prompt, examples, table = H.words_for("zoo", None, ASK_EXAMPLES["hub"][0])
    assert "organism" in explain and prompt["value"] == ASK_EXAMPLES["zoo"][0]
    assert examples.raw_samples == [[q] for q in ASK_EXAMPLES["zoo"][1:]]
    assert table["label"] == "Sample answers (greedy, ✓ = exact match)"
    assert "value" not in H.words_for("zoo", None, "my own question")[1]


def test_the_first_view_is_the_default_settings_result(shown):
    out = H.first_view("zoo", *DEFAULT, None, None, None, None)
    assert len(out) == 6 and out[-1] == gr.skip()
    assert out[-2] == shown[-1]  # the same numbers as the live call (cached per setting)
