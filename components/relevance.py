"""Relevance tab: MambaLRP token and pixel heatmaps beside the baselines, with the conservation
check, faithfulness curves and rule ablations (Jafari et al., 2024). UI only: the computation lives
in backend.lrp.service."""
from __future__ import annotations

import html
import io
import json
import math
import tempfile
from pathlib import Path

import gradio as gr
import numpy as np

from backend.lrp import sentences as S
from backend.lrp import service as svc
from backend.lrp.forward import RULES
from backend.lrp.methods import LABELS, METHODS, SIGNED
from backend.lrp.models import IMAGE_ZOO, LONG_ZOO, available, text_preset, text_presets
from backend.lrp.tokens import SPACE_MARK, visible
from backend.core import colors as C
from components.model_picker import model_picker
from components.common import fail, model_event, themed
from components.inputs import keep_on_failure

TAB_ID = "relevance"
TITLE = "Relevance"
ORDER = 1
SUMMARY = "MambaLRP: which tokens and pixels a Mamba model relies on, with baselines and faithfulness."
# A deep link reruns these (components.links): the text explanation, then the linked held-out image.
LINK_RUNS = ("explain_text", "image_example", "explain_image")

DEFAULT_METHODS = ["mambalrp", "gi", "ig", "mambaattr"]
RULE_LABELS = {"norm": "RMSNorm: detach the normaliser", "silu": "SiLU: x·stopgrad(σ(x))",
               "ssm": "SSM: detach Ā, B̄, C", "gate": "Gate: half rule"}
# Presenter view's one plain line in place of the explanation above (components.common: wb-presenter-only).
PRESENTER_CAPTION = ("Which words made the model give its answer: red pushed it towards the answer, "
                     "blue against it.")
PAPER_DAF = {"mambalrp": 1.978, "ig": 0.857, "lrp_ln": 0.877, "gi": 0.078, "random": -0.012}
HUB_LONG_EXAMPLE = ("The secret code is 4817. Remember it, because you will need it at the end. "
                    "Meanwhile the weather turned cold, the trains ran late, and the market was busy "
                    "with people buying bread, apples and coffee before the holiday. The secret code is")
HELD_SOURCES = {"zoo": "zoo held-out set", "captions": "COCO captions (shipped)", "file": "my sentence file",
                "sst2": "SST-2 from the hub"}
TEXT_EXAMPLES = [
    "the plot was dull but the cast was brilliant and the music was lovely",
    "a really charming film with a weak ending",
    "this sequel is long and boring and the dialogue is awful",
    "the director seemed new to the city at night",
]


# ----------------------------------------------------------------------------- colours & rendering

def _rgb(v: float) -> str:
    """v in [-1, 1] → the shared diverging map (red = positive, blue = negative, white = 0)."""
    r, g, b = C.cmap_rgb((float(np.clip(v, -1, 1)) + 1) / 2, C.SIGNED_CMAP)
    return f"rgb({r},{g},{b})"


def _ink(v: float) -> str:
    """Text colour that reads on the token's background: white on the dark ends of the map."""
    return "#ffffff" if abs(float(v)) > 0.6 else "#111827"


def max_abs(res: dict) -> float:
    return max(max(float(np.abs(np.asarray(v, float)).max()) for v in res["relevance"].values()), 1e-12)


def _scale(res: dict, normalise: bool, vmax: float | None = None) -> tuple[dict, float]:
    """Relevance in [-1, 1] for colouring: per method, or over one scale (`vmax`, by default this
    result's largest |R|; a pinned comparison passes the larger of both results')."""
    rel = {k: np.asarray(v, float) for k, v in res["relevance"].items()}
    if normalise:
        return {k: v / max(np.abs(v).max(), 1e-12) for k, v in rel.items()}, 1.0
    vmax = vmax or max_abs(res)
    return {k: v / vmax for k, v in rel.items()}, vmax


def colorbar_html(vmax: float, normalise: bool) -> str:
    lo, hi = ("−1", "+1") if normalise else (f"−{vmax:.3g}", f"+{vmax:.3g}")
    what = "relevance ÷ each method's max |R|" if normalise else "relevance (one scale for all methods)"
    return (f"<div style='display:flex;align-items:center;gap:8px;margin:6px 0 2px 0;font-size:0.8rem'>"
            f"<span>{lo}</span><div style='width:220px;height:12px;border-radius:3px;"
            f"background:{C.css_gradient(C.SIGNED_CMAP)};border:1px solid #ccc'></div><span>{hi}</span>"
            f"<span class='wb-muted'>{what} · red supports the target, blue speaks against it</span></div>")


def token_html(tok: str) -> str:
    """A token's text with its leading spaces drawn as faint marks (' was' → ·was), so the word
    boundaries a byte-level BPE keeps stay visible without the raw 'Ġ' pieces."""
    shown = visible(tok)
    lead = len(shown) - len(shown.lstrip(SPACE_MARK))
    rest = html.escape(shown[lead:]) or "&nbsp;"
    if not lead:
        return rest
    return f"<span class='wb-space' style='opacity:0.45'>{SPACE_MARK * lead}</span>{rest}"


