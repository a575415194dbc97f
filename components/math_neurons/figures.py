"""Math neurons' pictures and exports: the accuracy card and bars, the pruning scatter (the paper's
Figure 2), the scale curve, the per-layer and consistency plots, sample rows and the PNG export.

Pure functions of plain numbers (dicts from backend.mathneuro.service); the tab wires them up.
"""

from __future__ import annotations

import html
from pathlib import Path

import plotly.graph_objects as go

from backend.core import colors as C
from backend.mathneuro.service import Setting
from components.common import themed
from components.mpl import pyplot

METHOD_LABELS = {
    "MathNeuro": "mathneuro",
    "Wanda (no subtraction)": "wanda",
    "Random (same count)": "random",
    "LAPE (MLP neurons)": "lape",
}
LABEL_OF = {v: k for k, v in METHOD_LABELS.items()}
# Methods in the shared qualitative palette (the same colour in every figure and the PNG export).
COLORS = {
    "mathneuro": C.QUALITATIVE[0],
    "wanda": C.QUALITATIVE[3],
    "random": C.NEUTRAL,
    "lape": C.QUALITATIVE[1],
    "none": C.QUALITATIVE[2],
}
TEXT_POS = {
    "mathneuro": "top center",
    "wanda": "top right",
    "random": "bottom center",
    "lape": "top left",
}  # nearby points (random, LAPE, unmodified) keep readable labels


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def _delta(x: float) -> str:
    pts = 100 * x
    color = "#16a34a" if pts > 0.05 else ("#e11d48" if pts < -0.05 else "#64748b")
    return f"<span style='color:{color};font-weight:600'>{pts:+.1f} pts</span>"


def samples_words(n: int, used: tuple[int, int] | None = None) -> str:
    """How many samples identified the set: the setting's number, or what each side had of it."""
    m, nm = used or (n, n)
    return f"{m} samples per set" if m == nm else f"{m} math and {nm} non-math samples"


def accuracy_html(base: dict, mod: dict, s: Setting, n_total: int, used: tuple[int, int] | None = None) -> str:
    what = "pruned" if s.factor == 0 else f"scaled × {s.factor:g}"
    rows = "".join(
        f"<tr><td><b>{name}</b></td><td>{_pct(base[key])}</td><td>{_pct(mod[key])}</td>"
        f"<td>{_delta(mod[key] - base[key])}</td></tr>"
        for name, key in (("math", "math"), ("non-math", "nonmath"))
    )
    return (
        f"<div class='wb-card' style='min-height:0'><h3>Accuracy: {html.escape(LABEL_OF[s.method])} "
        f"set {what}</h3><div class='wb-paper'>{mod['n_params']:,} of {n_total:,} linear weights "
        f"({100 * mod['n_params'] / max(n_total, 1):.2f} %) · K = {100 * s.top_k:g} % · "
        f"{samples_words(s.n_samples, used)}</div>"
        "<table class='wb-acc'><tr><th></th><th>unmodified</th><th>modified</th><th>change</th></tr>"
        f"{rows}</table></div>"
    )


def describe_result(s: Setting, base: dict, mod: dict) -> dict:
    """A shown result as plain numbers: what a pin keeps (never tensors)."""
    return {
        "method": s.method,
        "k": round(100 * s.top_k, 6),
        "factor": float(s.factor),
        "n": int(s.n_samples),
        "math": float(mod["math"]),
        "nonmath": float(mod["nonmath"]),
        "base_math": float(base["math"]),
        "base_nonmath": float(base["nonmath"]),
    }


def short_label(d: dict) -> str:
    what = "pruned" if d["factor"] == 0 else f"× {d['factor']:g}"
    return f"{LABEL_OF[d['method']].split(' ')[0]}, K {d['k']:g} %, {what}"


def pct(x: float) -> str:
    """An accuracy as people say it: 0.995 reads 99.5 %, 0.78 reads 78 % (never rounded to a lie)."""
    return f"{100 * x:.1f}".rstrip("0").rstrip(".") + " %"


