"""Adapters: PiSSA explorer — spectra, PiSSA vs LoRA init, QLoRA / LoftQ / QPiSSA quantization
error, and a live LoRA vs PiSSA fine-tuning race. UI only: every number comes from backend.pissa."""
from __future__ import annotations

import html
import json
import re
import tempfile
import time
from pathlib import Path

import gradio as gr
import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from backend.core import gpu
from backend.pissa import service
from backend.pissa.race import RACE_METHODS, RaceConfig
from backend.core import colors as C
from components import links, race_live
from backend.core import bounds
from components.common import fail, model_event, on_first_open, themed
from components.inputs import CheckedNumber, bounded_slider, checked_radio, keep_on_failure
from components.adapter_convert import conversion_md
from components.model_picker import model_picker
from components.mpl import pyplot

TAB_ID = "adapters"
TITLE = "Adapters"
ORDER = 5
SUMMARY = "PiSSA: principal singular vectors as adapter init; quantization error; live LoRA vs PiSSA race."
# A deep link reruns the layer analysis of its settings (components.links); "layers" first, so a link
# to another model than the default lists that model's layers and keeps the linked one.
LINK_RUNS = ("layers", "analyse")
# The session report keeps these results and pins (components.report).
REPORT_RESULTS = {"pissa-spectrum": "Spectrum and PiSSA split", "pissa-error-table": "Quantization error", "pissa-race": "LoRA vs PiSSA race", "pissa-convert-result": "PiSSA to LoRA conversion"}
REPORT_PINS = {"pissa-pin": "pissa-spectrum"}

# One colour per method here and in the guided tour (backend.core.colors): PiSSA and its quantized
# QPiSSA in PiSSA's orange family, LoRA blue, LoftQ green/purple, the frozen residual W_res blue as
# the tour draws it, the untouched W grey.
COLORS = {"lora": C.LORA, "pissa": C.PISSA, "full": C.NEUTRAL, "W": C.NEUTRAL, "W_res": C.LORA,
          "qlora": "#bbbbbb", "loftq-1": C.QUALITATIVE[2], "loftq-5": C.QUALITATIVE[4],
          "qpissa-1": C.PISSA, "qpissa-5": C.QUALITATIVE[3]}
NAMES = {"lora": "LoRA", "pissa": "PiSSA", "full": "full fine-tuning"}
DASHES = ["solid", "dash", "dot", "dashdot"]
# The race streams at a pace a browser keeps up with on a busy machine: every update makes the page
# redraw, and a figure of nine runs costs it 30-300 ms, so steps are coalesced into at most four
# updates a second, and the figure goes out at most once a second (the status line in between).
UPDATE_EVERY_S = 0.25
# the page's live view is handed its progress in the server process, which costs no browser work:
# fresher, so that each of its polls finds the latest steps
LIVE_EVERY_S = 0.15
INIT_LABELS = {"pissa": "full SVD (pissa)", "pissa_niter_4": "fast SVD (pissa_niter_4)"}
FIGURE_EVERY_S = 1.0
STOP_WAIT_S = race_live.STOP_WAIT_S
MAX_PLOT_POINTS = 150

EXPLAIN = (
    "<div class='wb-explain'><b>PiSSA</b> (Meng et al., 2024) splits a weight matrix "
    "W = U S Vᵀ into its <b>principal part</b> (top-r singular triplets, A = U<sub>r</sub>S<sub>r</sub>"
    "<sup>½</sup>, B = S<sub>r</sub><sup>½</sup>V<sub>r</sub>ᵀ), which becomes the trainable adapter, "
    "and a frozen <b>residual</b> W<sub>res</sub> = W − AB. LoRA instead freezes W and trains a "
    "“noise &amp; zero” adapter. Pick a model and a linear layer: see its spectrum, how much narrower "
    "W<sub>res</sub> is than W (why it quantizes better), the NF4 quantization error that QLoRA, LoftQ "
    "and QPiSSA leave, and race LoRA against PiSSA fine-tuning live. Everything is computed now on the "
    "model in memory (PiSSA/LoRA through peft; NF4 by this project, checked against the published "
    "table).</div>")
# Presenter view: one plain line in place of the explanation above (components.common, wb-presenter-only)
PRESENTER_CAPTION = ("<div class='wb-explain'>Start fine-tuning from a weight matrix's biggest directions "
                     "instead of from noise: it learns faster and quantizes with less error.</div>")


# --- helpers ------------------------------------------------------------------------------------
def _call(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except (service.ServiceError, ValueError, KeyError, FileNotFoundError) as e:
        fail(str(e).strip("'\""))


def _export_dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="wb-adapters-"))


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def export_name(*parts, ext: str) -> str:
    """One file name for an export: a hub id's "/" becomes "--" as in the Hugging Face cache, any
    other character a file system may refuse becomes "_", and the name stays one path component."""
    stem = "-".join(_UNSAFE.sub("_", str(p).replace("/", "--")) for p in parts if p not in (None, ""))
    stem = stem.strip(".")[:180] or "export"
    return f"{stem}.{ext}"


