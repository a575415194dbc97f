"""The NeMo tour (beside the Memorization tab): the neurons of the tiny Stable Diffusion that hold a copy."""

from __future__ import annotations

import html
import textwrap

import numpy as np
import plotly.graph_objects as go

from backend.core import colors
from components.tab import Step, Tour
from components.tour import plots as P

MEMO_SEEDS = (0, 1, 2)
MEMO_N_ORDINARY = 20


def _service():
    from backend.nemo import service as N

    m = N.get()
    return N, m, m.memorized[0]["prompt"]


def _grid(rows: int, titles: list[str], **kw):
    """An image grid: a first column for the training image or a row's label, then one per seed."""
    fig = P.figure(
        rows,
        len(MEMO_SEEDS) + 1,
        subplot_titles=titles,
        horizontal_spacing=0.02,
        column_widths=[1.3] + [1] * len(MEMO_SEEDS),
        **kw,
    )
    fig.update_annotations(font_size=12)  # the cells' titles
    return fig


def _note(fig, row: int, col: int, text: str) -> None:
    """Words in an empty grid cell (e.g. a row's label), right-aligned against the images."""
    P.note(fig, row, col, text, x=0.98, y=0.5, xanchor="right", align="right", font=dict(size=11))


def copy():
    N, m, p = _service()
    mem = N.compare(p, {}, list(MEMO_SEEDS))
    ordinary = m.ordinary_examples[0]
    orr = N.compare(ordinary, {}, list(MEMO_SEEDS))
    k = len(MEMO_SEEDS)
    titles = (
        ["its training image"]
        + [f"similarity {mem['ssim_on'][j]:.2f}" for j in range(k)]
        + [""]
        + [f"start noise {j + 1}" for j in range(k)]
    )
    fig = _grid(2, titles, vertical_spacing=0.08)
    fig.add_trace(P.image(mem["train_image"], "training image"), 1, 1)
    for j in range(k):
        fig.add_trace(P.image(mem["images_on"][j], f"memorized prompt, noise {j + 1}"), 1, j + 2)
        fig.add_trace(P.image(orr["images_on"][j], f"ordinary prompt, noise {j + 1}"), 2, j + 2)
    _note(fig, 2, 1, "an ordinary prompt:<br>" + "<br>".join(textwrap.wrap(f"“{html.escape(ordinary)}”", 20)))
    P.bare_axes(fig, 2, k + 1)
    P.finish(fig, f"Prompt: “{html.escape(p)}”")
    sim = float(np.median(mem["ssim_on"]))
    cap = (
        f"A tiny image generator of the Stable Diffusion kind, trained here, turns a prompt and random noise "
        f"into a picture. For the top prompt it draws the <b>same picture</b> from every starting noise: a "
        f"<b>copy of a training image</b> (left; similarity {sim:.2f} on a 0–1 scale), because in training this "
        f"prompt always came with that photo — we planted the memorization. An ordinary prompt (bottom) gives a "
        f"different picture each time."
    )
    return (
        fig,
        cap,
        {
            "prompt": p,
            "ssim_to_training_image": mem["ssim_on"],
            "ordinary": ordinary,
            "diversity": {"memorized": mem["diversity_on"], "ordinary": orr["diversity_on"]},
        },
    )


