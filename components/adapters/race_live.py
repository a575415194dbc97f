"""The race's live view in the page: curves drawn as a small SVG that the page fetches itself.

Every update a Gradio event streams makes Gradio's front end refresh the loading status of every
component that has one, taking a deep copy (`structuredClone`) of each value, figures included, and
it recorded each update in the browser's run history: with a figure a second and a status line
four times a second, that kept a browser's main thread busy for seconds at a time. So the race in
the page streams nothing through Gradio: the handler hands its progress to this module (`relay`,
outside the ZeroGPU mark, in the server process), and the page asks for it four times a second
through a server function of the live view's gr.HTML (`progress`), receiving one SVG string and one
status line, which it writes into its own element. The finished race stays drawn there, with a hover
readout of every run's values at the step under the pointer: a Plotly figure sent through Gradio at
the end cost the page one more of those refreshes. The API's `/race` still streams as before.
"""

from __future__ import annotations

import functools
import html
import itertools
import json
import math
import threading
import time
from dataclasses import dataclass, field

import gradio as gr

from backend.core import colors as C
from backend.pissa import service

COLORS = {"lora": C.LORA, "pissa": C.PISSA, "full": C.NEUTRAL}
NAMES = {"lora": "LoRA", "pissa": "PiSSA", "full": "full fine-tuning"}
DASHES = ["", "7 4", "2 3", "7 3 2 3"]  # seed 0, 1, 2, 3: the figure's solid, dash, dot, dashdot
MAX_POINTS = 150  # per curve in the drawing (the exports keep every step)
POLL_MS = 250
KEEP_S = 600.0  # a finished race's view stays this long for a page that asks late
# Stop answers once the race has ended, or, when a step takes longer, says it is finishing that
# step: either way within a second of the click
STOP_WAIT_S = 0.8


@dataclass
class Live:
    """One update of a race for its page: new points per run since the last update, the status."""

    session: str  # the page's id (page_of)
    status: str
    points: dict = field(default_factory=dict)  # (method, seed) -> (steps, losses, grad_norms)
    title: str = ""
    start: bool = False  # a new race: forget the last one's curves
    done: bool = False
    owner: str = ""  # the Gradio session that runs it (what Stop knows)


@dataclass
class _Record:
    run: int
    owner: str = ""
    title: str = ""
    status: str = ""
    curves: dict = field(default_factory=dict)
    done: bool = False
    version: int = 0
    updated: float = field(default_factory=time.monotonic)
    svg: tuple = (-1, "", {})  # (version, drawing, hover data) last drawn


_RUNS = itertools.count(1)
_LOCK = threading.Lock()
_RECORDS: dict[str, _Record] = {}


def take(item) -> bool:
    """Keep a Live update for its page (True), or leave anything else to Gradio (False)."""
    if not isinstance(item, Live):
        return False
    now = time.monotonic()
    with _LOCK:
        for s in [s for s, r in _RECORDS.items() if r.done and now - r.updated > KEEP_S]:
            del _RECORDS[s]
        rec = _RECORDS.get(item.session)
        if rec is None or item.start:
            rec = _RECORDS[item.session] = _Record(run=next(_RUNS), owner=item.owner)
        for key, (steps, losses, grads) in item.points.items():
            c = rec.curves.setdefault(tuple(key), ([], [], []))
            c[0].extend(steps)
            c[1].extend(losses)
            c[2].extend(grads)
        rec.status, rec.title = item.status, item.title or rec.title
        rec.done = rec.done or item.done
        rec.version += 1
        rec.updated = now
    return True


def relayed(handler):
    """The page's race handler, in the server process: its Live updates go to `take`, the rest
    (the first and the final outputs) to Gradio."""

    @functools.wraps(handler)
    def gen(*args, **kwargs):
        inner = handler(*args, **kwargs)
        session = None
        try:
            for item in inner:
                if isinstance(item, Live):
                    session = item.session
                if not take(item):
                    yield item
        finally:
            inner.close()
            if session is not None:  # a race that failed or was abandoned is over for its page too
                _end(session, "The race did not finish: see the message.")

    return gen


