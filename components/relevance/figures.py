"""The Relevance tab's pictures and exports: token heatmaps with their colour bar, relevance per
position, the conservation note, long-range ranks and image heatmaps. The held-out evaluation's
curves and tables are in heldout.py."""

from __future__ import annotations

import html
import io
import json
from pathlib import Path

import numpy as np

from backend.core import colors as C
from backend.lrp.methods import LABELS, SIGNED
from backend.lrp.tokens import SPACE_MARK, visible
from components.serving import exports
from components.common import themed
from components.mpl import pyplot


def md_code(text: str) -> str:
    """Markdown code span of any text: code spans show '<' as it is, so no HTML escaping; a
    backtick inside is fenced by a longer run."""
    text = str(text)
    fence = "``" if "`" in text else "`"
    return f"{fence} {text} {fence}" if fence == "``" else f"`{text}`"


def _rgb(v: float) -> str:
    """v in [-1, 1] → the shared diverging map (red = positive, blue = negative, white = 0)."""
    r, g, b = C.cmap_rgb((float(np.clip(v, -1, 1)) + 1) / 2, C.SIGNED_CMAP)
    return f"rgb({r},{g},{b})"


def _ink(v: float) -> str:
    """Text colour that reads on the token's background: white on the dark ends of the map."""
    return "#ffffff" if abs(float(v)) > 0.6 else "#111827"


def template_of(res: dict) -> set[int]:
    """Positions the prompt format adds around the typed text (the zoo's <bos> and "sentiment:")."""
    return set(res.get("template_positions") or [])


def _in_scale(res: dict, template: bool) -> np.ndarray | None:
    """A mask of the positions the colour scale is taken over: all, or all but the template's."""
    skip = set() if template else template_of(res)
    keep = np.array([i not in skip for i in range(len(res["tokens"]))])
    return keep if keep.any() else None


def max_abs(res: dict, template: bool = False) -> float:
    keep = _in_scale(res, template)
    return max(
        max(
            float(np.abs(np.asarray(v, float)[keep] if keep is not None else np.asarray(v, float)).max())
            for v in res["relevance"].values()
        ),
        1e-12,
    )


def _scale(res: dict, normalise: bool, vmax: float | None = None, template: bool = False) -> tuple[dict, float]:
    """Relevance in [-1, 1] for colouring: per method, or over one scale (`vmax`, by default this
    result's largest |R|; a pinned comparison passes the larger of both results'). The template's
    positions are left out of the scale unless `template` (they would set it: the zoo's
    "sentiment:" often carries the largest |R| of all)."""
    rel = {k: np.asarray(v, float) for k, v in res["relevance"].items()}
    keep = _in_scale(res, template)
    if normalise:
        return {k: v / max(np.abs(v[keep] if keep is not None else v).max(), 1e-12) for k, v in rel.items()}, 1.0
    vmax = vmax or max_abs(res, template)
    return {k: v / vmax for k, v in rel.items()}, vmax


def colorbar_html(vmax: float, normalise: bool) -> str:
    lo, hi = ("−1", "+1") if normalise else (f"−{vmax:.3g}", f"+{vmax:.3g}")
    what = "relevance ÷ each method's max |R|" if normalise else "relevance (one scale for all methods)"
    return (
        f"<div style='display:flex;align-items:center;gap:8px;margin:6px 0 2px 0;font-size:0.8rem'>"
        f"<span>{lo}</span><div style='width:220px;height:12px;border-radius:3px;"
        f"background:{C.css_gradient(C.SIGNED_CMAP)};border:1px solid #ccc'></div><span>{hi}</span>"
        f"<span class='wb-muted'>{what} · red supports the target, blue speaks against it</span></div>"
    )


def token_html(tok: str) -> str:
    """A token's text with its leading spaces drawn as faint marks (' was' → ·was), so the word
    boundaries a byte-level BPE keeps stay visible without the raw 'Ġ' pieces."""
    shown = visible(tok)
    lead = len(shown) - len(shown.lstrip(SPACE_MARK))
    rest = html.escape(shown[lead:]) or "&nbsp;"
    if not lead:
        return rest
    return f"<span class='wb-space' style='opacity:0.45'>{SPACE_MARK * lead}</span>{rest}"


