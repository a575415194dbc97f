"""The Memorization tab's pictures and exports: the score card, z-scores per value neuron, the
generation grids and comparison cards, the statistics, the checked list's rows and the PNG export
(the results for the memorized prompts, the paper's table, are in table.py)."""

from __future__ import annotations

import html
import math
from pathlib import Path

import numpy as np
import plotly.graph_objects as go

from backend.core import colors as C
from backend.nemo import data as ndata
from components.common import themed
from components.mpl import pyplot

TYPES = ndata.TYPES
LAYER_COLOURS = list(C.QUALITATIVE)  # the shared qualitative palette, one colour per layer
Z_OUTLIER = 3.0


def score_html(r: dict) -> str:
    s, th = r["score"], r["theta_mem"]
    verdict = "memorized" if r["memorized"] else "not memorized"
    colour = "#e11d48" if r["memorized"] else "#16a34a"
    pct = max(0.0, min(1.0, s)) * 100
    tpct = max(0.0, min(1.0, th)) * 100
    if r.get("is_training_prompt"):
        train = " · <span class='wb-muted'>this caption is in the training set with its own image</span>"
    elif r.get("listed_type"):
        t = r["listed_type"]
        train = (
            f" · <span class='wb-muted'>the NeMo paper lists this caption as memorized "
            f"({html.escape(t)}: {html.escape(TYPES.get(t, t))})</span>"
        )
    else:
        train = ""
    det = r.get("detection")
    auc = (
        f" · <span title='how well the score tells the memorized prompts from held-out ordinary ones "
        f"(1 = perfectly, 0.5 = chance)'>detection AUROC <b>{det['auroc']:.2f}</b></span>"
        if det
        else ""
    )
    return (
        f"<div class='wb-card' style='min-height:0' id='memo-score-card' "
        f"data-memorized='{int(bool(r['memorized']))}'>"
        f"<div><b>Memorization score</b> {s:.3f} vs θ<sub>mem</sub> {th:.3f} → "
        f"<b style='color:{colour}'>{verdict}</b>{auc}{train}</div>"
        f"<div title='score {s:.4f} · θ_mem {th:.4f}' style='position:relative;height:14px;"
        f"background:var(--background-fill-secondary);"
        f"border-radius:7px;margin-top:8px'>"
        f"<div style='width:{pct:.1f}%;height:14px;background:{colour};border-radius:7px'></div>"
        f"<div title='θ_mem' style='position:absolute;left:{tpct:.1f}%;top:-3px;width:2px;height:20px;"
        f"background:var(--body-text-color)'></div></div>"
        f"<div class='wb-muted wb-advanced'>0 … 1 (SSIM); the tick is θ<sub>mem</sub>. Largest neuron "
        f"z-score: {r['max_z']:.1f}</div>{theta_words(th, det)}</div>"
    )


NO_TYPE = "—"


def relaxed_words(theta_mem: float, reached: float) -> str:
    """NeMo's fallback in plain words: switching off even the widest candidate set did not make the
    seeds' images differ as much as an ordinary prompt's do (θ_mem), so the search kept the neurons
    needed for the largest difference it did reach (the official code does the same)."""
    return (
        f"Even with every candidate neuron switched off, the model's first denoising steps for different "
        f"seeds stayed more alike (similarity {reached:.3f}) than the memorization threshold allows "
        f"({theta_mem:.3f}): these neurons weaken the copy but do not remove it. The list keeps only the "
        f"neurons needed to get that far."
    )


def type_shown(card: str | None, listed_type: str | None) -> str:
    """The Type (VM/TM) box after a check: the paper's listed type only while the score card says
    memorized; "—" beside "not memorized" (a type is a kind of memorization) or for an unlisted prompt."""
    memorized = "data-memorized='1'" in (card or "")
    return listed_type if memorized and listed_type else NO_TYPE