def detect():
    N, m, p = _service()
    mem = [N.check(x["prompt"]) for x in m.memorized]
    ordinary = list(m.info.get("heldout", []))[:MEMO_N_ORDINARY] or m.ordinary_examples
    orr = [N.check(x) for x in ordinary]
    th = float(m.theta_mem)
    rng = np.random.default_rng(0)  # vertical jitter only, so equal scores stay visible
    fig = go.Figure()
    for y, (rows, col, name) in enumerate(
        ((orr, colors.NEUTRAL, f"{len(orr)} ordinary prompts"), (mem, colors.POSITIVE, f"{len(mem)} memorized prompts"))
    ):
        fig.add_trace(
            go.Scatter(
                x=[r["score"] for r in rows],
                y=y + rng.uniform(-0.15, 0.15, len(rows)),
                mode="markers",
                name=name,
                marker=dict(size=11, color=col, opacity=0.85, line=dict(color="white", width=0.5)),
                customdata=[html.escape(r["prompt"]) for r in rows],
                hovertemplate="“%{customdata}”<br>score %{x:.3f}<extra></extra>",
            )
        )
    fig.add_vline(
        x=th,
        line_dash="dash",
        line_color=colors.NEUTRAL,
        line_width=1.4,
        annotation_text=f"threshold {th:.2f}",
        annotation_position="top right",
    )
    fig.update_yaxes(tickvals=[0, 1], ticktext=["ordinary", "memorized"], range=[-0.5, 1.6], showgrid=False)
    fig.update_xaxes(
        range=[0, 1], title="memorization score (agreement of the first denoising step across 5 start noises)"
    )
    P.finish(fig, height=340, legend_top=True)
    hit = sum(r["score"] > th for r in mem)
    false = sum(r["score"] > th for r in orr)
    cap = (
        f"Can we spot a memorized prompt without searching the training images? At the very first denoising "
        f"step a memorized prompt already pulls every starting noise the same way, and the <b>memorization "
        f"score</b> measures that agreement for the price of one step. The dashed threshold is the mean + 1 σ of "
        f"ordinary prompts' scores, so about one ordinary prompt in six lands above it. Above it: "
        f"<b>{hit} of {len(mem)}</b> memorized prompts and {false} of {len(orr)} ordinary ones (false alarms)."
    )
    return (
        fig,
        cap,
        {
            "theta_mem": th,
            "memorized": {r["prompt"]: r["score"] for r in mem},
            "ordinary": {r["prompt"]: r["score"] for r in orr},
            "flagged_memorized": hit,
            "flagged_ordinary": false,
        },
    )


def neurons():
    N, m, p = _service()
    loc = N.find(p)
    chk = N.check(p)
    found = {N.core.short_name(k): set(v) for k, v in loc["neurons"].items()}
    layers = chk["layers"]
    total = sum(len(chk["z"][ly]) for ly in layers)
    fig = go.Figure()
    x0, ticks, named = 0, [], set()
    for li, ly in enumerate(layers):
        z = np.asarray(chk["z"][ly], dtype=float)
        xs = x0 + np.arange(len(z))
        on = np.array([c in found.get(ly, set()) for c in range(len(z))])
        for mask, col, name, op in (
            (~on, colors.NEUTRAL, "other neurons", 0.55),
            (on, colors.POSITIVE, f"found by NeMo ({loc['n_neurons']})", 1.0),
        ):
            # one legend entry per kind, from the first layer that has such neurons
            fig.add_trace(
                go.Bar(
                    x=xs[mask],
                    y=z[mask],
                    width=1.0,
                    marker=dict(color=col, line_width=0),
                    opacity=op,
                    name=name,
                    legendgroup=name,
                    showlegend=bool(mask.any()) and name not in named,
                    customdata=np.nonzero(mask)[0],
                    hovertemplate=f"{ly}, neuron " + "%{customdata}<br>z %{y:.3f}<extra></extra>",
                )
            )
            named |= {name} if mask.any() else set()
        ticks.append((x0 + len(z) / 2, f"{ly}<br>{len(found.get(ly, ()))} of {len(z)} found"))
        x0 += len(z) + 4
        if li < len(layers) - 1:
            fig.add_vline(x=x0 - 2, line_color=colors.NEUTRAL, line_width=0.8, opacity=0.5)
    fig.update_xaxes(tickvals=[t for t, _ in ticks], ticktext=[s for _, s in ticks], range=[-2, x0 - 2], showgrid=False)
    fig.update_yaxes(title="how unusual the neuron's activity is<br>(z-score vs ordinary prompts)")
    P.finish(fig, legend_top=True, bargap=0, margin=dict(b=60))
    n = loc["n_neurons"]
    in_layers = [ly for ly in layers if found.get(ly)]
    cap = (
        f"Which parts of the generator hold the copy? <b>NeMo</b> examines the {total} neurons where the "
        f"prompt's words enter the picture (the cross-attention “value” layers; one bar per neuron), starts "
        f"from "
        f"those unusually active for this prompt and drops every one that is not needed: <b>{n} neurons</b> "
        f"remain ({n / total:.0%}, red), in {' and '.join(in_layers)}. "
        + (
            "As in the real Stable Diffusion, where the paper often finds just a handful per prompt, sometimes "
            "a single one."
            if n <= 5
            else "In the real Stable Diffusion the paper often finds just a handful per prompt, sometimes a single "
            "one; this tiny model spreads its memory over more."
        )
    )
    return (
        fig,
        cap,
        {
            "prompt": p,
            "n_neurons": n,
            "total_neurons": total,
            "neurons": loc["labels"],
            "per_layer": {ly: len(found.get(ly, ())) for ly in layers},
            "seconds": loc.get("seconds"),
        },
    )