def _jsonable(obj):
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items() if not k.endswith("_sample")}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, (np.floating, np.integer)):
        return obj.item()
    return obj


def _write_json(folder: Path, name: str, data) -> str:
    path = folder / name
    path.write_text(json.dumps(_jsonable(data), indent=1))
    return str(path)


# --- 1. one layer -------------------------------------------------------------------------------
def describe_analysis(key, a: dict) -> dict:
    """A shown layer analysis as plain numbers: what a pin keeps (the two spectra, no tensors)."""
    return {"model": key, "layer": a["layer"], "shape": list(a["shape"]), "rank": int(a["rank"]),
            "init": a["init"], "singular_values": [float(v) for v in a["singular_values"]],
            "residual_singular_values": [float(v) for v in a["residual_singular_values"]]}


def pin_label(p: dict) -> str:
    return f"pinned: {p['model']} · {p['layer']} · r {p['rank']} · {p['init']}"


def spectrum_figure(a: dict, pinned: dict | None = None) -> go.Figure:
    """The key figure: the layer's spectrum and W_res's; a pinned analysis is drawn over it on the same
    axes (its W spectrum and principal part faint, dotted)."""
    sv = np.asarray(a["singular_values"])
    res = np.asarray(a["residual_singular_values"])
    r = a["rank"]
    idx = np.arange(1, len(sv) + 1)
    # W_res has rank n − r: its last r singular values are round-off, not shown on the log axis
    res = res[res > sv[0] * 1e-6]
    fig = go.Figure()
    fig.add_vrect(x0=0.5, x1=r + 0.5, fillcolor=COLORS["pissa"], opacity=0.12, line_width=0)
    fig.add_trace(go.Scatter(x=idx, y=sv, mode="lines+markers", name="W", marker=dict(size=4),
                             line=dict(color=COLORS["W"])))
    fig.add_trace(go.Scatter(x=idx[:r], y=sv[:r], mode="markers", name=f"principal part (top {r}) → adapter AB",
                             marker=dict(size=8, color=COLORS["pissa"])))
    fig.add_trace(go.Scatter(x=np.arange(1, len(res) + 1), y=res, mode="lines", name="W_res (frozen)",
                             line=dict(color=COLORS["W_res"], dash="dash")))
    if pinned:
        psv = np.asarray(pinned["singular_values"])
        pres = np.asarray(pinned["residual_singular_values"])
        pres = pres[pres > psv[0] * 1e-6]
        pidx = np.arange(1, len(psv) + 1)
        fig.add_trace(go.Scatter(x=pidx, y=psv, mode="lines", name=pin_label(pinned) + " · W",
                                 line=dict(color=COLORS["W"], dash="dot", width=2), opacity=0.7))
        fig.add_trace(go.Scatter(x=np.arange(1, len(pres) + 1), y=pres, mode="lines",
                                 name=pin_label(pinned) + " · W_res",
                                 line=dict(color=COLORS["W_res"], dash="dot", width=2), opacity=0.7))
    fig.update_layout(title=f"Singular values of {a['layer']} {tuple(a['shape'])}"
                            + (" · pinned one dotted" if pinned else ""),
                      xaxis_title="index i", yaxis_title="σᵢ (log scale)", yaxis_type="log",
                      height=360, margin=dict(l=50, r=20, t=50, b=45),
                      legend=dict(orientation="h", yref="container", y=0, yanchor="bottom"))
    return themed(fig)


HIST_BINS = 80


def histogram_figure(a: dict) -> go.Figure:
    """W's and W_res's entries counted here in shared bins: the page gets 80 bars per matrix, not the
    20,000 sampled entries (Gradio's front end copies every shown figure's value on each status
    message of any event, so a figure that large cost each click on the page ~100 ms)."""
    w, res = np.asarray(a["w_sample"], dtype=float), np.asarray(a["w_res_sample"], dtype=float)
    both = np.concatenate([w, res])
    lo, hi = (float(both.min()), float(both.max())) if both.size else (0.0, 1.0)
    edges = np.linspace(lo, hi if hi > lo else lo + 1.0, HIST_BINS + 1)
    centers, width = (edges[:-1] + edges[1:]) / 2, float(edges[1] - edges[0])
    fig = go.Figure()
    for values, name, color in ((w, f"W (std {a['w_std']:.3g})", COLORS["W"]),
                                (res, f"W_res (std {a['w_res_std']:.3g})", COLORS["W_res"])):
        counts, _ = np.histogram(values, bins=edges)
        fig.add_trace(go.Bar(x=centers, y=counts, width=width, name=name, opacity=0.6, marker_color=color,
                             marker_line_width=0,
                             hovertemplate="%{x:.3g} ± " + f"{width / 2:.2g}" + ": %{y} entries<extra>" + name
                             + "</extra>"))
    fig.update_layout(barmode="overlay", bargap=0, title="Distribution of entries: W vs W_res",
                      xaxis_title="value", yaxis_title="count", height=360,
                      margin=dict(l=50, r=20, t=50, b=45), legend=dict(orientation="h", yref="container", y=0, yanchor="bottom"))
    return themed(fig)