def theta_words(th: float, det: dict | None) -> str:
    """What θ_mem is and how far to trust one verdict: the rule, and the measured separation."""
    rule = (
        "θ<sub>mem</sub> = mean + 1 σ of ordinary prompts' scores, so about one ordinary prompt in six "
        "scores above it: a score just over it is weak evidence. "
    )
    if det:
        how = (
            f"Detection AUROC {det['auroc']:.2f} over this model's {det['n_memorized']} memorized and "
            f"{det['n_ordinary']} held-out ordinary prompts ({det['memorized_above']} of {det['n_memorized']} "
            f"and {det['ordinary_above']} of {det['n_ordinary']} above θ<sub>mem</sub> {th:.3f})."
        )
    else:
        how = (
            "No scores are recorded for this model: “Check a list of prompts” with memorized and "
            "ordinary ones measures its AUROC."
        )
    return f"<div class='wb-muted wb-advanced' id='memo-theta-words'>{rule}{how}</div>"


def z_plot(r: dict, found: list[str] | None = None) -> go.Figure:
    fig = go.Figure()
    offset = 0
    found = set(found or [])
    tickvals, ticktext = [], []
    fx, fy, ftxt = [], [], []
    for i, layer in enumerate(r["layers"]):
        z = r["z"][layer]
        act = r.get("activation", {}).get(layer) or [None] * len(z)
        xs = list(range(offset, offset + len(z)))
        tips = [
            f"{layer}:{c}<br>z = {v:.3f}" + (f"<br>mean |activation| {a:.4g}" if a is not None else "")
            for c, (v, a) in enumerate(zip(z, act))
        ]
        fig.add_trace(
            go.Bar(
                x=xs,
                y=z,
                name=layer,
                marker_color=LAYER_COLOURS[i % len(LAYER_COLOURS)],
                hovertext=tips,
                hoverinfo="text",
            )
        )
        out = [(x, v, c) for c, (x, v) in enumerate(zip(xs, z)) if v > Z_OUTLIER]
        if out:
            fig.add_trace(
                go.Scatter(
                    x=[o[0] for o in out],
                    y=[o[1] for o in out],
                    mode="markers",
                    marker=dict(symbol="triangle-up", size=9, color=C.NEUTRAL),
                    name=f"outlier (z > {Z_OUTLIER:g})",
                    legendgroup="outlier",
                    showlegend=not any(t.name.startswith("outlier") for t in fig.data),
                    hovertext=[f"{layer}:{o[2]} z = {o[1]:.3f}" for o in out],
                    hoverinfo="text",
                )
            )
        for c, (x, v) in enumerate(zip(xs, z)):
            if f"{layer}:{c}" in found:
                fx.append(x)
                fy.append(v)
                ftxt.append(f"{layer}:{c} (found by NeMo) z = {v:.3f}")
        tickvals.append(offset + len(z) / 2)
        ticktext.append(layer)
        offset += len(z)
    if fx:
        fig.add_trace(
            go.Scatter(
                x=fx,
                y=fy,
                mode="markers",
                hovertext=ftxt,
                hoverinfo="text",
                marker=dict(symbol="diamond", size=10, color=C.POSITIVE, line=dict(width=1, color="#ffffff")),
                name="found by NeMo",
            )
        )
    fig.add_hline(y=Z_OUTLIER, line_dash="dot", line_color="#94a3b8")
    fig.update_layout(
        height=320 if len(tickvals) <= 4 else 400,
        margin=dict(l=40, r=10, t=30, b=40),
        bargap=0,
        title=dict(text="z = |a − μ| / σ per value neuron", font=dict(size=13)),
        # many layers of unequal widths (SD: 320 to 1280 neurons): names upright, not slanted into each other
        xaxis=dict(
            tickvals=tickvals,
            ticktext=ticktext,
            title="layer (neurons in order)",
            tickangle=-90 if len(tickvals) > 4 else None,
        ),
        yaxis=dict(title="z-score"),
        # below the axis words however many layers turn them: anchored to the figure's foot
        legend=dict(orientation="h", yref="container", y=0, yanchor="bottom", x=0),
    )
    return themed(fig)


def _big(img: np.ndarray, scale: int = 4) -> np.ndarray:
    a = (np.clip(img, 0, 1) * 255).round().astype(np.uint8)
    return np.kron(a, np.ones((scale, scale, 1), np.uint8))


