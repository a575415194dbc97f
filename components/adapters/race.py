"""The Adapters tab's race: LoRA against PiSSA (and full) fine-tuning, streamed to API clients at a
pace a browser keeps up with and to the page through its live view (components.adapters.race_live)."""

from __future__ import annotations

import time
from pathlib import Path

import gradio as gr
import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from backend.core import bounds
from backend.pissa import service
from backend.pissa.race import RACE_METHODS, RaceConfig
from components.adapters import race_live
from components.adapters.common import COLORS, NAMES, _call, _exported, _write_json, export_name
from components.common import fail, themed
from components.mpl import pyplot


DASHES = ["solid", "dash", "dot", "dashdot"]
# The race streams at a pace a browser keeps up with on a busy machine: every update makes the page
# redraw, and a figure of nine runs costs it 30-300 ms, so steps are coalesced into at most four
# updates a second, and the figure goes out at most once a second (the status line in between).
UPDATE_EVERY_S = 0.25
# the page's live view is handed its progress in the server process, which costs no browser work:
# fresher, so that each of its polls finds the latest steps
LIVE_EVERY_S = 0.15
FIGURE_EVERY_S = 1.0
STOP_WAIT_S = race_live.STOP_WAIT_S
MAX_PLOT_POINTS = 150


def _thin(n: int, most: int = MAX_PLOT_POINTS) -> list[int]:
    """Indices of at most `most` evenly spaced points, the last one included (display only; the
    exports keep every step)."""
    if n <= most:
        return list(range(n))
    stride = -(-n // most)
    idx = list(range(0, n, stride))
    return idx if idx[-1] == n - 1 else idx + [n - 1]


def race_figure(curves: dict, title: str = "") -> go.Figure:
    fig = make_subplots(rows=1, cols=2, subplot_titles=("training loss", "gradient norm"), horizontal_spacing=0.08)
    seeds = sorted({s for _, s in curves})
    for (method, seed), c in sorted(curves.items()):
        dash = DASHES[seeds.index(seed) % len(DASHES)]
        name = f"{NAMES.get(method, method)} · seed {seed}"
        keep = _thin(len(c["step"]))
        for col, k in ((1, "loss"), (2, "grad_norm")):
            fig.add_trace(
                go.Scatter(
                    x=[c["step"][i] for i in keep],
                    y=[c[k][i] for i in keep],
                    mode="lines",
                    name=name,
                    legendgroup=name,
                    showlegend=col == 1,
                    line=dict(color=COLORS.get(method), dash=dash, width=2),
                ),
                row=1,
                col=col,
            )
    fig.update_xaxes(title_text="step")
    fig.update_yaxes(type="log", row=1, col=2)
    fig.update_layout(
        title=title or "LoRA vs PiSSA",
        height=400,
        margin=dict(l=50, r=20, t=60, b=45),
        legend=dict(orientation="h", yref="container", y=0, yanchor="bottom"),
        uirevision="race",
    )
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
    for (m, _seed), c in curves.items():
        if c["loss"]:
            latest.setdefault(m, []).append(float(np.mean(c["loss"][-5:])))
    if latest:
        lines.append(" · ".join(f"{NAMES.get(m, m)}: loss {np.mean(v):.3f}" for m, v in sorted(latest.items())))
    if done:
        s = done["summary"]
        run, planned = s.get("steps_run", 0), s.get("steps_planned", 0)
        cut = bool(done.get("stopped")) and run < planned
        if cut:  # a stopped race compares only the steps every run completed, and says so
            lines.append(
                f"Race **stopped** at step {run} of {planned}" + (": nothing to compare yet." if not run else ".")
            )
        if "pissa_beats_lora" in s and run:
            w = s["pissa_beats_lora"]
            when = f"at step {run} (of the {planned} planned)" if cut else "at the end"
            lines.append(
                f"PiSSA's loss is below LoRA's {when} for **{w['wins']}/{w['seeds']}** seeds "
                f"(same lr {s['settings']['lr']:g}, r {s['settings']['rank']}, "
                f"alpha {s['settings']['alpha']:g})."
            )
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
    (components.adapters.race_live, `page` its id) instead of through Gradio's front end; Gradio gets two
    updates of the summary and exports: cleared at the start, filled at the end."""
    for item in _race(key, methods, n_seeds, steps, rank, lr, request, live=race_live.page_of(page, request)):
        yield item if isinstance(item, race_live.Live) else item[2:]


race_in_page.main_process = race_live.relayed  # components.serving.guard: outside the ZeroGPU mark


def _race(key, methods, n_seeds, steps, rank, lr, request, live: str):
    """The race's outputs; with `live` (a page's id) its progress goes to that page's live view."""
    if not key:
        fail("Pick a model first.")
    methods = [m for m in RACE_METHODS if m in (methods or [])]
    if not methods:
        fail("Tick at least one method (LoRA, PiSSA, full fine-tuning).")
    n_seeds, steps = _call(bounds.check, bounds.PISSA_SEEDS, n_seeds), _call(bounds.check, bounds.PISSA_STEPS, steps)
    rank, lr = _call(bounds.check, bounds.PISSA_RANK, rank), _call(bounds.check, bounds.PISSA_LR, lr or 0)
    cfg = RaceConfig(methods=tuple(methods), seeds=tuple(range(n_seeds)), steps=steps, lr=lr or None, rank=rank)
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
                title = (
                    f"{key} · task {settings['task']} · r {settings['rank']} · alpha "
                    f"{settings['alpha']:g} · lr {settings['lr']:g}"
                )
                status = _status(curves, ev, time.perf_counter() - t0, total)
                # the client hears that the race is over before the exports are drawn and written
                # (a loaded machine takes a second or more over the PNG)
                if live:
                    yield to_page(status, done=True, title=title)
                else:
                    updates.wait()
                    yield gr.skip(), status, gr.skip(), gr.skip()
                data = {
                    "summary": ev["summary"],
                    "stopped": ev["stopped"],
                    "curves": [{"method": m, "seed": s, **c} for (m, s), c in sorted(curves.items())],
                }

                def write(folder):
                    png = folder / export_name("pissa-race", key, ext="png")
                    _race_png(curves, png, title)
                    return [_write_json(folder, export_name("pissa-race", key, ext="json"), data), str(png)]

                files = _exported(write)
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
    """The API's Stop (the page's goes through its live view: components.adapters.race_live.stop)."""
    return race_live.stop_session(getattr(request, "session_hash", None) or "local")