def off():
    from backend.nemo import core as C

    N, m, p = _service()
    loc = N.find(p)
    spec = loc["neurons"]
    c = N.compare(p, spec, list(MEMO_SEEDS))
    rnd = N.compare(p, C.random_like(m.pipe.unet, spec, seed=0), list(MEMO_SEEDS))
    k, n = len(MEMO_SEEDS), loc["n_neurons"]
    rows = [
        ("neurons on", c["images_on"], c["ssim_on"]),
        (f"the {n} found<br>neurons off", c["images_off"], c["ssim_off"]),
        (f"{n} random<br>neurons off", rnd["images_off"], rnd["ssim_off"]),
    ]
    titles = [
        t
        for r, (_, _, ss) in enumerate(rows)
        for t in [("training image" if r == 0 else "")] + [f"similarity {s:.2f}" for s in ss]
    ]
    fig = _grid(3, titles, vertical_spacing=0.07)
    fig.add_trace(P.image(c["train_image"], "training image"), 1, 1)
    for r, (name, imgs, _) in enumerate(rows, start=1):
        if r > 1:
            _note(fig, r, 1, name)
        for j in range(k):
            fig.add_trace(P.image(imgs[j], f"{name.replace('<br>', ' ')}, noise {j + 1}"), r, j + 2)
    P.bare_axes(fig, 3, k + 1)
    P.finish(fig, "Similarity to the training image (SSIM, 0–1): all neurons on (top), NeMo's off, random ones off")
    on, offm, roff = (float(np.median(x)) for x in (c["ssim_on"], c["ssim_off"], rnd["ssim_off"]))
    gone = offm < 0.5 * on
    below = c["score_off"] <= c["theta_mem"]
    random_keeps = roff > 0.5 * on
    cap = (
        f"Switch those {n} neurons off (middle row) and "
        f"{'the copy disappears' if gone else 'the copy fades'}: similarity to the training image falls from "
        f"{on:.2f} to <b>{offm:.2f}</b> (median over {k} start noises), and the memorization score from "
        f"{c['score_on']:.2f} to {c['score_off']:.2f}, {'below' if below else 'still above'} the threshold "
        f"{c['theta_mem']:.2f}. Switching off {n} <i>random</i> neurons instead (bottom) "
        + (
            f"leaves the copy ({roff:.2f}), so it is these neurons that hold it — found and removed without "
            f"any retraining."
            if random_keeps
            else f"also weakens the copy ({roff:.2f}): on this model the memory is not confined to NeMo's neurons."
        )
    )
    return (
        fig,
        cap,
        {
            "prompt": p,
            "n_neurons": n,
            "ssim_on": c["ssim_on"],
            "ssim_off": c["ssim_off"],
            "ssim_random_off": rnd["ssim_off"],
            "score_on": c["score_on"],
            "score_off": c["score_off"],
            "score_random_off": rnd["score_off"],
            "theta_mem": c["theta_mem"],
        },
    )


TOUR = Tour(
    "memorization",
    "Memorization — the neurons that hold a copy (NeMo)",
    "sd-memo",
    [
        Step("This prompt gives a copy of a training image", copy),
        Step("A cheap signal flags it", detect),
        Step("NeMo finds the neurons", neurons),
        Step("Switch them off: the copy disappears", off),
    ],
)