def accuracy_plot(current: dict, pinned: dict | None = None) -> go.Figure:
    """The key figure: math and non-math accuracy, unmodified vs the current setting, and the pinned
    result beside it on the same axes (hatched, so two settings of one method stay apart)."""
    cats = ["math", "non-math"]
    bars = [
        ("unmodified", [current["base_math"], current["base_nonmath"]], COLORS["none"], ""),
        (f"now: {short_label(current)}", [current["math"], current["nonmath"]], COLORS[current["method"]], ""),
    ]
    if pinned:
        bars.append(
            (f"pinned: {short_label(pinned)}", [pinned["math"], pinned["nonmath"]], COLORS[pinned["method"]], "/")
        )
    fig = go.Figure()
    for name, ys, color, hatch in bars:
        fig.add_trace(
            go.Bar(
                x=cats,
                y=[100 * y for y in ys],
                name=name,
                marker=dict(color=color, pattern_shape=hatch),
                text=[pct(y) for y in ys],
                textposition="outside",
                textfont=dict(size=14),
                hovertemplate=f"{html.escape(name)}<br>%{{x}} accuracy: %{{y:.1f}} %<extra></extra>",
            )
        )
    # The title is the plain caption of the result (the block's label names the figure), one side a
    # line, so that it fits a 1000 px window beside the controls.
    title = (
        f"math {pct(current['base_math'])} → {pct(current['math'])},<br>non-math "
        f"{pct(current['base_nonmath'])} → {pct(current['nonmath'])}"
    )
    fig.update_layout(
        title=title + (" · pinned result hatched" if pinned else ""),
        barmode="group",
        yaxis=dict(title="accuracy (%)", range=[0, 112]),
        font=dict(size=13),
        height=360,
        margin=dict(l=50, r=20, t=70, b=40),
        legend=dict(orientation="h", y=-0.15),
    )
    return themed(fig)


def _label_positions(points: list[tuple[float, float]], preferred: list[str]) -> list[str]:
    """Text positions for point labels: a label moves to a free side when an earlier point sits
    within a few percent (random pruning often lands on the unmodified point)."""
    sides = ["bottom center", "top center", "middle right", "middle left"]
    out: list[str] = []
    for i, (x, y) in enumerate(points):
        taken = {out[j] for j, (u, v) in enumerate(points[:i]) if abs(u - x) < 8 and abs(v - y) < 8}
        out.append(
            preferred[i] if preferred[i] not in taken else next((p for p in sides if p not in taken), preferred[i])
        )
    return out


def figure2_plot(base: dict, results: dict, k: float) -> go.Figure:
    """The paper's Figure 2: x = math accuracy, y = non-math accuracy after pruning each set."""
    fig = go.Figure()
    points = [(100 * base["math"], 100 * base["nonmath"])] + [
        (100 * r["math"], 100 * r["nonmath"]) for r in results.values()
    ]
    where = _label_positions(points, ["bottom center"] + [TEXT_POS[m] for m in results])

    def hover(what):
        return f"<b>{what}</b><br>math: %{{x:.1f}} %<br>non-math: %{{y:.1f}} %<extra></extra>"

    # cliponaxis off: a label above a point at 100 % stays whole
    fig.add_trace(
        go.Scatter(
            x=[points[0][0]],
            y=[points[0][1]],
            mode="markers+text",
            cliponaxis=False,
            name="unmodified",
            text=["unmodified"],
            textposition=where[0],
            hovertemplate=hover("unmodified"),
            marker=dict(size=14, color=COLORS["none"], symbol="star"),
        )
    )
    for (m, _r), (x, y), pos in zip(results.items(), points[1:], where[1:]):
        fig.add_trace(
            go.Scatter(
                x=[x],
                y=[y],
                mode="markers+text",
                hovertemplate=hover(f"{LABEL_OF[m]} set pruned"),
                name=LABEL_OF[m],
                text=[LABEL_OF[m].split(" ")[0]],
                cliponaxis=False,
                textposition=pos,
                marker=dict(size=13, color=COLORS[m]),
            )
        )
    fig.update_layout(
        title=f"After pruning each set (top {100 * k:g} %): ideal = top left",
        xaxis_title="math accuracy (%)",
        yaxis_title="non-math accuracy (%)",
        xaxis=dict(range=[-5, 105]),
        yaxis=dict(range=[-5, 110]),
        height=420,
        margin=dict(l=50, r=20, t=70, b=45),
        legend=dict(orientation="h", y=-0.2),
    )
    return themed(fig)


