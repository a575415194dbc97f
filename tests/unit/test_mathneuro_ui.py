"""The Math neurons tab's handlers and figures without a served app: one rule for numbers, the
export's title, pinned results and hover values."""

import math

import gradio as gr
import pytest

from backend.mathneuro import service
from components.math_neurons import figures as figures
from components.math_neurons import handlers as H


@pytest.fixture
def no_model(monkeypatch):
    """Any handler that reaches the model fails the test: a refused value computes nothing."""

    def bench(*_a, **_k):
        raise AssertionError("the model was asked for")

    monkeypatch.setattr(service, "bench", bench)


@pytest.mark.parametrize(
    "k, factor, n, message",
    [
        (500, 0.0, 64, r"K must be between 1 % and 30 % \(got 500 %\)"),
        (0.5, 0.0, 64, r"K must be between 1 % and 30 % \(got 0.5 %\)"),
        (3, 2.5, 64, r"scale factor must be between 0 and 2 \(got 2.5\)"),
        (3, -0.1, 64, r"scale factor must be between 0 and 2"),
        (3, 0.0, 0, r"number of samples must be a whole number between 1 and 64 \(got 0\)"),
        (3, 0.0, 2.5, r"whole number between 1 and 64 \(got 2.5\)"),
        (3, 0.0, 65, r"between 1 and 64 \(got 65\)"),
        ("nan", 0.0, 64, r"K must be between 1 % and 30 % \(got 'nan'\)"),
        (3, float("inf"), 64, r"scale factor must be between 0 and 2 \(got 'inf'\)"),
        (3, 0.0, "-inf", r"whole number between 1 and 64 \(got '-inf'\)"),
        (None, 0.0, 64, r"K must be between 1 % and 30 % \(got an empty box\)"),
        (3, "abc", 64, r"scale factor must be between 0 and 2 \(got 'abc'\)"),
    ],
)
def test_out_of_range_numbers_are_refused_before_any_model_work(no_model, k, factor, n, message):
    calls = [
        lambda: H.live("zoo", "MathNeuro", k, factor, n),
        lambda: H.ask("zoo", "two plus two ?", "MathNeuro", k, factor, n),
        lambda: H.export("zoo", "MathNeuro", k, factor, n),
        lambda: H.check("MathNeuro", k, factor, n),
    ]
    if factor == 0.0:  # these take K and the sample count only
        calls += [
            lambda: H.figure2("zoo", k, n),
            lambda: H.curve("zoo", "MathNeuro", k, n),
            lambda: H.consistency("zoo", k, n),
        ]
    for call in calls:
        with pytest.raises(gr.Error, match=message):
            call()


def test_the_valid_ends_are_accepted_unchanged():
    s = H._setting("Random (same count)", 30, 2, 1)
    assert (s.method, s.top_k, s.factor, s.n_samples) == ("random", 0.3, 2.0, 1)
    s = H._setting("MathNeuro", "1", "0", "64")
    assert (s.top_k, s.factor, s.n_samples) == (0.01, 0.0, 64)
    assert math.isclose(H._setting("MathNeuro", 2.5, 1.1, 8).top_k, 0.025)


def test_the_export_says_what_it_shows(tmp_path):
    """The export's title names the set, what was done to it, K, the samples and the model (it once
    read 'MathNeuro · mathneuro')."""
    title = figures.setting_title(
        {"method": "mathneuro", "top_k": 0.03, "factor": 0.0, "n_samples": 64}, "zoo:math-llama@main"
    )
    assert title == "MathNeuro set pruned · K = 3 % · 64 samples per set · model math-llama (zoo)"
    assert "mathneuro" not in title
    title = figures.setting_title(
        {"method": "random", "top_k": 0.1, "factor": 1.1, "n_samples": 8}, "hub:meta-llama/Llama-3.2-1B-Instruct@main"
    )
    assert title == (
        "Random (same count) set scaled × 1.1 · K = 10 % · 8 samples per set · "
        "model meta-llama/Llama-3.2-1B-Instruct (hub)"
    )
    base = {"math": 0.7, "nonmath": 1.0}
    state = {
        "title": title,
        "setting": {"method": "random"},
        "baseline": base,
        "figure2": {"random": base},
        "scale_curve": [{"factor": 0.0, **base}, {"factor": 1.0, **base}],
        "layers": {"0": {"fraction": 0.1, "count": 3}, "other": {"fraction": 0.0, "count": 0}},
    }
    figures.export_png(state, tmp_path / "x.png")
    assert (tmp_path / "x.png").read_bytes()[:4] == b"\x89PNG"


