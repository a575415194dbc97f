"""What the session report keeps: per Gradio session, each tab's latest results, the ones the visitor
pinned and the guided tour's steps, as plain text, JSON and small PNGs (never tensors or models).

A tab's result is what one of its handlers returned, converted here once, when it is shown: a
figure becomes its plotly JSON (the same JSON the page drew, so the report's numbers are the tab's),
a table its rows, an HTML or Markdown output its cleaned HTML, an image a PNG. Server paths never
get in: file outputs are skipped and absolute paths in text are cut to their last part.

Session scope as for uploads: records are keyed by the Gradio session hash, dropped when the
session ends (components.serving.visitor's unload, backend.core.sessions.end) or has been idle longer than
WORKBENCH_SESSION_TTL, and bounded in bytes per session (older pins go first).
"""

from __future__ import annotations

import base64
import io
import json
import math
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import gradio as gr
import numpy as np

from backend.core import sessions

MAX_SESSION_BYTES = 40_000_000  # per session, in converted form
MAX_PINS = 10  # per tab
MAX_TOUR_STEPS = 40
MAX_ROWS = 200  # rows of one table
MAX_FIG_POINTS = 120  # a figure's numbers are tabulated up to this many points per trace
MAX_IMAGE_SIDE = 384  # images are embedded at most this large
MAX_TEXT = 5_000


@dataclass
class SessionRecord:
    current: dict[str, dict[str, dict]] = field(default_factory=dict)  # tab → section → result
    pins: dict[str, list[dict]] = field(default_factory=dict)  # tab → pinned results, oldest first
    tour: list[dict] = field(default_factory=list)
    link_values: dict[str, dict[str, Any]] = field(default_factory=dict)  # tab → elem_id → value
    used: set[str] = field(default_factory=set)  # tabs the visitor did something in (not a page load)
    touched: float = field(default_factory=time.time)

    def nbytes(self) -> int:
        items = (
            [r for t in self.current.values() for r in t.values()]
            + [r for ps in self.pins.values() for r in ps]
            + self.tour
        )
        return sum(r.get("_bytes", 0) for r in items)


_LOCK = threading.Lock()
_RECORDS: dict[str, SessionRecord] = {}


def record(sid: str, create: bool = True) -> SessionRecord | None:
    with _LOCK:
        _expire()
        rec = _RECORDS.get(sid)
        if rec is None and create:
            rec = _RECORDS[sid] = SessionRecord()
        if rec is not None:
            rec.touched = time.time()
        return rec


def forget(sid: str, _folder=None) -> None:
    with _LOCK:
        _RECORDS.pop(sid, None)


def sessions_held() -> list[str]:
    with _LOCK:
        return list(_RECORDS)


def _expire() -> None:
    """Records of sessions idle past the session time limit go (a client that never says goodbye)."""
    cutoff = time.time() - sessions.ttl_seconds()
    for sid in [s for s, r in _RECORDS.items() if r.touched < cutoff]:
        del _RECORDS[sid]


sessions.on_end(forget)


def put_result(sid: str, tab: str, section: str, result: dict) -> None:
    result["_bytes"] = len(json.dumps(result, default=str))
    rec = record(sid)
    with _LOCK:
        rec.current.setdefault(tab, {})[section] = result
        _trim(rec)


def put_pin(sid: str, tab: str, section: str, pinned_at: str) -> bool:
    rec = record(sid, create=False)
    if rec is None:
        return False
    with _LOCK:
        cur = rec.current.get(tab, {}).get(section)
        if cur is None:
            return False
        pins = rec.pins.setdefault(tab, [])
        if pins and pins[-1].get("computed_at") == cur.get("computed_at") and pins[-1].get("section") == section:
            return False  # the same result pinned again
        pins.append(dict(cur, pinned_at=pinned_at))
        del pins[:-MAX_PINS]
        _trim(rec)
        return True


def put_tour_step(sid: str, step: dict) -> None:
    step["_bytes"] = len(json.dumps(step, default=str))
    rec = record(sid)
    with _LOCK:
        rec.tour = [s for s in rec.tour if s.get("key") != step.get("key")] + [step]
        del rec.tour[:-MAX_TOUR_STEPS]
        _trim(rec)