def heatmap_html(res: dict, normalise: bool = True, mark: dict[str, set[int]] | None = None,
                 vmax: float | None = None) -> str:
    """One row of tokens per method; `mark[method]` underlines that method's own chosen positions
    (the long-range section marks each method's top-10)."""
    scaled, vmax = _scale(res, normalise, vmax)
    unknown = set(res.get("unknown_words") or [])
    rows = []
    for meth in res["methods"]:
        marked = (mark or {}).get(meth, set())
        spans = []
        for i, (tok, v, raw) in enumerate(zip(res["tokens"], scaled[meth], res["relevance"][meth])):
            border = "border-bottom:3px solid #111;font-weight:700;" if i in marked else ""
            if tok in unknown:
                border += "outline:1px dashed #6b7280;"
            spans.append(f"<span title='#{i} {html.escape(visible(tok))}: {raw:+.4g}' class='wb-token' style='background:{_rgb(v)};color:{_ink(v)};"
                         f"padding:1px 3px;margin:1px;border-radius:3px;display:inline-block;{border}'>"
                         f"{token_html(tok)}</span>")
        tag = "" if meth in SIGNED else " <span class='wb-muted'>(≥ 0 only)</span>"
        rows.append(f"<div style='margin:4px 0'><div style='font-weight:600;font-size:0.85rem'>"
                    f"{html.escape(LABELS[meth])}{tag}</div><div style='line-height:1.9'>{''.join(spans)}</div></div>")
    note = ""
    if unknown:
        words = ", ".join(html.escape(w) for w in res["unknown_words"])
        note = (f"<div class='wb-muted wb-unknown'>Not in this model's vocabulary (read as the unknown "
                f"token, outlined): {words}</div>")
    return f"<div class='wb-relevance-heatmap'>{colorbar_html(vmax, normalise)}{note}{''.join(rows)}</div>"


def position_plot(res: dict, normalise: bool = True):
    """Bars of what the heatmap shows: each method divided by its max |R| when normalised (hover
    gives the raw value too), else the raw relevance on one axis."""
    import plotly.graph_objects as go

    fig = go.Figure()
    x = list(range(len(res["tokens"])))
    shown = [visible(t) for t in res["tokens"]]
    for i, meth in enumerate(res["methods"]):
        raw = np.asarray(res["relevance"][meth], float)
        if normalise:
            y = raw / max(np.abs(raw).max(), 1e-12)
            hover = "%{text}<br>normalised %{y:.3f}<br>raw relevance %{customdata:.4g}"
        else:
            y = raw
            hover = "%{text}<br>relevance %{y:.4g}"
        fig.add_bar(x=x, y=y, name=LABELS[meth], marker_color=C.qualitative(i), customdata=raw, text=shown,
                    textposition="none", hovertemplate=hover + "<extra>" + LABELS[meth] + "</extra>")
    fig.update_layout(barmode="group", height=380, margin=dict(l=50, r=10, t=40, b=40),
                      title="Relevance by position" + (" (normalised per method)" if normalise else ""),
                      legend=dict(orientation="h", yanchor="top", y=-0.3, x=0),
                      xaxis=dict(tickmode="array", tickvals=x, ticktext=shown, tickangle=-45),
                      yaxis_title="relevance ÷ method's max |R|" if normalise else "relevance")
    if normalise:
        fig.update_yaxes(range=[-1.05, 1.05])
    return themed(fig)


def conservation_md(res: dict) -> str:
    f = res["logit"]
    lines = [f"**Target** {_code(visible(res['target']))} · logit f = **{f:.4f}**", ""]
    if res.get("target_note"):
        lines += [f"<span class='wb-muted'>{html.escape(res['target_note'])}</span>", ""]
    lines += ["| method | Σ relevance | Σ R − f | \\|Σ R − f\\| / \\|f\\| |", "|---|---|---|---|"]
    for meth in res["methods"]:
        s = res["sum_relevance"][meth]
        lines.append(f"| {LABELS[meth]} | {s:.4f} | {s - f:+.2e} | {abs(s - f) / max(abs(f), 1e-12):.2e} |")
    lines.append("")
    lines.append("<span class='wb-muted'>With every rule on and zero biases, MambaLRP's relevance sums to "
                 "the logit (conservation); drop a rule to see it break. Attention methods are not "
                 "meant to sum to f.</span>")
    if res.get("conv_bias"):
        lines.append("")
        lines.append("<span class='wb-muted'>This model's conv1d layers have biases (as Mamba-130M's "
                     "do): the biases absorb a share of the logit, so Σ R − f is not zero here even "
                     "with every rule on; that gap is the biases' share, not a broken rule.</span>")
    return "\n".join(lines)


def _tmpdir() -> Path:
    return Path(tempfile.mkdtemp(prefix="wb-relevance-"))