def gallery_items(c: dict) -> list[tuple[np.ndarray, str]]:
    """The images as files (full size, downloadable): reference, then each seed on, then off (only
    when neurons are off: otherwise the "off" images are the "on" ones again)."""
    items = []
    if c["train_image"] is not None:
        items.append((_big(c["train_image"]), c.get("reference_kind") or "training image"))
    for tag in ("on", "off")[: 2 if c.get("n_neurons") else 1]:
        for i, (seed, im) in enumerate(zip(c["seeds"], c[f"images_{tag}"])):
            cap = f"s{seed} {tag}"
            if c[f"ssim_{tag}"] is not None:
                cap += f" SSIM {c[f'ssim_{tag}'][i]:.2f}"
            items.append((_big(im), cap))
    return items


NO_NEURONS_OFF = "No neurons switched off: tick found neurons or type some, then generate."
CELL_PX = 190  # a grid cell's largest width: reference + 2 rows of seeds fit a 1000 px high screen
SMALL_PX = 96  # images this small are drawn with sharp pixels
_IMG = "width:100%;aspect-ratio:1;object-fit:contain;display:block;border-radius:6px;"
_CAP = "font-size:0.8rem;text-align:center;color:var(--body-text-color-subdued);margin-top:2px"


def _data_uri(img: np.ndarray, limit: int = 256) -> str:
    """A PNG data URI (no file round trip; a hub image is shrunk to `limit` px for the grid)."""
    import base64
    import io

    from PIL import Image

    im = Image.fromarray((np.clip(img, 0, 1) * 255).round().astype(np.uint8))
    if max(im.size) > limit:
        im.thumbnail((limit, limit), Image.BICUBIC)
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _figure(img: np.ndarray, tip: str, cap: str, attrs: str = "", style: str = "") -> str:
    """One image of the grid; `cap` is HTML (already escaped), `tip` plain text for the hover."""
    pix = "image-rendering:pixelated;" if max(img.shape[:2]) <= SMALL_PX else ""
    t = html.escape(tip, quote=True)
    return (
        f"<figure style='margin:0;min-width:0;{style}' {attrs}><img src='{_data_uri(img)}' title='{t}' alt='{t}' "
        f"style='{_IMG}{pix}'><figcaption style='{_CAP}'>{cap}</figcaption></figure>"
    )


def grid_html(c: dict, grid_id: str = "memo-grid") -> str:
    """The key figure: columns are seeds, rows are all neurons on and the chosen neurons off, the
    reference image (training image or the user's) beside them at twice the size. Exact SSIM values
    on hover. With nothing switched off the "off" row says so instead of repeating the "on" row."""
    n, k = len(c["seeds"]), c["n_neurons"]
    ref, kind = c["train_image"], c.get("reference_kind") or "training image"
    cols = ("minmax(0,2fr) " if ref is not None else "") + f"5.5em repeat({n}, minmax(0,1fr))"
    width = CELL_PX * (n + (2 if ref is not None else 0)) + 90
    cells = []
    if ref is not None:
        cells.append(_figure(ref, kind, html.escape(kind), "class='memo-ref'", "grid-row:1 / span 3;align-self:center"))
    head = "font-size:0.85rem;font-weight:600;text-align:center;align-self:end"
    cells.append("<div></div>")
    cells += [f"<div class='memo-colhead' style='{head}'>seed {s}</div>" for s in c["seeds"]]
    off_label = f"{k} neuron{'s' if k != 1 else ''} off" if k else "no neurons off"
    for tag, label in (("on", "all neurons on"), ("off", off_label)):
        cells.append(
            f"<div class='memo-rowhead' data-row='{tag}' style='font-weight:600;align-self:center;"
            f"font-size:0.9rem'>{label}</div>"
        )
        if tag == "off" and not k:
            cells.append(
                f"<div class='memo-none wb-muted' data-row='off' style='grid-column:span {n};"
                f"align-self:center;padding:8px'>{NO_NEURONS_OFF}</div>"
            )
            continue
        ss = c[f"ssim_{tag}"]
        for i, (seed, im) in enumerate(zip(c["seeds"], c[f"images_{tag}"])):
            tip = f"seed {seed}, {label}" + (f": SSIM to the {kind} {ss[i]:.4f}" if ss is not None else "")
            # presenter view says "similarity" where the expert view says SSIM
            cap = (
                f"<span class='wb-advanced'>SSIM</span><span class='wb-presenter-only'>similarity</span> {ss[i]:.2f}"
                if ss is not None
                else ""
            )
            cells.append(_figure(im, tip, cap, f"class='memo-cell' data-row='{tag}' data-seed='{seed}'"))
    return (
        f"<div class='memo-grid wb-keyfig' id='{grid_id}' style='display:grid;grid-template-columns:{cols};"
        f"gap:6px 8px;max-width:{width}px;align-items:start'>{''.join(cells)}</div>"
    )