def put_link_values(sid: str, tab: str, values: dict[str, Any]) -> None:
    if values:
        rec = record(sid)
        with _LOCK:
            rec.link_values.setdefault(tab, {}).update(values)


def mark_used(sid: str, tab: str | None) -> None:
    if tab:
        rec = record(sid)
        with _LOCK:
            rec.used.add(tab)


def shown(rec: SessionRecord, tab: str, result: dict) -> bool:
    """Whether the visitor looked at a result: one a page load prepared (a tab's default view) counts
    once the page opened on that tab or the visitor did something in it."""
    return not result.get("on_load") or result.get("opened_here") or tab in rec.used


def _trim(rec: SessionRecord) -> None:
    """Over the byte bound: the oldest pins go first, then the tour's oldest steps."""
    while rec.nbytes() > MAX_SESSION_BYTES:
        tabs = [t for t, ps in rec.pins.items() if ps]
        if tabs:
            oldest = min(tabs, key=lambda t: rec.pins[t][0].get("pinned_at", ""))
            rec.pins[oldest].pop(0)
        elif rec.tour:
            rec.tour.pop(0)
        else:
            break


# --------------------------------------------------------------------------- cleaning text and HTML
_DATA_URI = re.compile(r"""data:[^'"\s)]+""")
_ABS_PATH = re.compile(r"(?<![\w.:/~+=-])/(?:[\w.@+-]+/)+[\w.@+-]*")
_WIN_PATH = re.compile(r"\b[A-Za-z]:\\(?:[^\\\s'\"<>]+\\)+[^\\\s'\"<>]*")


def scrub_paths(text: str) -> str:
    """Absolute server paths → their last part ("…/name"); data URIs are left alone."""

    def cut(m: re.Match) -> str:
        last = m.group(0).rstrip("/\\").replace("\\", "/").rsplit("/", 1)[-1]
        return f"…/{last}"

    out, pos = [], 0
    for m in _DATA_URI.finditer(text):
        out.append(_WIN_PATH.sub(cut, _ABS_PATH.sub(cut, text[pos : m.start()])))
        out.append(m.group(0))
        pos = m.end()
    out.append(_WIN_PATH.sub(cut, _ABS_PATH.sub(cut, text[pos:])))
    return "".join(out)


_SCRIPT = re.compile(r"<\s*(script|iframe|object|embed|link|meta|base)\b.*?(</\s*\1\s*>|/?>)", re.I | re.S)
_ON_ATTR = re.compile(r"""\son[a-z]+\s*=\s*("[^"]*"|'[^']*'|[^\s>]+)""", re.I)
_SRC_ATTR = re.compile(r"""\s(src|srcset|href|poster|action)\s*=\s*("([^"]*)"|'([^']*)'|([^\s>]+))""", re.I)
_CSS_URL = re.compile(r"url\(\s*(['\"]?)(?!data:)[^)]*\)", re.I)


def clean_html(text: str) -> str:
    """A tab's HTML for a page that must load nothing and run nothing of its own: scripts and event
    attributes out, every src that is not a data URI out (it would be a request), links kept only to
    http(s) and #anchors, server paths cut."""
    text = _SCRIPT.sub("", str(text))
    text = _ON_ATTR.sub("", text)

    def attr(m: re.Match) -> str:
        name, value = m.group(1).lower(), next(v for v in m.group(3, 4, 5) if v is not None)
        if name in ("src", "srcset", "poster") and value.startswith("data:"):
            return m.group(0)
        if name == "href" and (value.startswith(("http://", "https://", "#"))):
            return m.group(0)
        return ""

    text = _SRC_ATTR.sub(attr, text)
    text = _CSS_URL.sub("none", text)
    return scrub_paths(text)


