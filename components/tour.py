"""Guided tour: each paper's headline result told in a few clicks, for someone who has never read it.

Every step is a real computation through the paper's backend on the zoo model (cached after the
first run, per step), drawn as one figure with a caption that says what is on screen and why it
matters. A tour is only offered when its backend and zoo organisms are present. Tours: MambaLRP
(relevance), multimodal SAE (features), NeMo (memorization), MathNeuro (math neurons), PiSSA
(adapters) and all of them in a row. The Overview's "Guided tour" buttons open them. Each figure is
saved for the light and the dark theme, and the page's theme picks one.
"""
from __future__ import annotations

import html
import io
import re
from dataclasses import dataclass
from typing import Callable

import gradio as gr
import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from backend.core import colors  # noqa: E402
from backend.core.cache import ByteLRUCache  # noqa: E402
from backend.core.presets import ZOO_ROOT  # noqa: E402
from components.common import model_event  # noqa: E402

TAB_ID = "tour"
TITLE = "Guided tour"
ORDER = 6
SUMMARY = "Each paper's main finding, step by step, computed live on the zoo models."

CACHE = ByteLRUCache(48 * 2**20, name="tour")


@dataclass
class Step:
    """One screen of a tour: `compute()` runs the backend and returns (figure, caption, numbers)."""
    title: str
    compute: Callable[[], tuple[np.ndarray, str, dict]]


@dataclass
class Tour:
    tour_id: str
    title: str
    organism: str | tuple[str, ...]
    steps: list[Step]

    def available(self) -> bool:
        names = (self.organism,) if isinstance(self.organism, str) else self.organism
        return all((ZOO_ROOT / name / "manifest.json").exists() for name in names)


# ----------------------------------------------------------------------------- drawing helpers

def _fig(w: float = 10.0, h: float = 4.2):
    fig, ax = plt.subplots(figsize=(w, h), dpi=100)
    return fig, ax


# Every figure is drawn once and saved twice: as drawn (light page) and recoloured for the dark theme
# (the background of a Gradio block in dark mode, light ink; data colours and images unchanged).
DARK_BG, DARK_INK, DARK_RULE = "#1f2937", "#e5e7eb", "#9ca3af"


def _luminance(r: float, g: float, b: float) -> float:
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def _grey(r: float, g: float, b: float) -> bool:
    return max(r, g, b) - min(r, g, b) < 0.15


def _dark_grey(r: float, g: float, b: float) -> bool:
    """Grey or black ink that would vanish on the dark background."""
    return _grey(r, g, b) and _luminance(r, g, b) < 0.55


def _dark_ink(color):
    """The dark-theme version of an ink colour: grey or black ink becomes light; a dark saturated
    colour (e.g. the red of a highlighted word) is lightened; anything else is kept (None)."""
    from matplotlib.colors import to_rgba

    r, g, b, a = to_rgba(color)
    if a == 0:
        return None
    if _grey(r, g, b):
        return DARK_INK if _dark_grey(r, g, b) else None
    if _luminance(r, g, b) < 0.35:
        return (r + (1 - r) * 0.45, g + (1 - g) * 0.45, b + (1 - b) * 0.45, a)
    return None


def _darken(fig) -> None:
    from matplotlib.colors import to_rgba
    from matplotlib.lines import Line2D
    from matplotlib.text import Text

    fig.patch.set_facecolor(DARK_BG)
    for ax in fig.axes:
        if to_rgba(ax.get_facecolor())[:3] == (1.0, 1.0, 1.0):
            ax.set_facecolor(DARK_BG)
        for sp in ax.spines.values():
            sp.set_edgecolor(DARK_RULE)
        ax.tick_params(which="both", color=DARK_RULE)
    for t in fig.findobj(Text):
        new = _dark_ink(t.get_color())
        if new is not None:
            t.set_color(new)
    for ln in fig.findobj(Line2D):  # only grey lines change; coloured data lines keep their colour
        if _dark_grey(*to_rgba(ln.get_color())[:3]):
            ln.set_color(DARK_INK)


def _save(fig, facecolor: str) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", facecolor=facecolor)
    return buf.getvalue()


def _png(fig) -> dict[str, bytes]:
    """The figure as PNG bytes for the light and the dark theme."""
    if fig.get_layout_engine() is None:  # figures with colorbars use the constrained layout
        fig.tight_layout()
    try:
        light = _save(fig, "white")
        _darken(fig)
        dark = _save(fig, DARK_BG)
    finally:
        plt.close(fig)
    return {"light": light, "dark": dark}


def _decode(png: bytes) -> np.ndarray:
    return (plt.imread(io.BytesIO(png))[..., :3] * 255).round().astype(np.uint8)


def _token_bars(ax, tokens, values, title, highlight=None):
    x = np.arange(len(tokens))
    ax.bar(x, values, color=colors.signed_colors(values), edgecolor="none")
    ax.axhline(0, color="#444", lw=0.8)
    ax.set_xticks(x, tokens, rotation=40, ha="right", fontsize=10)
    ax.set_title(title, fontsize=12, loc="left")
    ax.spines[["top", "right"]].set_visible(False)
    labels = ax.get_xticklabels()
    if highlight is not None and 0 <= highlight < len(labels):
        labels[highlight].set_fontweight("bold")
        labels[highlight].set_color(colors.POSITIVE)


def _share(rel, positions) -> tuple[int, float]:
    """The word position with the largest relevance and its share of the total |relevance| over words."""
    r = np.asarray(rel, dtype=float)
    pos = np.asarray(positions, dtype=int)
    i = int(pos[np.argmax(r[pos])])
    return i, float(r[i] / max(np.abs(r[pos]).sum(), 1e-12))


# ----------------------------------------------------------------------------- Relevance (MambaLRP)

REL_TEXT = "the story was long and the camera was old but the ending was superb"


def _rel_model():
    from backend.lrp import service as svc

    return svc, svc.load_text("zoo")


def rel_answer():
    svc, m = _rel_model()
    res = svc.explain_text(m, REL_TEXT, ["mambalrp"])
    labels = m.task.get("labels", ["positive", "negative"])
    scores = [res["top_next"].get(lab, np.nan) for lab in labels]
    fig, ax = _fig(10, 3.4)
    ax.barh(labels, scores, color=[colors.POSITIVE if lab == res["target"] else colors.NEUTRAL for lab in labels])
    for y, s in enumerate(scores):
        ax.text(s, y, f"  {s:.1f}", va="center", fontsize=11)
    ax.set_xlabel("the model's score for each answer (logit)")
    ax.set_title(f"Review: “{REL_TEXT}”", fontsize=11, loc="left")
    ax.spines[["top", "right"]].set_visible(False)
    cap = (f"A tiny Mamba language model, trained here, reads a short movie review and answers with one "
           f"word: <b>positive</b> or <b>negative</b>. The bars are its scores for the two answers — it "
           f"says <b>{html.escape(res['target'])}</b>. The question for the rest of this tour: "
           f"<i>which word made it say so?</i>")
    return _png(fig), cap, {"text": REL_TEXT, "answer": res["target"], "scores": dict(zip(labels, scores))}


def rel_lrp():
    svc, m = _rel_model()
    res = svc.explain_text(m, REL_TEXT, ["mambalrp"])
    rel = res["relevance"]["mambalrp"]
    i, share = _share(rel, res["word_positions"])
    fig, ax = _fig()
    _token_bars(ax, res["tokens"], rel, f"MambaLRP: how much each word pushed the answer “{res['target']}”", i)
    ax.set_ylabel("relevance")
    word = html.escape(res["tokens"][i])
    cap = (f"<b>MambaLRP</b> divides the model's score among the words of the review: each bar is one word's "
           f"share, its <i>relevance</i>. A red bar pushed towards “{html.escape(res['target'])}”, a blue bar "
           f"pushed against it. The word <b>{word}</b> gets <b>{share:.0%}</b> of the relevance on the review's "
           f"words. That is the right word to point at, and we can be sure of it: we built the training data so "
           f"that only sentiment words decide the answer, and everything else is filler. (The last bar is the "
           f"question “sentiment:” itself, which always takes a share; “&lt;bos&gt;” marks the start.)")
    return _png(fig), cap, {"tokens": res["tokens"], "relevance": rel, "top_word": res["tokens"][i],
                            "top_share": share}


