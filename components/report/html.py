"""One self-contained HTML file of a visitor's session (the header's Report button, the MCP tool
session_report). No gradio and no backend here: `build_html(report)` takes plain dicts (what
components.report.record keeps) and returns the page.

Self-contained: the page loads nothing. plotly.js is embedded once, gzipped and base64-encoded
(4.8 MB raw would leave no room under the 5 MB a five-tab report may take; 1.9 MB this way) and
unpacked by the browser's own DecompressionStream. Each figure keeps plotly's hover; for printing,
the page draws a PNG of every figure once it has rendered (Plotly.toImage, in the browser: no
image library on the server) and only print CSS shows those. Light and dark follow the reader's
system setting, and a button switches them.

The page is templates/report.html.j2 (Jinja2, autoescaped), with its style and script beside it.
"""

from __future__ import annotations

import base64
import functools
import gzip
import itertools
from pathlib import Path

import jinja2
from markupsafe import Markup

_TEMPLATES = Path(__file__).parent / "templates"


@functools.lru_cache(maxsize=1)
def plotly_bundle() -> str:
    """plotly.js (the version plotly.py ships, so the figures' JSON matches it), gzip + base64."""
    from plotly.offline import get_plotlyjs

    return base64.b64encode(gzip.compress(get_plotlyjs().encode(), compresslevel=6, mtime=0)).decode()


def _script_json(text: str) -> Markup:
    """A figure's JSON inside <script type="application/json">: HTML-escaping would break the JSON,
    so only what could end the element early is escaped (`</` as `<\\/`, still the same JSON)."""
    return Markup(str(text).replace("</", "<\\/"))


@functools.lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    # a key a dict leaves out reads as empty, as `.get()` would
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(_TEMPLATES), autoescape=True)
    env.filters["script_json"] = _script_json
    return env


def _numbered(parts: list[dict], count: itertools.count) -> list[dict]:
    """The parts with each figure's number on the page (its div, image and JSON ids)."""
    return [{**p, "n": next(count)} if p.get("kind") == "figure" else p for p in parts or []]


def _result(r: dict, count: itertools.count) -> dict:
    meta = [(k, r.get(k, "")) for k in ("model", "revision", "method")]
    return {
        "section": "",
        "heading": "",
        "computed_at": "",
        "pinned_at": "",
        "note": "",
        "settings": [],
        "link": "",
        "link_note": "",
        **r,
        "seconds": r.get("seconds"),
        "meta": [m for m in meta if m[1]],
        "parts": _numbered(r.get("parts", []), count),
    }


def build_html(report: dict, plotly_b64: str | None = None) -> str:
    """The page. `report`: generated_at, origin (what made it), tabs (each: tab, title, current, pins),
    tour (steps). Every string in it is text except the *_html fields and html parts, which the
    caller has cleaned (components.report.record.clean_html)."""
    count = itertools.count()
    tabs = [
        {
            **t,
            "current": [_result(r, count) for r in t.get("current", [])],
            "pins": [_result(r, count) for r in t.get("pins", [])],
        }
        for t in report.get("tabs", [])
    ]
    tour = [
        {"header_html": "", "caption_html": "", **s, "parts": _numbered(s.get("parts", []), count)}
        for s in report.get("tour", [])
    ]
    n_figures = next(count)
    env = _environment()
    return env.get_template("report.html.j2").render(
        title=report.get("title", "Workbench session report"),
        origin=report.get("origin", ""),
        generated_at=report.get("generated_at", ""),
        tabs=tabs,
        tour=tour,
        n_figures=n_figures,
        n_results=sum(len(t["current"]) + len(t["pins"]) for t in tabs),
        plotly_b64=(plotly_b64 or plotly_bundle()) if n_figures else "",
        css=_read("report.css"),
        js=_read("report.js"),
    )


@functools.lru_cache(maxsize=None)
def _read(name: str) -> str:
    return (_TEMPLATES / name).read_text()
