"""The Relevance tab's held-out evaluation, drawn: the MoRF/LeRF curves, the ΔA^F table beside the
paper's values, the per-sentence table and one sentence's view, Σ R against the logit. They live
apart from figures.py, which draws one explanation: these draw an evaluation over many sentences
(a sentence's view reuses that module's heatmap)."""

from __future__ import annotations

import html

from backend.core import colors as C
from backend.lrp.methods import LABELS
from backend.lrp.tokens import visible
from components.common import themed
from components.relevance.figures import heatmap_html

# ΔA^F the paper reports for Mamba-130M fine-tuned on SST-2, shown beside the measured values
PAPER_DAF = {"mambalrp": 1.978, "ig": 0.857, "lrp_ln": 0.877, "gi": 0.078, "random": -0.012}


def curves_plot(hres: dict):
    import plotly.graph_objects as go

    fig = go.Figure()
    for i, meth in enumerate(hres["methods"]):
        r = hres["results"][meth]
        c = C.qualitative(i)
        fig.add_scatter(x=r["grid"], y=r["morf"], name=f"{LABELS[meth]} MoRF", line=dict(color=c))
        fig.add_scatter(x=r["grid"], y=r["lerf"], name=f"{LABELS[meth]} LeRF", line=dict(color=c, dash="dash"))
    fig.update_layout(
        height=520,
        margin=dict(l=40, r=10, t=40, b=40),
        legend=dict(orientation="h", yref="container", y=0, yanchor="bottom", x=0, font=dict(size=10)),
        title=f"Target logit while removing words ({hres['n']} held-out sentences)",
        xaxis_title=f"fraction of words replaced by {hres.get('neutral', '<unk>')}",
        yaxis_title="target logit",
    )
    return themed(fig)


def daf_table(hres: dict) -> list[list]:
    rows = []
    for meth in sorted(hres["methods"], key=lambda m: -hres["results"][m]["delta_af"]):
        r = hres["results"][meth]
        paper = PAPER_DAF.get(meth)
        prec = r.get("precision_at_k")
        rows.append(
            [
                LABELS[meth],
                round(r["delta_af"], 3),
                round(r["delta_af_se"], 3),
                round(r["a_lerf"], 3),
                round(r["a_morf"], 3),
                "" if prec is None else round(prec, 3),
                "" if paper is None else paper,
            ]
        )
    return rows


# |Σ R − logit| / |logit| of MambaLRP per sentence; the table's label says the formula
CONSERVATION_COLUMN = "conservation error (MambaLRP)"


def sentence_widths(columns) -> list[str]:
    """Column widths of the per-sentence table in px: the sentence wide, each number column as wide
    as its header's longest word (Gradio otherwise squeezes them and breaks headers letter by
    letter); a narrow window scrolls the table sideways instead."""

    def fit(name: str) -> str:
        return f"{max(80, 8 * max(len(w) for w in str(name).split()) + 20)}px"

    return ["44px", "240px", "92px", "92px"] + [fit(c) for c in list(columns)[4:]]


def sentence_frame(hres: dict):
    """The per-sentence table: one row per sentence (its number in the input), ΔA^F per method and
    MambaLRP's conservation error; numeric columns sort as numbers."""
    import pandas as pd

    methods = hres["methods"]
    rows = []
    for rec in hres.get("sentences") or []:
        row = {
            "#": rec["i"],
            "sentence": rec["text"],
            "label": "" if rec.get("label") is None else str(rec["label"]),
            "target": rec["target"],
        }
        for meth in methods:
            row[f"ΔA^F {LABELS[meth]}"] = round(rec["delta_af"][meth], 3)
        if "mambalrp" in rec["sum_r"]:
            f = rec["logit"]["mambalrp"]
            row[CONSERVATION_COLUMN] = round(abs(rec["sum_r"]["mambalrp"] - f) / max(abs(f), 1e-12), 4)
        rows.append(row)
    df = pd.DataFrame(rows)
    kinds = ["number", "str", "str", "str"] + ["number"] * (len(df.columns) - 4)
    return df, kinds


def sentence_html(hres: dict, number: int, normalise: bool = True) -> str:
    """One held-out sentence as the evaluation saw it: its heatmap per method (the relevance the
    faithfulness curves were computed from) and its numbers."""
    rec = next((r for r in hres.get("sentences") or [] if r["i"] == number), None)
    if rec is None:
        return ""
    res = {"tokens": rec["tokens"], "methods": hres["methods"], "relevance": rec["relevance"]}
    numbers = " · ".join(f"{html.escape(LABELS[m])} {rec['delta_af'][m]:+.3f}" for m in hres["methods"])
    label = "" if rec.get("label") is None else f" · label <b>{html.escape(str(rec['label']))}</b>"
    return (
        f"<div class='wb-card' style='min-height:0'><b>Sentence #{rec['i']}</b>{label} · explained "
        f"target <code>{html.escape(visible(rec['target']))}</code><br><span class='wb-muted'>ΔA^F: "
        f"{numbers}</span>{heatmap_html(res, normalise)}</div>"
    )


def scatter_plot(hres: dict):
    import plotly.graph_objects as go

    fig = go.Figure()
    allv = []
    for meth, color in (("mambalrp", C.PAIR[1]), ("gi", C.PAIR[0])):
        r = hres["results"].get(meth)
        if r is None:
            continue
        fig.add_scatter(
            x=r["sum_r"], y=r["logit"], mode="markers", name=LABELS[meth], marker=dict(color=color, size=6, opacity=0.7)
        )
        allv += r["sum_r"] + r["logit"]
    if allv:
        lo, hi = min(allv), max(allv)
        fig.add_scatter(x=[lo, hi], y=[lo, hi], mode="lines", name="Σ R = f", line=dict(color=C.NEUTRAL, dash="dot"))
    fig.update_layout(
        height=520,
        margin=dict(l=40, r=10, t=40, b=40),
        title="Conservation on the held-out set",
        legend=dict(orientation="h", yref="container", y=0, yanchor="bottom", x=0),
        xaxis_title="Σ relevance",
        yaxis_title="target logit f",
    )
    return themed(fig)