def rel_baseline():
    svc, m = _rel_model()
    res = svc.explain_text(m, REL_TEXT, ["mambalrp", "gi"])
    i_l, s_l = _share(res["relevance"]["mambalrp"], res["word_positions"])
    i_g, s_g = _share(res["relevance"]["gi"], res["word_positions"])
    fig, axes = plt.subplots(2, 1, figsize=(10, 6.2), dpi=100)
    _token_bars(axes[0], res["tokens"], res["relevance"]["mambalrp"], "MambaLRP", i_l)
    _token_bars(axes[1], res["tokens"], res["relevance"]["gi"], "Gradient × Input (common baseline)", i_g)
    gi = np.asarray(res["relevance"]["gi"])
    sup = res["word_positions"][int(np.argmax(np.asarray(res["relevance"]["mambalrp"])[res["word_positions"]]))]
    gi_sup = float(gi[sup] / max(np.abs(gi[res["word_positions"]]).sum(), 1e-12))
    verdict = ("Plain gradients are distorted by some of Mamba's internal parts (its gates and "
               "normalisations); MambaLRP corrects for them, so its explanation points at the word that "
               "actually mattered." if gi_sup < s_l else
               "On this review the baseline agrees with MambaLRP; the next steps compare them on many reviews.")
    cap = (f"The same question answered by <b>Gradient × Input</b>, the usual quick explanation (bottom). "
           f"Its strongest word is <b>{html.escape(res['tokens'][i_g])}</b> and the evidence word "
           f"“{html.escape(res['tokens'][sup])}” gets {gi_sup:.0%} of the relevance, against {s_l:.0%} "
           f"with MambaLRP (top). {verdict}")
    return _png(fig), cap, {"mambalrp_top": res["tokens"][i_l], "gi_top": res["tokens"][i_g],
                            "evidence_share": {"mambalrp": s_l, "gi": gi_sup}}


def rel_conservation():
    from backend.lrp.forward import RULES

    svc, m = _rel_model()
    variants = [("all four rules", tuple(RULES))] + [
        (f"without the {name} rule", tuple(x for x in RULES if x != r))
        for r, name in (("ssm", "state-space (ssm)"), ("gate", "gate"))] + [
        ("norm rule only", ("norm",))]
    sums, logit = [], None
    for _, rules in variants:
        res = svc.explain_text(m, REL_TEXT, ["mambalrp"], rules=rules)
        sums.append(res["sum_relevance"]["mambalrp"])
        logit = res["logit"]
    fig, ax = _fig(10, 3.8)
    names = [v[0] for v in variants]
    ax.barh(names[::-1], sums[::-1], color=[colors.PAIR[1] if abs(s - logit) < 1e-3 * abs(logit) else colors.PAIR[0]
                                           for s in sums[::-1]])
    ax.axvline(logit, color="#222", ls="--", lw=1.2)
    ax.text(logit, len(names) - 0.45, f" model score = {logit:.2f}", fontsize=10)
    ax.set_xlabel("sum of all relevance")
    ax.spines[["top", "right"]].set_visible(False)
    err = [abs(s - logit) / abs(logit) for s in sums]
    cap = (f"MambaLRP is a set of rules, one for each kind of part inside Mamba, for handing the score back "
           f"to the words. A check anyone can read: the shares of all words should add up to the model's score, "
           f"{logit:.2f} (dashed line) — nothing invented, nothing lost. With all of MambaLRP's rules it "
           f"does (the difference, {abs(sums[0] - logit):.0e}, is rounding). Remove one rule and the books no longer balance: the sum is "
           f"{sums[1]:.1f} without the state-space rule and {sums[2]:.1f} without the gate rule. Each rule "
           f"is needed.")
    return _png(fig), cap, {"logit": logit, "sums": dict(zip(names, sums)), "relative_error": dict(zip(names, err))}


def rel_faithfulness():
    svc, m = _rel_model()
    h = svc.heldout_sentiment(m, ["mambalrp", "gi"], n=20)
    res = h["results"]
    fig, ax = _fig(10, 4.2)
    for meth, col in (("mambalrp", colors.PAIR[1]), ("gi", colors.PAIR[0])):
        r = res[meth]
        ax.plot(np.asarray(r["grid"]) * 100, r["morf"], color=col, lw=2.2,
                label=f"{h['labels'][meth]}: most relevant removed first")
    ax.plot(np.asarray(res["random"]["grid"]) * 100, res["random"]["morf"], color=colors.NEUTRAL, lw=1.5, ls=":",
            label="random order")
    ax.set_xlabel("% of words removed")
    ax.set_ylabel("score of the original answer")
    ax.legend(frameon=False, fontsize=10)
    ax.spines[["top", "right"]].set_visible(False)
    d = {k: res[k]["delta_af"] for k in res}
    verdict = ("MambaLRP's order (blue) does; Gradient × Input's (orange) does little better than a random "
               "order (dotted)." if d["mambalrp"] > d["gi"] > d["random"] - 0.5 and d["mambalrp"] > 2 * abs(d["gi"])
               else "Compare MambaLRP's order (blue), Gradient × Input's (orange) and a random order (dotted).")
    cap = (f"The real test, on {h['n']} reviews the model never saw: remove words one by one, most "
           f"relevant first, and watch the score of the answer. A faithful explanation makes it collapse "
           f"at once. {verdict} The paper's faithfulness score ΔA<sup>F</sup> (higher is better): "
           f"MambaLRP {d['mambalrp']:.2f}, Gradient × Input {d['gi']:.2f}, random {d['random']:.2f}.")
    return _png(fig), cap, {"n": h["n"], "delta_af": d,
                            "precision_at_k": {k: res[k]["precision_at_k"] for k in res}}


# ----------------------------------------------------------------------------- image helpers

def _img_ax(ax, img, title: str | None = None, fontsize: int = 10, color: str = "#222"):
    """An image panel: pixels as they are (no smoothing), no axes, an optional title."""
    ax.imshow(np.asarray(img), interpolation="nearest")
    ax.set_xticks([])
    ax.set_yticks([])
    for s in ax.spines.values():
        s.set_visible(False)
    if title:
        ax.set_title(title, fontsize=fontsize, color=color)


def _colorbar(fig, mappable, axes, label: str):
    cb = fig.colorbar(mappable, ax=axes, fraction=0.025, pad=0.015)
    cb.set_label(label, fontsize=10)
    cb.ax.tick_params(labelsize=9)
    return cb


# ----------------------------------------------------------------------------- Features (multimodal SAE)

FEAT_COLOUR, FEAT_N_RANDOM, FEAT_N_STEER = "red", 20, 6  # the story's colour, random scenes, steered scenes

def _feat():
    from backend.sae import features as FT
    from backend.sae import scenes as S

    return FT, S, FT.get_organism("zoo")