TEMPLATE_STYLE = "outline:2px dotted #6b7280;outline-offset:-2px;"


def heatmap_html(
    res: dict,
    normalise: bool = True,
    mark: dict[str, set[int]] | None = None,
    vmax: float | None = None,
    template: bool = False,
) -> str:
    """One row of tokens per method; `mark[method]` underlines that method's own chosen positions
    (the long-range section marks each method's top-10). Template tokens are outlined and, unless
    `template`, left out of the colour scale and drawn grey."""
    scaled, vmax = _scale(res, normalise, vmax, template)
    unknown = set(res.get("unknown_words") or [])
    tpl = template_of(res)
    rows = []
    for meth in res["methods"]:
        marked = (mark or {}).get(meth, set())
        spans = []
        for i, (tok, v, raw) in enumerate(zip(res["tokens"], scaled[meth], res["relevance"][meth])):
            border = "border-bottom:3px solid #111;font-weight:700;" if i in marked else ""
            if tok in unknown:
                border += "outline:1px dashed #6b7280;"
            title = f"#{i} {html.escape(visible(tok))}: {raw:+.4g}"
            bg, ink = _rgb(v), _ink(v)
            if i in tpl:
                border += TEMPLATE_STYLE
                title += " · template token" + ("" if template else ", left out of the colour scale")
                if not template:
                    bg, ink = "var(--background-fill-secondary)", "var(--body-text-color-subdued)"
            spans.append(
                f"<span title='{title}' class='wb-token{' wb-template' if i in tpl else ''}' "
                f"style='background:{bg};color:{ink};"
                f"padding:1px 3px;margin:1px;border-radius:3px;display:inline-block;{border}'>"
                f"{token_html(tok)}</span>"
            )
        tag = "" if meth in SIGNED else " <span class='wb-muted'>(≥ 0 only)</span>"
        rows.append(
            f"<div style='margin:4px 0'><div style='font-weight:600;font-size:0.85rem'>"
            f"{html.escape(LABELS[meth])}{tag}</div><div style='line-height:1.9'>{''.join(spans)}</div></div>"
        )
    note = ""
    if unknown:
        words = ", ".join(html.escape(w) for w in res["unknown_words"])
        note = (
            f"<div class='wb-muted wb-unknown'>Not in this model's vocabulary (read as the unknown "
            f"token, outlined): {words}</div>"
        )
    if tpl:
        names = ", ".join(html.escape(visible(res["tokens"][i])) for i in sorted(tpl))
        note += (
            f"<div class='wb-muted wb-template-note'>Template tokens (dotted outline: {names}) are the "
            f"prompt format the model was trained on, not your text; "
            + (
                "they are included in the colour scale."
                if template
                else "they are left out of the colour scale and drawn grey (hover for their relevance; "
                "tick “Template tokens in the colour scale” to include them)."
            )
            + "</div>"
        )
    return f"<div class='wb-relevance-heatmap'>{colorbar_html(vmax, normalise)}{note}{''.join(rows)}</div>"


def position_plot(res: dict, normalise: bool = True, template: bool = False):
    """Bars of what the heatmap shows: each method divided by its max |R| when normalised (hover
    gives the raw value too), else the raw relevance on one axis. The rule of the heatmap holds
    here too: the template's positions (the zoo's <bos> and "sentiment:", not the visitor's text)
    are left out unless `template`; they once drew the tallest bar of all, above the evidence word."""
    import plotly.graph_objects as go

    fig = go.Figure()
    skip = set() if template else template_of(res)
    keep = [i for i in range(len(res["tokens"])) if i not in skip] or list(range(len(res["tokens"])))
    shown = [visible(res["tokens"][i]) for i in keep]
    for n, meth in enumerate(res["methods"]):
        raw = np.asarray(res["relevance"][meth], float)[keep]
        if normalise:
            y = raw / max(np.abs(raw).max(), 1e-12)
            hover = "%{text}<br>normalised %{y:.3f}<br>raw relevance %{customdata:.4g}"
        else:
            y = raw
            hover = "%{text}<br>relevance %{y:.4g}"
        fig.add_bar(
            x=keep,
            y=y,
            name=LABELS[meth],
            marker_color=C.qualitative(n),
            customdata=raw,
            text=shown,
            textposition="none",
            hovertemplate=hover + "<extra>" + LABELS[meth] + "</extra>",
        )
    left_out = len(res["tokens"]) - len(keep)
    title = "Relevance by position" + (", normalised" if normalise else "")
    if left_out:
        title += f"<br><sup>template tokens left out ({left_out})</sup>"
    fig.update_layout(
        barmode="group",
        height=380,
        margin=dict(l=50, r=10, t=50 if left_out else 40, b=40),
        title=title,  # fits 1000 px
        legend=dict(orientation="h", yref="container", y=0, yanchor="bottom", x=0),
        xaxis=dict(tickmode="array", tickvals=keep, ticktext=shown, tickangle=-45),
        yaxis_title="relevance ÷ method's max |R|" if normalise else "relevance",
    )
    if normalise:
        fig.update_yaxes(range=[-1.05, 1.05])
    return themed(fig)


