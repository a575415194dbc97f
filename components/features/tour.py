"""The multimodal-SAE tour (beside the Features tab): what one feature of the tiny LLaVA means."""

from __future__ import annotations

import html
import textwrap

import numpy as np
import plotly.graph_objects as go

from backend.core import colors
from backend.sae import analysis, pages
from components.tab import Step, Tour
from components.tour import plots as P

FEAT_COLOUR, FEAT_N_RANDOM, FEAT_N_STEER = "red", 20, 6  # the story's colour, random scenes, steered scenes


def _organism():
    from backend.sae import loading
    from backend.sae import scenes as S

    return S, loading.get_organism("zoo")


def _setup():
    """The story's feature (the organism's steering feature for 'red'), its best steering setting
    as the organism's summary reports it, and held-out scenes with nothing red in them."""
    S, org = _organism()
    st = org.summary.get("steering", {})
    feature = int(st.get("colour_features", {}).get(FEAT_COLOUR, -1))
    if feature < 0:  # no steering record: the feature whose label is the colour with the best IoU
        feature = max(
            (int(f) for f, lab in org.labels.items() if lab.get("label") == FEAT_COLOUR),
            key=lambda f: org.labels[str(f)].get("score", 0.0),
        )
    best = st.get("sweep", {}).get(st.get("best"), {})
    calibrated = st.get("calibrated", {}).get("multiples", {}).get(FEAT_COLOUR)  # per-colour, when recorded
    setting = {
        "positions": best.get("positions", st.get("default_positions", "prompt")),
        "multiple": float(calibrated or best.get("multiple", st.get("value_multiple", 2.0))),
        "suppress": bool(best.get("suppress_other_colours", st.get("suppress_other_colours", False))),
    }
    clean = [i for i, s in enumerate(org.heldout_specs) if not any(o["colour"] == FEAT_COLOUR for o in s["objects"])]
    return S, org, feature, setting, clean


def _tour_scene():
    """The tour's scene: the first held-out scene with two objects, none of them red, that the
    model captions correctly."""
    S, org, feature, setting, clean = _setup()
    for i in clean:
        spec = org.heldout_specs[i]
        if len(spec["objects"]) != 2:
            continue
        out = analysis.analyse_image(org, S.render(spec)[0], top_n=org.n_features)
        if out["caption"] == S.caption(spec):
            return i, out
    i = clean[0]
    return i, analysis.analyse_image(org, S.render(org.heldout_specs[i])[0], top_n=org.n_features)


def _label(org, f) -> str:
    return org.labels.get(str(f), {}).get("label") or "?"


def scene():
    import torch
    from backend.sae import explain as E
    from backend.sae.explain import upsample

    S, org, feature, setting, clean = _setup()
    i, out = _tour_scene()
    img = out["image"]
    # The strongest features with different labels (several features can share one).
    shown, seen = [], set()
    for r in out["features"]:
        if _label(org, r["feature"]) not in seen:
            shown.append(r)
            seen.add(_label(org, r["feature"]))
        if len(shown) == 3:
            break
    titles = ["held-out scene"] + [
        f"feature {r['feature']}<br>“{html.escape(_label(org, r['feature']))}”" for r in shown
    ]
    fig = P.figure(1, 1 + len(shown), subplot_titles=titles, horizontal_spacing=0.03)
    fig.add_trace(P.image(img, "scene"), 1, 1)
    vmax = max(float(out["maps"][r["feature"]].max()) for r in shown) if shown else 1.0
    for c, r in enumerate(shown, start=2):
        m = upsample(torch.as_tensor(out["maps"][r["feature"]]), img.shape[0])[0].numpy()
        fig.add_trace(P.heatmap(m, f"feature {r['feature']}"), 1, c)
    P.bare_axes(fig, 1, 1 + len(shown))
    P.finish(
        fig,
        f"The model's caption: “{html.escape(out['caption'])}”",
        height=360,
        coloraxis=P.activation_axis(vmax),
        margin=dict(t=96),
    )  # room for two-line cell titles
    truth = S.caption(org.heldout_specs[i])
    right = "word for word right" if out["caption"] == truth else f"the truth is “{truth}”"
    names = ", ".join(f"“{html.escape(_label(org, r['feature']))}”" for r in shown)
    # Does each label fit this scene? Overlap of the feature's active region with the label's pixels here.
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
        faint = float(out["maps"][f].max()) < 0.5 * vmax
        caveat = (
            f" Not every label fits every scene: feature {f} (“{html.escape(_label(org, f))}”) matches "
            f"nothing in this one (overlap {fit[f]:.2f}){' and glows only faintly' if faint else ''}."
        )
    cap = (
        f"A tiny image-captioning model (a miniature LLaVA, trained here on drawn scenes) sees a scene it "
        f"never saw in training and writes <b>“{html.escape(out['caption'])}”</b> — {right}. A <b>sparse "
        f"autoencoder</b> splits what the model computes inside into {org.n_features} <b>features</b>; the maps "
        f"show where the strongest ones with different labels fire on this scene (bright = strong), with the "
        f"labels {names} that an automatic explainer gave them (step 3 shows how).{caveat}"
    )
    return (
        fig,
        cap,
        {
            "scene": i,
            "caption": out["caption"],
            "truth": truth,
            "features": shown,
            "label_fit": {str(f): v for f, v in fit.items()},
        },
    )