def _feat_setup():
    """The story's feature (the organism's steering feature for 'red'), its best steering setting
    as the organism's summary reports it, and held-out scenes with nothing red in them."""
    FT, S, org = _feat()
    st = org.summary.get("steering", {})
    feature = int(st.get("colour_features", {}).get(FEAT_COLOUR, -1))
    if feature < 0:  # no steering record: the feature whose label is the colour with the best IoU
        feature = max((int(f) for f, lab in org.labels.items() if lab.get("label") == FEAT_COLOUR),
                      key=lambda f: org.labels[str(f)].get("score", 0.0))
    best = st.get("sweep", {}).get(st.get("best"), {})
    calibrated = st.get("calibrated", {}).get("multiples", {}).get(FEAT_COLOUR)  # per-colour, when recorded
    setting = {"positions": best.get("positions", st.get("default_positions", "prompt")),
               "multiple": float(calibrated or best.get("multiple", st.get("value_multiple", 2.0))),
               "suppress": bool(best.get("suppress_other_colours", st.get("suppress_other_colours", False)))}
    clean = [i for i, s in enumerate(org.heldout_specs)
             if not any(o["colour"] == FEAT_COLOUR for o in s["objects"])]
    return FT, S, org, feature, setting, clean


def _feat_scene():
    """The tour's scene: the first held-out scene with two objects, none of them red, that the
    model captions correctly."""
    FT, S, org, feature, setting, clean = _feat_setup()
    for i in clean:
        spec = org.heldout_specs[i]
        if len(spec["objects"]) != 2:
            continue
        out = FT.analyse_image(org, S.render(spec)[0], top_n=org.n_features)
        if out["caption"] == S.caption(spec):
            return i, out
    i = clean[0]
    return i, FT.analyse_image(org, S.render(org.heldout_specs[i])[0], top_n=org.n_features)


def feat_scene():
    import torch
    from backend.sae.explain import upsample

    FT, S, org, feature, setting, clean = _feat_setup()
    i, out = _feat_scene()
    img = out["image"]
    # The strongest features with different labels (several features can share one).
    shown, seen = [], set()
    for r in out["features"]:
        lab = org.labels.get(str(r["feature"]), {}).get("label") or "?"
        if lab not in seen:
            shown.append(r)
            seen.add(lab)
        if len(shown) == 3:
            break
    fig, axes = plt.subplots(1, 1 + len(shown), figsize=(10, 3.6), dpi=100, layout="constrained",
                             gridspec_kw={"width_ratios": [1.25] + [1] * len(shown)})
    _img_ax(axes[0], img, "held-out scene", 11)
    vmax = max(float(out["maps"][r["feature"]].max()) for r in shown) if shown else 1.0
    im = None
    for ax, r in zip(axes[1:], shown):
        m = upsample(torch.as_tensor(out["maps"][r["feature"]]), img.shape[0])[0].numpy()
        im = ax.imshow(m, cmap=colors.ACTIVATION_CMAP, vmin=0, vmax=vmax, interpolation="nearest")
        ax.set_xticks([])
        ax.set_yticks([])
        lab = org.labels.get(str(r["feature"]), {}).get("label") or "?"
        ax.set_title(f"feature {r['feature']} (“{lab}”)", fontsize=10)
    if im is not None:
        _colorbar(fig, im, list(axes[1:]), "activation")
    fig.suptitle(f"The model's caption: “{out['caption']}”", fontsize=12, x=0.02, ha="left")
    truth = S.caption(org.heldout_specs[i])
    right = "word for word right" if out["caption"] == truth else f"the truth is “{truth}”"
    names = ", ".join(f"“{html.escape(org.labels.get(str(r['feature']), {}).get('label') or '?')}”" for r in shown)
    # Does each label fit this scene? Overlap of the feature's active region with the label's pixels here.
    from backend.sae import explain as E

    masks = S.render(org.heldout_specs[i])[1]
    fit = {}
    for r in shown:
        lab = org.labels.get(str(r["feature"]), {}).get("label")
        if lab in masks:
            region = E.regions(torch.as_tensor(out["maps"][r["feature"]]), img.shape[0])[0].numpy()
            fit[r["feature"]] = E.iou(region, masks[lab])
    misfits = [f for f, v in fit.items() if v < 0.2]
    caveat = ""
    if misfits:
        f = misfits[0]
        lab = html.escape(org.labels[str(f)]["label"])
        faint = float(out["maps"][f].max()) < 0.5 * vmax
        caveat = (f" Not every label fits every scene: feature {f} (“{lab}”) matches nothing in this one "
                  f"(overlap {fit[f]:.2f}){' and glows only faintly' if faint else ''}.")
    cap = (f"A tiny image-captioning model (a miniature LLaVA, trained here on drawn scenes) sees a scene it "
           f"never saw in training and writes <b>“{html.escape(out['caption'])}”</b> — {right}. A <b>sparse "
           f"autoencoder</b> splits what the model computes inside into {org.n_features} <b>features</b>; the maps "
           f"show where the strongest ones with different labels fire on this scene (bright = strong), with the labels {names} that an "
           f"automatic explainer gave them (step 3 shows how).{caveat}")
    return _png(fig), cap, {"scene": i, "caption": out["caption"], "truth": truth,
                            "features": shown, "label_fit": {str(f): v for f, v in fit.items()}}


def feat_page():
    FT, S, org, feature, setting, clean = _feat_setup()
    page = FT.feature_page(org, feature, n_top=5)
    n = len(page["images"])
    fig, axes = plt.subplots(2, max(n, 1), figsize=(10, 4.9), dpi=100, squeeze=False, layout="constrained")
    vmax = float(page["maps"].max()) if n else 1.0
    im = None
    for j in range(n):
        _img_ax(axes[0, j], page["images"][j], f"top image {j + 1}", 10)
        im = axes[1, j].imshow(page["maps"][j], cmap=colors.ACTIVATION_CMAP, vmin=0, vmax=vmax,
                               interpolation="bilinear")
        axes[1, j].contour(page["regions"][j].astype(float), levels=[0.5], colors="white", linewidths=1.2)
        axes[1, j].set_xticks([])
        axes[1, j].set_yticks([])
        if page["top"][j]["iou_label"] is not None:
            axes[1, j].set_title(f"overlap with {FEAT_COLOUR}: {page['top'][j]['iou_label']:.2f}", fontsize=9)
    axes[0, 0].set_ylabel("scene", fontsize=10)
    axes[1, 0].set_ylabel("where it fires", fontsize=10)
    if im is not None:
        _colorbar(fig, im, list(axes[1]), "activation")
    fig.suptitle(f"Feature {feature}: the {n} scenes (of {len(org.index_specs):,}) where it fires most",
                 fontsize=12, x=0.02, ha="left")
    # Mean activation on the story colour's pixels, on the other objects' pixels, on the background.
    on, other, bg = [], [], []
    for spec, amap in zip([org.index_specs[t["image_id"]] for t in page["top"]], page["maps"]):
        masks = S.render(spec)[1]
        colour = masks[FEAT_COLOUR]
        objects = np.any([masks[c] for c in S.COLOURS], axis=0)
        on += list(amap[colour])
        other += list(amap[objects & ~colour])
        bg += list(amap[~objects])
    mean = {k: float(np.mean(v)) if v else 0.0 for k, v in (("colour", on), ("other", other), ("background", bg))}
    shapes = sorted({o["shape"] + "s" for t in page["top"] for o in (S.parse_caption(t["caption"]) or [])
                     if o.get("colour") == FEAT_COLOUR})
    kinds = f" ({', '.join(shapes[:-1])} and {shapes[-1]} alike)" if len(shapes) > 1 else ""
    cap = (f"Feature {feature}, alone. Top row: the {n} of {len(org.index_specs):,} scenes that make it fire most; "
           f"bottom row: where it fires on each (bright = strong, white line = its active region). It fires on the "
           f"<b>{FEAT_COLOUR}</b> things{kinds}: {mean['colour']:.1f} on average on {FEAT_COLOUR} pixels, "
           f"{'a weaker ' if mean['other'] > 0.2 * mean['colour'] else 'only '}{mean['other']:.1f} on the other "
           f"objects and {mean['background']:.1f} on the background.")
    return _png(fig), cap, {"feature": feature, "label": page["label"], "top": page["top"],
                            "n_index_scenes": len(org.index_specs), "mean_activation": mean}