def layer_stats_md(a: dict) -> str:
    return (f"**{html.escape(a['layer'])}** {tuple(a['shape'])}, rank **{a['rank']}** "
            f"(`{a['init']}`): the top {a['rank']} singular values hold **{a['energy_top_r']:.1%}** of "
            f"‖W‖²_F.  W_res + AB reproduces W to a relative error of "
            f"**{a['reconstruction_rel_error']:.1e}**; the adapted layer's output at init differs from "
            f"the base layer's by **{a['init_output_rel_gap']:.1e}** (relative).  "
            f"absmax W = {a['w_absmax']:.3g} → W_res = {a['w_res_absmax']:.3g}: a narrower range for "
            f"the 4-bit quantizer.")


def _analysis_png(a: dict, path: Path) -> None:
    with pyplot() as plt:
        fig, ax = plt.subplots(1, 2, figsize=(11, 4))
        sv = np.asarray(a["singular_values"])
        ax[0].semilogy(np.arange(1, len(sv) + 1), sv, "k.-", ms=3, label="W")
        res = np.asarray(a["residual_singular_values"])
        res = res[res > sv[0] * 1e-6]
        ax[0].semilogy(np.arange(1, len(res) + 1), res, "--", color=COLORS["W_res"], label="W_res")
        ax[0].axvspan(0.5, a["rank"] + 0.5, color=COLORS["pissa"], alpha=0.15, label="principal part")
        ax[0].set_xlabel("index")
        ax[0].set_ylabel("singular value")
        ax[0].legend()
        ax[0].set_title(f"{a['layer']} spectrum (r = {a['rank']})")
        ax[1].hist(a["w_sample"], bins=80, alpha=0.6, color=COLORS["W"], label="W")
        ax[1].hist(a["w_res_sample"], bins=80, alpha=0.6, color=COLORS["W_res"], label="W_res")
        ax[1].legend()
        ax[1].set_title("entries of W and W_res")
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)


@gpu(duration=60)
def analyse(key, layer, rank, init, pinned=None, progress=gr.Progress()):
    if not key:
        fail("Pick a model first.")
    if not layer:
        fail("Pick a layer first.")
    names = _call(service.layer_names, key)
    if layer not in names:
        fail(f"{str(layer)[:60]!r} is not a linear layer of {key}: choose one of "
             f"{', '.join(names[:12])}{' …' if len(names) > 12 else ''}. Nothing was computed.")
    _call(bounds.check_choice, "init", init, bounds.PISSA_INITS)
    progress(0.1, desc="SVD of the layer")
    a = _call(service.layer_analysis, key, layer, _call(bounds.check, bounds.PISSA_RANK, rank), init)
    folder = _export_dir()
    png = folder / export_name("pissa", key, layer, f"r{a['rank']}", ext="png")
    _analysis_png(a, png)
    files = [_write_json(folder, export_name("pissa", key, layer, f"r{a['rank']}", ext="json"), a), str(png)]
    return spectrum_figure(a, pinned), histogram_figure(a), layer_stats_md(a), files, describe_analysis(key, a)


def on_model_change(key, progress=gr.Progress()):
    """The model's layers and a default one; when the page's deep link names this model and one of
    its layers, that layer (the restore sets the model, which lands here)."""
    if not key:
        return gr.update(choices=[], value=None), gr.update()
    names = _call(service.layer_names, key, lambda f, d: progress(f, desc=d))
    default = next((n for n in names if n.endswith("fc2") or n.endswith("q_proj")), names[0])
    query = links.current_query()
    # the link's layer goes with the link's model (absent from the link: the default one)
    if links.decode(query.get("pissa-model", "null")) in (key, None) and "pissa-layer" in query:
        wanted = links.decode(query.get("pissa-layer", "null"))
        default = wanted if wanted in names else default
    return gr.update(choices=names, value=default), gr.update()


# --- 2. quantization error ----------------------------------------------------------------------
ERROR_COLUMNS = ["layer", "shape", "qlora", "loftq-1", "loftq-5", "qpissa-1", "qpissa-5"]


def heatmap_figure(t: dict) -> go.Figure:
    h = t["heatmap"]
    z = np.array([[np.nan if v is None else v for v in row] for row in h["values"]], dtype=float)
    fig = go.Figure(go.Heatmap(z=z, x=[str(r) for r in h["ranks"]], y=list(range(len(h["layers"]))),
                               colorscale=C.ACTIVATION_PLOTLY, zmin=0, zmax=1,
                               colorbar=dict(title="error<br>reduction")))
    fig.update_yaxes(tickmode="array", tickvals=list(range(len(h["layers"]))), ticktext=h["layers"],
                     autorange="reversed")
    fig.update_layout(title=f"{h['method'].upper()} error-reduction ratio, layers × rank",
                      xaxis_title="rank r", height=max(300, 60 + 22 * len(h["layers"])),
                      margin=dict(l=140, r=20, t=50, b=45))
    return themed(fig)