def _fmt(x, nd=3):
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{nd}f}"


def compare_html(c: dict, card_id: str = "memo-compare-card") -> str:
    rows = []
    conds = (("on", "all neurons on"), ("off", f"{c['n_neurons']} neuron(s) off"))
    for tag, label in conds if c["n_neurons"] else conds[:1]:  # nothing off: no "off" row to report
        ss = c[f"ssim_{tag}"]
        rows.append(
            f"<tr><td>{label}</td><td>{_fmt(float(np.median(ss)) if ss else None)}</td>"
            f"<td>{_fmt(c[f'diversity_{tag}'])}</td><td>{_fmt(c[f'alignment_{tag}'], 2)}</td>"
            f"<td>{_fmt(c[f'score_{tag}'])}</td></tr>"
        )
    neurons = html.escape(", ".join(c["neurons"]) or "none")
    ref = c.get("reference_kind")
    ref_note = (
        ""
        if ref
        else "<div class='wb-muted'>No reference image: upload one (e.g. the training "
        "image, if you have it) to measure the copy; diversity across seeds tells without one.</div>"
    )
    return (
        f"<div class='wb-card' style='min-height:0;margin-top:8px' id='{card_id}'>"
        f"<table style='width:100%;font-size:0.9rem'><tr><th></th><th>median SSIM to {html.escape(ref or 'a reference')}</th>"
        "<th>diversity (1 − mean pairwise SSIM)</th><th>prompt alignment (colour proxy)</th>"
        f"<th>memorization score (θ<sub>mem</sub> {c['theta_mem']:.3f})</th></tr>{''.join(rows)}</table>"
        f"<div class='wb-muted'>Switched off: {neurons}</div>{ref_note}</div>"
    )


def result_html(c: dict) -> str:
    """What Generate shows: the grid, then the numbers."""
    return grid_html(c) + compare_html(c)


def pin_html(c: dict) -> str:
    """The pinned generation set, drawn like the current one below it for a side-by-side reading."""
    off = html.escape(", ".join(c["neurons"]) or "none")
    return (
        f"<div id='memo-pinned' style='margin-top:10px;border-top:2px dashed var(--border-color-primary);"
        f"padding-top:8px'><div style='margin-bottom:6px'><b>Pinned</b> · "
        f"<span class='wb-muted'>{html.escape(c['prompt'][:120])} · switched off: {off}</span></div>"
        + grid_html(c, "memo-pin-grid")
        + compare_html(c, "memo-pin-card")
        + "</div>"
    )