def conservation_md(res: dict) -> str:
    f = res["logit"]
    lines = [f"**Target** {md_code(visible(res['target']))} · logit f = **{f:.4f}**", ""]
    if res.get("target_note"):
        lines += [f"<span class='wb-muted'>{html.escape(res['target_note'])}</span>", ""]
    lines += ["| method | Σ relevance | Σ R − f | \\|Σ R − f\\| / \\|f\\| |", "|---|---|---|---|"]
    for meth in res["methods"]:
        s = res["sum_relevance"][meth]
        lines.append(f"| {LABELS[meth]} | {s:.4f} | {s - f:+.2e} | {abs(s - f) / max(abs(f), 1e-12):.2e} |")
    lines.append("")
    lines.append(
        "<span class='wb-muted'>With every rule on and zero biases, MambaLRP's relevance sums to "
        "the logit (conservation); drop a rule to see it break. Attention methods are not "
        "meant to sum to f.</span>"
    )
    if res.get("conv_bias"):
        lines.append("")
        lines.append(
            "<span class='wb-muted'>This model's conv1d layers have biases (as Mamba-130M's "
            "do): the biases absorb a share of the logit, so Σ R − f is not zero here even "
            "with every rule on; that gap is the biases' share, not a broken rule.</span>"
        )
    return "\n".join(lines)


def export_text(res: dict, request=None) -> tuple[str, str]:
    """The explanation as JSON and as a PNG heatmap: paths Gradio serves (components.serving.exports)."""
    return exports.hand_out(lambda d: _write_text(res, d), request)


def _write_text(res: dict, d: Path) -> tuple[str, str]:
    with pyplot() as plt:
        jpath = d / "relevance.json"
        data = dict(res)
        data["tokens_shown"] = [visible(t) for t in res["tokens"]]  # leading space → "·"
        jpath.write_text(json.dumps(data, indent=1, default=float))
        scaled, _ = _scale(res, True)
        M = np.stack([scaled[m] for m in res["methods"]])
        fig, ax = plt.subplots(figsize=(max(6, 0.45 * len(res["tokens"])), 0.6 * len(res["methods"]) + 1.6), dpi=110)
        im = ax.imshow(M, cmap=C.SIGNED_CMAP, vmin=-1, vmax=1, aspect="auto")
        ax.set_yticks(range(len(res["methods"])), [LABELS[m] for m in res["methods"]])
        ax.set_xticks(
            range(len(res["tokens"])), [visible(t) for t in res["tokens"]], rotation=60, ha="right", fontsize=8
        )
        ax.set_title(f"explaining '{visible(res['target'])}' (logit {res['logit']:.3f})", fontsize=9)
        fig.colorbar(im, ax=ax, label="relevance / max|R|", fraction=0.03)
        fig.tight_layout()
        ppath = d / "relevance.png"
        fig.savefig(ppath)
        plt.close(fig)
    return str(jpath), str(ppath)