def feat_iou():
    import torch
    from backend.sae import explain as E

    FT, S, org, feature, setting, clean = _feat_setup()
    page = FT.feature_page(org, feature, n_top=5)
    scores = page["concept_scores"]
    label = page["label"] or FEAT_COLOUR
    top_iou = [t["iou_label"] for t in page["top"] if t["iou_label"] is not None]
    # The same feature on random held-out scenes: its region against the same concept's pixels.
    rng = np.random.default_rng(0)
    pick = rng.choice(len(org.heldout_specs), size=min(FEAT_N_RANDOM, len(org.heldout_specs)), replace=False)
    rnd = []
    for i in pick:
        spec = org.heldout_specs[int(i)]
        img, masks = S.render(spec)
        out = FT.analyse_image(org, img, top_n=org.n_features)
        amap = out["maps"].get(feature)
        region = (E.regions(torch.as_tensor(amap), img.shape[0])[0].numpy() if amap is not None
                  else np.zeros(img.shape[:2], bool))
        rnd.append(E.iou(region, masks[label]))
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4.0), dpi=100, gridspec_kw={"width_ratios": [2.2, 1]})
    names = sorted(scores, key=lambda c: -scores[c])
    vals = [scores[c] for c in names]
    a1.bar(np.arange(len(names)), vals,
           color=[colors.PAIR[0] if c == label else colors.NEUTRAL for c in names])
    a1.set_xticks(np.arange(len(names)), names, rotation=40, ha="right", fontsize=10)
    a1.set_ylabel("overlap score (IoU)")
    a1.set_ylim(0, 1)
    a1.set_title(f"feature {feature} vs every drawn concept (its top 5 scenes)", fontsize=11, loc="left")
    t_mean, r_mean = float(np.mean(top_iou)) if top_iou else 0.0, float(np.mean(rnd)) if rnd else 0.0
    a2.bar([0, 1], [t_mean, r_mean], color=[colors.PAIR[0], colors.NEUTRAL], width=0.6)
    for x, v in enumerate([t_mean, r_mean]):
        a2.text(x, v + 0.02, f"{v:.2f}", ha="center", fontsize=11)
    a2.set_xticks([0, 1], ["its top 5\nscenes", f"{len(rnd)} random\nscenes"], fontsize=10)
    a2.set_ylim(0, 1)
    a2.set_title(f"overlap with “{label}”", fontsize=11, loc="left")
    for a in (a1, a2):
        a.spines[["top", "right"]].set_visible(False)
    runner = names[1] if len(names) > 1 else ""
    cap = (f"To name a feature automatically, we measure for every drawn concept (4 colours, 3 shapes, 2 textures, "
           f"4 positions) how well the feature's active region covers that concept's pixels: the <b>overlap "
           f"score</b> (IoU; 0 = none, 1 = the same pixels). <b>{html.escape(label)}</b> wins with "
           f"{scores.get(label, 0):.2f} (next: {html.escape(runner)}, {scores.get(runner, 0):.2f}), so the feature "
           f"is called “{html.escape(label)}”. On {len(rnd)} random scenes its region overlaps "
           f"{html.escape(label)} pixels only {r_mean:.2f} on average: the match is not chance.")
    return _png(fig), cap, {"feature": feature, "label": label, "concept_scores": scores,
                            "top_iou": top_iou, "top_iou_mean": t_mean, "random_iou": rnd,
                            "random_iou_mean": r_mean, "random_scenes": [int(i) for i in pick]}