def bars_figure(t: dict) -> go.Figure:
    rows = t["rows"]
    fig = go.Figure()
    for col in ERROR_COLUMNS[3:]:
        fig.add_trace(go.Bar(x=list(range(len(rows))), y=[np.nan if r[col] is None else r[col] for r in rows],
                             name=col.upper(),
                             marker_color=COLORS[col]))
    fig.update_xaxes(tickmode="array", tickvals=list(range(len(rows))), ticktext=[r["layer"] for r in rows])
    fig.update_layout(barmode="group", title=f"Error-reduction ratio at r = {t['rank']} (QLoRA = 0)",
                      yaxis_title="1 − ‖W − (Q + AB)‖* / ‖W − nf4(W)‖*", height=360,
                      margin=dict(l=60, r=20, t=50, b=80), legend=dict(orientation="h", yref="container", y=0, yanchor="bottom"))
    return themed(fig)


@gpu(duration=300)
def errors(key, rank, heat, progress=gr.Progress()):
    if not key:
        fail("Pick a model first.")
    method, _, iters = str(heat).partition("-")
    t = _call(service.error_table, key, int(rank), heat_method=(method, int(iters or 1)),
              progress=lambda f, d: progress(f, desc=d))
    table = [[r["layer"], "×".join(map(str, r["shape"]))] +
             [("n/a" if r[c] is None else round(r[c], 4)) for c in ERROR_COLUMNS[2:]] for r in t["rows"]]
    s = t["summary"]
    skipped = (f" (n/a on {', '.join(s['skipped_layers'])}: rank above the layer's own)"
               if s["skipped_layers"] else "")
    md = (f"At r = {t['rank']}{skipped}: QPiSSA-1 beats LoftQ-1 on **{s['qpissa1_beats_loftq1']}/{s['layers']}** "
          f"layers, QPiSSA-5 on **{s['qpissa5_beats_loftq1']}/{s['layers']}**. Mean ratios: " +
          ", ".join(f"{k} {v:.3f}" for k, v in s["mean"].items()) +
          ". (Paper, LLaMA-2-7B: QPiSSA reduces the error by ~19 % more than QLoRA.)")
    folder = _export_dir()
    csv = folder / export_name("pissa-errors", key, f"r{t['rank']}", ext="csv")
    csv.write_text("\n".join([",".join(ERROR_COLUMNS)] + [",".join(map(str, r)) for r in table]))
    files = [_write_json(folder, export_name("pissa-errors", key, f"r{t['rank']}", ext="json"), t), str(csv)]
    return table, bars_figure(t), heatmap_figure(t), md, files


# --- 3. the race --------------------------------------------------------------------------------
def _thin(n: int, most: int = MAX_PLOT_POINTS) -> list[int]:
    """Indices of at most `most` evenly spaced points, the last one included (display only; the
    exports keep every step)."""
    if n <= most:
        return list(range(n))
    stride = -(-n // most)
    idx = list(range(0, n, stride))
    return idx if idx[-1] == n - 1 else idx + [n - 1]


def race_figure(curves: dict, title: str = "") -> go.Figure:
    fig = make_subplots(rows=1, cols=2, subplot_titles=("training loss", "gradient norm"),
                        horizontal_spacing=0.08)
    seeds = sorted({s for _, s in curves})
    for (method, seed), c in sorted(curves.items()):
        dash = DASHES[seeds.index(seed) % len(DASHES)]
        name = f"{NAMES.get(method, method)} · seed {seed}"
        keep = _thin(len(c["step"]))
        for col, k in ((1, "loss"), (2, "grad_norm")):
            fig.add_trace(go.Scatter(x=[c["step"][i] for i in keep], y=[c[k][i] for i in keep],
                                     mode="lines", name=name, legendgroup=name,
                                     showlegend=col == 1,
                                     line=dict(color=COLORS.get(method), dash=dash, width=2)), row=1, col=col)
    fig.update_xaxes(title_text="step")
    fig.update_yaxes(type="log", row=1, col=2)
    fig.update_layout(title=title or "LoRA vs PiSSA", height=400, margin=dict(l=50, r=20, t=60, b=45),
                      legend=dict(orientation="h", yref="container", y=0, yanchor="bottom"), uirevision="race")
    return themed(fig)


def _race_png(curves: dict, path: Path, title: str) -> None:
    with pyplot() as plt:
        fig, ax = plt.subplots(1, 2, figsize=(11, 4))
        seeds = sorted({s for _, s in curves})
        styles = ["-", "--", ":", "-."]
        for (method, seed), c in sorted(curves.items()):
            ls = styles[seeds.index(seed) % 4]
            ax[0].plot(c["step"], c["loss"], ls, color=COLORS.get(method), label=f"{NAMES.get(method, method)} s{seed}")
            ax[1].semilogy(c["step"], c["grad_norm"], ls, color=COLORS.get(method))
        ax[0].set_title("training loss")
        ax[1].set_title("gradient norm")
        for a in ax:
            a.set_xlabel("step")
        ax[0].legend(fontsize=7, ncol=2)
        fig.suptitle(title)
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)


