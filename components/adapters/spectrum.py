"""The Adapters tab's first panel: one layer's spectrum and its PiSSA split (W_res against W), a
pinned analysis drawn over the next, and the layer list a model pick fills."""

from __future__ import annotations

import html
from pathlib import Path

import gradio as gr
import numpy as np
import plotly.graph_objects as go

from backend.core import bounds, gpu
from backend.pissa import service
from components.links import deep_links as links
from components.adapters.common import COLORS, _call, _exported, _write_json, export_name
from components.common import fail, themed
from components.mpl import pyplot
from components.report import redraw


def describe_analysis(key, a: dict) -> dict:
    """A shown layer analysis as plain numbers: what a pin keeps (the two spectra, no tensors)."""
    return {
        "model": key,
        "layer": a["layer"],
        "shape": list(a["shape"]),
        "rank": int(a["rank"]),
        "init": a["init"],
        "singular_values": [float(v) for v in a["singular_values"]],
        "residual_singular_values": [float(v) for v in a["residual_singular_values"]],
    }


def pin_label(p: dict) -> str:
    return f"pinned: {p['model']} · {p['layer']} · r {p['rank']} · {p['init']}"


def spectrum_figure(a: dict, pinned: dict | None = None) -> go.Figure:
    """The key figure: the layer's spectrum and W_res's; a pinned analysis is drawn over it on the same
    axes (its W spectrum and principal part faint, dotted)."""
    sv = np.asarray(a["singular_values"])
    res = np.asarray(a["residual_singular_values"])
    r = a["rank"]
    idx = np.arange(1, len(sv) + 1)
    # W_res has rank n − r: its last r singular values are round-off, not shown on the log axis
    res = res[res > sv[0] * 1e-6]
    fig = go.Figure()
    fig.add_vrect(x0=0.5, x1=r + 0.5, fillcolor=COLORS["pissa"], opacity=0.12, line_width=0)
    fig.add_trace(
        go.Scatter(x=idx, y=sv, mode="lines+markers", name="W", marker=dict(size=4), line=dict(color=COLORS["W"]))
    )
    fig.add_trace(
        go.Scatter(
            x=idx[:r],
            y=sv[:r],
            mode="markers",
            name=f"principal part (top {r}) → adapter AB",
            marker=dict(size=8, color=COLORS["pissa"]),
        )
    )
    fig.add_trace(
        go.Scatter(
            x=np.arange(1, len(res) + 1),
            y=res,
            mode="lines",
            name="W_res (frozen)",
            line=dict(color=COLORS["W_res"], dash="dash"),
        )
    )
    if pinned:
        psv = np.asarray(pinned["singular_values"])
        pres = np.asarray(pinned["residual_singular_values"])
        pres = pres[pres > psv[0] * 1e-6]
        pidx = np.arange(1, len(psv) + 1)
        fig.add_trace(
            go.Scatter(
                x=pidx,
                y=psv,
                mode="lines",
                name=pin_label(pinned) + " · W",
                line=dict(color=COLORS["W"], dash="dot", width=2),
                opacity=0.7,
            )
        )
        fig.add_trace(
            go.Scatter(
                x=np.arange(1, len(pres) + 1),
                y=pres,
                mode="lines",
                name=pin_label(pinned) + " · W_res",
                line=dict(color=COLORS["W_res"], dash="dot", width=2),
                opacity=0.7,
            )
        )
    fig.update_layout(
        title=f"Singular values of {a['layer']} {tuple(a['shape'])}" + (" · pinned one dotted" if pinned else ""),
        xaxis_title="index i",
        yaxis_title="σᵢ (log scale)",
        yaxis_type="log",
        height=360,
        margin=dict(l=50, r=20, t=50, b=45),
        legend=dict(orientation="h", yref="container", y=0, yanchor="bottom"),
    )
    return themed(fig)


HIST_BINS = 80


def histogram_figure(a: dict) -> go.Figure:
    """W's and W_res's entries counted here in shared bins: the page gets 80 bars per matrix, not the
    20,000 sampled entries (Gradio's front end copies every shown figure's value on each status
    message of any event, so a figure that large cost each click on the page ~100 ms)."""
    w, res = np.asarray(a["w_sample"], dtype=float), np.asarray(a["w_res_sample"], dtype=float)
    both = np.concatenate([w, res])
    lo, hi = (float(both.min()), float(both.max())) if both.size else (0.0, 1.0)
    edges = np.linspace(lo, hi if hi > lo else lo + 1.0, HIST_BINS + 1)
    centers, width = (edges[:-1] + edges[1:]) / 2, float(edges[1] - edges[0])
    fig = go.Figure()
    for values, name, color in (
        (w, f"W (std {a['w_std']:.3g})", COLORS["W"]),
        (res, f"W_res (std {a['w_res_std']:.3g})", COLORS["W_res"]),
    ):
        counts, _ = np.histogram(values, bins=edges)
        fig.add_trace(
            go.Bar(
                x=centers,
                y=counts,
                width=width,
                name=name,
                opacity=0.6,
                marker_color=color,
                marker_line_width=0,
                hovertemplate="%{x:.3g} ± " + f"{width / 2:.2g}" + ": %{y} entries<extra>" + name + "</extra>",
            )
        )
    fig.update_layout(
        barmode="overlay",
        bargap=0,
        title="Distribution of entries: W vs W_res",
        xaxis_title="value",
        yaxis_title="count",
        height=360,
        margin=dict(l=50, r=20, t=50, b=45),
        legend=dict(orientation="h", yref="container", y=0, yanchor="bottom"),
    )
    return themed(fig)