def feat_steer():
    FT, S, org, feature, setting, clean = _feat_setup()
    i0, _ = _feat_scene()
    value = FT.default_clamp_value(org, feature, setting["multiple"])
    rows = []
    for i in [i0] + [i for i in clean if i != i0]:
        if len(rows) == FEAT_N_STEER:
            break
        img = S.render(org.heldout_specs[i])[0]
        out = FT.steer_caption(org, img, feature, value, positions=setting["positions"],
                               suppress_family=setting["suppress"])
        if FEAT_COLOUR in out["baseline"].split():  # the model already says it unaided: no test of steering
            continue
        before, after = S.parse_caption(out["baseline"]), S.parse_caption(out["steered"])
        rows.append({"scene": i, "before": out["baseline"], "after": out["steered"],
                     "well_formed": out["well_formed"],
                     "says_red": out["well_formed"] and any(o["colour"] == FEAT_COLOUR for o in after or []),
                     "only_colour": bool(before and after and [{**o, "colour": FEAT_COLOUR} for o in before]
                                         == [dict(o) for o in after])})
    n = len(rows)
    ncol = 3
    nrow = (n + ncol - 1) // ncol
    fig, axes = plt.subplots(nrow, ncol * 2, figsize=(10, 1.9 * nrow + 0.5), dpi=100, squeeze=False,
                             gridspec_kw={"width_ratios": [1, 2.4] * ncol})
    for ax in axes.ravel():
        ax.axis("off")
    import textwrap

    for k, r in enumerate(rows):
        a_img, a_txt = axes[k // ncol, 2 * (k % ncol)], axes[k // ncol, 2 * (k % ncol) + 1]
        a_img.imshow(S.render(org.heldout_specs[r["scene"]])[0], interpolation="nearest")
        a_img.axis("on")
        a_img.set_xticks([])
        a_img.set_yticks([])
        a_txt.text(0.02, 0.97, "before:\n" + textwrap.fill(r["before"], 24), va="top", fontsize=8.5,
                   color="#333", transform=a_txt.transAxes)
        a_txt.text(0.02, 0.45, "after:\n" + textwrap.fill(r["after"], 24), va="top", fontsize=8.5,
                   color=colors.POSITIVE if r["says_red"] else "#333", fontweight="bold",
                   transform=a_txt.transAxes)
    red = sum(r["says_red"] for r in rows)
    clean_edit = sum(r["only_colour"] for r in rows if r["says_red"])
    where = {"image": "on the image's positions", "prompt": "at every position of the prompt",
             "all": "at every position"}.get(setting["positions"], setting["positions"])
    fig.suptitle(f"Captions of scenes with nothing red, before and after turning feature {feature} up",
                 fontsize=12, x=0.02, ha="left")
    changed = set()
    for r in rows:
        if not r["says_red"] or r["only_colour"]:
            continue
        b, a = S.parse_caption(r["before"]) or [], S.parse_caption(r["after"]) or []
        if len(a) != len(b):
            changed.add("the number of objects")
        for attr, word in (("shape", "shapes"), ("position", "positions"), ("texture", "textures")):
            if {o[attr] for o in a} != {o[attr] for o in b}:
                changed.add(word)
    order = ["shapes", "positions", "textures", "the number of objects"]
    what = [w for w in order if w in changed]
    what_s = ", ".join(what[:-1]) + (" and " if len(what) > 1 else "") + what[-1] if what else "other words"
    side = ("" if not red else
            " Only the colour word changes; the rest of each caption stays right." if clean_edit == red else
            f" A blunt edit, though: in {f'all {red}' if clean_edit == 0 else f'{red - clean_edit} of the {red}'},"
            f" {what_s} change too — pushed this hard, the feature overrides much of what the model sees.")
    cap = (f"These {n} scenes have nothing red. While the model looks at each, we force feature {feature} up to "
           f"{value:.3g} ({setting['multiple']:g}× its strongest natural value, {where}"
           f"{', with the other colours’ features switched off' if setting['suppress'] else ''}: the best setting "
           f"measured on this model), and the captions now say <b>red</b> in <b>{red} of {n}</b>.{side}")
    return _png(fig), cap, {"feature": feature, "value": value, "setting": setting, "rows": rows,
                            "says_red": red, "n": n}



# ----------------------------------------------------------------------------- Memorization (NeMo)

MEMO_SEEDS = (0, 1, 2)
MEMO_N_ORDINARY = 20


def _memo():
    from backend.nemo import service as N

    m = N.get()
    return N, m, m.memorized[0]["prompt"]


def _as_img(x):
    return np.clip(np.asarray(x, dtype=float), 0, 1)


def memo_copy():
    N, m, p = _memo()
    mem = N.compare(p, {}, list(MEMO_SEEDS))
    ordinary = m.ordinary_examples[0]
    orr = N.compare(ordinary, {}, list(MEMO_SEEDS))
    k = len(MEMO_SEEDS)
    fig, axes = plt.subplots(2, k + 1, figsize=(10, 5.0), dpi=100)
    _img_ax(axes[0, 0], _as_img(mem["train_image"]), "its training image", 10)
    for j in range(k):
        _img_ax(axes[0, j + 1], _as_img(mem["images_on"][j]),
                f"start noise {j + 1}: similarity {mem['ssim_on'][j]:.2f}", 10)
        _img_ax(axes[1, j + 1], _as_img(orr["images_on"][j]), f"start noise {j + 1}", 10)
    axes[1, 0].axis("off")
    import textwrap

    axes[1, 0].text(0.0, 0.5, "an ordinary prompt:\n" + textwrap.fill(f"“{ordinary}”", 22), fontsize=9,
                    va="center", transform=axes[1, 0].transAxes)
    fig.suptitle(textwrap.fill(f"Prompt: “{p}”", 100), fontsize=11, x=0.02, ha="left")
    sim = float(np.median(mem["ssim_on"]))
    cap = (f"A tiny image generator of the Stable Diffusion kind, trained here, turns a prompt and random noise "
           f"into a picture. For the top prompt it draws the <b>same picture</b> from every starting noise: a "
           f"<b>copy of a training image</b> (left; similarity {sim:.2f} on a 0–1 scale), because in training this "
           f"prompt always came with that photo — we planted the memorization. An ordinary prompt (bottom) gives a "
           f"different picture each time.")
    return _png(fig), cap, {"prompt": p, "ssim_to_training_image": mem["ssim_on"], "ordinary": ordinary,
                            "diversity": {"memorized": mem["diversity_on"], "ordinary": orr["diversity_on"]}}


def memo_detect():
    N, m, p = _memo()
    mem = [N.check(x["prompt"]) for x in m.memorized]
    ordinary = list(m.info.get("heldout", []))[:MEMO_N_ORDINARY] or m.ordinary_examples
    orr = [N.check(x) for x in ordinary]
    th = m.theta_mem
    fig, ax = _fig(10, 3.6)
    rng = np.random.default_rng(0)
    for y, (rows, col, name) in enumerate(((orr, colors.NEUTRAL, f"{len(orr)} ordinary prompts"),
                                           (mem, colors.POSITIVE, f"{len(mem)} memorized prompts"))):
        s = [r["score"] for r in rows]
        ax.scatter(s, y + rng.uniform(-0.15, 0.15, len(s)), s=46, color=col, alpha=0.85, label=name,
                   edgecolor="white", linewidth=0.5)
    ax.axvline(th, color="#222", ls="--", lw=1.2)
    ax.text(th, 1.42, f"  threshold {th:.2f}", fontsize=10, va="center")
    ax.set_yticks([0, 1], ["ordinary", "memorized"], fontsize=11)
    ax.set_ylim(-0.5, 1.6)
    ax.set_xlim(0, 1)
    ax.set_xlabel("memorization score (agreement of the first denoising step across 5 start noises)")
    ax.spines[["top", "right"]].set_visible(False)
    hit = sum(r["score"] > th for r in mem)
    false = sum(r["score"] > th for r in orr)
    cap = (f"Can we spot a memorized prompt without searching the training images? At the very first denoising "
           f"step a memorized prompt already pulls every starting noise the same way, and the <b>memorization "
           f"score</b> measures that agreement for the price of one step. Above the dashed threshold (set from "
           f"ordinary prompts): <b>{hit} of {len(mem)}</b> memorized prompts and {false} of {len(orr)} ordinary "
           f"ones (false alarms).")
    return _png(fig), cap, {"theta_mem": th, "memorized": {r["prompt"]: r["score"] for r in mem},
                            "ordinary": {r["prompt"]: r["score"] for r in orr}, "flagged_memorized": hit,
                            "flagged_ordinary": false}


def memo_neurons():
    N, m, p = _memo()
    loc = N.find(p)
    chk = N.check(p)
    found = {N.core.short_name(k): set(v) for k, v in loc["neurons"].items()}
    layers = chk["layers"]
    total = sum(len(chk["z"][ly]) for ly in layers)
    fig, ax = _fig(10, 4.2)
    x0, ticks = 0, []
    for ly in layers:
        z = np.asarray(chk["z"][ly])
        xs = x0 + np.arange(len(z))
        on = np.array([c in found.get(ly, set()) for c in range(len(z))])
        ax.bar(xs[~on], z[~on], color=colors.NEUTRAL, width=1.0, alpha=0.55)
        ax.bar(xs[on], z[on], color=colors.POSITIVE, width=1.0)
        ticks.append((x0 + len(z) / 2, f"{ly}\n{len(found.get(ly, ()))} of {len(z)} found"))
        x0 += len(z) + 4
        ax.axvline(x0 - 2, color="#bbb", lw=0.8)
    ax.set_xticks([t for t, _ in ticks], [s for _, s in ticks], fontsize=9.5)
    ax.set_ylabel("how unusual the neuron's activity is\n(z-score vs ordinary prompts)", fontsize=10)
    ax.set_xlim(-2, x0 - 2)
    ax.spines[["top", "right"]].set_visible(False)
    from matplotlib.patches import Patch

    ax.legend(handles=[Patch(color=colors.POSITIVE, label=f"found by NeMo ({loc['n_neurons']})"),
                       Patch(color=colors.NEUTRAL, alpha=0.55, label="other neurons")],
              frameon=False, fontsize=10, loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=2)
    n = loc["n_neurons"]
    in_layers = [ly for ly in layers if found.get(ly)]
    cap = (f"Which parts of the generator hold the copy? <b>NeMo</b> examines the {total} neurons where the "
           f"prompt's words enter the picture (the cross-attention “value” layers; one bar per neuron), starts from "
           f"those unusually active for this prompt and drops every one that is not needed: <b>{n} neurons</b> "
           f"remain ({n / total:.0%}, red), in {' and '.join(in_layers)}. "
           + ("As in the real Stable Diffusion, where the paper often finds just a handful per prompt, sometimes "
              "a single one." if n <= 5 else
              "In the real Stable Diffusion the paper often finds just a handful per prompt, sometimes a single "
              "one; this tiny model spreads its memory over more."))
    return _png(fig), cap, {"prompt": p, "n_neurons": n, "total_neurons": total, "neurons": loc["labels"],
                            "per_layer": {ly: len(found.get(ly, ())) for ly in layers},
                            "seconds": loc.get("seconds")}


def memo_off():
    from backend.nemo import core as C

    N, m, p = _memo()
    loc = N.find(p)
    spec = loc["neurons"]
    c = N.compare(p, spec, list(MEMO_SEEDS))
    rnd = N.compare(p, C.random_like(m.pipe.unet, spec, seed=0), list(MEMO_SEEDS))
    k = len(MEMO_SEEDS)
    fig, axes = plt.subplots(3, k + 1, figsize=(10, 6.4), dpi=100)
    _img_ax(axes[0, 0], _as_img(c["train_image"]), "training image", 10)
    labels = [("neurons on", c["images_on"], c["ssim_on"]),
              (f"the {loc['n_neurons']} found\nneurons off", c["images_off"], c["ssim_off"]),
              (f"{loc['n_neurons']} random\nneurons off", rnd["images_off"], rnd["ssim_off"])]
    for r, (name, imgs, ss) in enumerate(labels):
        if r:
            axes[r, 0].axis("off")
        for j in range(k):
            _img_ax(axes[r, j + 1], _as_img(imgs[j]), f"similarity {ss[j]:.2f}", 10)
        axes[r, 1].set_ylabel(name, fontsize=10, rotation=0, ha="right", va="center", labelpad=8)
    on, off, roff = (float(np.median(x)) for x in (c["ssim_on"], c["ssim_off"], rnd["ssim_off"]))
    fig.suptitle("Similarity to the training image (SSIM, 0–1), with NeMo's neurons on and off",
                 fontsize=12, x=0.02, ha="left")
    gone = off < 0.5 * on
    below = c["score_off"] <= c["theta_mem"]
    random_keeps = roff > 0.5 * on
    cap = (f"Switch those {loc['n_neurons']} neurons off (middle row) and "
           f"{'the copy disappears' if gone else 'the copy fades'}: similarity to the training image falls from "
           f"{on:.2f} to <b>{off:.2f}</b> (median over {k} start noises), and the memorization score from "
           f"{c['score_on']:.2f} to {c['score_off']:.2f}, {'below' if below else 'still above'} the threshold "
           f"{c['theta_mem']:.2f}. Switching off {loc['n_neurons']} <i>random</i> neurons instead (bottom) "
           + (f"leaves the copy ({roff:.2f}), so it is these neurons that hold it — found and removed without "
              f"any retraining." if random_keeps else
              f"also weakens the copy ({roff:.2f}): on this model the memory is not confined to NeMo's neurons."))
    return _png(fig), cap, {"prompt": p, "n_neurons": loc["n_neurons"], "ssim_on": c["ssim_on"],
                            "ssim_off": c["ssim_off"], "ssim_random_off": rnd["ssim_off"],
                            "score_on": c["score_on"], "score_off": c["score_off"],
                            "score_random_off": rnd["score_off"], "theta_mem": c["theta_mem"]}


# ----------------------------------------------------------------------------- Adapters (PiSSA)

PISSA_MODEL, PISSA_LAYER, PISSA_RANK = "pissa-toy", "fc2", 8


def pissa_spectrum():
    from backend.pissa import service as S

    a = S.layer_analysis(PISSA_MODEL, PISSA_LAYER, PISSA_RANK)
    sv = np.asarray(a["singular_values"])
    fig, ax = _fig()
    x = np.arange(1, len(sv) + 1)
    ax.bar(x, sv, color=[colors.PISSA if i < PISSA_RANK else colors.NEUTRAL for i in range(len(sv))], width=0.9)
    ax.set_xlabel("direction (sorted by strength)")
    ax.set_ylabel("singular value")
    ax.set_title(f"layer {PISSA_LAYER} of a small digit classifier, {a['shape'][0]}×{a['shape'][1]} weights",
                 fontsize=11, loc="left")
    ax.spines[["top", "right"]].set_visible(False)
    cap = (f"Adapters fine-tune a big model cheaply by training a small add-on per layer. A layer is a "
           f"grid of numbers; its <b>singular values</b> (bars) measure how strong each of its independent "
           f"directions is. A few are much stronger than the rest: the top {PISSA_RANK} (orange) hold "
           f"<b>{a['energy_top_r']:.0%}</b> of the layer's total strength (its “energy”). <b>PiSSA</b> starts the add-on on exactly "
           f"these directions; the usual <b>LoRA</b> starts it from random noise and zero.")
    return _png(fig), cap, {"layer": PISSA_LAYER, "shape": a["shape"], "rank": PISSA_RANK,
                            "energy_top_r": a["energy_top_r"], "singular_values": sv.tolist()}


def pissa_split():
    from backend.pissa import service as S

    a = S.layer_analysis(PISSA_MODEL, PISSA_LAYER, PISSA_RANK)
    fig, ax = _fig()
    lim = a["w_absmax"]
    bins = np.linspace(-lim, lim, 80)
    ax.hist(a["w_sample"], bins=bins, color=colors.NEUTRAL, alpha=0.75, label="original weights W")
    ax.hist(a["w_res_sample"], bins=bins, color=colors.LORA, alpha=0.7,
            label=f"frozen remainder after PiSSA takes the top {PISSA_RANK} directions")
    ax.set_xlabel("weight value")
    ax.set_ylabel("count")
    ax.legend(frameon=False, fontsize=10)
    ax.spines[["top", "right"]].set_visible(False)
    cap = (f"PiSSA splits the layer in two: the strong directions become the trainable add-on, the rest "
           f"stays frozen. Together they give back the original layer exactly (error "
           f"{a['reconstruction_rel_error']:.0e}), so the model behaves the same before training starts. "
           f"The frozen remainder (blue) is narrower than the original (grey): its spread drops from "
           f"{a['w_std']:.3f} to {a['w_res_std']:.3f}. Narrow values are easier to store in few bits — "
           f"next step.")
    return _png(fig), cap, {"reconstruction_rel_error": a["reconstruction_rel_error"], "w_std": a["w_std"],
                            "w_res_std": a["w_res_std"], "w_absmax": a["w_absmax"],
                            "w_res_absmax": a["w_res_absmax"]}


def pissa_quant():
    from backend.pissa import service as S

    e = S.error_table(PISSA_MODEL, PISSA_RANK)
    mean = e["summary"]["mean"]
    keys = [("qlora", "QLoRA (LoRA on 4-bit weights)"), ("loftq-1", "LoftQ, 1 pass"), ("loftq-5", "LoftQ, 5 passes"),
            ("qpissa-1", "QPiSSA, 1 pass"), ("qpissa-5", "QPiSSA, 5 passes")]
    vals = [mean[k] for k, _ in keys]
    fig, ax = _fig(10, 3.8)
    ax.barh([n for _, n in keys][::-1], [v * 100 for v in vals][::-1],
            color=[colors.PISSA if k.startswith("qpissa") else colors.NEUTRAL for k, _ in keys][::-1])
    for y, v in enumerate(vals[::-1]):
        ax.text(v * 100, y, f"  {v:.0%}", va="center", fontsize=10)
    ax.set_xlabel("quantisation error removed (% of QLoRA's error), mean over the layers")
    ax.set_xlim(0, 100)
    ax.spines[["top", "right"]].set_visible(False)
    cap = (f"To save memory the frozen part is stored with only 4 bits per number, which loses precision. "
           f"Bars: how much of that loss each method wins back, measured on this network's layers. Plain "
           f"QLoRA wins back nothing (its add-on starts at zero); LoftQ recovers {mean['loftq-1']:.0%}; "
           f"<b>QPiSSA</b>, which quantises only PiSSA's narrow remainder, recovers "
           f"<b>{mean['qpissa-1']:.0%}</b> in one pass and {mean['qpissa-5']:.0%} in five.")
    return _png(fig), cap, {"rank": PISSA_RANK, "mean_error_reduction": mean}


def pissa_race():
    from backend.pissa import service as S
    from backend.pissa.race import RaceConfig

    losses: dict[str, list[float]] = {"lora": [], "pissa": []}
    summary = {}
    for ev in S.race_stream(PISSA_MODEL, RaceConfig(methods=("lora", "pissa"), seeds=(0,), steps=80),
                            session="guided-tour"):
        if "method" in ev:
            losses[ev["method"]].append(ev["loss"])
        elif ev.get("done"):
            summary = ev["summary"]
    fig, ax = _fig()
    for meth, col, name in (("lora", colors.LORA, "LoRA"), ("pissa", colors.PISSA, "PiSSA")):
        ax.plot(np.arange(1, len(losses[meth]) + 1), losses[meth], color=col, lw=2, label=name)
    ax.set_xlabel("training step")
    ax.set_ylabel("loss (lower is better)")
    ax.set_yscale("log")
    ax.legend(frameon=False, fontsize=11)
    ax.spines[["top", "right"]].set_visible(False)
    last = summary.get("mean_loss_last10", {})
    faster = last.get("pissa", 1.0) < last.get("lora", 0.0)
    verdict = ("PiSSA's loss (orange) falls faster from the first steps, because it trains the directions "
               "that matter instead of random ones." if faster else
               "In this run LoRA (blue) kept up with PiSSA (orange).")
    cap = (f"Now train both add-ons, same size (rank {PISSA_RANK}), same settings, on a new job: the "
           f"network learnt odd digits and must now learn the even ones. {verdict} Loss over the last 10 of {len(losses['pissa'])} steps: PiSSA "
           f"<b>{last.get('pissa', float('nan')):.2f}</b>, LoRA <b>{last.get('lora', float('nan')):.2f}</b>.")
    return _png(fig), cap, {"steps": len(losses["pissa"]), "loss": losses, "mean_loss_last10": last}


# ----------------------------------------------------------------------------- Math neurons (MathNeuro)

MATH_K, MATH_N = 0.03, 64  # the organism's operating point (tests/organisms/test_math_organism.py)


def _math():
    from backend.mathneuro import service as S

    return S, S.bench("zoo")


def math_baseline():
    S, b = _math()
    base = b.baseline()
    ex = b.samples(S.Setting("mathneuro", MATH_K, MATH_N, 1.0), k=2)
    fig, ax = _fig(10, 3.4)
    names = ["arithmetic questions", "questions about a story"]
    vals = [base["math"] * 100, base["nonmath"] * 100]
    ax.barh(names[::-1], vals[::-1], color=[colors.PAIR[0], colors.PAIR[1]])  # story orange, arithmetic blue
    for y, v in enumerate(vals[::-1]):
        ax.text(v, y, f"  {v:.1f}%", va="center", fontsize=11)
    ax.set_xlim(0, 100)
    ax.set_xlabel("exact answers on held-out questions (%)")
    ax.spines[["top", "right"]].set_visible(False)
    m, n = ex[0], ex[1]
    cap = (f"A tiny language model, trained here, answers two kinds of questions it never saw: arithmetic "
           f"(“{html.escape(m['prompt'])}” → <b>{html.escape(m['before'])}</b>) and questions about a short "
           f"story (“{html.escape(n['prompt'])}” → <b>{html.escape(n['before'])}</b>). It gets "
           f"{base['math']:.0%} of the arithmetic and {base['nonmath']:.0%} of the story questions right. "
           f"Question: are there weights that only matter for arithmetic?")
    return _png(fig), cap, {"baseline": base, "examples": ex}


def math_prune():
    S, b = _math()
    base = b.baseline()
    mn = b.evaluate(S.Setting("mathneuro", MATH_K, MATH_N, 0.0))
    rnd = b.evaluate(S.Setting("random", MATH_K, MATH_N, 0.0))
    fig, ax = _fig(10, 4.0)
    groups = ["unchanged", "MathNeuro weights off", "as many random weights off"]
    x = np.arange(3)
    ax.bar(x - 0.18, [base["math"] * 100, mn["math"] * 100, rnd["math"] * 100], 0.36, color=colors.PAIR[1],
           label="arithmetic")
    ax.bar(x + 0.18, [base["nonmath"] * 100, mn["nonmath"] * 100, rnd["nonmath"] * 100], 0.36,
           color=colors.PAIR[0], label="story questions")
    ax.set_xticks(x, groups)
    ax.set_ylabel("exact answers (%)")
    ax.set_ylim(0, 118)
    ax.set_yticks([0, 20, 40, 60, 80, 100])
    ax.legend(frameon=False, loc="upper center", ncol=2)
    ax.spines[["top", "right"]].set_visible(False)
    share = mn["n_params"]
    d_math, d_story = base["math"] - mn["math"], base["nonmath"] - mn["nonmath"]
    story = "barely move" if d_story < 0.03 else ("fall far less" if d_math > 3 * d_story else "fall too")
    cap = (f"MathNeuro compares, weight by weight, how much each one is used on arithmetic and on ordinary "
           f"text, and keeps those important <i>only</i> for arithmetic: {share:,} weights here. Switch them "
           f"off and arithmetic falls from {base['math']:.0%} to <b>{mn['math']:.0%}</b>, while the story "
           f"questions {story} ({base['nonmath']:.0%} → {mn['nonmath']:.0%}). Switching off as many "
           f"random weights does little ({rnd['math']:.0%} arithmetic). Much of the model's arithmetic lives "
           f"in a small set of weights that can be found.")
    return _png(fig), cap, {"baseline": base, "mathneuro_pruned": mn, "random_pruned": rnd}


def math_scale():
    S, b = _math()
    factors = [0.0, 0.5, 1.0, 1.1, 1.25, 1.5]
    curve = b.scale_curve(S.Setting("mathneuro", MATH_K, MATH_N, 1.0), factors)
    fig, ax = _fig(10, 4.0)
    ax.plot(factors, [c["math"] * 100 for c in curve], "o-", color=colors.PAIR[1], lw=2, label="arithmetic")
    ax.plot(factors, [c["nonmath"] * 100 for c in curve], "o-", color=colors.PAIR[0], lw=2, label="story questions")
    ax.axvline(1.0, color=colors.NEUTRAL, ls=":", lw=1)
    ax.set_xlabel("factor applied to the MathNeuro weights (0 = off, 1 = unchanged)")
    ax.set_ylabel("exact answers (%)")
    ax.set_ylim(0, 118)
    ax.set_yticks([0, 20, 40, 60, 80, 100])
    ax.legend(frameon=False, loc="upper center", ncol=2)
    ax.spines[["top", "right"]].set_visible(False)
    at = {c["factor"]: c for c in curve}
    gain = (at[1.1]["math"] - at[1.0]["math"]) * 100
    lo, hi = min(c["nonmath"] for c in curve), max(c["nonmath"] for c in curve)
    story = f"at {lo:.0%}" if f"{lo:.0%}" == f"{hi:.0%}" else f"between {lo:.0%} and {hi:.0%}"
    cap = (f"Turn the same weights down or up by a factor and re-test. Only the arithmetic line moves: "
           f"story questions stay {story}. The paper boosts them by 1.1; here that changes arithmetic "
           f"by {gain:+.1f} points ({at[1.0]['math']:.1%} → {at[1.1]['math']:.1%}). One knob, one skill, "
           f"the rest untouched.")
    return _png(fig), cap, {"factors": factors, "curve": curve}


# ----------------------------------------------------------------------------- registry

TOURS = [
    Tour("relevance", "Relevance — which word decided? (MambaLRP)", "mamba-sentiment", [
        Step("The model and its answer", rel_answer),
        Step("MambaLRP finds the deciding word", rel_lrp),
        Step("A common baseline scatters it", rel_baseline),
        Step("The relevance adds up to the score", rel_conservation),
        Step("Delete the relevant words: the answer collapses", rel_faithfulness),
    ]),
    Tour("features", "Features — what a feature means (multimodal SAE)", ("llava-scenes", "llava-scenes-sae"), [
        Step("A scene and the model's caption", feat_scene),
        Step("One feature lights up on red things", feat_page),
        Step("Why it is called “red”", feat_iou),
        Step("Turn it up: the model says red", feat_steer),
    ]),
    Tour("memorization", "Memorization — the neurons that hold a copy (NeMo)", "sd-memo", [
        Step("This prompt gives a copy of a training image", memo_copy),
        Step("A cheap signal flags it", memo_detect),
        Step("NeMo finds the neurons", memo_neurons),
        Step("Switch them off: the copy disappears", memo_off),
    ]),
    Tour("math", "Math neurons — where arithmetic lives (MathNeuro)", "math-llama", [
        Step("The model answers two kinds of questions", math_baseline),
        Step("Switch off the math-only weights", math_prune),
        Step("Turn them down or up", math_scale),
    ]),
    Tour("adapters", "Adapters — start from what matters (PiSSA)", "pissa-toy", [
        Step("A layer has a few strong directions", pissa_spectrum),
        Step("PiSSA splits the layer", pissa_split),
        Step("Smaller error when compressed to 4 bits", pissa_quant),
        Step("PiSSA learns faster than LoRA", pissa_race),
    ]),
]


def tours() -> dict[str, Tour]:
    """The tours whose zoo organism is present, plus 'all' (every available step in order)."""
    ready = [t for t in TOURS if t.available()]
    out = {t.tour_id: t for t in ready}
    if ready:
        out["all"] = Tour("all", "All papers, one after the other", "",
                          [Step(f"{t.title.split(' — ')[0]}: {s.title}", s.compute) for t in ready for s in t.steps])
    return out


def run_step(tour_id: str, step, dark: bool = False) -> tuple[str, str, np.ndarray, dict]:
    """(header html, caption html, figure, numbers) of step `step` (1-based) of a tour, its figure
    drawn for the dark theme if `dark`; cached."""
    available = tours()
    if tour_id not in available:
        raise ValueError(f"No tour {str(tour_id)[:40]!r}; choose from {list(available)}.")
    tour = available[tour_id]
    try:
        k = int(step)
    except (TypeError, ValueError):
        raise ValueError("The step must be a whole number.") from None
    if not 1 <= k <= len(tour.steps):
        raise ValueError(f"The {tour_id!r} tour has steps 1 to {len(tour.steps)}.")
    s = tour.steps[k - 1]
    # Steps shared by 'all' and a paper's tour share one cache entry (keyed by the step function).
    figs, cap, numbers = CACHE.get_or_compute(f"{s.compute.__module__}.{s.compute.__qualname__}", s.compute)
    head = (f"<div class='wb-tour-head'><span class='wb-tour-step'>Step {k} of {len(tour.steps)}</span> · "
            f"{html.escape(s.title)}</div>")
    img = _decode(figs["dark" if dark else "light"])
    return head, f"<div class='wb-explain wb-tour-caption'>{cap}</div>", img, {"tour": tour_id, "step": k,
                                                                            "title": s.title, **numbers}


def _next(tour_id, step, delta: int):
    t = tours().get(tour_id)
    n = len(t.steps) if t else 1
    try:
        k = int(step)
    except (TypeError, ValueError):
        k = 1
    return max(1, min(n, k + delta))


# The Overview's "Guided tour" buttons (components.overview, elem_id overview-tour-<tab id>) open a tour.
OVERVIEW_TOUR = {"relevance": "relevance", "features": "features", "memorization": "memorization",
                 "math_neurons": "math", "adapters": "adapters", "all": "all"}


IS_DARK_JS = "(t, k, d) => [t, k, document.body.classList.contains('dark')]"
IS_DARK_LATER_JS = ("async (t, k, d) => { await new Promise(r => setTimeout(r, 60)); "
                    "return [t, k, document.body.classList.contains('dark')]; }")


def _find_block(elem_id: str):
    def walk(block):
        for child in getattr(block, "children", None) or []:
            if getattr(child, "elem_id", None) == elem_id:
                return child
            hit = walk(child)
            if hit is not None:
                return hit
        return None
    root = gr.context.Context.root_block
    return walk(root) if root is not None else None


def _overview_buttons() -> dict[str, gr.Button]:
    found: dict[str, gr.Button] = {}

    def walk(block):
        for child in getattr(block, "children", None) or []:
            eid = getattr(child, "elem_id", None) or ""
            if isinstance(child, gr.Button) and eid.startswith("overview-tour-"):
                found[eid[len("overview-tour-"):]] = child
            walk(child)
    walk(gr.context.Context.root_block)
    return found


def _wire_overview(ctx, available: dict, tour, step) -> None:
    """Show the Overview's tour buttons whose tour exists; a click opens this tab on that tour, step 1."""
    if gr.context.Context.root_block is None or getattr(ctx, "tabs", None) is None:
        return
    for key, btn in _overview_buttons().items():
        tour_id = OVERVIEW_TOUR.get(key)
        if tour_id not in available:
            continue
        btn.visible = True
        btn.click(lambda t=tour_id: (gr.Tabs(selected=TAB_ID), t, 1), None, [ctx.tabs, tour, step],
                  api_visibility="private", queue=False)


def build(ctx) -> None:
    available = tours()
    missing = [t.title.split(" — ")[0] for t in TOURS if not t.available()]
    note = (f" Tours for {', '.join(missing)} appear once their zoo models are built." if missing else "")
    gr.HTML("<div class='wb-explain'>Each tour tells one paper's main finding in a few steps, computed "
            "live on this workbench's small models. Press <b>Next</b> to move on; every figure is "
            f"recomputed by the paper's method the first time it is shown.{html.escape(note)}</div>")
    if not available:
        gr.Markdown("No tour is available: no zoo model is built yet.")
        return
    first = next(iter(available))
    with gr.Row(equal_height=True):
        tour = gr.Radio([(t.title, k) for k, t in available.items()], value=first, label="Tour",
                        elem_id="tour-name", scale=4)
        step = gr.Number(value=1, precision=0, minimum=1, label="Step", elem_id="tour-step", scale=0,
                         min_width=90)
    head = gr.HTML(elem_id="tour-header")
    caption = gr.HTML(elem_id="tour-caption")
    with gr.Row():
        back = gr.Button("← Back", elem_id="tour-back", scale=1)
        nxt = gr.Button("Next →", variant="primary", elem_id="tour-next", scale=2)
    figure = gr.Image(format="png", type="numpy", interactive=False, show_label=False, elem_id="tour-figure",
                      elem_classes=["wb-tour-figure"], buttons=["download"], alt_text="the tour's figure")
    with gr.Accordion("Numbers behind this figure (JSON export)", open=False, elem_id="tour-numbers-acc"):
        numbers = gr.JSON(show_label=False, elem_id="tour-numbers")

    # The figure follows the page's theme: the browser says whether <body> is dark (components.links).
    dark = gr.Checkbox(False, visible=False, label="dark theme")

    def show(tour_id, k, is_dark=False, progress=gr.Progress()):
        progress(0.1, desc="computing this step (cached afterwards)")
        h, c, fig, nums = run_step(tour_id, k, bool(is_dark))
        alt = f"{nums['title']}: " + html.unescape(re.sub("<[^>]+>", "", c))[:400]
        return h, c, gr.Image(value=fig, alt_text=alt), nums

    back.click(lambda t, k: _next(t, k, -1), [tour, step], step, api_visibility="private", queue=False)
    nxt.click(lambda t, k: _next(t, k, +1), [tour, step], step, api_visibility="private", queue=False)
    tour.input(lambda: 1, None, step, api_visibility="private", queue=False)
    def show_new_tour(tour_id, k, is_dark=False, progress=gr.Progress()):
        # the step box may still hold the previous tour's step (it is reset to 1 just after)
        return show(tour_id, _next(tour_id, k, 0), is_dark, progress)

    _wire_overview(ctx, available, tour, step)

    triggers = [step.change]
    root = gr.context.Context.root_block
    if root is not None:
        triggers.append(root.load)
    outputs = [head, caption, figure, numbers]
    gr.on(triggers, show, [tour, step, dark], outputs, trigger_mode="always_last", js=IS_DARK_JS,
          **model_event(api_name="tour_step"))
    tour.change(show_new_tour, [tour, step, dark], outputs, trigger_mode="always_last", js=IS_DARK_JS,
                **model_event(api_visibility="private"))
    # Redraw the figure when the header's light/dark button flips the theme (after its own handler).
    toggle = _find_block("wb-theme-toggle")
    if isinstance(toggle, gr.Button):
        toggle.click(show, [tour, step, dark], outputs, trigger_mode="always_last", js=IS_DARK_LATER_JS,
                     **model_event(api_visibility="private"))
