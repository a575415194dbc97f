"""The MambaLRP tour (beside the Relevance tab): which word decided the tiny Mamba's answer."""

from __future__ import annotations

import html

import numpy as np
import plotly.graph_objects as go

from backend.core import colors
from components.tab import Step, Tour
from components.tour import plots as P

REL_TEXT = "the story was long and the camera was old but the ending was superb"


def _model():
    from backend.lrp import service as svc

    return svc, svc.load_text("zoo")


def _share(rel, positions) -> tuple[int, float]:
    """The word position with the largest relevance and its share of the total |relevance| over words."""
    r = np.asarray(rel, dtype=float)
    pos = np.asarray(positions, dtype=int)
    i = int(pos[np.argmax(r[pos])])
    return i, float(r[i] / max(np.abs(r[pos]).sum(), 1e-12))


def answer():
    svc, m = _model()
    res = svc.explain_text(m, REL_TEXT, ["mambalrp"])
    labels = m.task.get("labels", ["positive", "negative"])
    scores = [float(res["top_next"].get(lab, np.nan)) for lab in labels]
    fig = go.Figure(
        go.Bar(
            y=labels,
            x=scores,
            orientation="h",
            text=[f"{s:.1f}" for s in scores],
            textposition="outside",
            cliponaxis=False,
            marker_color=[colors.POSITIVE if lab == res["target"] else colors.NEUTRAL for lab in labels],
            hovertemplate="%{y}: logit %{x:.4f}<extra></extra>",
        )
    )
    fig.update_xaxes(title="the model's score for each answer (logit)")
    P.finish(fig, f"Review: “{html.escape(REL_TEXT)}”", height=300)
    cap = (
        f"A tiny Mamba language model, trained here, reads a short movie review and answers with one "
        f"word: <b>positive</b> or <b>negative</b>. The bars are its scores for the two answers — it "
        f"says <b>{html.escape(res['target'])}</b>. The question for the rest of this tour: "
        f"<i>which word made it say so?</i>"
    )
    return fig, cap, {"text": REL_TEXT, "answer": res["target"], "scores": dict(zip(labels, scores))}


def lrp():
    svc, m = _model()
    res = svc.explain_text(m, REL_TEXT, ["mambalrp"])
    rel = res["relevance"]["mambalrp"]
    i, share = _share(rel, res["word_positions"])
    fig = go.Figure(P.token_bars(res["tokens"], rel, "MambaLRP"))
    fig.update_xaxes(**P.token_axis(res["tokens"], i))
    fig.update_yaxes(title="relevance", zeroline=True)
    P.finish(fig, f"MambaLRP: how much each word pushed the answer “{html.escape(res['target'])}”")
    word = html.escape(res["tokens"][i])
    cap = (
        f"<b>MambaLRP</b> divides the model's score among the words of the review: each bar is one word's "
        f"share, its <i>relevance</i>. A red bar pushed towards “{html.escape(res['target'])}”, a blue bar "
        f"pushed against it. The word <b>{word}</b> gets <b>{share:.0%}</b> of the relevance on the review's "
        f"words. That is the right word to point at, and we can be sure of it: we built the training data so "
        f"that only sentiment words decide the answer, and everything else is filler. (The last bar is the "
        f"question “sentiment:” itself, which always takes a share; “&lt;bos&gt;” marks the start.)"
    )
    return fig, cap, {"tokens": res["tokens"], "relevance": rel, "top_word": res["tokens"][i], "top_share": share}


def baseline():
    svc, m = _model()
    res = svc.explain_text(m, REL_TEXT, ["mambalrp", "gi"])
    words = res["word_positions"]
    i_l, s_l = _share(res["relevance"]["mambalrp"], words)
    i_g, s_g = _share(res["relevance"]["gi"], words)
    fig = P.figure(
        2, 1, shared_xaxes=True, vertical_spacing=0.1, subplot_titles=("MambaLRP", "Gradient × Input (common baseline)")
    )
    fig.add_trace(P.token_bars(res["tokens"], res["relevance"]["mambalrp"], "MambaLRP"), 1, 1)
    fig.add_trace(P.token_bars(res["tokens"], res["relevance"]["gi"], "Gradient × Input"), 2, 1)
    fig.update_xaxes(**P.token_axis(res["tokens"], i_l), row=2, col=1)
    fig.update_yaxes(title="relevance")
    P.finish(fig)
    gi = np.asarray(res["relevance"]["gi"])
    sup = words[int(np.argmax(np.asarray(res["relevance"]["mambalrp"])[words]))]
    gi_sup = float(gi[sup] / max(np.abs(gi[words]).sum(), 1e-12))
    verdict = (
        "Plain gradients are distorted by some of Mamba's internal parts (its gates and "
        "normalisations); MambaLRP corrects for them, so its explanation points at the word that "
        "actually mattered."
        if gi_sup < s_l
        else "On this review the baseline agrees with MambaLRP; the next steps compare them on many reviews."
    )
    cap = (
        f"The same question answered by <b>Gradient × Input</b>, the usual quick explanation (bottom). "
        f"Its strongest word is <b>{html.escape(res['tokens'][i_g])}</b> and the evidence word "
        f"“{html.escape(res['tokens'][sup])}” gets {gi_sup:.0%} of the relevance, against {s_l:.0%} "
        f"with MambaLRP (top). {verdict}"
    )
    return (
        fig,
        cap,
        {
            "mambalrp_top": res["tokens"][i_l],
            "gi_top": res["tokens"][i_g],
            "evidence_share": {"mambalrp": s_l, "gi": gi_sup},
        },
    )