def export_text(res: dict) -> tuple[str, str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    d = _tmpdir()
    jpath = d / "relevance.json"
    data = dict(res)
    data["tokens_shown"] = [visible(t) for t in res["tokens"]]  # leading space → "·"
    jpath.write_text(json.dumps(data, indent=1, default=float))
    scaled, _ = _scale(res, True)
    M = np.stack([scaled[m] for m in res["methods"]])
    fig, ax = plt.subplots(figsize=(max(6, 0.45 * len(res["tokens"])), 0.6 * len(res["methods"]) + 1.6), dpi=110)
    im = ax.imshow(M, cmap=C.SIGNED_CMAP, vmin=-1, vmax=1, aspect="auto")
    ax.set_yticks(range(len(res["methods"])), [LABELS[m] for m in res["methods"]])
    ax.set_xticks(range(len(res["tokens"])), [visible(t) for t in res["tokens"]], rotation=60, ha="right", fontsize=8)
    ax.set_title(f"explaining '{visible(res['target'])}' (logit {res['logit']:.3f})", fontsize=9)
    fig.colorbar(im, ax=ax, label="relevance / max|R|", fraction=0.03)
    fig.tight_layout()
    ppath = d / "relevance.png"
    fig.savefig(ppath)
    plt.close(fig)
    return str(jpath), str(ppath)


def curves_plot(hres: dict):
    import plotly.graph_objects as go

    fig = go.Figure()
    for i, meth in enumerate(hres["methods"]):
        r = hres["results"][meth]
        c = C.qualitative(i)
        fig.add_scatter(x=r["grid"], y=r["morf"], name=f"{LABELS[meth]} MoRF", line=dict(color=c))
        fig.add_scatter(x=r["grid"], y=r["lerf"], name=f"{LABELS[meth]} LeRF", line=dict(color=c, dash="dash"))
    fig.update_layout(height=520, margin=dict(l=40, r=10, t=40, b=40),
                      legend=dict(orientation="h", yanchor="top", y=-0.18, x=0, font=dict(size=10)),
                      title=f"Target logit while removing words ({hres['n']} held-out sentences)",
                      xaxis_title=f"fraction of words replaced by {hres.get('neutral', '<unk>')}",
                      yaxis_title="target logit")
    return themed(fig)


def daf_table(hres: dict) -> list[list]:
    rows = []
    for meth in sorted(hres["methods"], key=lambda m: -hres["results"][m]["delta_af"]):
        r = hres["results"][meth]
        paper = PAPER_DAF.get(meth)
        prec = r.get("precision_at_k")
        rows.append([LABELS[meth], round(r["delta_af"], 3), round(r["delta_af_se"], 3), round(r["a_lerf"], 3),
                     round(r["a_morf"], 3), "" if prec is None else round(prec, 3),
                     "" if paper is None else paper])
    return rows


def sentence_frame(hres: dict):
    """The per-sentence table: one row per sentence (its number in the input), ΔA^F per method and
    MambaLRP's conservation error; numeric columns sort as numbers."""
    import pandas as pd

    methods = hres["methods"]
    rows = []
    for rec in hres.get("sentences") or []:
        row = {"#": rec["i"], "sentence": rec["text"], "label": "" if rec.get("label") is None else str(rec["label"]),
               "target": rec["target"]}
        for meth in methods:
            row[f"ΔA^F {LABELS[meth]}"] = round(rec["delta_af"][meth], 3)
        if "mambalrp" in rec["sum_r"]:
            f = rec["logit"]["mambalrp"]
            row["MambaLRP |Σ R − logit| / |logit|"] = round(abs(rec["sum_r"]["mambalrp"] - f) / max(abs(f), 1e-12), 4)
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
    return (f"<div class='wb-card' style='min-height:0'><b>Sentence #{rec['i']}</b>{label} · explained "
            f"target <code>{html.escape(visible(rec['target']))}</code><br><span class='wb-muted'>ΔA^F: "
            f"{numbers}</span>{heatmap_html(res, normalise)}</div>")


def scatter_plot(hres: dict):
    import plotly.graph_objects as go

    fig = go.Figure()
    allv = []
    for meth, color in (("mambalrp", C.PAIR[1]), ("gi", C.PAIR[0])):
        r = hres["results"].get(meth)
        if r is None:
            continue
        fig.add_scatter(x=r["sum_r"], y=r["logit"], mode="markers", name=LABELS[meth],
                        marker=dict(color=color, size=6, opacity=0.7))
        allv += r["sum_r"] + r["logit"]
    if allv:
        lo, hi = min(allv), max(allv)
        fig.add_scatter(x=[lo, hi], y=[lo, hi], mode="lines", name="Σ R = f",
                        line=dict(color=C.NEUTRAL, dash="dot"))
    fig.update_layout(height=520, margin=dict(l=40, r=10, t=40, b=40), title="Conservation on the held-out set",
                      legend=dict(orientation="h", yanchor="top", y=-0.18, x=0),
                      xaxis_title="Σ relevance", yaxis_title="target logit f")
    return themed(fig)


def longrange_plot(res: dict):
    """Top-10 relevant tokens per method against their distance back from the answer."""
    import plotly.graph_objects as go

    fig = go.Figure()
    far, ys = 1, [0.0, 1.0]
    for i, meth in enumerate(res["methods"]):
        tops = res["top_tokens"][meth]
        top = max(abs(tops[0]["relevance"]), 1e-12) if tops else 1.0
        far = max([far] + [d["distance"] for d in tops])
        ys += [d["relevance"] / top for d in tops]
        fig.add_scatter(x=[d["distance"] for d in tops], y=[d["relevance"] / top for d in tops],
                        # labels on each method's top 3 only (ten per method pile up); hover names all
                        text=[visible(d["token"]) if k < 3 else "" for k, d in enumerate(tops)],
                        mode="markers+text", textposition="top center",
                        customdata=[d["relevance"] for d in tops], cliponaxis=False,
                        hovertext=[visible(d["token"]) for d in tops],
                        hovertemplate="%{hovertext} · %{x} tokens back<br>relevance %{customdata:.4g}"
                                      "<extra>" + LABELS[meth] + "</extra>",
                        name=LABELS[meth], marker=dict(color=C.qualitative(i)))
    # room around the points so the labels above them (and at the ends) stay inside the plot
    fig.update_layout(height=360, margin=dict(l=50, r=30, t=50, b=40),
                      title=f"Explaining '{visible(res['target'])}': top-10 tokens",
                      xaxis=dict(title="distance back from the answer position (tokens)",
                                 range=[-0.06 * far - 1, far * 1.06 + 1]),
                      yaxis=dict(title="relevance / top relevance",
                                 range=[min(ys) - 0.1 * (max(ys) - min(ys)), max(ys) + 0.25 * (max(ys) - min(ys))]))
    return themed(fig)


def image_plot(res: dict):
    """The input and one map per method as plotly heatmaps on one symmetric scale (each map ÷ its
    max |R|), the relevance drawn over the grey input; hover gives each pixel's exact relevance."""
    from plotly.subplots import make_subplots

    meths = res["methods"]
    share = res.get("share_in_region") or {}
    titles = [f"input → {res['pred']}"] + [LABELS[m] + (f"<br>{100 * share[m]:.0f}% of R⁺ in box" if m in share else "")
                                           for m in meths]
    fig = make_subplots(1, len(meths) + 1, subplot_titles=titles, horizontal_spacing=0.02)
    img = np.asarray(res["image"], float)
    rgb = np.repeat((np.clip(img, 0, 1) * 255).round()[..., None], 3, -1)
    fig.add_image(z=rgb, hovertemplate="x %{x}, y %{y}<extra>input</extra>", row=1, col=1)
    for j, meth in enumerate(meths, start=2):
        raw = np.asarray(res["maps"][meth], float)
        fig.add_image(z=rgb, hoverinfo="skip", row=1, col=j)
        # one shared colour axis: every map on the same scale, one colour bar
        fig.add_heatmap(z=raw / max(np.abs(raw).max(), 1e-12), customdata=raw, coloraxis="coloraxis",
                        opacity=0.85,
                        hovertemplate="x %{x}, y %{y}<br>relevance %{customdata:.4g}<br>÷ max|R| %{z:.3f}"
                                      "<extra>" + LABELS[meth] + "</extra>", row=1, col=j)
    fig.update_layout(coloraxis=dict(colorscale=C.SIGNED_PLOTLY, cmin=-1, cmax=1,
                                     colorbar=dict(title=dict(text="R ÷ max|R|", side="right"), len=0.9,
                                                   thickness=12)))
    mask = res.get("mask")
    if mask is not None and np.asarray(mask).any():
        ys, xs = np.nonzero(np.asarray(mask))
        for j in range(1, len(meths) + 2):
            fig.add_shape(type="rect", x0=xs.min() - 0.5, x1=xs.max() + 0.5, y0=ys.min() - 0.5, y1=ys.max() + 0.5,
                          line=dict(color="lime", width=2), row=1, col=j)
    fig.update_xaxes(showticklabels=False, showgrid=False, zeroline=False)
    fig.update_yaxes(showticklabels=False, showgrid=False, zeroline=False, autorange="reversed")
    for j in range(1, len(meths) + 2):
        fig.update_yaxes(scaleanchor=f"x{'' if j == 1 else j}", scaleratio=1, row=1, col=j)
    fig.update_annotations(font_size=11)
    fig.update_layout(height=300, margin=dict(l=10, r=10, t=55, b=10))
    return themed(fig)


def image_figure(res: dict) -> tuple[np.ndarray, str]:
    """Input + one overlay per method on a shared symmetric scale, with a colorbar; returns RGB + PNG path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
    path = _tmpdir() / "relevance-image.png"
    fig.savefig(path, bbox_inches="tight")
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    plt.close(fig)
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(buf.getvalue())).convert("RGB")), str(path)


# ----------------------------------------------------------------------------- event handlers

def _is_zoo_sentiment_preset(p) -> bool:
    return p.source == "zoo" and p.path_or_id == "mamba-sentiment"


def held_sources_for(preset) -> list[str]:
    """The held-out sentence sets a text model can run: the organism's own set (planted evidence)
    for the zoo sentiment organism, the shipped captions for any other model (the zoo's word-level
    vocabulary would read them as <unk>s), and a file or SST-2 for all."""
    return (["zoo"] if _is_zoo_sentiment_preset(preset) else ["captions"]) + ["file", "sst2"]


def describe(text, methods, rules, target, model) -> dict:
    """What a pin keeps: the inputs of an explanation (recomputed from the cache), never tensors."""
    return {"text": text, "methods": list(methods or []), "rules": list(rules or []), "target": target or "",
            "model": model}


def pinned_html(pin: dict, res: dict, normalise: bool, vmax: float | None) -> str:
    dropped = [RULE_LABELS[r].split(":")[0] for r in RULES if r not in pin["rules"]]
    rules = "all MambaLRP rules" if not dropped else "without " + ", ".join(dropped)
    head = (f"<div class='wb-pinned-head'><b>Pinned</b> · {html.escape(str(pin['model']).split('/')[-1])} · "
            f"{rules} · target {html.escape(visible(res['target']))} (logit {res['logit']:.3f}) · "
            f"“{html.escape(pin['text'][:80])}”</div>")
    return f"<div class='wb-pinned' style='border-top:2px dashed #9ca3af;margin-top:6px;padding-top:4px'>{head}" \
           f"{heatmap_html(res, normalise, vmax=vmax)}</div>"


def refuse_unreadable(image: gr.Image) -> gr.Image:
    """Refuse an upload Pillow cannot read (a damaged or non-image file) with a clear message.

    Gradio decodes the upload before the handler runs, and its own failure there reaches the user
    as a generic error. Wrapped on the instance rather than by a subclass: a gr.Image subclass makes
    Gradio write a .pyi stub beside this module at every import."""
    decode = image.preprocess

    def preprocess(payload):
        try:
            return decode(payload)
        except gr.Error:
            raise
        except Exception:
            name = str(getattr(payload, "orig_name", None) or "the file")[:60]
            raise gr.Error(f"{name} could not be read as an image (not a PNG, JPEG or WebP file, or "
                           "damaged). Upload another image; nothing was computed.",
                           print_exception=False) from None

    image.preprocess = preprocess
    return image


def refuse_out_of_range(slider: gr.Slider, what: str) -> gr.Slider:
    """Refuse a value the slider cannot take (out of range, fractional, NaN, infinite, empty) with
    its valid range, before anything is computed. Gradio's own check lets NaN through and fails
    generically on an empty box; no value is ever clamped into range."""
    check = slider.preprocess
    lo, hi = slider.minimum, slider.maximum

    def preprocess(payload):
        ok = (isinstance(payload, (int, float)) and not isinstance(payload, bool) and math.isfinite(payload)
              and lo <= payload <= hi and float(payload).is_integer())
        if not ok:
            raise gr.Error(f"{what} must be a whole number from {lo:g} to {hi:g} (got {str(payload)[:20]}); "
                           "nothing was computed.", print_exception=False)
        return check(payload)

    slider.preprocess = preprocess
    return slider


def _guard(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except (svc.InputError, S.DataError) as e:
        fail(str(e))


def _code(text: str) -> str:
    """Markdown code span of any text: code spans show '<' as it is, so no HTML escaping; a
    backtick inside is fenced by a longer run."""
    text = str(text)
    fence = "``" if "`" in text else "`"
    return f"{fence} {text} {fence}" if fence == "``" else f"`{text}`"


def heldout_note(hres: dict) -> str:
    """What data and targets the held-out numbers come from."""
    src = {"zoo": "the zoo organism's held-out sentences (planted evidence words)",
           "sst2": "SST-2 validation sentences from the hub", "file": "your sentence file",
           "captions": "COCO 2014 captions shipped with the app (assets/data/nemo, MIT; no labels)"}
    parts = [f"**Data:** {src.get(hres.get('source', 'zoo'), hres.get('source'))} · {hres['n']} sentences"]
    if hres.get("source") == "zoo":
        parts.append("**Target:** the label the organism prefers for each sentence")
    elif hres.get("target") == "label":
        words = ", ".join(f"{html.escape(k)} → {_code(visible(v))}" for k, v in hres["label_tokens"].items())
        parts.append(f"**Target:** each sentence's label word ({words})")
    elif hres.get("target") == "predicted":
        top = ", ".join(f"{_code(visible(k))} ×{v}" for k, v in list(hres["targets_used"].items())[:6])
        parts.append(f"**Target:** the model's own next-token prediction ({top})")
    if hres.get("suffix"):
        parts.append(f"**Prompt after each sentence:** {_code(hres['suffix'])} (its tokens are never removed)")
    if hres.get("neutral"):
        parts.append(f"Removed tokens are replaced by {_code(hres['neutral'])}.")
    if hres.get("skipped"):
        parts.append("Skipped: " + ", ".join(f"{v} ({k})" for k, v in hres["skipped"].items()) + ".")
    for note in hres.get("notes", []):
        parts.append(f"<span class='wb-muted'>{html.escape(note)}</span>")
    if hres.get("source") != "zoo":
        parts.append("<span class='wb-muted'>No planted evidence here, so no precision@k. The paper's "
                     "ΔA^F figures are for Mamba-130M fine-tuned on SST-2; a base checkpoint explains "
                     "its own next-token predictions.</span>")
    return "  \n".join(parts)


def read_heldout(data: str, upload) -> list[dict]:
    """The sentences the held-out section runs on: an uploaded file or SST-2 from the hub."""
    if data == "sst2":
        return S.load_sst2()
    if data == "captions":
        return S.load_captions()
    if not upload:
        raise S.DataError("Upload a sentence file (one per line, or CSV/TSV/JSONL with a 'sentence' or "
                          "'text' column and an optional 'label').")
    path = upload if isinstance(upload, str) else getattr(upload, "name", None) or upload.get("path")
    return S.read_sentences(path)


def build(ctx) -> None:
    source = ctx.source
    text_p = text_preset(source)
    text_choices = text_presets(source)
    hub = text_p.source == "hub"
    gr.HTML(
        "<div class='wb-explain'><b>MambaLRP</b> (Jafari et al., 2024) explains a Mamba model's output "
        "as relevance per input token (or pixel). It is Gradient×Input on a forward pass whose values "
        "are unchanged but whose gradient paths are cut by four rules (RMSNorm, SiLU, selective SSM, "
        "gate), so relevance <i>sums to the explained logit</i>. Compare it with gradient baselines "
        "and Mamba's hidden-attention maps, check conservation, ablate rules, and measure faithfulness "
        "by deleting the tokens each method calls most (MoRF) or least (LeRF) relevant. Your own "
        "Mamba or FalconMamba model can be typed into the model box; FalconMamba's extra norms on "
        "Δ, B and C lie on the SSM parameters' branch, which the SSM rule detaches, so they need no rule "
        "of their own (being scale-invariant, that branch adds nothing to the total either: on FalconMamba "
        "conservation holds even with the SSM rule off, which only changes how relevance is shared)."
        "</div>",
        elem_classes=["wb-advanced"])
    gr.HTML(f"<div class='wb-explain'>{PRESENTER_CAPTION}</div>", elem_classes=["wb-presenter-only"],
            elem_id="rel-presenter-caption")
    zoo_note = (" — the zoo organism: 1–3 polar words among distractors decide the label by majority; "
                "the truth is where they are." if text_p.source == "zoo" else "")
    gr.Markdown(f"<span class='wb-muted'>Default text model: <b>{html.escape(text_p.label or text_p.path_or_id)}</b>"
                f"{zoo_note}" + (" — pick the checkpoint below. Tokens are shown as the text they stand "
                                 "for; a faint · marks a token that begins with a space." if hub else "")
                + "</span>", elem_classes=["wb-advanced"])

    # ---------------------------------------------------------------- text
    with gr.Row():
        with gr.Column(scale=3):
            text = gr.Textbox(label="Text", value=TEXT_EXAMPLES[0], lines=2, elem_id="rel-text")
            gr.Examples(TEXT_EXAMPLES, inputs=[text], label="Examples")
        with gr.Column(scale=2):
            # the zoo organism, the paper's checkpoints, or your own Mamba / FalconMamba typed in
            model, _ = model_picker(text_choices, "relevance", elem_id="rel-model", value=text_p.path_or_id,
                                    label="Text model")
            methods = gr.CheckboxGroup([(LABELS[m], m) for m in METHODS], value=DEFAULT_METHODS,
                                       label="Methods", elem_id="rel-methods", elem_classes=["wb-advanced"])
            rules = gr.CheckboxGroup([(RULE_LABELS[r], r) for r in RULES], value=list(RULES),
                                     label="MambaLRP rules (untick to ablate)", elem_id="rel-rules",
                                     elem_classes=["wb-advanced"])
            with gr.Row(elem_classes=["wb-advanced"]):
                target = gr.Textbox(label="Target word or token (blank = the model's prediction)", value="",
                                    elem_id="rel-target", scale=2)
                normalise = gr.Checkbox(label="Normalise per method", value=True, elem_id="rel-normalise")
            explain = gr.Button("Explain", variant="primary", elem_id="rel-explain")
    heat = gr.HTML(elem_id="rel-heatmap", elem_classes=["wb-keyfig"])
    with gr.Row():
        pin_btn = gr.Button("Pin this result", size="sm", elem_id="rel-pin", scale=0, min_width=160)
        unpin_btn = gr.Button("Clear pin", size="sm", elem_id="rel-unpin", scale=0, min_width=120)
        gr.Markdown("<span class='wb-muted'>A pinned explanation stays below the current one, on the same "
                    "colour scale: change the rules, the target or the model and compare.</span>")
    pinned = gr.HTML(elem_id="rel-pinned")
    last, pin = gr.State(None), gr.State(None)
    with gr.Row():
        with gr.Column(scale=3):
            bars = gr.Plot(label="Relevance by position", elem_id="rel-bars")
        with gr.Column(scale=2):
            cons = gr.Markdown(elem_id="rel-conservation", elem_classes=["wb-advanced"])
    with gr.Row():
        jfile = gr.File(label="Export JSON", elem_id="rel-json")
        pfile = gr.File(label="Export PNG", elem_id="rel-png")
    with gr.Accordion("Result as data", open=False):
        summary = gr.JSON(label="Result (raw)", open=False, elem_id="rel-result")

    def run_text(t, ms, rs, tgt, norm, model_id=None, progress=gr.Progress()):
        progress(0.1, desc="loading model")
        m = _guard(svc.load_text, source, model_id, lambda f, d: progress(0.1 + 0.2 * f, desc=d))
        progress(0.3, desc="explaining")
        res = _guard(svc.explain_text, m, t, ms, rs, tgt or None)
        jpath, ppath = export_text(res)
        return heatmap_html(res, norm), position_plot(res, norm), conservation_md(res), jpath, ppath, res

    text_out = [heat, bars, cons, jfile, pfile, summary]
    text_in = [text, methods, rules, target, model]
    ran = keep_on_failure(explain.click(run_text, [text, methods, rules, target, normalise, model], text_out,
                                        **model_event(api_name="explain_text")), text_out)

    def pair(p, res, norm):
        """The current heatmap and the pinned one, on one scale when not normalised per method."""
        if not p or not res:
            return gr.skip(), ""
        m = _guard(svc.load_text, source, p["model"])
        pres = _guard(svc.explain_text, m, p["text"], p["methods"], p["rules"], p["target"] or None)
        vmax = max(max_abs(res), max_abs(pres))
        return heatmap_html(res, norm, vmax=vmax), pinned_html(p, pres, norm, vmax)

    def do_pin(last_inputs, res, norm):
        if not last_inputs or not res:
            fail("Explain a text first, then pin it.")
        return (last_inputs, *pair(last_inputs, res, norm))

    ran.success(describe, text_in, [last], queue=False, api_name=False).then(
        pair, [pin, summary, normalise], [heat, pinned], show_progress="hidden",
        **model_event(api_name=False))
    keep_on_failure(pin_btn.click(do_pin, [last, summary, normalise], [pin, heat, pinned],
                                  **model_event(api_name=False)), [pin, heat, pinned])
    unpin_btn.click(lambda res, norm: (None, heatmap_html(res, norm) if res else gr.skip(), ""),
                    [summary, normalise], [pin, heat, pinned], queue=False, api_name=False)

    # ---------------------------------------------------------------- held-out evaluation
    with gr.Accordion("Held-out evaluation: faithfulness (ΔA^F) and conservation", open=False,
                      elem_id="rel-heldout-acc"):
        gr.Markdown("Tokens are replaced by a neutral token (`<unk>`; for GPT-NeoX vocabularies "
                    "`<|endoftext|>`) in order of relevance, most relevant first (MoRF) or "
                    "least relevant first (LeRF); the area between the two logit curves is ΔA^F "
                    "(higher = more faithful). Precision@k (zoo only): share of the top-k words that are the "
                    "label-supporting evidence words (k = their number). Paper (SST-2, Mamba-130M): "
                    "MambaLRP 1.978, IG 0.857, LRP (LN-rule) 0.877, GI 0.078, random −0.012.")
        held_sources = held_sources_for(text_p)
        with gr.Row():
            held_data = gr.Radio([(HELD_SOURCES[k], k) for k in held_sources], value=held_sources[0],
                                 label="Sentences", elem_id="rel-held-data")
            held_target = gr.Radio([("the model's prediction", "predicted"), ("each sentence's label", "label")],
                                   value="predicted", label="Target", elem_id="rel-held-target")
        with gr.Row(visible=held_sources[0] not in ("zoo", "captions")) as held_own:
            held_file = gr.File(label="Sentence file (.txt lines · .csv/.tsv/.jsonl with 'sentence' or "
                                      "'text' and optional 'label')",
                                file_types=[".txt", ".csv", ".tsv", ".jsonl", ".json"], elem_id="rel-held-file")
            with gr.Column():
                held_words = gr.Textbox(label="Label words (label=word, …; blank: 0/1 → negative/positive, "
                                              "other labels are their own word)", value="",
                                        elem_id="rel-held-words")
                held_suffix = gr.Textbox(label="Prompt after each sentence (optional, e.g. ' Sentiment:')",
                                         value="", elem_id="rel-held-suffix")
        with gr.Row():
            n_sent = refuse_out_of_range(gr.Slider(20, 240, value=60, step=10, label="Held-out sentences (at most)",
                                                   elem_id="rel-n"), "The number of held-out sentences")
            run_held = gr.Button("Run held-out evaluation", elem_id="rel-heldout")
        held_note = gr.Markdown(elem_id="rel-held-note")
        table = gr.Dataframe(headers=["method", "ΔA^F", "± s.e.", "A LeRF", "A MoRF", "precision@k",
                                      "paper ΔA^F"], interactive=False, elem_id="rel-daf")
        with gr.Row():
            curves = gr.Plot(label="MoRF / LeRF", elem_id="rel-curves")
            scatter = gr.Plot(label="Σ R vs logit", elem_id="rel-scatter")
        sentences = gr.Dataframe(label="Per sentence: sort from a header's ⋮ menu, select a row to see its heatmap",
                                 interactive=False, wrap=True, max_height=360, elem_id="rel-sentences")
        with gr.Row():
            with gr.Column(scale=3):
                sentence_view = gr.HTML(elem_id="rel-sentence-view")
            with gr.Column(scale=1):
                sentence_csv = gr.File(label="Per-sentence results (CSV)", elem_id="rel-sentences-csv")
        held_res = gr.State(None)  # the last held-out result (per-sentence relevance for the row view)

    def run_heldout(ms, n, data=None, upload=None, tgt="predicted", words="", suffix="", model_id=None,
                    progress=gr.Progress()):
        m = _guard(svc.load_text, source, model_id)
        report = lambda f, d: progress(f, desc=d)  # noqa: E731
        data = data or held_sources[0]
        if data == "zoo":
            res = dict(_guard(svc.heldout_sentiment, m, ms, n, progress=report), source="zoo")
        else:
            progress(0.02, desc="reading sentences")
            items = _guard(read_heldout, data, upload)
            res = _guard(svc.heldout_sentences, m, items, ms, target=tgt or "predicted", label_words=words,
                         suffix=suffix, n=n, source=data, progress=report)
        return daf_table(res), curves_plot(res), scatter_plot(res), heldout_note(res), res

    def sentence_table(res):
        df, kinds = sentence_frame(res)
        path = Path(tempfile.mkdtemp(prefix="relevance-")) / "sentences.csv"
        df.to_csv(path, index=False)
        return gr.update(value=df, datatype=kinds), "", str(path)

    def open_sentence(res, norm, evt: gr.SelectData):
        """A selected row (after any sort: its '#' cell says which sentence) shows that sentence."""
        if not res or evt is None or not evt.row_value:
            return gr.skip()
        try:
            number = int(evt.row_value[0])
        except (TypeError, ValueError):
            return gr.skip()
        return sentence_html(res, number, norm)

    # the file, label words and prompt only matter for sentences of the user's or SST-2
    held_data.change(lambda d: gr.update(visible=d not in ("zoo", "captions")), [held_data], [held_own],
                     api_name=False)

    def held_for_model(model_id):
        """A newly picked text model gets the sentence sets it can run (an unreadable pick says why
        when it is used)."""
        try:
            options = held_sources_for(svc.pick_text(source, model_id or None).preset)
        except svc.InputError:
            return gr.skip(), gr.skip()
        return (gr.update(choices=[(HELD_SOURCES[k], k) for k in options], value=options[0]),
                gr.update(visible=options[0] not in ("zoo", "captions")))

    model.change(held_for_model, model, [held_data, held_own], queue=False, show_progress="hidden",
                 api_visibility="private")

    held_out = [table, curves, scatter, held_note, held_res]
    held = keep_on_failure(run_held.click(run_heldout, [methods, n_sent, held_data, held_file, held_target,
                                                        held_words, held_suffix, model], held_out,
                                          **model_event(api_name="heldout_eval")), held_out)
    held.success(sentence_table, held_res, [sentences, sentence_view, sentence_csv], queue=False,
                 api_visibility="private")
    sentences.select(open_sentence, [held_res, normalise], sentence_view, queue=False, api_visibility="private")

    # ---------------------------------------------------------------- long range
    with gr.Accordion("Long-range: where does the answer come from?", open=False, elem_id="rel-long-acc"):
        long_ok = hub or available(LONG_ZOO)
        lr_example = HUB_LONG_EXAMPLE if hub else ""
        if long_ok and not hub:
            lm = svc.load_longrange()
            lr_example = " ".join(lm.heldout[0]["tokens"][:-1])
        if hub:
            gr.Markdown("Runs on the **selected hub checkpoint** above (the zoo's long-range organism is not "
                        "used in hub mode): type a text whose next token depends on something far back, "
                        "e.g. a code stated at the start and asked for at the end. The plot shows where "
                        "the 10 most relevant tokens sit, counted back from the predicted token.")
        else:
            gr.Markdown("The zoo long-range model sees one `key` token near the start, then 40–60 noise "
                        "tokens, and must answer with the key's value. The explanation of its predicted "
                        "answer should sit on the key, far back. Underlined: each method's own top-10 tokens.")
        lr_text = gr.Textbox(label="Text (the predicted next token is explained)" if hub else
                             "Sequence (answer: is appended)", value=lr_example, lines=3,
                             elem_id="rel-long-text", interactive=long_ok)
        lr_btn = gr.Button("Explain the predicted next token", interactive=long_ok, elem_id="rel-long-explain")
        lr_heat = gr.HTML(elem_id="rel-long-heatmap")
        lr_plot = gr.Plot(label="Top-10 relevant tokens by distance", elem_id="rel-long-plot")
        with gr.Accordion("Top tokens as data", open=False):
            lr_json = gr.JSON(label="Top tokens", open=False, elem_id="rel-long-json")
        if not long_ok:
            gr.Markdown("<span class='wb-muted'>The long-range organism is not built.</span>")

    def run_long(t, ms, model_id=None, progress=gr.Progress()):
        progress(0.2, desc="explaining")
        m = _guard(svc.load_text, source, model_id) if hub else svc.load_longrange()
        res = _guard(svc.longrange, m, t, ms)
        mark = {meth: {d["position"] for d in tops} for meth, tops in res["top_tokens"].items()}
        return heatmap_html(res, True, mark), longrange_plot(res), {"target": res["target"],
                                                                     "top_tokens": res["top_tokens"]}

    long_out = [lr_heat, lr_plot, lr_json]
    keep_on_failure(lr_btn.click(run_long, [lr_text, methods, model], long_out,
                                 **model_event(api_name="explain_longrange")), long_out)

    # ---------------------------------------------------------------- image
    with gr.Accordion("Image: Vision-Mamba-style classifier (zoo organism)" if hub else
                      "Image: Vision-Mamba-style classifier", open=True, elem_id="rel-image-acc"):
        img_ok = available(IMAGE_ZOO)
        if hub:
            gr.Markdown("<b>Not a paper checkpoint:</b> the image classifier is this project's own "
                        "Vision-Mamba organism (trained here, from the zoo); no hub checkpoint is registered "
                        "for images, so this section runs on it in hub mode too.", elem_id="rel-image-hub-note")
        gr.Markdown("Which pixels made the classifier name the shape: red pushed towards its answer.",
                    elem_classes=["wb-presenter-only"])
        gr.Markdown("A patch embedding feeds `MambaModel(inputs_embeds=…)`; the class is the shape of "
                    "the one bright 4×4 object (ring / cross / stripes) on one patch, or none when there is no "
                    "object, among noise and distractor strokes on other patches. "
                    "For held-out examples the green box is the ground-truth patch, and each title gives "
                    "the share of positive relevance inside it.", elem_classes=["wb-advanced"])
        with gr.Row():
            with gr.Column(scale=1):
                gr.Markdown("**Image** · any size; converted to 16×16 grayscale. <span class='wb-muted'>"
                            "A link to this view carries the held-out example number, not an uploaded "
                            "image.</span>")
                image = refuse_unreadable(gr.Image(label="input image (16×16 grayscale)", show_label=False,
                                                   type="numpy", format="png", image_mode="L", height=220,
                                                   elem_id="rel-image"))
                with gr.Row():
                    ex_idx = refuse_out_of_range(gr.Slider(0, 199, value=0, step=1, label="Held-out example",
                                                           elem_id="rel-ex-idx"), "The held-out example number")
                    ex_btn = gr.Button("Load example", size="sm", interactive=img_ok, elem_id="rel-ex-load")
                img_btn = gr.Button("Explain image", variant="primary", interactive=img_ok,
                                    elem_id="rel-image-explain")
            with gr.Column(scale=3):
                gr.Markdown("**Heatmaps** · one symmetric scale, each map divided by its max |R|; hover a pixel "
                            "for its exact relevance")
                img_out = gr.Plot(label="relevance heatmaps: the input and one map per method", show_label=False,
                                  elem_id="rel-image-out")
                img_md = gr.Markdown(elem_id="rel-image-md")
                img_file = gr.File(label="Export PNG", elem_id="rel-image-png")
        if not img_ok:
            gr.Markdown("<span class='wb-muted'>The image organism is not built.</span>")

    def load_example(i):
        return _guard(svc.example_image, svc.load_image(), i)

    keep_on_failure(ex_btn.click(load_example, [ex_idx], [image], api_name="image_example"), [image])

    def run_image(img, ms, rs, progress=gr.Progress()):
        progress(0.2, desc="explaining")
        m = svc.load_image()
        res = _guard(svc.explain_image, m, img, ms, rs)
        _, path = image_figure(res)
        logits = ", ".join(f"{k} {v:.2f}" for k, v in res["logits"].items())
        md = [f"**Prediction:** {res['pred']} (logits: {logits})"]
        if res["share_in_region"]:
            md.append("Share of positive relevance inside the object's box: " + ", ".join(
                f"{LABELS[k]} {100 * v:.0f}%" for k, v in res["share_in_region"].items())
                      + f" (the box covers {100 * np.mean(res['mask']):.0f}% of the image)")
        md.append("Σ relevance: " + ", ".join(f"{LABELS[k]} {v:.3f}" for k, v in res["sum_relevance"].items()))
        return image_plot(res), "\n\n".join(md), path

    image_out = [img_out, img_md, img_file]
    keep_on_failure(img_btn.click(run_image, [image, methods, rules], image_out,
                                  **model_event(api_name="explain_image")), image_out)