def page():
    S, org, feature, setting, clean = _setup()
    pg = pages.feature_page(org, feature, n_top=5)
    n = max(len(pg["images"]), 1)
    titles = [f"top image {j + 1}" for j in range(n)] + [
        f"overlap {t['iou_label']:.2f}" if t["iou_label"] is not None else "" for t in pg["top"][:n]
    ]
    fig = P.figure(2, n, subplot_titles=titles, horizontal_spacing=0.02, vertical_spacing=0.1)
    vmax = float(pg["maps"].max()) if len(pg["images"]) else 1.0
    for j in range(len(pg["images"])):
        fig.add_trace(P.image(pg["images"][j], f"top image {j + 1}"), 1, j + 1)
        fig.add_trace(P.heatmap(pg["maps"][j], f"top image {j + 1}"), 2, j + 1)
        # The feature's active region: one white outline at the 0.5 level of the region mask.
        fig.add_trace(
            go.Contour(
                z=pg["regions"][j].astype(float),
                showscale=False,
                showlegend=False,
                hoverinfo="skip",
                contours=dict(start=0.5, end=0.5, size=1, coloring="none"),
                line=dict(color="white", width=1.5),
            ),
            2,
            j + 1,
        )
    P.bare_axes(fig, 2, n)
    P.finish(
        fig,
        f"Feature {feature}: the {len(pg['images'])} scenes (of {len(org.index_specs):,}) where it fires most",
        coloraxis=P.activation_axis(vmax),
    )
    # Mean activation on the story colour's pixels, on the other objects' pixels, on the background.
    on, other, bg = [], [], []
    for spec, amap in zip([org.index_specs[t["image_id"]] for t in pg["top"]], pg["maps"]):
        masks = S.render(spec)[1]
        colour = masks[FEAT_COLOUR]
        objects = np.any([masks[c] for c in S.COLOURS], axis=0)
        on += list(amap[colour])
        other += list(amap[objects & ~colour])
        bg += list(amap[~objects])
    mean = {k: float(np.mean(v)) if v else 0.0 for k, v in (("colour", on), ("other", other), ("background", bg))}
    shapes = sorted(
        {
            o["shape"] + "s"
            for t in pg["top"]
            for o in (S.parse_caption(t["caption"]) or [])
            if o.get("colour") == FEAT_COLOUR
        }
    )
    kinds = f" ({', '.join(shapes[:-1])} and {shapes[-1]} alike)" if len(shapes) > 1 else ""
    cap = (
        f"Feature {feature}, alone. Top row: the {len(pg['images'])} of {len(org.index_specs):,} scenes that "
        f"make it fire most; bottom row: where it fires on each (bright = strong, white line = its active "
        f"region, above it the region's overlap with the {FEAT_COLOUR} pixels). It fires on the "
        f"<b>{FEAT_COLOUR}</b> things{kinds}: {mean['colour']:.1f} on average on "
        f"{FEAT_COLOUR} pixels, {'a weaker ' if mean['other'] > 0.2 * mean['colour'] else 'only '}"
        f"{mean['other']:.1f} on the other objects and {mean['background']:.1f} on the background."
    )
    return (
        fig,
        cap,
        {
            "feature": feature,
            "label": pg["label"],
            "top": pg["top"],
            "n_index_scenes": len(org.index_specs),
            "mean_activation": mean,
        },
    )


