"""Plotly building blocks shared by the tours' figures: one figure size that fits a 1440×1000
screen beside the tour's controls, token bars plotted by position, images and activation maps
with exact values on hover."""

from __future__ import annotations

import html

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from backend.core import colors

# Tall enough for two rows of images, short enough that the figure's bottom axis stays on screen
# at 1440×1000 under the app header, the tour's controls and the step header.
HEIGHT = 470
# Plotly never wraps a title: one longer than the figure runs off its edge. The narrowest the tour's
# figure gets is about 545 px (presenter view at 1000 px, beside the caption), where a 14 px title holds
# about 70 characters and a 12 px axis or panel title about 80; wrapped with a margin for wide glyphs.
TITLE_CHARS, AXIS_CHARS = 64, 68
PANEL_TITLE_SIZE = 12  # make_subplots' default 16 px overlaps neighbouring panels' titles at 545 px
LINE_PX = 20  # one more line of a title or an axis title


def wrap(text: str, width: int) -> str:
    """`text` in lines of at most `width` visible characters (tags and entities count as what they
    show), broken at spaces; text that already has line breaks is left as it is."""
    import re

    if "<br>" in text:
        return text

    def shown(t: str) -> int:
        return len(html.unescape(re.sub(r"<[^>]*>", "", t)))

    lines: list[str] = []
    for word in text.split(" "):
        if lines and shown(lines[-1] + " " + word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return "<br>".join(lines)


def figure(rows: int = 1, cols: int = 1, **kw) -> go.Figure:
    """A grid of subplots (make_subplots' keywords), or one plain figure."""
    if rows * cols == 1 and not kw:
        return go.Figure()
    fig = make_subplots(rows=rows, cols=cols, **kw)
    fig.update_annotations(font_size=PANEL_TITLE_SIZE)  # only the panels' titles exist yet
    return fig


def _wrap_axis_titles(fig: go.Figure, side_margins: int) -> int:
    """Wraps the long x-axis titles, shorter where wide side margins (room for long tick labels)
    narrow the plot they are centred on; the most lines added to one, for the bottom margin."""
    width = AXIS_CHARS - max(0, side_margins - 80) // 7  # about 7 px a character
    added = 0
    for axis in fig.select_xaxes():
        text = axis.title.text if axis.title is not None else None
        if text:
            axis.title.text = wrap(text, width)
            added = max(added, axis.title.text.count("<br>"))
    return added


def finish(
    fig: go.Figure, title: str | None = None, height: int = HEIGHT, legend_top: bool = False, **layout
) -> go.Figure:
    """The shared theme, the tour's size and margins, an optional left-aligned title; long titles and
    x-axis titles wrapped, with the margins they need."""
    colors.themed(fig)
    title = wrap(title, TITLE_CHARS) if title else None
    margin = {**dict(l=60, r=20, t=56 if title else 24, b=50), **layout.pop("margin", {})}
    fig.update_layout(height=height, hoverlabel=dict(namelength=-1), **layout)
    margin["t"] += title.count("<br>") * LINE_PX if title else 0
    margin["b"] += _wrap_axis_titles(fig, margin["l"] + margin["r"]) * LINE_PX
    fig.update_layout(margin=margin)
    if title:
        fig.update_layout(title=dict(text=title, x=0.01, xanchor="left", font=dict(size=14)))
    if legend_top:
        fig.update_layout(legend=dict(orientation="h", x=0, y=1.02, yanchor="bottom"))
    return fig


def token_bars(tokens, values, name: str) -> go.Bar:
    """Bars by position (plotly merges equal category labels, so never plot by token text)."""
    v = np.asarray(values, dtype=float)
    return go.Bar(
        x=np.arange(len(v)),
        y=v,
        name=name,
        marker_color=colors.signed_colors(v),
        customdata=[html.escape(str(t)) for t in tokens],
        showlegend=False,
        hovertemplate="“%{customdata}”<br>relevance %{y:.4g}<extra>" + name + "</extra>",
    )


def token_axis(tokens, highlight: int | None = None) -> dict:
    """x-axis settings that label positions with their tokens; the highlighted one in bold red."""
    text = [
        f"<b><span style='color:{colors.POSITIVE}'>{html.escape(str(t))}</span></b>"
        if i == highlight
        else html.escape(str(t))
        for i, t in enumerate(tokens)
    ]
    return dict(tickmode="array", tickvals=list(range(len(tokens))), ticktext=text, tickangle=-40)


def as_uint8(img) -> np.ndarray:
    a = np.asarray(img)
    if a.dtype != np.uint8:
        a = (np.clip(a.astype(float), 0, 1) * 255).round().astype(np.uint8)
    if a.ndim == 2:
        a = np.repeat(a[..., None], 3, axis=-1)
    return a[..., :3]


def image(img, name: str = "image") -> go.Image:
    """An image panel with its pixel values on hover."""
    return go.Image(z=as_uint8(img), name=name, hovertemplate="x %{x}, y %{y}<br>RGB %{z}<extra>" + name + "</extra>")


def heatmap(z, name: str, coloraxis: str = "coloraxis", label: str = "activation") -> go.Heatmap:
    """An activation map (shared colour axis) with the exact value on hover; row 0 at the top."""
    return go.Heatmap(
        z=np.asarray(z, dtype=float),
        coloraxis=coloraxis,
        name=name,
        hovertemplate="x %{x}, y %{y}<br>" + label + " %{z:.3g}<extra>" + name + "</extra>",
    )


def bare_axes(fig: go.Figure, rows: int, cols: int, square: bool = True) -> None:
    """Image cells: no ticks or grid, y downwards, square pixels."""
    for r in range(1, rows + 1):
        for c in range(1, cols + 1):
            fig.update_xaxes(visible=False, showgrid=False, row=r, col=c)
            fig.update_yaxes(visible=False, showgrid=False, autorange="reversed", row=r, col=c)
            # Square pixels only where there is something to draw: on an empty cell (a text cell)
            # the constraint collapses the cell's domain and its annotations jump to the first cell.
            xr = cell_refs(fig, r, c)[0]
            if square and any(getattr(t, "xaxis", None) == xr for t in fig.data):
                fig.update_yaxes(scaleanchor=xr, row=r, col=c)


def cell_refs(fig: go.Figure, row: int, col: int) -> tuple[str, str]:
    """The ('x3', 'y3') axis references of a subplot cell (each axis anchors on the other)."""
    ax = fig.get_subplot(row, col)
    return ax.yaxis.anchor, ax.xaxis.anchor


def note(fig: go.Figure, row: int, col: int, text: str, x: float = 0.0, y: float = 1.0, **kw) -> None:
    """Words placed in a subplot cell, in the cell's own 0–1 coordinates. Placed on the page
    ('paper') from the cell's domain: plotly.js does not draw the axes of a cell without traces,
    so an 'x5 domain' reference to a text-only cell would fall back to the first cell."""
    ax = fig.get_subplot(row, col)
    (x0, x1), (y0, y1) = ax.xaxis.domain, ax.yaxis.domain
    fig.add_annotation(
        xref="paper", yref="paper", x=x0 + x * (x1 - x0), y=y0 + y * (y1 - y0), showarrow=False, text=text, **kw
    )


def activation_axis(vmax: float, title: str = "activation") -> dict:
    return dict(
        colorscale=colors.ACTIVATION_PLOTLY,
        cmin=0,
        cmax=float(vmax) if vmax > 0 else 1.0,
        colorbar=dict(title=dict(text=title, side="right"), thickness=12, len=0.8),
    )
