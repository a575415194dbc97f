"""The session report's parts without a server: cleaning of the tabs' HTML, session scope, the page's
size and build time (the browser checks are tests/e2e/test_report.py)."""

from __future__ import annotations

import json
import time

import numpy as np
import plotly.graph_objects as go
import pytest

from backend.core import sessions
from components.report import session as report
from components.report import writer
from components.report import html as report_html
from components.report import record as R


def test_clean_html_keeps_no_script_no_request_and_no_server_path():
    raw = (
        "<div onclick='x()' style=\"background:url(http://evil/x.png)\"><script>fetch('/x')</script>"
        "<img src='/gradio_api/file=/tmp/gradio/abc/img.png'><img src=\"data:image/png;base64,iVBOR/AA/BB+/CC\">"
        "<a href='https://example.org/paper'>paper</a> saved in /tmp/workbench-sessions/abc123/report/x.json"
        "<iframe src='http://x'></iframe> 3/4 of 12/5</div>"
    )
    out = R.clean_html(raw)
    assert "<script" not in out and "onclick" not in out and "<iframe" not in out
    assert "evil" not in out and "gradio_api" not in out and "/tmp/" not in out
    assert "data:image/png;base64,iVBOR/AA/BB+/CC" in out  # a data URI stays whole
    assert "href='https://example.org/paper'" in out
    assert "…/x.json" in out and "3/4 of 12/5" in out


def _fig(n=12, seed=0) -> go.Figure:
    rng = np.random.default_rng(seed)
    return go.Figure(
        [go.Bar(x=list(range(n)), y=rng.normal(size=n), name="relevance")],
        layout=dict(xaxis=dict(tickvals=list(range(n)), ticktext=[f"w{i}" for i in range(n)])),
    )


def _result(tab, text, seed=0):
    fig = R.figure_part(_fig(seed=seed), "a figure")
    return {
        "tab": tab,
        "section": "s",
        "heading": "h",
        "computed_at": report.now(),
        "seconds": 0.5,
        "model": "m",
        "revision": "r",
        "method": "x",
        "settings": [("Text", text)],
        "note": "n",
        "parts": [fig, R.table_part([[1, 0.25]], None, "t")],
        "link": "http://127.0.0.1/?tab=" + tab,
    }


def test_figure_numbers_are_the_figures_own():
    fig = _fig()
    part = R.figure_part(fig, "t")
    rows = part["tables"][0]["rows"]
    assert part["tables"][0]["columns"] == ["x", "label", "y"]
    assert [float(r[2]) for r in rows] == list(fig.data[0].y)  # repr round-trips every float exactly
    assert rows[3][1] == "w3"


def test_reports_hold_only_their_sessions_results_and_go_with_the_session(monkeypatch, tmp_path):
    monkeypatch.setenv("WORKBENCH_SESSION_DIR", str(tmp_path))
    R.put_result("visitor-a", "relevance", "s", _result("relevance", "alpha words"))
    R.put_result("visitor-b", "adapters", "s", _result("adapters", "beta words"))
    page_a, sum_a = writer.report_html("visitor-a")
    page_b, _ = writer.report_html("visitor-b")
    assert "alpha words" in page_a and "beta words" not in page_a
    assert "beta words" in page_b and "alpha words" not in page_b
    assert sum_a["tabs"] == ["relevance"] and sum_a["results"] == 1
    sessions.end("visitor-a")  # the unload of the page
    assert "visitor-a" not in R.sessions_held() and "visitor-b" in R.sessions_held()
    assert "Nothing was computed" in writer.report_html("visitor-a")[0]
    R.forget("visitor-b")


def test_an_empty_report_says_so_and_carries_no_plotting_library():
    page, summary = writer.report_html(None)
    assert "Nothing was computed in this session yet" in page
    assert "plotly-gz" not in page and len(page) < 20_000 and summary["results"] == 0