def conservation():
    from backend.lrp.forward import RULES

    svc, m = _model()
    variants = (
        [("all four rules", tuple(RULES))]
        + [
            (f"without the {name} rule", tuple(x for x in RULES if x != r))
            for r, name in (("ssm", "state-space (ssm)"), ("gate", "gate"))
        ]
        + [("norm rule only", ("norm",))]
    )
    sums, logit = [], None
    for _, rules in variants:
        res = svc.explain_text(m, REL_TEXT, ["mambalrp"], rules=rules)
        sums.append(float(res["sum_relevance"]["mambalrp"]))
        logit = float(res["logit"])
    names = [v[0] for v in variants]
    balanced = [abs(s - logit) < 1e-3 * abs(logit) for s in sums]
    fig = go.Figure(
        go.Bar(
            y=names[::-1],
            x=sums[::-1],
            orientation="h",
            marker_color=[colors.PAIR[1] if b else colors.PAIR[0] for b in balanced[::-1]],
            hovertemplate="%{y}<br>sum of relevance %{x:.6g}<extra></extra>",
        )
    )
    fig.add_vline(
        x=logit,
        line_dash="dash",
        line_width=1.4,
        line_color=colors.NEUTRAL,
        layer="above",
        annotation_text=f"model score = {logit:.2f}",
        annotation_position="top",
    )
    fig.update_xaxes(title="sum of all relevance")
    P.finish(fig, height=340)
    err = [abs(s - logit) / abs(logit) for s in sums]
    cap = (
        f"MambaLRP is a set of rules, one for each kind of part inside Mamba, for handing the score back "
        f"to the words. A check anyone can read: the shares of all words should add up to the model's score, "
        f"{logit:.2f} (dashed line) — nothing invented, nothing lost. With all of MambaLRP's rules it "
        f"does (the difference, {abs(sums[0] - logit):.0e}, is rounding). Remove one rule and the books no "
        f"longer balance: the sum is {sums[1]:.1f} without the state-space rule and {sums[2]:.1f} without the "
        f"gate rule. Each rule is needed."
    )
    return fig, cap, {"logit": logit, "sums": dict(zip(names, sums)), "relative_error": dict(zip(names, err))}


def faithfulness():
    from backend.lrp import heldout

    _, m = _model()
    h = heldout.heldout_sentiment(m, ["mambalrp", "gi"], n=20)
    res = h["results"]
    fig = go.Figure()
    for meth, col in (("mambalrp", colors.PAIR[1]), ("gi", colors.PAIR[0])):
        r = res[meth]
        fig.add_trace(
            go.Scatter(
                x=np.asarray(r["grid"]) * 100,
                y=r["morf"],
                mode="lines",
                line=dict(color=col, width=2.5),
                name=f"{h['labels'][meth]}: most relevant removed first",
            )
        )
    fig.add_trace(
        go.Scatter(
            x=np.asarray(res["random"]["grid"]) * 100,
            y=res["random"]["morf"],
            mode="lines",
            line=dict(color=colors.NEUTRAL, width=1.8, dash="dot"),
            name="random order",
        )
    )
    fig.update_traces(hovertemplate="%{x:.0f}% removed: score %{y:.3f}")
    fig.update_xaxes(title="% of words removed")
    fig.update_yaxes(title="score of the original answer")
    P.finish(fig, hovermode="x unified", legend=dict(x=0.99, xanchor="right", y=0.99))
    d = {k: float(res[k]["delta_af"]) for k in res}
    verdict = (
        "MambaLRP's order (blue) does; Gradient × Input's (orange) does little better than a random order (dotted)."
        if d["mambalrp"] > d["gi"] > d["random"] - 0.5 and d["mambalrp"] > 2 * abs(d["gi"])
        else "Compare MambaLRP's order (blue), Gradient × Input's (orange) and a random order (dotted)."
    )
    cap = (
        f"The real test, on {h['n']} reviews the model never saw: remove words one by one, most "
        f"relevant first, and watch the score of the answer. A faithful explanation makes it collapse "
        f"at once. {verdict} The paper's faithfulness score ΔA<sup>F</sup> (higher is better): "
        f"MambaLRP {d['mambalrp']:.2f}, Gradient × Input {d['gi']:.2f}, random {d['random']:.2f}."
    )
    return fig, cap, {"n": h["n"], "delta_af": d, "precision_at_k": {k: res[k]["precision_at_k"] for k in res}}


TOUR = Tour(
    "relevance",
    "Relevance — which word decided? (MambaLRP)",
    "mamba-sentiment",
    [
        Step("The model and its answer", answer),
        Step("MambaLRP finds the deciding word", lrp),
        Step("A common baseline scatters it", baseline),
        Step("The relevance adds up to the score", conservation),
        Step("Delete the relevant words: the answer collapses", faithfulness),
    ],
)