def layer_stats_md(a: dict) -> str:
    return (
        f"**{html.escape(a['layer'])}** {tuple(a['shape'])}, rank **{a['rank']}** "
        f"(`{a['init']}`): the top {a['rank']} singular values hold **{a['energy_top_r']:.1%}** of "
        f"‖W‖²_F.  W_res + AB reproduces W to a relative error of "
        f"**{a['reconstruction_rel_error']:.1e}**; the adapted layer's output at init differs from "
        f"the base layer's by **{a['init_output_rel_gap']:.1e}** (relative).  "
        f"absmax W = {a['w_absmax']:.3g} → W_res = {a['w_res_absmax']:.3g}: a narrower range for "
        f"the 4-bit quantizer."
    )


def _analysis_png(a: dict, path: Path) -> None:
    with pyplot() as plt:
        fig, ax = plt.subplots(1, 2, figsize=(11, 4))
        sv = np.asarray(a["singular_values"])
        ax[0].semilogy(np.arange(1, len(sv) + 1), sv, "k.-", ms=3, label="W")
        res = np.asarray(a["residual_singular_values"])
        res = res[res > sv[0] * 1e-6]
        ax[0].semilogy(np.arange(1, len(res) + 1), res, "--", color=COLORS["W_res"], label="W_res")
        ax[0].axvspan(0.5, a["rank"] + 0.5, color=COLORS["pissa"], alpha=0.15, label="principal part")
        ax[0].set_xlabel("index")
        ax[0].set_ylabel("singular value")
        ax[0].legend()
        ax[0].set_title(f"{a['layer']} spectrum (r = {a['rank']})")
        ax[1].hist(a["w_sample"], bins=80, alpha=0.6, color=COLORS["W"], label="W")
        ax[1].hist(a["w_res_sample"], bins=80, alpha=0.6, color=COLORS["W_res"], label="W_res")
        ax[1].legend()
        ax[1].set_title("entries of W and W_res")
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)


@gpu(duration=60)
def analyse(key, layer, rank, init, pinned=None, progress=gr.Progress()):
    if not key:
        fail("Pick a model first.")
    if not layer:
        fail("Pick a layer first.")
    names = _call(service.layer_names, key)
    if layer not in names:
        fail(
            f"{str(layer)[:60]!r} is not a linear layer of {key}: choose one of "
            f"{', '.join(names[:12])}{' …' if len(names) > 12 else ''}. Nothing was computed."
        )
    _call(bounds.check_choice, "init", init, bounds.PISSA_INITS)
    progress(0.1, desc="SVD of the layer")
    a = _call(service.layer_analysis, key, layer, _call(bounds.check, bounds.PISSA_RANK, rank), init)

    def write(folder):
        png = folder / export_name("pissa", key, layer, f"r{a['rank']}", ext="png")
        _analysis_png(a, png)
        return [_write_json(folder, export_name("pissa", key, layer, f"r{a['rank']}", ext="json"), a), str(png)]

    files = _exported(write)
    return spectrum_figure(a, pinned), histogram_figure(a), layer_stats_md(a), files, describe_analysis(key, a)


def on_model_change(key, progress=gr.Progress()):
    """The model's layers and a default one; when the page's deep link names this model and one of
    its layers, that layer (the restore sets the model, which lands here)."""
    if not key:
        return gr.update(choices=[], value=None), gr.update()
    names = _call(service.layer_names, key, lambda f, d: progress(f, desc=d))
    default = next((n for n in names if n.endswith("fc2") or n.endswith("q_proj")), names[0])
    query = links.current_query()
    # the link's layer goes with the link's model (absent from the link: the default one)
    if links.decode(query.get("pissa-model", "null")) in (key, None) and "pissa-layer" in query:
        wanted = links.decode(query.get("pissa-layer", "null"))
        default = wanted if wanted in names else default
    return gr.update(choices=names, value=default), gr.update()


@redraw
def pin(current):
    """Compare: the pin is the shown analysis's numbers (describe_analysis), drawn dotted; no model work."""
    if not current:
        fail("Nothing to pin yet: analyse a layer first.")
    return current, spectrum_figure(current, current), f"{pin_label(current)} (dotted in the spectrum)"


@redraw
def unpin(current):
    return None, (spectrum_figure(current) if current else gr.skip()), ""