def _status(curves: dict, done: dict | None, elapsed: float, total: int) -> str:
    n = sum(len(c["step"]) for c in curves.values())
    lines = [f"{n}/{total} steps in {elapsed:.1f} s"]
    latest = {}
    for (m, s), c in curves.items():
        if c["loss"]:
            latest.setdefault(m, []).append(float(np.mean(c["loss"][-5:])))
    if latest:
        lines.append(" · ".join(f"{NAMES.get(m, m)}: loss {np.mean(v):.3f}" for m, v in sorted(latest.items())))
    if done:
        s = done["summary"]
        run, planned = s.get("steps_run", 0), s.get("steps_planned", 0)
        cut = bool(done.get("stopped")) and run < planned
        if cut:  # a stopped race compares only the steps every run completed, and says so
            lines.append(f"Race **stopped** at step {run} of {planned}" + (": nothing to compare yet." if not run else "."))
        if "pissa_beats_lora" in s and run:
            w = s["pissa_beats_lora"]
            when = f"at step {run} (of the {planned} planned)" if cut else "at the end"
            lines.append(f"PiSSA's loss is below LoRA's {when} for **{w['wins']}/{w['seeds']}** seeds "
                         f"(same lr {s['settings']['lr']:g}, r {s['settings']['rank']}, "
                         f"alpha {s['settings']['alpha']:g}).")
        limit = done.get("time_limit_s")
        if limit:
            lines.append(f"**stopped at this server's time limit of {limit:g} s**; fewer steps or seeds finish")
        elif not cut:
            lines.append("**stopped**" if done.get("stopped") else "**finished**")
    return "  \n".join(lines)


class Cadence:
    """At most one update every `every` seconds: `due()` says whether one may go out now (and
    counts it), `wait()` sleeps until one may."""

    def __init__(self, every: float, clock=time.perf_counter):
        self.every, self.clock, self.last = every, clock, float("-inf")

    def due(self) -> bool:
        now = self.clock()
        if now - self.last >= self.every:
            self.last = now
            return True
        return False

    def wait(self) -> None:
        time.sleep(max(0.0, self.last + self.every - self.clock()))
        self.last = self.clock()


def run_race(key, methods, n_seeds, steps, rank, lr, request: gr.Request = None):
    """The race for API clients: status lines at most four times a second, the figure once a
    second, then the final figure, status, summary and exports."""
    yield from _race(key, methods, n_seeds, steps, rank, lr, request, live="")


def race_in_page(key, methods, n_seeds, steps, rank, lr, page, request: gr.Request = None):
    """The race for the page: its progress, final figure and status go to the page's live view
    (components.race_live, `page` its id) instead of through Gradio's front end; Gradio gets two
    updates of the summary and exports: cleared at the start, filled at the end."""
    for item in _race(key, methods, n_seeds, steps, rank, lr, request, live=race_live.page_of(page, request)):
        yield item if isinstance(item, race_live.Live) else item[2:]


race_in_page.main_process = race_live.relayed  # components.guard: outside the ZeroGPU mark