def iou():
    import torch
    from backend.sae import explain as E

    S, org, feature, setting, clean = _setup()
    pg = pages.feature_page(org, feature, n_top=5)
    scores = pg["concept_scores"]
    label = pg["label"] or FEAT_COLOUR
    top_iou = [t["iou_label"] for t in pg["top"] if t["iou_label"] is not None]
    # The same feature on random held-out scenes: its region against the same concept's pixels.
    rng = np.random.default_rng(0)
    pick = rng.choice(len(org.heldout_specs), size=min(FEAT_N_RANDOM, len(org.heldout_specs)), replace=False)
    rnd = []
    for i in pick:
        img, masks = S.render(org.heldout_specs[int(i)])
        out = analysis.analyse_image(org, img, top_n=org.n_features)
        amap = out["maps"].get(feature)
        region = (
            E.regions(torch.as_tensor(amap), img.shape[0])[0].numpy()
            if amap is not None
            else np.zeros(img.shape[:2], bool)
        )
        rnd.append(E.iou(region, masks[label]))
    names = sorted(scores, key=lambda c: -scores[c])
    t_mean, r_mean = float(np.mean(top_iou)) if top_iou else 0.0, float(np.mean(rnd)) if rnd else 0.0
    fig = P.figure(
        1,
        2,
        column_widths=[0.68, 0.32],
        horizontal_spacing=0.08,
        subplot_titles=(
            f"feature {feature} vs each drawn concept",
            f"“{html.escape(label)}”: top 5 vs random",
        ),
    )
    fig.add_trace(
        go.Bar(
            x=names,
            y=[scores[c] for c in names],
            showlegend=False,
            marker_color=[colors.PAIR[0] if c == label else colors.NEUTRAL for c in names],
            hovertemplate="%{x}: IoU %{y:.3f}<extra></extra>",
        ),
        1,
        1,
    )
    fig.add_trace(
        go.Bar(
            x=["its top 5 scenes", f"{len(rnd)} random scenes"],
            y=[t_mean, r_mean],
            showlegend=False,
            marker_color=[colors.PAIR[0], colors.NEUTRAL],
            text=[f"{t_mean:.2f}", f"{r_mean:.2f}"],
            textposition="outside",
            cliponaxis=False,
            hovertemplate="%{x}: mean IoU %{y:.3f}<extra></extra>",
        ),
        1,
        2,
    )
    fig.update_yaxes(range=[0, 1.05])
    fig.update_yaxes(title="overlap score (IoU)", row=1, col=1)
    fig.update_xaxes(tickangle=-40, row=1, col=1)
    P.finish(fig)
    runner = names[1] if len(names) > 1 else ""
    cap = (
        f"To name a feature automatically, we measure for every drawn concept (4 colours, 3 shapes, 2 textures, "
        f"4 positions) how well the feature's active region covers that concept's pixels: the <b>overlap "
        f"score</b> (IoU; 0 = none, 1 = the same pixels). <b>{html.escape(label)}</b> wins with "
        f"{scores.get(label, 0):.2f} (next: {html.escape(runner)}, {scores.get(runner, 0):.2f}), so the feature "
        f"is called “{html.escape(label)}”. On {len(rnd)} random scenes its region overlaps "
        f"{html.escape(label)} pixels only {r_mean:.2f} on average: the match is not chance."
    )
    return (
        fig,
        cap,
        {
            "feature": feature,
            "label": label,
            "concept_scores": scores,
            "top_iou": top_iou,
            "top_iou_mean": t_mean,
            "random_iou": rnd,
            "random_iou_mean": r_mean,
            "random_scenes": [int(i) for i in pick],
        },
    )


def _changed(S, rows) -> str:
    """What else the steering changed in the captions that now say the colour (computed per caption)."""
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
    what = [w for w in ["shapes", "positions", "textures", "the number of objects"] if w in changed]
    return ", ".join(what[:-1]) + (" and " if len(what) > 1 else "") + what[-1] if what else "other words"


