"""The MathNeuro tour (beside the Math neurons tab): where the tiny Llama keeps its arithmetic."""

from __future__ import annotations

import html

import plotly.graph_objects as go

from backend.core import colors
from components.tab import Step, Tour
from components.tour import plots as P

MATH_K, MATH_N = 0.03, 64  # the organism's operating point (tests/organisms/test_math_organism.py)
# Arithmetic blue, story questions orange, in every step.
MATH_COLOUR, STORY_COLOUR = colors.PAIR[1], colors.PAIR[0]


def _bench():
    from backend.mathneuro import service as S

    return S, S.bench("zoo")


def _percent_axis(fig) -> None:
    fig.update_yaxes(title="exact answers (%)", range=[0, 112], tickvals=[0, 20, 40, 60, 80, 100])


def baseline():
    S, b = _bench()
    base = b.baseline()
    ex = b.samples(S.Setting("mathneuro", MATH_K, MATH_N, 1.0), k=2)
    names = ["arithmetic questions", "questions about a story"]
    vals = [base["math"] * 100, base["nonmath"] * 100]
    fig = go.Figure(
        go.Bar(
            y=names[::-1],
            x=vals[::-1],
            orientation="h",
            marker_color=[STORY_COLOUR, MATH_COLOUR],
            text=[f"{v:.1f}%" for v in vals[::-1]],
            textposition="outside",
            cliponaxis=False,
            hovertemplate="%{y}: %{x:.2f}% exact<extra></extra>",
        )
    )
    fig.update_xaxes(title="exact answers on held-out questions (%)", range=[0, 108])
    P.finish(fig, height=300, margin=dict(l=170))
    m, n = ex[0], ex[1]
    cap = (
        f"A tiny language model, trained here, answers two kinds of questions it never saw: arithmetic "
        f"(“{html.escape(m['prompt'])}” → <b>{html.escape(m['before'])}</b>) and questions about a short "
        f"story (“{html.escape(n['prompt'])}” → <b>{html.escape(n['before'])}</b>). It gets "
        f"{base['math']:.0%} of the arithmetic and {base['nonmath']:.0%} of the story questions right. "
        f"Question: are there weights that only matter for arithmetic?"
    )
    return fig, cap, {"baseline": base, "examples": ex}


def prune():
    S, b = _bench()
    base = b.baseline()
    mn = b.evaluate(S.Setting("mathneuro", MATH_K, MATH_N, 0.0))
    rnd = b.evaluate(S.Setting("random", MATH_K, MATH_N, 0.0))
    groups = ["unchanged", "MathNeuro weights off", "as many random weights off"]
    fig = go.Figure()
    for key, name, col in (("math", "arithmetic", MATH_COLOUR), ("nonmath", "story questions", STORY_COLOUR)):
        vals = [r[key] * 100 for r in (base, mn, rnd)]
        fig.add_trace(
            go.Bar(
                x=groups,
                y=vals,
                name=name,
                marker_color=col,
                text=[f"{v:.0f}%" for v in vals],
                textposition="outside",
                cliponaxis=False,
                hovertemplate="%{x}<br>" + name + ": %{y:.2f}%<extra></extra>",
            )
        )
    _percent_axis(fig)
    P.finish(fig, legend_top=True, barmode="group")
    share = mn["n_params"]
    d_math, d_story = base["math"] - mn["math"], base["nonmath"] - mn["nonmath"]
    story = "barely move" if d_story < 0.03 else ("fall far less" if d_math > 3 * d_story else "fall too")
    cap = (
        f"MathNeuro compares, weight by weight, how much each one is used on arithmetic and on ordinary "
        f"text, and keeps those important <i>only</i> for arithmetic: {share:,} weights here. Switch them "
        f"off and arithmetic falls from {base['math']:.0%} to <b>{mn['math']:.0%}</b>, while the story "
        f"questions {story} ({base['nonmath']:.0%} → {mn['nonmath']:.0%}). Switching off as many "
        f"random weights does little ({rnd['math']:.0%} arithmetic). Much of the model's arithmetic lives "
        f"in a small set of weights that can be found."
    )
    return fig, cap, {"baseline": base, "mathneuro_pruned": mn, "random_pruned": rnd}


def scale():
    S, b = _bench()
    factors = [0.0, 0.5, 1.0, 1.1, 1.25, 1.5]
    curve = b.scale_curve(S.Setting("mathneuro", MATH_K, MATH_N, 1.0), factors)
    fig = go.Figure()
    for key, name, col in (("math", "arithmetic", MATH_COLOUR), ("nonmath", "story questions", STORY_COLOUR)):
        fig.add_trace(
            go.Scatter(
                x=factors,
                y=[c[key] * 100 for c in curve],
                mode="lines+markers",
                name=name,
                line=dict(color=col, width=2.5),
                marker=dict(size=8),
                hovertemplate="factor %{x}<br>" + name + ": %{y:.2f}%<extra></extra>",
            )
        )
    fig.add_vline(x=1.0, line_dash="dot", line_color=colors.NEUTRAL, line_width=1)
    fig.update_xaxes(title="factor applied to the MathNeuro weights (0 = off, 1 = unchanged)")
    _percent_axis(fig)
    P.finish(fig, legend_top=True)
    at = {c["factor"]: c for c in curve}
    gain = (at[1.1]["math"] - at[1.0]["math"]) * 100
    lo, hi = min(c["nonmath"] for c in curve), max(c["nonmath"] for c in curve)
    story = f"at {lo:.0%}" if f"{lo:.0%}" == f"{hi:.0%}" else f"between {lo:.0%} and {hi:.0%}"
    cap = (
        f"Turn the same weights down or up by a factor and re-test. Only the arithmetic line moves: "
        f"story questions stay {story}. The paper boosts them by 1.1; here that changes arithmetic "
        f"by {gain:+.1f} points ({at[1.0]['math']:.1%} → {at[1.1]['math']:.1%}). One knob, one skill, "
        f"the rest untouched."
    )
    return fig, cap, {"factors": factors, "curve": curve}


TOUR = Tour(
    "math",
    "Math neurons — where arithmetic lives (MathNeuro)",
    "math-llama",
    [
        Step("The model answers two kinds of questions", baseline),
        Step("Switch off the math-only weights", prune),
        Step("Turn them down or up", scale),
    ],
)
