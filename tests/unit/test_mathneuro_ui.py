"""The Math neurons tab's handlers and figures without a served app: one rule for numbers, the
export's title, pinned results and hover values."""
import math

import gradio as gr
import pytest

from backend.mathneuro import service
from components import math_neurons as mn


@pytest.fixture
def no_model(monkeypatch):
    """Any handler that reaches the model fails the test: a refused value computes nothing."""
    def bench(*_a, **_k):
        raise AssertionError("the model was asked for")
    monkeypatch.setattr(service, "bench", bench)


@pytest.mark.parametrize("k, factor, n, message", [
    (500, 0.0, 64, r"K must be between 1 % and 30 % \(got 500 %\)"),
    (0.5, 0.0, 64, r"K must be between 1 % and 30 % \(got 0.5 %\)"),
    (3, 2.5, 64, r"scale factor must be between 0 and 2 \(got 2.5\)"),
    (3, -0.1, 64, r"scale factor must be between 0 and 2"),
    (3, 0.0, 0, r"number of samples must be a whole number between 1 and 64 \(got 0\)"),
    (3, 0.0, 2.5, r"whole number between 1 and 64 \(got 2.5\)"),
    (3, 0.0, 65, r"between 1 and 64 \(got 65\)"),
    ("nan", 0.0, 64, r"K must be a finite number between 1 % and 30 %, not nan"),
    (3, float("inf"), 64, r"scale factor must be a finite number between 0 and 2, not inf"),
    (3, 0.0, "-inf", r"finite number between 1 and 64, not -inf"),
    (None, 0.0, 64, r"K must be a number between 1 % and 30 %; the box is empty"),
    (3, "abc", 64, r"scale factor must be a number between 0 and 2; got 'abc'"),
])
def test_out_of_range_numbers_are_refused_before_any_model_work(no_model, k, factor, n, message):
    live, figure2, curve, consistency, ask, export, _ = mn.make_handlers("zoo")
    calls = [lambda: live("MathNeuro", k, factor, n), lambda: ask("two plus two ?", "MathNeuro", k, factor, n),
             lambda: export("MathNeuro", k, factor, n)]
    if factor == 0.0:  # these take K and the sample count only
        calls += [lambda: figure2(k, n), lambda: curve("MathNeuro", k, n), lambda: consistency(k, n)]
    for call in calls:
        with pytest.raises(gr.Error, match=message):
            call()


def test_the_valid_ends_are_accepted_unchanged():
    s = mn._setting("Random (same count)", 30, 2, 1)
    assert (s.method, s.top_k, s.factor, s.n_samples) == ("random", 0.3, 2.0, 1)
    s = mn._setting("MathNeuro", "1", "0", "64")
    assert (s.top_k, s.factor, s.n_samples) == (0.01, 0.0, 64)
    assert math.isclose(mn._setting("MathNeuro", 2.5, 1.1, 8).top_k, 0.025)