def stats_html(st: dict) -> str:
    """Which neuron statistics the z-scores and the search use, and what to run for better ones."""
    if st.get("kind") == "file":
        n = st.get("n_prompts")
        # the file's name only: a page shows no server folder
        what = f"precomputed file <code>{html.escape(Path(str(st.get('file'))).name)}</code>" + (
            f" ({n:,} prompts)" if n else ""
        )
    elif st.get("own"):
        what = f"{st.get('n_prompts', 0):,} ordinary prompts you gave, computed in this process"
    else:
        what = (
            f"the first {st.get('n_prompts', 0):,} of {st.get('total', 0):,} "
            f"{html.escape(st.get('set', 'ordinary prompts'))}, computed in this process"
        )
    when = " (at first use)" if st.get("pending") else ""
    if st.get("session"):  # backend.nemo.visitor: the other visitors keep the shared ones
        when += "; yours only: the other visitors' z-scores use the shared statistics"
    job = (
        f"<div class='wb-muted'>For the paper's statistics over all of them run "
        f"<code>{html.escape(st['job'])}</code>.</div>"
        if st.get("job")
        else ""
    )
    err = f"<div class='wb-muted'>{html.escape(st['error'])}</div>" if st.get("error") else ""
    return (
        f"<div class='wb-card' style='min-height:0' id='memo-stats-card'><b>Neuron statistics</b> "
        f"(μ, σ per value neuron for the z-scores): {what}{when}.{job}{err}</div>"
    )


def batch_rows(rows: list[dict]) -> list[list]:
    return [
        [
            r["prompt"],
            round(r["score"], 4),
            "memorized" if r["memorized"] else "not memorized",
            round(r["max_z"], 2),
            r["listed_type"] or "",
        ]
        for r in rows
    ]


def export_figure(c: dict | None, check: dict | None, table: dict | None):
    """The export's figure: reference image, a row of generations with all neurons on and, only when
    some are switched off, a row with them off (an "off" row with nothing off would repeat the "on"
    row under a false label); below, the z-scores or the neurons-per-prompt histogram."""
    with pyplot() as plt:
        n_img = 0 if c is None else len(c["seeds"])
        cols = max(n_img + 1, 3)
        fig = plt.figure(figsize=(2.2 * cols, 7.2))
        grid = fig.add_gridspec(3, cols)

        def cell(row, col):  # only the cells that show something get axes: each costs the export time
            ax = fig.add_subplot(grid[row, col])
            ax.axis("off")
            return ax

        if c is not None:
            if c["train_image"] is not None:
                ax = cell(0, 0)
                ax.imshow(c["train_image"])
                ax.set_title(c.get("reference_kind") or "training image", fontsize=8)
            tags = ("on", "off") if c["n_neurons"] else ("on",)
            for j, tag in enumerate(tags):
                for i, im in enumerate(c[f"images_{tag}"]):
                    ax = cell(j, i + 1)
                    ax.imshow(im)
                    t = f"seed {c['seeds'][i]} {tag}" if c["n_neurons"] else f"seed {c['seeds'][i]}"
                    if c[f"ssim_{tag}"] is not None:
                        t += f"\nSSIM {c[f'ssim_{tag}'][i]:.2f}"
                    ax.set_title(t, fontsize=8)
            if not c["n_neurons"]:  # in the figure, not an axis: a long line would defeat tight_layout
                fig.text(0.5, 0.5, NO_NEURONS_OFF, fontsize=9, ha="center", va="center")
        ax = fig.add_subplot(grid[2, :])
        if check is not None:
            off = 0
            for i, layer in enumerate(check["layers"]):
                z = check["z"][layer]
                ax.bar(range(off, off + len(z)), z, width=1.0, color=LAYER_COLOURS[i % len(LAYER_COLOURS)], label=layer)
                off += len(z)
            ax.axhline(Z_OUTLIER, ls=":", c="#94a3b8")
            ax.set(ylabel="z-score", title=f"score {check['score']:.3f} vs θ_mem {check['theta_mem']:.3f}")
            ax.legend(fontsize=7, ncol=4)
        elif table is not None:
            ax.hist([r["n_neurons"] for r in table["rows"]], bins=np.arange(-0.5, 12.5, 1), color=C.QUALITATIVE[0])
            ax.set(xlabel="neurons per memorized prompt", ylabel="prompts")
        fig.suptitle(f"NeMo · {c['prompt'] if c else ''}", fontsize=10)
        fig.tight_layout()
        return fig


def export_png(path: Path, c: dict | None, check: dict | None, table: dict | None) -> None:
    with pyplot() as plt:
        fig = export_figure(c, check, table)
        fig.savefig(path, dpi=110)
        plt.close(fig)
