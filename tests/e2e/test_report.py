"""The session report in Chromium: a visitor touches all five tabs (pins one result), takes the report
from the header, and opens it with the network blocked: every figure draws, hover works, the numbers
are the tab's, the links restore the views. Two visitors' reports hold only their own results; a
report of a session that computed nothing says so."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.conftest import ARTIFACTS
from tests.e2e.conftest import first_view, settle, shot
from tests.helpers.waits import result_of

pytestmark = pytest.mark.timeout(900)
LONG = 180_000
TITLES = {
    "relevance": "Relevance",
    "features": "Features",
    "memorization": "Memorization",
    "math_neurons": "Math neurons",
    "adapters": "Adapters",
}
MEMO_PROMPT = "a striped blue square on the left"


def open_tab(page, tab_id: str):
    page.get_by_role("tab", name=TITLES[tab_id], exact=True).click()
    page.wait_for_selector(f"#tab-{tab_id}", state="visible")
    first_view(page, tab_id, LONG)  # its silent event ended, or it could follow the test's own click
    settle(page, LONG)


def plot_data(page, selector: str) -> list:
    """The y values of every trace of the plotly figure under `selector`."""
    return page.eval_on_selector(
        selector,
        "el => (el.classList.contains('js-plotly-plot') ? el : "
        "el.querySelector('.js-plotly-plot')).data.map(t => Array.from(t.y || []))",
    )


def take_report(page, name: str) -> tuple[Path, str, float]:
    t0 = time.perf_counter()
    page.click("#wb-report-btn")
    button = page.locator("#wb-report-file")
    expect(button).to_contain_text("⤓", timeout=LONG)
    seconds = time.perf_counter() - t0
    with page.expect_download() as dl:
        button.click()
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / name
    dl.value.save_as(str(path))
    return path, button.inner_text().strip(), seconds


def open_offline(context, path: Path):
    """The report in a new page with every non-file request aborted and counted."""
    requests: list[str] = []
    page = context.new_page()
    page.route(
        "**/*",
        lambda r: r.continue_() if r.request.url.startswith("file:") else (requests.append(r.request.url), r.abort()),
    )
    page.on("request", lambda r: None if r.url.startswith(("file:", "data:", "blob:")) else requests.append(r.url))
    page.goto(path.as_uri())
    page.wait_for_function("document.body.dataset.ready === '1'", timeout=LONG)
    return page, requests


def test_report_of_five_tabs_offline_with_hover_numbers_and_links(page, server_url):
    page.goto(f"{server_url}?tab=relevance")
    page.wait_for_selector("#tab-relevance", state="visible")
    expect(page.locator("#rel-bars .js-plotly-plot")).to_be_visible(timeout=LONG)
    expect(page.locator("#rel-conservation")).to_contain_text("logit", timeout=LONG)
    settle(page, LONG)
    with result_of(page, done="#rel-heatmap", timeout_ms=LONG):  # the tab pins what Explain computed
        page.click("#rel-explain")
    settle(page, LONG)
    page.click("#rel-pin")
    expect(page.locator("#rel-pinned")).to_contain_text("the plot", timeout=LONG)
    settle(page, LONG)
    rel_bars = plot_data(page, "#rel-bars")

    open_tab(page, "features")
    page.click("#features-analyse")
    expect(page.locator("#features-fire-patches .js-plotly-plot")).to_be_visible(timeout=LONG)
    settle(page, LONG)

    open_tab(page, "memorization")
    first_score = page.locator("#memo-score").inner_text()
    page.locator("#memo-prompt textarea").fill(MEMO_PROMPT)
    page.click("#memo-check")
    # the check's own card, not the first view's, nor its status tracker's timer ("0.4s") over it:
    # the first view's figure already stands, and on a busy machine settle can see quiet frames
    # before the click's pending state is drawn
    page.wait_for_function(
        "(before) => { const t = document.querySelector('#memo-score').innerText.trim();"
        " return t && !/^[\\d.]+\\s*s\\b/.test(t) && t !== before.trim(); }",
        arg=first_score,
        timeout=LONG,
    )
    expect(page.locator("#memo-z .js-plotly-plot")).to_be_visible(timeout=LONG)
    settle(page, LONG)
    memo_score = page.locator("#memo-score").inner_text()

    open_tab(page, "math_neurons")
    expect(page.locator("#mn-acc")).to_contain_text("set pruned", timeout=LONG)
    expect(page.locator("#mn-accfig .js-plotly-plot")).to_be_visible(timeout=LONG)
    settle(page, LONG)
    math_acc = plot_data(page, "#mn-accfig")

    open_tab(page, "adapters")
    with result_of(page, done="#pissa-stats", timeout_ms=LONG):  # (the first view's spectrum stands already)
        page.click("#pissa-analyse")
    expect(page.locator("#pissa-spectrum .js-plotly-plot")).to_be_visible(timeout=LONG)
    settle(page, LONG)

    path, status, click_s = take_report(page, "report-five-tabs.html")
    shot(page, "report-header")
    size = path.stat().st_size
    built_s = float(re.search(r"([\d.]+) s$", status).group(1))
    print(
        f"report: {status}; {size / 1e6:.2f} MB; built in {built_s:.2f} s on the server, "
        f"{click_s:.2f} s from the click to the file"
    )
    assert "5 tab(s)" in status and "1 pinned" in status
    assert size <= 5_000_000
    assert built_s <= 3.0
    html = path.read_text()
    assert "/tmp/" not in html and str(Path.home()) + "/" not in html and "gradio_api/file" not in html

    rep, requests = open_offline(page.context, path)
    try:
        figures = rep.locator(".plot[data-fig]")
        assert figures.count() >= 8
        assert rep.locator(".plot[data-error]").count() == 0
        assert rep.locator(".plot[data-rendered='1']").count() == figures.count()
        for i in range(figures.count()):
            assert figures.nth(i).locator(".main-svg").count() >= 1
        for tab in TITLES:
            assert rep.locator(f"section#tab-{tab} article.result").count() >= 1, tab
        assert rep.locator("section#tab-relevance article.pinned[data-section='rel-bars']").count() == 1

        # the numbers are the tab's: the same figure data, the same score text
        assert plot_data(rep, "section#tab-relevance article:not(.pinned)[data-section='rel-bars'] .plot") == rel_bars
        assert plot_data(rep, "[data-section='mn-accfig'] .plot") == math_acc
        assert memo_score.strip().splitlines()[0] in rep.locator("[data-section='memo-score']").inner_text()

        # hover on a bar of the math figure shows its value
        bar = rep.locator("[data-section='mn-accfig'] .plot .bars path").first
        bar.scroll_into_view_if_needed()
        box = bar.bounding_box()  # plotly's drag layer lies over the bars: move the mouse, not a click target
        rep.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        hover = rep.locator("[data-section='mn-accfig'] .hoverlayer .hovertext").first
        hover.wait_for(timeout=10_000)
        assert "accuracy" in hover.text_content()

        rep.wait_for_function("document.body.dataset.printReady === '1'", timeout=LONG)
        assert rep.eval_on_selector_all(".print-fig", "els => els.every(e => e.src.startsWith('data:image/png'))")
        links = {a.get_attribute("href") for a in rep.locator("a.viewlink").all()}
        assert requests == [], requests
    finally:
        rep.close()

    # each link restores its view (in a page of its own, as a reader would open it): its tab opens,
    # and the memorization link brings back the prompt and its score
    memo_link = next(h for h in links if "tab=memorization" in h)
    assert "memo-prompt" in memo_link
    for href in sorted(links):
        tab = re.search(r"tab=(\w+)", href).group(1)
        view = page.context.new_page()
        try:
            view.goto(href, wait_until="domcontentloaded")
            view.wait_for_selector(f"#tab-{tab}", state="visible", timeout=LONG)
            if href == memo_link:
                expect(view.locator("#memo-prompt textarea")).to_have_value(MEMO_PROMPT, timeout=LONG)
                expect(view.locator("#memo-score")).to_contain_text(memo_score.strip().splitlines()[0], timeout=LONG)
        finally:
            view.close()


def test_two_visitors_reports_hold_only_their_own(page, server_url):
    other = page.context.new_page()
    texts = {
        page: "the music was lovely and the cast was brilliant",
        other: "the plot was dull and the ending was awful",
    }
    try:
        for p, text in texts.items():
            p.set_default_timeout(LONG)
            p.goto(f"{server_url}?tab=relevance")
            p.wait_for_selector("#tab-relevance", state="visible")
            settle(p, LONG)
            p.locator("#rel-text textarea").fill(text)
            # the words are the first view's too: wait for this click's explanation, not for a word
            with result_of(p, done="#rel-heatmap", changed="#rel-heatmap", timeout_ms=LONG):
                p.click("#rel-explain")
            settle(p, LONG)
        for p, text in texts.items():
            path, _status, _s = take_report(p, f"report-visitor-{'a' if p is page else 'b'}.html")
            html = path.read_text()
            mine, theirs = text, texts[other if p is page else page]
            assert mine in html
            assert theirs not in html
    finally:
        other.close()


def test_a_report_with_nothing_computed_says_so(page, server_url):
    page.goto(server_url)
    page.wait_for_selector("#wb-report-btn", state="visible")
    settle(page, LONG)
    path, status, _s = take_report(page, "report-empty.html")
    assert "nothing computed" in status
    rep, requests = open_offline(page.context, path)
    try:
        expect(rep.locator("#nothing")).to_contain_text("Nothing was computed")
        assert rep.locator("article.result").count() == 0 and requests == []
    finally:
        rep.close()