def _end(session: str, status: str) -> None:
    with _LOCK:
        rec = _RECORDS.get(session)
        if rec is not None and not rec.done:
            rec.done, rec.status = True, status
            rec.version += 1


def finished_steps(owner: str) -> tuple[int, bool] | None:
    """(steps its page was shown, whether it is over) of the last race of a Gradio session, if any."""
    with _LOCK:
        mine = [r for r in _RECORDS.values() if r.owner == owner]
        if not mine:
            return None
        rec = max(mine, key=lambda r: r.run)
        return sum(len(c[0]) for c in rec.curves.values()), rec.done


def progress(query: str = "") -> dict:
    """What the page's live view asks for, as "PAGE VERSION": the race of that page (a random id the
    view made when it loaded: a server function does not learn the Gradio session), drawn, unless
    the view already has that version ("run.version"). Never raises: the view polls quietly."""
    page, _, since = str(query).partition(" ")
    with _LOCK:
        rec = _RECORDS.get(page)
        if rec is None or not page:
            return {"run": 0, "version": 0, "state": "idle"}
        out = {"run": rec.run, "version": rec.version, "state": "done" if rec.done else "running"}
        if since == f"{rec.run}.{rec.version}":
            return out
        if rec.svg[0] != rec.version:
            rec.svg = (rec.version, svg(rec.curves, rec.title), hover_data(rec.curves))
        return {**out, "status": rec.status, "svg": rec.svg[1], "hover": rec.svg[2]}


def stop_session(session: str) -> str:
    """Stop a Gradio session's race; the answer comes once it has ended (or says it is finishing its
    step), within STOP_WAIT_S, and says what happened."""
    t0 = time.perf_counter()
    state = service.request_stop(session, wait_s=STOP_WAIT_S)
    if state == "idle":
        last = finished_steps(session)
        if last and last[1]:
            return f"No race is running: the last one had already ended, after {last[0]} steps."
        return "No race is running: nothing to stop."
    if state == "stopped":
        return f"Race stopped, {time.perf_counter() - t0:.1f} s after the request."
    return "Stopping: the race ends as soon as its current training step is done."


def stop(page: str = "") -> str:
    """The page's Stop: the race of that page's session (a server function, not a Gradio event)."""
    with _LOCK:
        rec = _RECORDS.get(str(page))
        owner = rec.owner if rec is not None else None
    return stop_session(owner) if owner else "No race is running: nothing to stop."


# --- drawing ------------------------------------------------------------------------------------
W, H = 1000, 330
PANEL_W, TOP, PLOT_H = 420, 40, 220
LEFTS = (70, 560)


def _thin(n: int, most: int = MAX_POINTS) -> range | list:
    if n <= most:
        return range(n)
    stride = -(-n // most)
    idx = list(range(0, n, stride))
    return idx if idx[-1] == n - 1 else idx + [n - 1]


def _ticks(lo: float, hi: float, log: bool) -> list[float]:
    if log:
        a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
        return [10.0**e for e in range(a, b + 1)]
    span = (hi - lo) or 1.0
    step = 10 ** math.floor(math.log10(span / 4))
    step = next(m * step for m in (1, 2, 2.5, 5, 10) if span / (m * step) <= 5)
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step + 1e-9) + 1)]


def _fmt(v: float) -> str:
    return f"{v:.3g}" if 1e-3 <= abs(v) < 1e4 or v == 0 else f"{v:.0e}"