def curve_plot(curve: list[dict], base: dict, s: Setting) -> go.Figure:
    xs = [r["factor"] for r in curve]
    fig = go.Figure()
    for name, key, color in (("math", "math", COLORS["mathneuro"]), ("non-math", "nonmath", COLORS["lape"])):
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=[100 * r[key] for r in curve],
                mode="lines+markers",
                name=name,
                line=dict(color=color),
                hovertemplate=f"factor %{{x:g}}: {name} accuracy %{{y:.1f}} %<extra></extra>",
            )
        )
    fig.add_vline(x=1.0, line_dash="dot", line_color=C.NEUTRAL)
    fig.update_layout(
        title=f"Accuracy vs scale factor ({LABEL_OF[s.method]}, K = {100 * s.top_k:g} %)",
        xaxis_title="scale factor (0 = pruned, 1 = unmodified)",
        yaxis_title="accuracy (%)",
        height=360,
        margin=dict(l=50, r=20, t=50, b=45),
        legend=dict(orientation="h", y=-0.25),
    )
    return themed(fig)


def layers_plot(layers: dict, s: Setting) -> go.Figure:
    keys = list(layers)
    fig = go.Figure(
        go.Bar(
            x=list(range(len(keys))),
            y=[100 * layers[k]["fraction"] for k in keys],
            customdata=[layers[k]["count"] for k in keys],
            hovertext=[f"layer {k}" if k.isdigit() else "lm_head" for k in keys],
            hovertemplate="%{hovertext}: %{y:.2f} % of its linear weights (%{customdata:,} weights)<extra></extra>",
            marker_color=COLORS[s.method],
        )
    )
    fig.update_layout(
        title=f"{LABEL_OF[s.method]}: share of each layer's linear weights selected",
        xaxis=dict(
            tickmode="array",
            tickvals=list(range(len(keys))),
            ticktext=[f"layer {k}" if k.isdigit() else "lm_head" for k in keys],
            title=("layer (lm_head: the untied output layer)" if "other" in layers else "decoder layer"),
        ),
        yaxis_title="selected (%)",
        height=320,
        margin=dict(l=50, r=20, t=50, b=45),
    )
    return themed(fig)


def consistency_plot(cons: dict, s: Setting) -> go.Figure:
    xs = [int(k) for k in cons]
    fig = go.Figure()
    for name, key, line in (
        ("mean overlap", "mean", dict(color=COLORS["mathneuro"])),
        ("worst subset", "min", dict(color=C.NEUTRAL, dash="dot")),
    ):
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=[100 * cons[str(x)][key] for x in xs],
                mode="lines+markers",
                name=name,
                line=line,
                hovertemplate=(f"%{{x}} samples: {name} %{{y:.1f}} % of the {s.n_samples}-sample set<extra></extra>"),
            )
        )
    fig.update_layout(
        title=f"Consistency: share of the {s.n_samples}-sample set found from n samples",
        xaxis=dict(
            type="log",
            title="samples per set (random subsets)",
            tickmode="array",
            tickvals=xs,
            ticktext=[str(x) for x in xs],
        ),
        yaxis=dict(title="overlap (%)", range=[0, 103]),
        height=320,
        margin=dict(l=50, r=20, t=50, b=45),
        legend=dict(orientation="h", y=-0.3),
    )
    return themed(fig)


