"""The Features tab's pictures: activation overlays and dimmed views, the colour bar, the
activation histogram, per-patch heatmaps to hover, the concept IoU bars and a feature page as PNG."""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np

from backend.core import colors as C
from backend.sae import scenes as S
from backend.sae.label_quality import with_quality
from components.common import themed

DISPLAY = 144  # px per thumbnail


def _cmap(values: np.ndarray) -> np.ndarray:
    """Activations in [0, 1] → RGB through the shared sequential map (backend.core.colors)."""
    return C.cmap_rgb(values, C.ACTIVATION_CMAP)


def enlarged(img: np.ndarray, size: int = DISPLAY) -> np.ndarray:
    rep = max(1, size // img.shape[0])
    return np.repeat(np.repeat(img, rep, 0), rep, 1)


def overlay(image: np.ndarray, amap: np.ndarray, vmax: float, alpha: float = 0.6) -> np.ndarray:
    """Continuous overlay: the activation map in a colormap blended over the image."""
    heat = _cmap(amap / max(vmax, 1e-9)).astype(np.float32)
    a = alpha * np.clip(amap / max(vmax, 1e-9), 0.15, 1.0)[..., None]
    return (image.astype(np.float32) * (1 - a) + heat * a).clip(0, 255).astype(np.uint8)


def dimmed(image: np.ndarray, region: np.ndarray) -> np.ndarray:
    keep = region[..., None].astype(np.float32)
    return (image.astype(np.float32) * (keep + (1 - keep) * 0.2)).astype(np.uint8)


def colorbar_html(vmax: float, label: str = "activation") -> str:
    return (
        f"<div style='display:flex;align-items:center;gap:8px;font-size:0.8rem'>"
        f"<span>0</span><div style='flex:1;max-width:320px;height:12px;border-radius:3px;"
        f"background:{C.css_gradient(C.ACTIVATION_CMAP)}'></div><span>{vmax:.2f}</span>"
        f"<span class='wb-muted'>{html.escape(label)}</span></div>"
    )


def hist_plot(page: dict):
    import plotly.graph_objects as go

    counts = np.asarray(page["hist_counts"])
    edges = np.asarray(page["hist_edges"])
    nz = np.nonzero(counts)[0]
    lo, hi = (int(nz[0]), int(nz[-1]) + 1) if len(nz) else (0, len(counts))
    x = list(range(hi - lo))
    labels = [f"{np.sqrt(edges[i] * edges[i + 1]):.2g}" for i in range(lo, hi)]
    fig = go.Figure(
        go.Bar(
            x=x,
            y=counts[lo:hi],
            marker_color=C.QUALITATIVE[0],
            hovertext=[f"{edges[i]:.3g}–{edges[i + 1]:.3g}: {counts[i]}" for i in range(lo, hi)],
        )
    )
    step = -(-len(x) // 6)  # at most 6 bin labels: every bin's crowded a narrow plot's axis
    fig.update_layout(
        title=f"density {page['density']:.2%}",
        xaxis=dict(tickmode="array", tickvals=x[::step], ticktext=labels[::step], title="activation (log bins)"),
        yaxis_title="tokens",
        height=260,
        margin=dict(l=40, r=10, t=40, b=40),
    )
    return themed(fig)


def _clear_zero_scale() -> list:
    """The shared activation colour scale with zero transparent: silent patches show the picture."""
    from plotly.colors import get_colorscale

    scale = [list(stop) for stop in get_colorscale(C.ACTIVATION_PLOTLY)]
    return [[0.0, "rgba(0,0,0,0)"], [1e-6, scale[0][1]]] + scale[1:]


def patch_figure(images, patch_maps, titles, vmax: float | None = None, height: int = 260):
    """Pictures with their per-patch activations over them, one panel each: hovering a patch gives
    its exact activation (the galleries are pictures; this is where the numbers are). One colour
    scale for every panel, the overlays' own."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    n = max(len(images), 1)
    vmax = vmax or maps_max(patch_maps)
    heads = [wrapped_title(t) for t in titles]
    lines = max([h.count("<br>") + 1 for h in heads] or [1])
    fig = make_subplots(1, n, subplot_titles=heads or None, horizontal_spacing=0.04)
    fig.update_annotations(font_size=TITLE_FONT)  # the wrap's width is counted at this size
    for j, (im, m) in enumerate(zip(images, patch_maps)):
        m = np.asarray(m, np.float32)
        h, w = im.shape[:2]
        gh, gw = m.shape
        rows, cols = np.meshgrid(np.arange(gh), np.arange(gw), indexing="ij")
        fig.add_trace(go.Image(z=im, hoverinfo="skip"), 1, j + 1)
        fig.add_trace(
            go.Heatmap(
                z=m,
                x0=w / gw / 2 - 0.5,
                dx=w / gw,
                y0=h / gh / 2 - 0.5,
                dy=h / gh,
                zmin=0,
                zmax=vmax,
                colorscale=_clear_zero_scale(),
                opacity=0.6,
                customdata=np.stack([rows, cols], -1),
                showscale=j == n - 1,
                colorbar=dict(title="activation", thickness=10),
                hovertemplate="patch row %{customdata[0]}, col %{customdata[1]}<br>activation %{z:.4f}<extra></extra>",
            ),
            1,
            j + 1,
        )
    fig.update_xaxes(showticklabels=False, showgrid=False, zeroline=False)
    fig.update_yaxes(showticklabels=False, showgrid=False, zeroline=False, autorange="reversed", scaleanchor="x")
    for j in range(1, n):
        fig.update_yaxes(scaleanchor=f"x{j + 1}", row=1, col=j + 1)
    # titles below the block label (about 36 px), their lines above the pictures; the pictures keep
    # their size whatever the titles' length
    top = 36 + TITLE_LINE * lines
    fig.update_layout(height=height - 52 + top, margin=dict(l=4, r=4, t=top, b=4))
    return themed(fig)


TITLE_FONT = 11  # px
TITLE_LINE = 14  # px a line of it
TITLE_CHARS = 24  # ≈ 140 px at 11 px: four panels side by side in a 1000 px page give each about 150


def wrapped_title(text, width: int = TITLE_CHARS, max_lines: int = 4) -> str:
    """A panel's title in lines of at most `width` characters (plotly never wraps one: a long title
    runs over its neighbours and off the figure's edge), the last ended by "…" when more is left;
    the table beside the figure keeps the full label."""
    import textwrap

    name, paren, rest = str(text).partition(" (")  # a label's quality starts a line of its own
    lines = [
        line
        for part in (name, paren.strip() + rest)
        if part
        for line in textwrap.wrap(part, width, break_long_words=True)
    ] or [""]
    if len(lines) > max_lines:
        lines = lines[:max_lines]
        lines[-1] = lines[-1][: width - 1].rstrip() + "…"
    return "<br>".join(html.escape(line, quote=False) for line in lines)


def concept_plot(page: dict):
    import plotly.graph_objects as go

    scores = page.get("concept_scores") or {}
    names = list(scores)
    fam_colour = {fam: C.qualitative(i) for i, fam in enumerate(("colour", "shape", "texture", "position"))}
    fig = go.Figure(
        go.Bar(
            x=list(range(len(names))),
            y=[scores[n] for n in names],
            marker_color=[fam_colour.get(S.FAMILY_OF.get(n, ""), C.NEUTRAL) for n in names],
        )
    )
    fig.update_layout(
        title="IoU per planted concept (top-5 images)",
        xaxis=dict(tickmode="array", tickvals=list(range(len(names))), ticktext=names),
        yaxis=dict(range=[0, 1], title="IoU"),
        height=260,
        margin=dict(l=40, r=10, t=40, b=60),
    )
    return themed(fig)


def page_png(page: dict, path: Path) -> Path:
    """The feature page as one PNG (PIL, fast): title, top images, activation overlays with a colour
    bar, and the dimmed-outside-region view."""
    from PIL import Image, ImageDraw

    n = max(len(page["images"]), 1)
    t, pad, head = DISPLAY, 6, 40
    W = n * (t + pad) + pad
    H = head + 3 * (t + pad) + 40
    canvas = Image.new("RGB", (W, H), "white")
    draw = ImageDraw.Draw(canvas)
    draw.text(
        (pad, 6),
        f"feature {page['feature']}: {page['label'] or 'no concept'} (IoU {page['iou']:.2f})  "
        f"density {page['density']:.2%}  max {page['max_act']:.2f}",
        fill="black",
    )
    draw.text((pad, 22), "rows: top images (score) / activation overlay / outside the region dimmed", fill="gray")
    vmax = max(maps_max(page["maps"]), 1e-9)
    for j, (im, m, r) in enumerate(zip(page["images"], page["maps"], page["regions"])):
        x = pad + j * (t + pad)
        for i, view in enumerate((im, overlay(im, m, vmax), dimmed(im, r))):
            canvas.paste(Image.fromarray(enlarged(view, t)).resize((t, t), Image.NEAREST), (x, head + i * (t + pad)))
        draw.text((x + 2, head + 2), f"#{page['top'][j]['image_id']} {page['top'][j]['score']:.2f}", fill="white")
    y = head + 3 * (t + pad) + 6
    bar = _cmap(np.linspace(0, 1, min(W - 2 * pad - 120, 400))[None, :].repeat(12, 0))
    canvas.paste(Image.fromarray(bar), (pad + 20, y))
    draw.text((pad, y), "0", fill="black")
    draw.text((pad + 26 + bar.shape[1], y), f"{vmax:.2f} activation", fill="black")
    canvas.save(path, format="PNG")
    return path


def maps_max(maps) -> float:
    """The largest activation over a page's maps (an array, or a list of maps of different shapes)."""
    return max([float(np.max(m)) for m in maps if np.size(m)] or [1.0])


def label_shown(org, f: int, unlabelled: str = "no concept") -> str:
    """A feature's label with how well it holds beside it (backend.sae.label_quality)."""
    lab = org.labels.get(str(int(f)), {})
    t = org.index.tensors if org.index is not None else None
    density = float(t["density"][int(f)]) if t is not None and int(f) < len(t["density"]) else None
    return with_quality(lab, density, unlabelled)