def _label_slots(xs: list[float], labels: list[str], span: float, plot_px: float = 600.0) -> list[str]:
    """A text position per labelled point of one row ("top center", or "" for no label), placed in
    rank order: a label that would overlap a higher-ranked one (by its width at ~7 px a character)
    is left to the hover (below the marker it would meet the next row's labels)."""
    placed: dict[str, list[tuple[float, float]]] = {"top center": []}
    out = [""] * len(xs)
    for k in range(len(xs)):
        if not labels[k]:
            continue
        half = (len(labels[k]) * 7 + 6) / 2 * span / plot_px
        lo, hi = xs[k] - half, xs[k] + half
        for slot in placed:
            if all(hi <= a or lo >= b for a, b in placed[slot]):
                placed[slot].append((lo, hi))
                out[k] = slot
                break
    return out


def longrange_plot(res: dict):
    """Each method's top-10 tokens by their distance back from the answer: one row per method (a
    token several methods rank is never hidden under another's marker), MambaLRP on top, marker
    size = relevance / the method's top relevance; the top 3 of each row are labelled where the
    labels do not overlap, and hover names every point."""
    import plotly.graph_objects as go

    fig = go.Figure()
    meths = list(res["methods"])
    order = sorted(meths, key=lambda m: m != "mambalrp")  # the headline method in the top row
    far = max([1] + [d["distance"] for m in meths for d in res["top_tokens"][m]])
    span = far * 1.12 + 2
    for row, meth in enumerate(order):
        tops = res["top_tokens"][meth]
        top = max(abs(tops[0]["relevance"]), 1e-12) if tops else 1.0
        share = [d["relevance"] / top for d in tops]
        xs = [d["distance"] for d in tops]
        labels = [visible(d["token"]) if k < 3 else "" for k, d in enumerate(tops)]
        slots = _label_slots(xs, labels, span)
        y = len(order) - 1 - row
        colour = C.qualitative(meths.index(meth))
        for slot in ("top center", ""):
            idx = [k for k in range(len(tops)) if slots[k] == slot]
            if not idx:
                continue
            fig.add_scatter(
                x=[xs[k] for k in idx],
                y=[y] * len(idx),
                mode="markers+text" if slot else "markers",
                text=[labels[k] for k in idx] if slot else None,
                textposition=slot or None,
                marker=dict(
                    color=colour,
                    size=[7 + 11 * max(share[k], 0.0) for k in idx],
                    line=dict(color="white", width=1.2 if meth == "mambalrp" else 0.5),
                ),
                customdata=[[tops[k]["relevance"], share[k]] for k in idx],
                cliponaxis=False,
                hovertext=[visible(tops[k]["token"]) for k in idx],
                hovertemplate="%{hovertext} · %{x} tokens back<br>relevance %{customdata[0]:.4g} "
                "(%{customdata[1]:.2f} of the top)<extra>" + LABELS[meth] + "</extra>",
                name=LABELS[meth],
                showlegend=False,
            )
    fig.update_layout(
        height=max(260, 90 + 62 * len(order)),
        margin=dict(l=110, r=30, t=50, b=40),
        title=f"Explaining '{visible(res['target'])}': each method's top-10 tokens",
        xaxis=dict(title="distance back from the answer position (tokens)", range=[-0.06 * far - 1, far * 1.06 + 1]),
        yaxis=dict(
            tickvals=list(range(len(order))),
            ticktext=[LABELS[m] for m in reversed(order)],
            range=[-0.7, len(order) - 0.3],
            showgrid=False,
            zeroline=False,
        ),
    )
    return themed(fig)