def plain(text: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", str(text))).strip()


def markdown_html(text: str) -> str:
    from markdown_it import MarkdownIt

    return clean_html(MarkdownIt("commonmark", {"html": True}).enable("table").render(str(text)))


# --------------------------------------------------------------------------- values → report parts
def fmt(v: Any) -> str:
    """A cell as the tab shows it (the shortest repr of a float, as a browser prints the number)."""
    if isinstance(v, (np.generic,)):
        v = v.item()
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else str(v)
    if isinstance(v, (list, tuple)):
        return ", ".join(fmt(x) for x in v)
    if v is None:
        return ""
    return scrub_paths(str(v))[:MAX_TEXT]


def png_b64(img: Any) -> str | None:
    from PIL import Image

    try:
        if isinstance(img, dict):  # Gradio's FileData / ImageData
            img = img.get("path") or img.get("url")
        if isinstance(img, (str, bytes)) and not isinstance(img, np.ndarray):
            im = Image.open(img)
        elif isinstance(img, Image.Image):
            im = img
        else:
            a = np.asarray(img)
            if a.dtype != np.uint8:
                a = (
                    (np.clip(a.astype(np.float32), 0, 1) * 255).round().astype(np.uint8)
                    if a.max(initial=0) <= 1.0
                    else np.clip(a, 0, 255).astype(np.uint8)
                )
            im = Image.fromarray(a)
        im = im.convert("RGBA" if im.mode in ("RGBA", "LA", "P") else "RGB")
        if max(im.size) > MAX_IMAGE_SIDE:
            im.thumbnail((MAX_IMAGE_SIDE, MAX_IMAGE_SIDE))
        buf = io.BytesIO()
        im.save(buf, format="PNG", optimize=False)
        return base64.b64encode(buf.getvalue()).decode()
    except Exception:  # noqa: BLE001 - a picture that cannot be read is left out, never fails the tab
        return None


def figure_part(value: Any, title: str) -> dict | None:
    if value is None:
        return None
    if hasattr(value, "savefig"):  # a matplotlib figure: its picture
        buf = io.BytesIO()
        value.savefig(buf, format="png", dpi=100, bbox_inches="tight")
        return {"kind": "images", "title": title, "items": [{"png": base64.b64encode(buf.getvalue()).decode()}]}
    import plotly.graph_objects as go
    import plotly.io as pio

    fig = value if isinstance(value, go.Figure) else go.Figure(value) if isinstance(value, dict) else None
    if fig is None:
        return None
    return {
        "kind": "figure",
        "title": title,
        "json": scrub_paths(pio.to_json(fig, validate=False)),
        "tables": figure_tables(fig),
    }


def figure_tables(fig) -> list[dict]:
    """A figure's numbers as tables: each bar / line trace of at most MAX_FIG_POINTS points, with the
    axis's tick labels where the figure plots by position (as the tabs do for repeated tokens)."""
    lay = fig.layout
    out = []
    for i, tr in enumerate(fig.data):
        if tr.type not in ("bar", "scatter", "scattergl"):
            continue
        y = getattr(tr, "y", None)
        if y is None or len(y) == 0 or len(y) > MAX_FIG_POINTS:
            continue
        x = tr.x if getattr(tr, "x", None) is not None else list(range(len(y)))
        axis = getattr(lay, "xaxis" + ("" if not getattr(tr, "xaxis", None) or tr.xaxis == "x" else tr.xaxis[1:]), None)
        ticks = {}
        if axis is not None and axis.tickvals is not None and axis.ticktext is not None:
            ticks = {fmt(v): t for v, t in zip(axis.tickvals, axis.ticktext)}
        cols = ["x"] + (["label"] if ticks else []) + ["y"]
        rows = [[fmt(a)] + ([ticks.get(fmt(a), "")] if ticks else []) + [fmt(b)] for a, b in zip(x, y)]
        out.append({"kind": "table", "title": tr.name or f"trace {i + 1}", "columns": cols, "rows": rows})
    return out


def table_part(value: Any, comp, title: str) -> dict | None:
    cols, rows = None, None
    if hasattr(value, "data") and hasattr(value, "render") and not hasattr(value, "columns"):  # a Styler
        value = value.data
    if hasattr(value, "columns") and hasattr(value, "values"):  # pandas
        cols, rows = [str(c) for c in value.columns], value.values.tolist()
    elif isinstance(value, dict) and "data" in value:
        cols, rows = value.get("headers"), value["data"]
    elif isinstance(value, (list, tuple)):
        rows = [list(r) if isinstance(r, (list, tuple)) else [r] for r in value]
    if not rows:
        return None
    cols = list(cols or getattr(comp, "headers", None) or [f"column {i + 1}" for i in range(len(rows[0]))])
    part = {
        "kind": "table",
        "title": title,
        "columns": [fmt(c) for c in cols],
        "rows": [[fmt(v) for v in r] for r in rows[:MAX_ROWS]],
    }
    if len(rows) > MAX_ROWS:
        part["more"] = f"the first {MAX_ROWS} of {len(rows)} rows"
    return part


def json_part(value: Any, title: str) -> dict | None:
    """A JSON output's numbers: every scalar (nested keys dotted), short lists joined, long ones counted."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    rows: list[list[str]] = []

    def walk(v, key):
        if len(rows) >= MAX_ROWS:
            return
        if isinstance(v, dict):
            for k, x in v.items():
                walk(x, f"{key}.{k}" if key else str(k))
        elif isinstance(v, (list, tuple)) and v and all(isinstance(x, dict) for x in v) and len(v) <= 20:
            for i, x in enumerate(v):
                walk(x, f"{key}[{i}]")
        elif isinstance(v, (list, tuple, np.ndarray)):
            v = list(v)
            rows.append(
                [
                    key,
                    fmt(v) if len(v) <= 24 and all(not isinstance(x, (list, dict)) for x in v) else f"{len(v)} values",
                ]
            )
        else:
            rows.append([key, fmt(v)])

    walk(value, "")
    return {"kind": "table", "title": title, "columns": ["name", "value"], "rows": rows} if rows else None


def images_part(value: Any, title: str) -> dict | None:
    items = []
    seq = value if isinstance(value, (list, tuple)) and not isinstance(value, np.ndarray) else [value]
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], str):  # one (image, caption)
        seq = [value]
    for it in seq:
        img, cap = (
            (it[0], it[1])
            if isinstance(it, (list, tuple)) and len(it) == 2 and (it[1] is None or isinstance(it[1], str))
            else (it, None)
        )
        png = png_b64(img)
        if png:
            items.append({"png": png, "caption": fmt(cap) if cap else ""})
    return {"kind": "images", "title": title, "items": items} if items else None


def unwrap(value: Any) -> Any:
    """An output's shown value: a gr.update's value; None where the update sets no value."""
    if isinstance(value, dict) and value.get("__type__") == "update":
        return value.get("value")
    if isinstance(value, gr.components.Component):
        return None
    return value


def part_of(comp, value: Any) -> dict | None:
    """The report part of one output component's value (None: nothing to show)."""
    value = unwrap(value)
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    title = str(getattr(comp, "label", None) or "")
    if isinstance(comp, gr.Plot):
        return figure_part(value, title)
    if isinstance(comp, gr.Dataframe):
        return table_part(value, comp, title)
    if isinstance(comp, gr.Gallery):
        return images_part(value, title)
    if isinstance(comp, gr.Image):
        return images_part([value], title)
    if isinstance(comp, gr.JSON):
        return json_part(value, title)
    if isinstance(comp, gr.HTML):
        return {"kind": "html", "html": clean_html(value)}
    if isinstance(comp, gr.Markdown):
        return {"kind": "html", "html": markdown_html(value)}
    return None  # files (server paths), states, buttons: not part of a report


def setting_of(comp, value: Any) -> tuple[str, str] | None:
    """(label, shown value) of an input; a choice shows its label; an image says what it is."""
    if isinstance(comp, (gr.State, gr.File, gr.Button)) or comp is None:
        return None
    label = str(getattr(comp, "label", None) or getattr(comp, "elem_id", None) or type(comp).__name__)
    if isinstance(comp, gr.Image):
        if value is None:
            return label, "none"
        a = value if isinstance(value, np.ndarray) else None
        return (
            label,
            f"an image ({a.shape[1]}×{a.shape[0]} px; shown below)" if a is not None else "an image (shown below)",
        )
    choices = getattr(comp, "choices", None)
    if choices and isinstance(comp, (gr.Dropdown, gr.Radio, gr.CheckboxGroup)):
        names = {}
        for c in choices:
            if isinstance(c, (list, tuple)) and len(c) == 2:
                names[json.dumps(c[1], default=str)] = c[0]
        show = lambda v: names.get(json.dumps(v, default=str), v)  # noqa: E731
        value = [show(v) for v in value] if isinstance(value, list) else show(value)
    if isinstance(value, bool):
        value = "on" if value else "off"
    return label, fmt(value)