def _desc(method, k, factor, m, nm):
    return {
        "method": method,
        "k": k,
        "factor": factor,
        "n": 64,
        "math": m,
        "nonmath": nm,
        "base_math": 0.78,
        "base_nonmath": 1.0,
    }


def test_a_pinned_result_sits_beside_the_current_one_on_the_same_axes():
    now, pin = _desc("mathneuro", 3, 0.0, 0.05, 0.995), _desc("mathneuro", 10, 0.0, 0.0, 0.9)
    fig = figures.accuracy_plot(now)
    assert [t.name for t in fig.data] == ["unmodified", "now: MathNeuro, K 3 %, pruned"]
    fig = figures.accuracy_plot(now, pin)
    assert [t.name for t in fig.data] == [
        "unmodified",
        "now: MathNeuro, K 3 %, pruned",
        "pinned: MathNeuro, K 10 %, pruned",
    ]
    assert [list(t.y) for t in fig.data] == [[78.0, 100.0], [5.0, 99.5], [0.0, 90.0]]
    assert fig.data[2].marker.pattern.shape == "/" and not fig.data[1].marker.pattern.shape
    assert fig.layout.barmode == "group" and list(fig.layout.yaxis.range) == [0, 112]
    rnd = figures.accuracy_plot(now, _desc("random", 3, 1.1, 0.8, 1.0))
    assert rnd.data[2].name == "pinned: Random, K 3 %, × 1.1"


def test_every_figure_of_the_tab_gives_exact_values_on_hover():
    from backend.mathneuro.service import Setting

    s = Setting("mathneuro", 0.03, 64, 0.0)
    base = {"math": 0.78, "nonmath": 1.0}
    figs = {
        "accuracy": figures.accuracy_plot(_desc("mathneuro", 3, 0.0, 0.05, 0.995), _desc("random", 3, 0.0, 0.77, 1.0)),
        "figure2": figures.figure2_plot(base, {"mathneuro": {"math": 0.05, "nonmath": 0.99}}, 0.03),
        "curve": figures.curve_plot([{"factor": 0.0, "math": 0.05, "nonmath": 0.99}, {"factor": 1.0, **base}], base, s),
        "layers": figures.layers_plot(
            {"0": {"fraction": 0.0123, "count": 1234}, "other": {"fraction": 0.02, "count": 5}}, s
        ),
        "consistency": figures.consistency_plot({"1": {"mean": 0.5, "min": 0.4}, "4": {"mean": 0.9, "min": 0.8}}, s),
    }
    for name, fig in figs.items():
        for tr in fig.data:
            t = tr.hovertemplate or ""
            assert "%{y:.1f} %" in t or "%{y:.2f} %" in t, (name, tr.name, t)
            assert "<extra></extra>" in t, (name, tr.name)
    assert "<b>unmodified</b><br>math: %{x:.1f} %" in figs["figure2"].data[0].hovertemplate
    assert "<b>MathNeuro set pruned</b>" in figs["figure2"].data[1].hovertemplate
    assert "factor %{x:g}" in figs["curve"].data[0].hovertemplate
    assert list(figs["layers"].data[0].hovertext) == ["layer 0", "lm_head"]
    assert "%{customdata:,} weights" in figs["layers"].data[0].hovertemplate


def test_the_accuracy_figure_title_is_the_result_in_words():
    fig = figures.accuracy_plot(_desc("mathneuro", 3, 0.0, 0.05, 0.995))
    assert fig.layout.title.text == "math 78 % → 5 %,<br>non-math 100 % → 99.5 %"


def test_bar_labels_and_title_agree():
    fig = figures.accuracy_plot(_desc("random", 3, 0.0, 0.745, 1.0))
    assert list(fig.data[1].text) == ["74.5 %", "100 %"] and "→ 74.5 %" in fig.layout.title.text