def svg(curves: dict, title: str = "") -> str:
    """Loss (linear) and gradient norm (log) of every run against the step, as one SVG string in
    the tab's colours: method = colour, seed = dash pattern, as in the race's plotly figure."""
    parts = [
        f"<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 {W} {H}' class='wb-race-svg' "
        f"role='img' aria-label='{html.escape(title or 'race', quote=True)}: training loss and gradient "
        f"norm per step' font-size='12' fill='currentColor'>"
    ]
    if title:
        parts.append(f"<text x='{W / 2}' y='16' text-anchor='middle' font-size='14'>{html.escape(title)}</text>")
    runs = sorted(curves)
    last = max((c[0][-1] for c in curves.values() if c[0]), default=0)
    seeds = sorted({s for _, s in runs})
    for panel, (name, col, log) in enumerate((("training loss", 1, False), ("gradient norm (log)", 2, True))):
        left = LEFTS[panel]
        values = [v for c in curves.values() for v in c[col] if math.isfinite(v) and (v > 0 or not log)]
        parts.append(f"<text x='{left + PANEL_W / 2}' y='{TOP - 8}' text-anchor='middle'>{name}</text>")
        # the pointer's area: the view reads the values at its step (hover_data) and draws a guide
        parts.append(
            f"<rect x='{left}' y='{TOP}' width='{PANEL_W}' height='{PLOT_H}' fill='transparent' "
            "pointer-events='all' class='wb-race-panel' "
            "stroke='currentColor' stroke-opacity='0.35'/>"
        )
        if not values or last < 1:
            continue
        lo, hi = min(values), max(values)
        if log:
            lo, hi = math.log10(lo), math.log10(hi)
        if hi - lo < 1e-9:
            lo, hi = lo - 0.5, hi + 0.5
        if not log:
            lo = min(lo, 0.0)

        def y_of(v, lo=lo, hi=hi, log=log):
            v = math.log10(v) if log else v
            return TOP + PLOT_H * (1 - (v - lo) / (hi - lo))

        def x_of(step, left=left):
            return left + PANEL_W * (step / last)

        for t in _ticks(10**lo if log else lo, 10**hi if log else hi, log):
            y = y_of(t)
            if TOP - 0.5 <= y <= TOP + PLOT_H + 0.5:
                parts.append(
                    f"<line x1='{left}' x2='{left + PANEL_W}' y1='{y:.1f}' y2='{y:.1f}' "
                    "stroke='currentColor' stroke-opacity='0.12'/>"
                    f"<text x='{left - 6}' y='{y + 4:.1f}' text-anchor='end'>{_fmt(t)}</text>"
                )
        for t in _ticks(0, last, False):
            x = x_of(t)
            parts.append(f"<text x='{x:.1f}' y='{TOP + PLOT_H + 16}' text-anchor='middle'>{_fmt(t)}</text>")
        parts.append(f"<text x='{left + PANEL_W / 2}' y='{TOP + PLOT_H + 32}' text-anchor='middle'>step</text>")
        for method, seed in runs:
            steps, ys = curves[(method, seed)][0], curves[(method, seed)][col]
            pts = " ".join(
                f"{x_of(steps[i]):.1f},{y_of(ys[i]):.1f}"
                for i in _thin(len(steps))
                if math.isfinite(ys[i]) and (ys[i] > 0 or not log)
            )
            dash = DASHES[seeds.index(seed) % len(DASHES)]
            parts.append(
                f"<polyline points='{pts}' fill='none' stroke='{COLORS.get(method, C.NEUTRAL)}' "
                f"stroke-width='2'{f' stroke-dasharray={chr(39)}{dash}{chr(39)}' if dash else ''}>"
                f"<title>{html.escape(NAMES.get(method, method))} · seed {seed}</title></polyline>"
            )
    x = 70
    for method, seed in runs:
        label = f"{NAMES.get(method, method)} · seed {seed}"
        dash = DASHES[seeds.index(seed) % len(DASHES)]
        parts.append(
            f"<line x1='{x}' x2='{x + 28}' y1='{H - 14}' y2='{H - 14}' stroke-width='2' "
            f"stroke='{COLORS.get(method, C.NEUTRAL)}'{f' stroke-dasharray={chr(39)}{dash}{chr(39)}' if dash else ''}/>"
            f"<text x='{x + 34}' y='{H - 10}'>{html.escape(label)}</text>"
        )
        x += 46 + 7 * len(label)
    parts.append(
        f"<line class='wb-race-guide' y1='{TOP}' y2='{TOP + PLOT_H}' x1='0' x2='0' "
        "stroke='currentColor' stroke-opacity='0.5' visibility='hidden' pointer-events='none'/>"
    )
    parts.append("</svg>")
    return "".join(parts)