def steer():
    S, org, feature, setting, clean = _setup()
    i0, _ = _tour_scene()
    value = analysis.default_clamp_value(org, feature, setting["multiple"])
    rows = []
    for i in [i0] + [i for i in clean if i != i0]:
        if len(rows) == FEAT_N_STEER:
            break
        img = S.render(org.heldout_specs[i])[0]
        out = analysis.steer_caption(
            org, img, feature, value, positions=setting["positions"], suppress_family=setting["suppress"]
        )
        if FEAT_COLOUR in out["baseline"].split():  # the model already says it unaided: no test of steering
            continue
        before, after = S.parse_caption(out["baseline"]), S.parse_caption(out["steered"])
        rows.append(
            {
                "scene": i,
                "before": out["baseline"],
                "after": out["steered"],
                "well_formed": out["well_formed"],
                "says_red": out["well_formed"] and any(o["colour"] == FEAT_COLOUR for o in after or []),
                "only_colour": bool(
                    before and after and [{**o, "colour": FEAT_COLOUR} for o in before] == [dict(o) for o in after]
                ),
            }
        )
    n, ncol = len(rows), 3
    nrow = max((n + ncol - 1) // ncol, 1)
    fig = P.figure(nrow, 2 * ncol, column_widths=[1, 2.4] * ncol, horizontal_spacing=0.01, vertical_spacing=0.08)
    for k, r in enumerate(rows):
        row, col = k // ncol + 1, 2 * (k % ncol) + 1
        fig.add_trace(P.image(S.render(org.heldout_specs[r["scene"]])[0], f"scene {r['scene']}"), row, col)
        # a text cell is about 128 px wide in the tour's narrowest figure (presenter view at 1000 px)
        wrap = lambda s: "<br>".join(textwrap.wrap(html.escape(s), 22))  # noqa: E731
        P.note(
            fig,
            row,
            col + 1,
            "before:<br>" + wrap(r["before"]),
            x=0.03,
            y=1.0,
            xanchor="left",
            yanchor="top",
            align="left",
            font=dict(size=10),
        )
        P.note(
            fig,
            row,
            col + 1,
            "<b>after:<br>" + wrap(r["after"]) + "</b>",
            x=0.03,
            y=0.45,
            xanchor="left",
            yanchor="top",
            align="left",
            font=dict(size=10, color=colors.POSITIVE if r["says_red"] else None),
        )
    P.bare_axes(fig, nrow, 2 * ncol)
    P.finish(
        fig,
        f"Captions of scenes with nothing red, before and after turning feature {feature} up",
        height=min(P.HEIGHT, 90 + 190 * nrow),
    )
    red = sum(r["says_red"] for r in rows)
    clean_edit = sum(r["only_colour"] for r in rows if r["says_red"])
    where = {
        "image": "on the image's positions",
        "prompt": "at every position of the prompt",
        "all": "at every position",
        "active": "on the objects' patches only",
    }.get(setting["positions"], setting["positions"])
    side = (
        ""
        if not red
        else " Only the colour word changes; the rest of each caption stays right."
        if clean_edit == red
        else f" A blunt edit, though: in {f'all {red}' if clean_edit == 0 else f'{red - clean_edit} of the {red}'},"
        f" {_changed(S, rows)} change too: the edit reaches more of what the model sees than the colour."
    )
    cap = (
        f"These {n} scenes have nothing red. While the model looks at each, we force feature {feature} up to "
        f"{value:.3g} ({setting['multiple']:g}× its strongest natural value, {where}"
        f"{', with the other colours’ features switched off' if setting['suppress'] else ''}: the best setting "
        f"measured on this model), and the captions now say <b>red</b> in <b>{red} of {n}</b>.{side}"
    )
    return fig, cap, {"feature": feature, "value": value, "setting": setting, "rows": rows, "says_red": red, "n": n}


TOUR = Tour(
    "features",
    "Features — what a feature means (multimodal SAE)",
    ("llava-scenes", "llava-scenes-sae"),
    [
        Step("A scene and the model's caption", scene),
        Step("One feature lights up on red things", page),
        Step("Why it is called “red”", iou),
        Step("Turn it up: the model says red", steer),
    ],
)