def _race(key, methods, n_seeds, steps, rank, lr, request, live: str):
    """The race's outputs; with `live` (a page's id) its progress goes to that page's live view."""
    if not key:
        fail("Pick a model first.")
    methods = [m for m in RACE_METHODS if m in (methods or [])]
    if not methods:
        fail("Tick at least one method (LoRA, PiSSA, full fine-tuning).")
    n_seeds, steps = _call(bounds.check, bounds.PISSA_SEEDS, n_seeds), _call(bounds.check, bounds.PISSA_STEPS, steps)
    rank, lr = _call(bounds.check, bounds.PISSA_RANK, rank), _call(bounds.check, bounds.PISSA_LR, lr or 0)
    cfg = RaceConfig(methods=tuple(methods), seeds=tuple(range(n_seeds)), steps=steps,
                     lr=lr or None, rank=rank)
    _call(cfg.validate)
    _call(service.preset_for, key)
    session = getattr(request, "session_hash", None) or "local"
    total = len(methods) * n_seeds * steps
    curves: dict = {}
    sent: dict = {}  # points per run the live view already has

    def to_page(status: str, done: bool = False, title: str = "") -> race_live.Live:
        new = {}
        for k, c in curves.items():
            i = sent.get(k, 0)
            new[k] = (c["step"][i:], c["loss"][i:], c["grad_norm"][i:])
            sent[k] = len(c["step"])
        plain = status.replace("**", "").replace("  \n", "\n")
        return race_live.Live(live, plain, new, title=title, done=done, owner=session)

    t0 = time.perf_counter()
    updates, figures = Cadence(LIVE_EVERY_S if live else UPDATE_EVERY_S), Cadence(FIGURE_EVERY_S)
    stream = service.race_stream(key, cfg, session, heartbeat_s=UPDATE_EVERY_S)
    title = f"{key}: LoRA vs PiSSA (r {rank})"
    updates.due()
    figures.due()
    if live:
        yield race_live.Live(live, "starting…", title=title, start=True, owner=session)
        yield None, "", None, None  # the last race's results go (the page takes the last two)
    else:
        yield race_figure(curves, title), "starting…", None, None  # clears the last race's results
    setup, drawn = "", 0
    try:
        for ev in stream:
            if ev.get("done"):
                settings = ev["summary"]["settings"]
                title = (f"{key} · task {settings['task']} · r {settings['rank']} · alpha "
                         f"{settings['alpha']:g} · lr {settings['lr']:g}")
                status = _status(curves, ev, time.perf_counter() - t0, total)
                # the client hears that the race is over before the exports are drawn and written
                # (a loaded machine takes a second or more over the PNG)
                if live:
                    yield to_page(status, done=True, title=title)
                else:
                    updates.wait()
                    yield gr.skip(), status, gr.skip(), gr.skip()
                folder = _export_dir()
                png = folder / export_name("pissa-race", key, ext="png")
                _race_png(curves, png, title)
                data = {"summary": ev["summary"], "stopped": ev["stopped"],
                        "curves": [{"method": m, "seed": s, **c} for (m, s), c in sorted(curves.items())]}
                files = [_write_json(folder, export_name("pissa-race", key, ext="json"), data), str(png)]
                if live:  # drawn by the live view
                    yield None, status, ev["summary"], files
                    return
                updates.wait()
                yield race_figure(curves, title), status, ev["summary"], files
                return
            if ev.get("setup"):
                setup = f"preparing run {ev['setup']}/{ev['of']}"
            elif not ev.get("heartbeat"):
                c = curves.setdefault((ev["method"], ev["seed"]), {"step": [], "loss": [], "grad_norm": []})
                c["step"].append(ev["step"])
                c["loss"].append(ev["loss"])
                c["grad_norm"].append(ev["grad_norm"])
            if not updates.due():
                continue  # coalesced into the next update
            now = time.perf_counter() - t0
            if curves:
                status = _status(curves, None, now, total)
            else:
                status = f"{setup or 'loading the model and building the runs'}… ({now:.1f} s)"
            if live:
                yield to_page(status, title=title)
                continue
            steps_now = sum(len(c["step"]) for c in curves.values())
            fig = gr.skip()
            if steps_now > drawn and figures.due():
                fig, drawn = race_figure(curves, title), steps_now
            yield fig, status, gr.skip(), gr.skip()
    except (service.ServiceError, FloatingPointError, ValueError) as e:
        fail(str(e))
    finally:
        stream.close()  # ends the worker and forgets this session's stop flag


def stop_race(request: gr.Request = None):
    """The API's Stop (the page's goes through its live view: components.race_live.stop)."""
    return race_live.stop_session(getattr(request, "session_hash", None) or "local")


# --- 4. conversion ------------------------------------------------------------------------------
@gpu(duration=120)
def convert(key, rank, steps, layer=None, progress=gr.Progress()):
    if not key:
        fail("Pick a model first.")
    if not layer:
        fail("Pick a layer first.")
    progress(0.2, desc="fine-tuning with PiSSA, then converting")
    r = _call(service.conversion_demo, key, _call(bounds.check, bounds.PISSA_RANK, rank),
              _call(bounds.check, bounds.PISSA_CONVERT_STEPS, steps), layer=layer)
    return conversion_md(r), r