def hover_data(curves: dict) -> dict:
    """What the view's hover readout needs: the plot's geometry and every run's values at the steps
    drawn (the same thinned points as the curves)."""
    last = max((c[0][-1] for c in curves.values() if c[0]), default=0)
    out = []
    for method, seed in sorted(curves):
        steps, losses, grads = curves[(method, seed)]
        keep = _thin(len(steps))
        out.append(
            {
                "name": f"{NAMES.get(method, method)} · seed {seed}",
                "color": COLORS.get(method, C.NEUTRAL),
                "step": [steps[i] for i in keep],
                "loss": [losses[i] if math.isfinite(losses[i]) else None for i in keep],
                "grad": [grads[i] if math.isfinite(grads[i]) else None for i in keep],
            }
        )
    return {"last": last, "lefts": list(LEFTS), "width": PANEL_W, "top": TOP, "height": PLOT_H, "runs": out}


# --- the page -----------------------------------------------------------------------------------
TEMPLATE = (
    "<div class='wb-race-stop' id='pissa-stop-msg' role='status'></div>"
    "<div class='wb-race-live' aria-live='polite'><div class='wb-race-live-status'></div>"
    "<div class='wb-race-live-plot'></div><div class='wb-race-hover' hidden></div></div>"
)
# Started by the Start button, it asks for the session's race every POLL_MS until that race is over
# (up to two minutes for a race still queued behind other users' work); Stop is acknowledged at once.
# The last race stays drawn, with a readout of the values at the step under the pointer.
JS = """
const view = element.querySelector('.wb-race-live');
const status = view.querySelector('.wb-race-live-status');
const plot = view.querySelector('.wb-race-live-plot');
const tip = view.querySelector('.wb-race-hover');
const said = element.querySelector('.wb-race-stop');
// kept on the page, not in this mount: Gradio may mount the view again while a race runs
const st = (window.wbRaceState ||= {have: '', seen: 0, baseline: 0, since: -1e9, waiting: false, last: null,
  page: (crypto.randomUUID ? crypto.randomUUID() : String(Math.random()).slice(2) + String(Date.now()))});
// this page's id: the race handler gets it as this component's value and files its progress under it
if (props.value !== st.page) props.value = st.page;
let timer = null;
function show(r) {
  if (r.svg !== undefined) { st.last = r; plot.innerHTML = r.svg; status.textContent = r.status; }
  view.style.display = '';
  view.dataset.state = r.state;
}
// before any race: the empty axes and what Start does, not an empty box
function idle() {
  plot.innerHTML = __IDLE_SVG__; status.textContent = __IDLE_STATUS__;
  view.style.display = ''; view.dataset.state = 'idle';
}
if (st.last) show(st.last); else idle();
async function poll() {
  timer = null;
  let r = null;
  try { r = await server.progress(props.value + ' ' + (element.isConnected ? st.have : '')); } catch (e) { r = null; }
  if (!element.isConnected) return;  // a newer mount polls now
  if (r && r.run > st.baseline) {
    st.seen = Math.max(st.seen, r.run);
    st.have = r.run + '.' + r.version;
    show(r);
    if (r.state === 'done') { st.waiting = false; return; }
  } else if (performance.now() - st.since > 120000) { st.waiting = false; return; }
  timer = setTimeout(poll, __POLL__);
}
if (st.waiting) { st.have = ''; timer = setTimeout(poll, 0); }  // mounted again mid-race
// the readout: every run's values at the drawn step nearest the pointer
function nearest(xs, x) {
  let lo = 0, hi = xs.length - 1;
  while (hi - lo > 1) { const mid = (lo + hi) >> 1; if (xs[mid] <= x) lo = mid; else hi = mid; }
  return Math.abs(xs[hi] - x) < Math.abs(xs[lo] - x) ? hi : lo;
}
const fmt = (v) => v === null || v === undefined ? '–' : Math.abs(v) >= 1e-3 && Math.abs(v) < 1e4 ? v.toPrecision(4) : v.toExponential(2);
function hover(e) {
  const svg = plot.querySelector('svg'), h = st.last && st.last.hover;
  const guide = svg && svg.querySelector('.wb-race-guide');
  if (!svg || !h || !h.last || !h.runs.length || !e.target.closest('.wb-race-panel')) {
    tip.hidden = true; if (guide) guide.setAttribute('visibility', 'hidden'); return;
  }
  const pt = svg.createSVGPoint(); pt.x = e.clientX; pt.y = e.clientY;
  const p = pt.matrixTransform(svg.getScreenCTM().inverse());
  const left = h.lefts.find((l) => p.x >= l && p.x <= l + h.width);
  if (left === undefined) return;
  const want = (p.x - left) / h.width * h.last;
  const first = h.runs.find((r) => r.step.length);
  const step = first.step[nearest(first.step, want)];
  const rows = h.runs.filter((r) => r.step.length).map((r) => {
    const i = nearest(r.step, step);
    return `<div><span style="color:${r.color}">━</span> ${r.name}: loss ${fmt(r.loss[i])} · grad norm ${fmt(r.grad[i])}</div>`;
  });
  tip.innerHTML = `<b>step ${step}</b>` + rows.join('');
  tip.hidden = false;
  const box = view.getBoundingClientRect();
  const x = e.clientX - box.left;
  tip.style.left = (x > box.width / 2 ? x - tip.offsetWidth - 14 : x + 14) + 'px';
  tip.style.top = (e.clientY - box.top + 14) + 'px';
  const gx = left + h.width * step / h.last;
  guide.setAttribute('x1', gx); guide.setAttribute('x2', gx); guide.setAttribute('visibility', 'visible');
}
plot.addEventListener('pointermove', hover);
plot.addEventListener('pointerleave', () => {
  tip.hidden = true; plot.querySelector('.wb-race-guide')?.setAttribute('visibility', 'hidden');
});
// another model picked: the last race's view goes with its other results (not a race still running)
window.wbRaceClear = () => {
  if (st.waiting) return;
  st.last = null; said.textContent = ''; tip.hidden = true;
  idle();
};
// one listener per page, however often the view is mounted
window.wbRaceLive?.abort();
window.wbRaceLive = new AbortController();
document.addEventListener('click', (e) => {
  if (e.target.closest('#pissa-start')) {
    props.value = st.page;  // again: Gradio may have set the value back since the mount
    st.baseline = st.seen;
    st.since = performance.now();
    st.waiting = true;
    said.textContent = status.textContent = '';  // the last race's words go; its curves stay till replaced
    if (timer === null) timer = setTimeout(poll, __POLL__);
  } else if (e.target.closest('#pissa-stop')) {
    // acknowledged at once; the server's answer follows when the race has ended (under a second)
    said.textContent = view.dataset.state === 'running' ? 'Stop requested: the race ends after its current step…' : '';
    server.stop(props.value).then((m) => { said.textContent = m; }).catch(() => {});
  }
}, {capture: true, signal: window.wbRaceLive.signal});
""".replace("__POLL__", str(POLL_MS))
IDLE_STATUS = (
    "No race yet: press Start race. LoRA and PiSSA then fine-tune the same model on the same task "
    "from the same data, seed by seed, and their loss and gradient norm are drawn here as they train."
)
JS = JS.replace("__IDLE_SVG__", json.dumps(svg({}))).replace("__IDLE_STATUS__", json.dumps(IDLE_STATUS))
CSS = (
    ".wb-race-stop{color:var(--body-text-color-subdued);font-size:.9em;min-height:1.2em}"
    ".wb-race-live{position:relative}"
    ".wb-race-live-status{font-size:.95em;margin:.2em 0 .4em;white-space:pre-line}"
    ".wb-race-svg{width:100%;height:auto;max-height:420px}"
    ".wb-race-hover{position:absolute;z-index:5;pointer-events:none;font-size:.82em;line-height:1.35;"
    "padding:.35em .55em;border-radius:4px;background:var(--background-fill-primary);"
    "border:1px solid var(--border-color-primary);box-shadow:0 1px 4px rgba(0,0,0,.2);white-space:nowrap}"
)


def live_view(**kwargs) -> gr.HTML:
    """The view; its value is the page's id, an input of the race handler (`page_of`)."""
    return gr.HTML(
        "", html_template=TEMPLATE, js_on_load=JS, css_template=CSS, server_functions=[progress, stop], **kwargs
    )


def page_of(value, request=None) -> str:
    """The id the race's progress is filed under: the page's own (a short token), else the session."""
    value = str(value or "")
    if 8 <= len(value) <= 64 and value.replace("-", "").isalnum():
        return value
    return getattr(request, "session_hash", None) or "local"
