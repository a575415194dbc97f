"""The Memorization tab's results for the memorized prompts (the paper's table): the table's rows,
the neurons-per-prompt histogram and the summary card. Apart from the single-prompt pictures in
figures.py: one button fills them all, from one results_table answer."""

from __future__ import annotations

import math

import plotly.graph_objects as go

from backend.core import colors as C
from components.common import themed
from components.memorization.figures import _fmt


def hist_plot(rows: list[dict]) -> go.Figure:
    counts = [r["n_neurons"] for r in rows]
    top = max(counts + [1])
    fig = go.Figure(
        go.Histogram(
            x=counts,
            xbins=dict(start=-0.5, end=top + 0.5, size=1),
            marker_color=C.QUALITATIVE[0],
            name="memorized prompts",
            hovertemplate="%{y} prompt(s) with %{x} neuron(s)<extra></extra>",
        )
    )
    fig.update_layout(
        height=260,
        margin=dict(l=40, r=10, t=30, b=40),
        title=dict(text="Neurons per memorized prompt", font=dict(size=13)),
        xaxis=dict(title="number of neurons found", dtick=1),
        yaxis=dict(title="prompts"),
        showlegend=False,
    )
    return themed(fig)


TABLE_HEADERS = [
    "prompt",
    "neurons",
    "SSIM on",
    "SSIM off",
    "SSIM random off",
    "diversity on",
    "diversity off",
    "alignment on",
    "alignment off",
    "score on",
    "score off",
    "score random off",
]
TABLE_WIDTHS = ["16%"] + ["7.6%"] * 11  # "alignment" fits a column at 1440 px


def _r(x, nd=3):
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else round(x, nd)


def table_rows(rows: list[dict]) -> list[list]:
    return [
        [
            r["prompt"],
            r["n_neurons"],
            _r(r["ssim_on"]),
            _r(r["ssim_off"]),
            _r(r["ssim_random_off"]),
            _r(r["diversity_on"]),
            _r(r["diversity_off"]),
            _r(r["alignment_on"], 2),
            _r(r["alignment_off"], 2),
            _r(r["score_on"]),
            _r(r["score_off"]),
            _r(r["score_random_off"]),
        ]
        for r in rows
    ]


def _effect_words(s: dict) -> str:
    """What switching the found neurons off did, said only over prompts where some were found."""
    n_loc = s.get("n_localized", s["n_prompts"])
    if not n_loc or s.get("share_below_theta_off") is None:
        above = s.get("n_above_on")
        why = (
            f" ({above} of {s['n_prompts']} score above θ<sub>mem</sub> {s['theta_mem']:.3f} with every neuron on)"
            if above is not None
            else ""
        )
        return (
            f"<b>No neurons were found for any of them</b>{why}: there is nothing to switch off, so "
            "there is no effect to report; "
        )
    of = "" if n_loc == s["n_prompts"] else f" ({n_loc} of {s['n_prompts']} had neurons to switch off)"
    return (
        f"Median neurons per localized prompt <b>{s['median_neurons']:g}</b>; with them off, "
        f"<b>{100 * s['share_below_theta_off']:.0f} %</b>{of} fall below θ<sub>mem</sub> (random "
        f"neurons of the same count: {100 * s['share_below_theta_random']:.0f} %); "
    )


def summary_html(s: dict) -> str:
    return (
        "<div class='wb-card' style='min-height:0' id='memo-summary-card'>"
        f"<b>{s['n_prompts']} memorized prompts</b> (search at guidance {s['search_guidance']:g}; "
        f"{s['n_skipped']} skipped by the seed filter, {s['n_relaxed']} refined against the relaxed "
        f"threshold). "
        + _effect_words(s)
        + (
            f"median SSIM to the training image {s['median_ssim_on']:.2f} → <b>{s['median_ssim_off']:.2f}</b> "
            f"(random: {s['median_ssim_random_off']:.2f}). "
            if s.get("median_ssim_on") is not None
            else f"no training images here: median diversity across seeds {_fmt(s.get('median_diversity_on'), 2)} "
            f"→ <b>{_fmt(s.get('median_diversity_off'), 2)}</b>. "
        )
        + f"Median localisation time {s['median_localisation_s']:.1f} s.</div>"
    )
