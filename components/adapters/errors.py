"""The Adapters tab's second panel: the NF4 quantization error QLoRA, LoftQ and QPiSSA leave, per
layer at one rank and as a layers × rank heatmap."""

from __future__ import annotations

import gradio as gr
import numpy as np
import plotly.graph_objects as go

from backend.core import colors as C
from backend.core import gpu
from backend.pissa import service
from components.adapters.common import COLORS, _call, _exported, _write_json, export_name
from components.common import fail, themed


ERROR_COLUMNS = ["layer", "shape", "qlora", "loftq-1", "loftq-5", "qpissa-1", "qpissa-5"]


def heatmap_figure(t: dict) -> go.Figure:
    h = t["heatmap"]
    z = np.array([[np.nan if v is None else v for v in row] for row in h["values"]], dtype=float)
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=[str(r) for r in h["ranks"]],
            y=list(range(len(h["layers"]))),
            colorscale=C.ACTIVATION_PLOTLY,
            zmin=0,
            zmax=1,
            colorbar=dict(title="error<br>reduction"),
        )
    )
    fig.update_yaxes(
        tickmode="array", tickvals=list(range(len(h["layers"]))), ticktext=h["layers"], autorange="reversed"
    )
    fig.update_layout(
        title=f"{h['method'].upper()} error-reduction ratio, layers × rank",
        xaxis_title="rank r",
        height=max(300, 60 + 22 * len(h["layers"])),
        margin=dict(l=140, r=20, t=50, b=45),
    )
    return themed(fig)


def bars_figure(t: dict) -> go.Figure:
    rows = t["rows"]
    fig = go.Figure()
    for col in ERROR_COLUMNS[3:]:
        fig.add_trace(
            go.Bar(
                x=list(range(len(rows))),
                y=[np.nan if r[col] is None else r[col] for r in rows],
                name=col.upper(),
                marker_color=COLORS[col],
            )
        )
    fig.update_xaxes(tickmode="array", tickvals=list(range(len(rows))), ticktext=[r["layer"] for r in rows])
    fig.update_layout(
        barmode="group",
        title=f"Error-reduction ratio at r = {t['rank']} (QLoRA = 0)",
        yaxis_title="1 − ‖W − (Q + AB)‖* / ‖W − nf4(W)‖*",
        height=360,
        margin=dict(l=60, r=20, t=50, b=80),
        legend=dict(orientation="h", yref="container", y=0, yanchor="bottom"),
    )
    return themed(fig)


@gpu(duration=300)
def errors(key, rank, heat, progress=gr.Progress()):
    if not key:
        fail("Pick a model first.")
    method, _, iters = str(heat).partition("-")
    t = _call(
        service.error_table,
        key,
        int(rank),
        heat_method=(method, int(iters or 1)),
        progress=lambda f, d: progress(f, desc=d),
    )
    table = [
        [r["layer"], "×".join(map(str, r["shape"]))]
        + [("n/a" if r[c] is None else round(r[c], 4)) for c in ERROR_COLUMNS[2:]]
        for r in t["rows"]
    ]
    s = t["summary"]
    skipped = f" (n/a on {', '.join(s['skipped_layers'])}: rank above the layer's own)" if s["skipped_layers"] else ""
    md = (
        f"At r = {t['rank']}{skipped}: QPiSSA-1 beats LoftQ-1 on **{s['qpissa1_beats_loftq1']}/{s['layers']}** "
        f"layers, QPiSSA-5 on **{s['qpissa5_beats_loftq1']}/{s['layers']}**. Mean ratios: "
        + ", ".join(f"{k} {v:.3f}" for k, v in s["mean"].items())
        + ". (Paper, LLaMA-2-7B: QPiSSA reduces the error by ~19 % more than QLoRA.)"
    )

    def write(folder):
        csv = folder / export_name("pissa-errors", key, f"r{t['rank']}", ext="csv")
        csv.write_text("\n".join([",".join(ERROR_COLUMNS)] + [",".join(map(str, r)) for r in table]))
        return [_write_json(folder, export_name("pissa-errors", key, f"r{t['rank']}", ext="json"), t), str(csv)]

    files = _exported(write)
    return table, bars_figure(t), heatmap_figure(t), md, files
