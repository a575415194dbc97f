"""The PiSSA tour (beside the Adapters tab): start the adapter from the layer's strongest directions.
LoRA and PiSSA keep one colour each here and in the Adapters tab (backend.core.colors.METHOD_COLORS)."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from backend.core import colors
from components.tab import Step, Tour
from components.tour import plots as P

PISSA_MODEL, PISSA_LAYER, PISSA_RANK = "pissa-toy", "fc2", 8
PISSA_COLOUR, LORA_COLOUR = colors.METHOD_COLORS["pissa"], colors.METHOD_COLORS["lora"]


def spectrum():
    from backend.pissa import service as S

    a = S.layer_analysis(PISSA_MODEL, PISSA_LAYER, PISSA_RANK)
    sv = np.asarray(a["singular_values"], dtype=float)
    fig = go.Figure(
        go.Bar(
            x=np.arange(1, len(sv) + 1),
            y=sv,
            width=0.9,
            marker_color=[PISSA_COLOUR if i < PISSA_RANK else colors.NEUTRAL for i in range(len(sv))],
            hovertemplate="direction %{x}<br>singular value %{y:.4g}<extra></extra>",
        )
    )
    fig.update_xaxes(title="direction (sorted by strength)")
    fig.update_yaxes(title="singular value")
    P.finish(fig, f"layer {PISSA_LAYER} of a small digit classifier, {a['shape'][0]}×{a['shape'][1]} weights")
    cap = (
        f"Adapters fine-tune a big model cheaply by training a small add-on per layer. A layer is a "
        f"grid of numbers; its <b>singular values</b> (bars) measure how strong each of its independent "
        f"directions is. A few are much stronger than the rest: the top {PISSA_RANK} (PiSSA's colour) hold "
        f"<b>{a['energy_top_r']:.0%}</b> of the layer's total strength (its “energy”). <b>PiSSA</b> starts the "
        f"add-on on exactly these directions; the usual <b>LoRA</b> starts it from random noise and zero."
    )
    return (
        fig,
        cap,
        {
            "layer": PISSA_LAYER,
            "shape": a["shape"],
            "rank": PISSA_RANK,
            "energy_top_r": a["energy_top_r"],
            "singular_values": sv.tolist(),
        },
    )


def split():
    from backend.pissa import service as S

    a = S.layer_analysis(PISSA_MODEL, PISSA_LAYER, PISSA_RANK)
    lim = float(a["w_absmax"])
    bins = dict(start=-lim, end=lim, size=2 * lim / 80)
    fig = go.Figure()
    fig.add_trace(
        go.Histogram(x=a["w_sample"], xbins=bins, marker_color=colors.NEUTRAL, opacity=0.75, name="original weights W")
    )
    # The frozen remainder is what LoRA-style training leaves untouched: drawn in the tab's W_res colour.
    fig.add_trace(
        go.Histogram(
            x=a["w_res_sample"],
            xbins=bins,
            marker_color=LORA_COLOUR,
            opacity=0.7,
            name=f"frozen remainder after PiSSA takes the top {PISSA_RANK} directions",
        )
    )
    fig.update_traces(hovertemplate="weights %{x}<br>count %{y}")
    fig.update_xaxes(title="weight value")
    fig.update_yaxes(title="count")
    P.finish(fig, barmode="overlay", legend_top=True)
    cap = (
        f"PiSSA splits the layer in two: the strong directions become the trainable add-on, the rest "
        f"stays frozen. Together they give back the original layer exactly (error "
        f"{a['reconstruction_rel_error']:.0e}), so the model behaves the same before training starts. "
        f"The frozen remainder (blue) is narrower than the original (grey): its spread drops from "
        f"{a['w_std']:.3f} to {a['w_res_std']:.3f}. Narrow values are easier to store in few bits — "
        f"next step."
    )
    return (
        fig,
        cap,
        {
            "reconstruction_rel_error": a["reconstruction_rel_error"],
            "w_std": a["w_std"],
            "w_res_std": a["w_res_std"],
            "w_absmax": a["w_absmax"],
            "w_res_absmax": a["w_res_absmax"],
        },
    )


def quant():
    from backend.pissa import service as S

    e = S.error_table(PISSA_MODEL, PISSA_RANK)
    mean = e["summary"]["mean"]
    keys = [
        ("qlora", "QLoRA (LoRA on 4-bit weights)"),
        ("loftq-1", "LoftQ, 1 pass"),
        ("loftq-5", "LoftQ, 5 passes"),
        ("qpissa-1", "QPiSSA, 1 pass"),
        ("qpissa-5", "QPiSSA, 5 passes"),
    ]
    vals = [float(mean[k]) * 100 for k, _ in keys]
    fig = go.Figure(
        go.Bar(
            y=[n for _, n in keys][::-1],
            x=vals[::-1],
            orientation="h",
            text=[f"{v:.0f}%" for v in vals[::-1]],
            textposition="outside",
            cliponaxis=False,
            marker_color=[PISSA_COLOUR if k.startswith("qpissa") else colors.NEUTRAL for k, _ in keys][::-1],
            hovertemplate="%{y}<br>%{x:.2f}% of QLoRA's error removed<extra></extra>",
        )
    )
    fig.update_xaxes(title="quantisation error removed (% of QLoRA's error), mean over the layers", range=[0, 105])
    P.finish(fig, height=340, margin=dict(l=200))
    cap = (
        f"To save memory the frozen part is stored with only 4 bits per number, which loses precision. "
        f"Bars: how much of that loss each method wins back, measured on this network's layers. Plain "
        f"QLoRA wins back nothing (its add-on starts at zero); LoftQ recovers {mean['loftq-1']:.0%}; "
        f"<b>QPiSSA</b>, which quantises only PiSSA's narrow remainder, recovers "
        f"<b>{mean['qpissa-1']:.0%}</b> in one pass and {mean['qpissa-5']:.0%} in five."
    )
    return fig, cap, {"rank": PISSA_RANK, "mean_error_reduction": mean}


def race():
    from backend.pissa import service as S
    from backend.pissa.race import RaceConfig

    losses: dict[str, list[float]] = {"lora": [], "pissa": []}
    summary = {}
    for ev in S.race_stream(
        PISSA_MODEL, RaceConfig(methods=("lora", "pissa"), seeds=(0,), steps=80), session="guided-tour"
    ):
        if "method" in ev:
            losses[ev["method"]].append(ev["loss"])
        elif ev.get("done"):
            summary = ev["summary"]
    fig = go.Figure()
    for meth, name in (("lora", "LoRA"), ("pissa", "PiSSA")):
        fig.add_trace(
            go.Scatter(
                x=np.arange(1, len(losses[meth]) + 1),
                y=losses[meth],
                mode="lines",
                name=name,
                line=dict(color=colors.METHOD_COLORS[meth], width=2.5),
                hovertemplate="step %{x}: loss %{y:.4f}",
            )
        )
    fig.update_xaxes(title="training step")
    fig.update_yaxes(title="loss (lower is better)", type="log")
    P.finish(fig, hovermode="x unified", legend=dict(x=0.99, xanchor="right", y=0.99))
    last = summary.get("mean_loss_last10", {})
    faster = last.get("pissa", 1.0) < last.get("lora", 0.0)
    verdict = (
        "PiSSA's loss falls faster from the first steps, because it trains the directions that matter "
        "instead of random ones."
        if faster
        else "In this run LoRA kept up with PiSSA."
    )
    cap = (
        f"Now train both add-ons, same size (rank {PISSA_RANK}), same settings, on a new job: the "
        f"network learnt odd digits and must now learn the even ones. {verdict} Loss over the last 10 of "
        f"{len(losses['pissa'])} steps: PiSSA <b>{last.get('pissa', float('nan')):.2f}</b>, LoRA "
        f"<b>{last.get('lora', float('nan')):.2f}</b>."
    )
    return fig, cap, {"steps": len(losses["pissa"]), "loss": losses, "mean_loss_last10": last}


TOUR = Tour(
    "adapters",
    "Adapters — start from what matters (PiSSA)",
    "pissa-toy",
    [
        Step("A layer has a few strong directions", spectrum),
        Step("PiSSA splits the layer", split),
        Step("Smaller error when compressed to 4 bits", quant),
        Step("PiSSA learns faster than LoRA", race),
    ],
)