def test_five_tabs_embed_plotly_once_within_size_and_time():
    report_html.plotly_bundle()  # packed once per process (the app does it at import)
    sid = "five-tabs"
    for i, tab in enumerate(["relevance", "features", "memorization", "math_neurons", "adapters"]):
        R.put_result(sid, tab, "s", _result(tab, f"text {i}", seed=i))
        R.put_result(sid, tab, "t", _result(tab, f"more {i}", seed=10 + i))
    R.put_pin(sid, "adapters", "s", report.now())
    t0 = time.perf_counter()
    page, summary = writer.report_html(sid)
    seconds = time.perf_counter() - t0
    R.forget(sid)
    assert page.count("id='plotly-gz'") == 1 and page.count("<div class='plot'") == 11
    assert summary["results"] == 10 and summary["pinned"] == 1
    assert len(page.encode()) <= 5_000_000 and seconds <= 3.0, (len(page), seconds)


@pytest.mark.parametrize(
    "value,expected",
    [(0.1 + 0.2, "0.30000000000000004"), (np.float32(0.5), "0.5"), (True, "True"), (None, ""), ([1, 2.5], "1, 2.5")],
)
def test_cells_read_as_the_tab_shows_them(value, expected):
    assert R.fmt(value) == expected


def test_an_output_that_is_a_table_or_an_array_counts_as_shown():
    """A Features result's table (a DataFrame, whose truth value pandas refuses) once made the
    report drop the result with a logged ValueError; empty ones are still nothing shown."""
    import numpy as np
    import pandas as pd

    from components.report.session import _filled

    assert _filled(pd.DataFrame({"feature": [3]})) and _filled(np.zeros((2, 2))) and _filled("text")
    assert not any(_filled(v) for v in (pd.DataFrame(), np.zeros(0), "", None, []))


def test_the_page_escapes_text_and_keeps_the_cleaned_html_and_figure_json():
    """The template autoescapes: a heading, a setting or a table cell that holds markup shows as text;
    the tab's cleaned HTML goes in as HTML; a figure's JSON stays JSON and cannot end its script."""
    fig = go.Figure(go.Bar(x=["</script><b>x</b>"], y=[1]))
    result = {
        "heading": "<img src=x onerror=alert(1)>",
        "computed_at": "now",
        "seconds": 0.5,
        "settings": [("text", "<b>bold?</b>")],
        "model": "m'odel",
        "parts": [
            {"kind": "html", "html": "<p class='wb-explain'>kept</p>"},
            {"kind": "table", "columns": ["<i>c</i>"], "rows": [["<u>v</u>"]]},
            {"kind": "figure", "title": "f", "json": fig.to_json()},
        ],
    }
    page = report_html.build_html(
        {"tabs": [{"tab": "relevance", "title": "Relevance", "current": [result], "pins": []}]}, plotly_b64="AAAA"
    )
    assert "<img src=x" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "&lt;b&gt;bold?&lt;/b&gt;" in page and "&lt;i&gt;c&lt;/i&gt;" in page and "&lt;u&gt;v&lt;/u&gt;" in page
    assert "m&#39;odel" in page and "<p class='wb-explain'>kept</p>" in page
    script = page.split("<script type='application/json' id='figjson0'>")[1].split("</script>")[0]
    assert go.Figure(json.loads(script)).data[0].x == ("</script><b>x</b>",)
    assert "in 0.50 s" in page and page.count("<div class='plot'") == 1


def test_a_pin_or_unpin_that_redraws_a_reported_figure_is_declared_a_redraw():
    """Pinning draws the shown result again with the pin beside it: not a new result, so the report
    keeps the computation's record. Declared on the handler (components.report.redraw), not read from
    its name or its button's id."""
    import app
    import components

    demo = app.build_app("zoo")
    results = {key for t in components.tabs() for key in t.report_results}
    pins = {}
    for bf in demo.fns.values():
        triggers = [getattr(demo.blocks.get(t[0]), "elem_id", None) or "" for t in (bf.targets or [])]
        outs = {getattr(c, "elem_id", None) for c in bf.outputs or []}
        if bf.fn is not None and any(t.endswith(("-pin", "-unpin")) for t in triggers) and outs & results:
            pins[tuple(triggers)] = getattr(report._inner(bf.fn), "report_redraw", False)
    assert pins and all(pins.values()), pins
    assert {t for ts in pins for t in ts} >= {"mn-pin", "mn-unpin", "pissa-pin", "pissa-unpin"}