def image_plot(res: dict):
    """The input and one map per method as plotly heatmaps on one symmetric scale (each map ÷ its
    max |R|), the relevance drawn over the grey input; hover gives each pixel's exact relevance."""
    from plotly.subplots import make_subplots

    meths = res["methods"]
    share = res.get("share_in_region") or {}
    titles = [f"input → {res['pred']}"] + [
        LABELS[m] + (f"<br>{100 * share[m]:.0f}% of R⁺ in box" if m in share else "") for m in meths
    ]
    fig = make_subplots(1, len(meths) + 1, subplot_titles=titles, horizontal_spacing=0.02)
    img = np.asarray(res["image"], float)
    rgb = np.repeat((np.clip(img, 0, 1) * 255).round()[..., None], 3, -1)
    fig.add_image(z=rgb, hovertemplate="x %{x}, y %{y}<extra>input</extra>", row=1, col=1)
    for j, meth in enumerate(meths, start=2):
        raw = np.asarray(res["maps"][meth], float)
        fig.add_image(z=rgb, hoverinfo="skip", row=1, col=j)
        # one shared colour axis: every map on the same scale, one colour bar
        fig.add_heatmap(
            z=raw / max(np.abs(raw).max(), 1e-12),
            customdata=raw,
            coloraxis="coloraxis",
            opacity=0.85,
            hovertemplate="x %{x}, y %{y}<br>relevance %{customdata:.4g}<br>÷ max|R| %{z:.3f}"
            "<extra>" + LABELS[meth] + "</extra>",
            row=1,
            col=j,
        )
    fig.update_layout(
        coloraxis=dict(
            colorscale=C.SIGNED_PLOTLY,
            cmin=-1,
            cmax=1,
            colorbar=dict(title=dict(text="R ÷ max|R|", side="right"), len=0.9, thickness=12),
        )
    )
    mask = res.get("mask")
    if mask is not None and np.asarray(mask).any():
        ys, xs = np.nonzero(np.asarray(mask))
        for j in range(1, len(meths) + 2):
            fig.add_shape(
                type="rect",
                x0=xs.min() - 0.5,
                x1=xs.max() + 0.5,
                y0=ys.min() - 0.5,
                y1=ys.max() + 0.5,
                line=dict(color="lime", width=2),
                row=1,
                col=j,
            )
    fig.update_xaxes(showticklabels=False, showgrid=False, zeroline=False)
    fig.update_yaxes(showticklabels=False, showgrid=False, zeroline=False, autorange="reversed")
    for j in range(1, len(meths) + 2):
        fig.update_yaxes(scaleanchor=f"x{'' if j == 1 else j}", scaleratio=1, row=1, col=j)
    fig.update_annotations(font_size=11)
    fig.update_layout(height=300, margin=dict(l=10, r=10, t=55, b=10))
    return themed(fig)


def image_figure(res: dict, request=None) -> tuple[np.ndarray, str]:
    """Input + one overlay per method on a shared symmetric scale, with a colorbar; returns RGB + the
    PNG's path Gradio serves (components.serving.exports)."""
    with pyplot() as plt:
        maps = {k: np.asarray(v) / max(np.abs(v).max(), 1e-12) for k, v in res["maps"].items()}
        n = len(res["methods"]) + 1
        fig, axes = plt.subplots(1, n, figsize=(2.3 * n + 0.8, 3.0), dpi=100)
        axes = np.atleast_1d(axes)
        axes[0].imshow(res["image"], cmap="gray", vmin=0, vmax=1)
        axes[0].set_title(f"input → {res['pred']}", fontsize=9)
        if res.get("mask") is not None:
            axes[0].contour(np.asarray(res["mask"], float), levels=[0.5], colors="lime", linewidths=1)
        im = None
        for ax, meth in zip(axes[1:], res["methods"]):
            ax.imshow(res["image"], cmap="gray", vmin=0, vmax=1)
            im = ax.imshow(maps[meth], cmap=C.SIGNED_CMAP, vmin=-1, vmax=1, alpha=0.85)
            if res.get("mask") is not None:
                ax.contour(np.asarray(res["mask"], float), levels=[0.5], colors="lime", linewidths=1)
            share = res.get("share_in_region") or {}
            extra = f"\n{100 * share[meth]:.0f}% of R⁺ in box" if meth in share else ""
            ax.set_title(LABELS[meth] + extra, fontsize=9)
        for ax in axes:
            ax.set_xticks([])
            ax.set_yticks([])
        if im is not None:
            fig.colorbar(im, ax=list(axes), fraction=0.02, label="relevance / max|R|")
        buf = io.BytesIO()
        fig.savefig(buf, format="png", bbox_inches="tight")
        plt.close(fig)
    from PIL import Image

    def write(d: Path) -> str:
        (d / "relevance-image.png").write_bytes(buf.getvalue())  # the same picture, drawn once
        return str(d / "relevance-image.png")

    return np.asarray(Image.open(io.BytesIO(buf.getvalue())).convert("RGB")), exports.hand_out(write, request)