def samples_rows(samples: list[dict]) -> list[list[str]]:
    def mark(ans, ok, kind):  # ok is None for plain text, which has no reference to match
        return f"{brief(ans, kind)}" + ("" if ok is None else f" {'✓' if ok else '✗'}")

    return [
        [
            r["kind"],
            r["prompt"],
            r["answer"],
            mark(r["before"], r.get("ok_before", r["before"] == r["answer"]), r["kind"]),
            mark(r["after"], r.get("ok_after", r["after"] == r["answer"]), r["kind"]),
        ]
        for r in samples
    ]


def brief(answer: str, kind: str, width: int = 90) -> str:
    """A long generated answer as the table shows it: a worked GSM8K solution as the number it ends
    on and its last words (the full text is in the export), other text cut at `width`."""
    answer = " ".join((answer or "").split())
    if len(answer) <= width:
        return answer or "∅"
    if kind == "math":
        from backend.mathneuro.sources import final_number

        return f"{final_number(answer) or '∅'} ← …{answer[-width:]}"
    return answer[:width] + "…"


def model_name(model_id: str) -> str:
    """'zoo:math-llama@main' as 'math-llama (zoo)': the name a reader knows, and where it came from."""
    where, _, rest = model_id.partition(":") if ":" in model_id else ("", "", model_id)
    name = rest.rsplit("@", 1)[0] if "@" in rest else rest
    return f"{name} ({where})" if where else name


def setting_title(setting: dict, model_id: str) -> str:
    """What a result is, in words: the set, what was done to it, K, samples and the model."""
    what = "pruned" if setting["factor"] == 0 else f"scaled × {setting['factor']:g}"
    return (
        f"{LABEL_OF[setting['method']]} set {what} · K = {100 * setting['top_k']:g} % · "
        f"{setting['n_samples']} samples per set · model {model_name(model_id)}"
    )


def export_png(state: dict, path: Path) -> None:
    with pyplot() as plt:
        fig, axes = plt.subplots(1, 3, figsize=(14, 4.2))
        ax = axes[0]
        base = state["baseline"]
        ax.scatter(
            [100 * base["math"]], [100 * base["nonmath"]], marker="*", s=160, c=COLORS["none"], label="unmodified"
        )
        for m, r in (state.get("figure2") or {}).items():
            ax.scatter([100 * r["math"]], [100 * r["nonmath"]], s=80, c=COLORS[m], label=LABEL_OF[m])
        ax.set(
            xlabel="math accuracy (%)",
            ylabel="non-math accuracy (%)",
            xlim=(-3, 103),
            ylim=(-3, 103),
            title="after pruning (ideal: top left)",
        )
        ax.legend(fontsize=7)
        if not state.get("figure2"):
            ax.text(50, 50, "methods not compared yet\n(“Compare methods”)", ha="center", va="center", fontsize=9)
        ax = axes[1]
        curve = state.get("scale_curve") or []
        if curve:
            ax.plot(
                [r["factor"] for r in curve],
                [100 * r["math"] for r in curve],
                "o-",
                c=COLORS["mathneuro"],
                label="math",
            )
            ax.plot(
                [r["factor"] for r in curve],
                [100 * r["nonmath"] for r in curve],
                "o-",
                c=COLORS["lape"],
                label="non-math",
            )
            ax.axvline(1.0, ls=":", c="#94a3b8")
            ax.legend(fontsize=7)
        else:
            ax.text(
                0.5,
                0.5,
                "scale factor not swept yet\n(“Sweep the scale factor”)",
                ha="center",
                va="center",
                fontsize=9,
                transform=ax.transAxes,
            )
        ax.set(xlabel="scale factor", ylabel="accuracy (%)", title="accuracy vs scale factor")
        ax = axes[2]
        layers = state.get("layers") or {}
        ax.bar(
            range(len(layers)), [100 * v["fraction"] for v in layers.values()], color=COLORS[state["setting"]["method"]]
        )
        ax.set_xticks(
            range(len(layers)),
            [f"layer {k}" if k.isdigit() else "lm_head" for k in layers],
            rotation=45 if len(layers) > 6 else 0,
        )
        ax.set(ylabel="share of the layer's weights in the set (%)", title="where the set lies, per layer")
        fig.suptitle(state["title"])
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