# --- layout -------------------------------------------------------------------------------------
def build(ctx) -> None:
    # Presenter view (body.wb-presenter, components.common): the plain caption replaces the
    # explanation, the spectrum and the race curves are the key figures, expert controls are hidden.
    gr.HTML(EXPLAIN, elem_classes=["wb-advanced"])
    gr.HTML(PRESENTER_CAPTION, elem_classes=["wb-presenter-only", "wb-lead"])
    listed = service.listed(ctx.source)
    default = listed[0].path_or_id if listed else None
    # Only a zoo model is loaded while the page is built; a hub checkpoint loads on first use.
    prefill = default and service.preset_for(default).source == "zoo"
    # a hub checkpoint's layers come from its config (no weights): the list is never empty at start
    layers = service.layer_names(default) if prefill else (service.config_layer_names(default) if default else [])
    layer0 = next((n for n in layers if n.endswith("fc2") or n.endswith("q_proj")), layers[0] if layers else None)
    with gr.Row():
        # the zoo, the papers' checkpoints, or your own model typed in (any model with linear layers)
        model, _ = model_picker(listed, "adapters", elem_id="pissa-model", value=default, takes="language model", scale=2)
        with gr.Column(scale=2, min_width=200):
            # custom values: a deep link may name a layer of another model than the default one
            layer = gr.Dropdown(layers, value=layer0, label="linear layer", elem_id="pissa-layer",
                                allow_custom_value=True)
            list_layers = gr.Button("List the model's layers", size="sm", elem_id="pissa-list-layers")
        rank = bounded_slider(bounds.PISSA_RANK, value=8, step=1, label="rank r", elem_id="pissa-rank", scale=2,
                              elem_classes=["wb-advanced"])
        init = checked_radio("init", [(INIT_LABELS[i], i) for i in bounds.PISSA_INITS],
                             value="pissa", label="PiSSA init (peft)", elem_id="pissa-init", scale=2,
                             elem_classes=["wb-advanced"])

    gr.Markdown("### 1 · Spectrum and the PiSSA split")
    with gr.Row():
        analyse_btn = gr.Button("Analyse layer", variant="primary", elem_id="pissa-analyse", scale=2)
        pin_btn = gr.Button("Pin this result", size="sm", elem_id="pissa-pin", scale=1)
        unpin_btn = gr.Button("Clear pin", size="sm", elem_id="pissa-unpin", scale=1)
    pin_md = gr.Markdown(elem_id="pissa-pin-msg", elem_classes=["wb-muted"])
    with gr.Row():
        spec_plot = gr.Plot(label="spectrum", elem_id="pissa-spectrum", elem_classes=["wb-keyfig", "wb-keyfirst"])
        hist_plot = gr.Plot(label="histograms", elem_id="pissa-hist", elem_classes=["wb-advanced"])
    stats = gr.Markdown(elem_id="pissa-stats", elem_classes=["wb-advanced"])
    analysis_files = gr.File(label="export (JSON, PNG)", file_count="multiple", elem_id="pissa-analysis-files")
    shown = gr.State(None)  # the analysis on screen (describe_analysis: numbers only)
    pinned = gr.State(None)  # a pinned analysis, drawn over the next ones on the same axes

    gr.Markdown("### 2 · Quantization error: QLoRA vs LoftQ vs QPiSSA (NF4, block 64)")
    gr.HTML("<div class='wb-explain'>Each method stores a 4-bit base Q plus a rank-r adapter AB. "
            "QLoRA: Q = nf4(W), no correction. LoftQ: quantize W, fit AB to the error (iterated). "
            "QPiSSA: take AB = principal part of W first, quantize only the narrower W<sub>res</sub>. "
            "Ratio = 1 − ‖W − (Q + AB)‖<sub>*</sub> / ‖W − nf4(W)‖<sub>*</sub> (nuclear norm; higher is "
            "better). The heatmap sweeps the rank.</div>")
    with gr.Row():
        heat_method = gr.Dropdown(["qpissa-1", "qpissa-5", "loftq-1", "loftq-5"], value="qpissa-1",
                                  label="heatmap method", elem_id="pissa-heat-method", scale=1,
                                  elem_classes=["wb-advanced"])
        errors_btn = gr.Button("Compute error table", variant="primary", elem_id="pissa-errors", scale=2)
    error_md = gr.Markdown(elem_id="pissa-error-summary")
    error_df = gr.Dataframe(headers=ERROR_COLUMNS, interactive=False, elem_id="pissa-error-table", wrap=True)
    with gr.Row():
        bars_plot = gr.Plot(label="ratios at r", elem_id="pissa-bars")
        heat_plot = gr.Plot(label="layers × rank", elem_id="pissa-heatmap")
    error_files = gr.File(label="export (JSON, CSV)", file_count="multiple", elem_id="pissa-error-files")

    gr.Markdown("### 3 · The race: LoRA vs PiSSA fine-tuning, live")
    gr.HTML("<div class='wb-explain'>Each run fine-tunes a private copy of the model on a new task "
            "(digits toy: the even digits the MLP never saw; LM: “how many more … does A have?”) with "
            "the same lr, rank and alpha; only the initialisation differs. Loss and gradient norm stream "
            "as they are computed; line style = seed. Stop ends the race after the current step.</div>")
    with gr.Row():
        methods = gr.CheckboxGroup([("LoRA", "lora"), ("PiSSA", "pissa"), ("full fine-tuning", "full")],
                                   value=["lora", "pissa"], label="methods", elem_id="pissa-methods", scale=2,
                                   elem_classes=["wb-advanced"])
        seeds = bounded_slider(bounds.PISSA_SEEDS, value=3, step=1, label="seeds", elem_id="pissa-seeds", scale=1,
                               elem_classes=["wb-advanced"])
        steps = bounded_slider(bounds.PISSA_STEPS, value=100, step=10, label="steps", elem_id="pissa-steps",
                               scale=1)
        lr = CheckedNumber(value=0, minimum=bounds.PISSA_LR.lo, maximum=bounds.PISSA_LR.hi, label="learning rate (0 = task default)",
                           elem_id="pissa-lr", scale=1, elem_classes=["wb-advanced"])
    with gr.Row(elem_classes=["wb-keyfirst"]):
        start = gr.Button("Start race", variant="primary", elem_id="pissa-start")
        stop = gr.Button("Stop", variant="stop", elem_id="pissa-stop")
    # the page's race is drawn here, live and finished, with its status (components.race_live)
    live_view = race_live.live_view(elem_id="pissa-race-live", elem_classes=["wb-keyfig", "wb-keyfirst"])
    # the API's race streams its figure and status into these; the page never shows them
    race_plot = gr.Plot(label="race", elem_id="pissa-race", visible=False)
    race_status = gr.Markdown(elem_id="pissa-race-status", visible=False)
    with gr.Row():
        race_summary = gr.JSON(label="summary", elem_id="pissa-race-summary", open=False)
        race_files = gr.File(label="export (JSON, PNG)", file_count="multiple", elem_id="pissa-race-files")

    gr.Markdown("### 4 · PiSSA → LoRA conversion")
    gr.HTML("<div class='wb-explain'>A PiSSA adapter lives on W<sub>res</sub>, not on W. peft can "
            "rewrite the fine-tuned PiSSA adapter as a plain LoRA of rank 2r on the original W "
            "(ΔW = B′A′ − BA), so it can be shared like any LoRA. This fine-tunes the chosen layer briefly "
            "with PiSSA, converts, and compares the two models' outputs.</div>")
    with gr.Row():
        conv_steps = bounded_slider(bounds.PISSA_CONVERT_STEPS, value=20, step=1,
                                    label="PiSSA steps before converting", elem_id="pissa-conv-steps", scale=2)
        conv_btn = gr.Button("Fine-tune, convert and compare", variant="primary", elem_id="pissa-convert",
                             scale=1)
    conv_md = gr.Markdown(elem_id="pissa-convert-result")
    conv_json = gr.JSON(label="conversion check", open=False, elem_id="pissa-convert-json")

    # a refused pick leaves the layer list and rank as they were (the reason is the toast, no badges)
    keep_on_failure(model.change(on_model_change, inputs=model, outputs=[layer, rank],
                                 **model_event(api_name="layers")), [layer, rank])
    stale = [spec_plot, hist_plot, stats, analysis_files, error_df, bars_plot, heat_plot, error_md,
             error_files, race_plot, race_status, race_summary, race_files, conv_md, conv_json, shown]
    # no stale results after the user picks another model (a restored link sets results of its own)
    model.input(lambda: [None] * len(stale), outputs=stale, api_visibility="private")
    model.input(None, js="() => { window.wbRaceClear?.(); }", api_visibility="private")
    keep_on_failure(list_layers.click(on_model_change, inputs=model, outputs=[layer, rank],
                                      **model_event(api_visibility="private")), [layer, rank])
    # A refused value (checked inputs) or a failed computation leaves the last good view as it was,
    # without Gradio's Error badge: the message is the toast (components.inputs.keep_on_failure).
    analysis_out = [spec_plot, hist_plot, stats, analysis_files, shown]
    keep_on_failure(analyse_btn.click(analyse, inputs=[model, layer, rank, init, pinned], outputs=analysis_out,
                                      **model_event(api_name="analyse")), analysis_out)
    # opened, the tab shows the default layer's analysis (a link with settings of this tab: its own)
    on_first_open(ctx, analyse, [model, layer, rank, init, pinned], analysis_out, link_prefix="pissa-")
    error_out = [error_df, bars_plot, heat_plot, error_md, error_files]
    keep_on_failure(errors_btn.click(errors, inputs=[model, rank, heat_method], outputs=error_out,
                                     **model_event(api_name="errors")), error_out)
    race_out = [race_plot, race_status, race_summary, race_files]
    race_in = [model, methods, seeds, steps, rank, lr]
    # as few outputs as can be: each output's status is refreshed by the front end at the start and end
    page_out = [race_summary, race_files]
    keep_on_failure(start.click(race_in_page, inputs=race_in + [live_view], outputs=page_out,
                                show_progress="hidden", **model_event(api_visibility="private")), page_out)
    # the API's race streams its status and figure as before (a button the page does not show)
    gr.Button(visible=False, elem_id="pissa-race-api").click(run_race, inputs=race_in, outputs=race_out,
                                                             **model_event(api_name="race"))

    # A number typed past a slider's range: components.range_guard refuses it in the browser.

    # Compare (a pinned datapoint): the pin is the shown analysis's numbers; no model work.
    def pin(current):
        if not current:
            fail("Nothing to pin yet: analyse a layer first.")
        return current, spectrum_figure(current, current), f"{pin_label(current)} (dotted in the spectrum)"

    def unpin(current):
        return None, (spectrum_figure(current) if current else gr.skip()), ""

    pin_btn.click(pin, shown, [pinned, spec_plot, pin_md], api_visibility="private", show_progress="hidden")
    unpin_btn.click(unpin, shown, [pinned, spec_plot, pin_md], api_visibility="private", show_progress="hidden")
    # Stop goes straight to the server, not through the queue behind other requests, and with no
    # progress overlay: its answer is the message
    # The page's Stop is handled by the live view (a server function: a Gradio event would make the
    # front end refresh every component's status); the API's goes to the same place
    stop_api = gr.Markdown(visible=False)
    gr.Button(visible=False, elem_id="pissa-stop-api").click(stop_race, outputs=stop_api, api_name="race_stop",
                                                             queue=False, show_progress="hidden")
    keep_on_failure(conv_btn.click(convert, inputs=[model, rank, conv_steps, layer], outputs=[conv_md, conv_json],
                                   **model_event(api_name="convert")), [conv_md, conv_json])
