"""The Overview's controls work (every tab's opening through its link: tests/e2e/test_layout.py)."""

from components import tabs
from tests.e2e.conftest import open_tab, settle, shot
from tests.helpers.waits import result_of


def _status(url: str) -> dict:
    """The problems themselves, for a failure's message."""
    from gradio_client import Client

    status = Client(url, verbose=False).predict(api_name="/status")[1]
    return {k: status[k] for k in ("integrity", "internal_errors")}


def test_overview_refresh_and_open_buttons(page, server_url):
    open_tab(page, server_url, "overview")
    # runtime details are closed for an audience, one click away for the operator
    assert not page.get_by_role("button", name="Refresh").is_visible()
    page.get_by_text("Runtime details (for the server's operator)").click()
    # the summary built with the page says "no problems" already: wait for the refreshed one
    with result_of(page, done="#overview-runtime"):
        page.get_by_role("button", name="Refresh").click()
    settle(page)
    summary = page.locator("#overview-runtime").inner_text()
    assert "integrity checks: no problems found" in summary, (summary, _status(server_url))
    # the cards end at one height, so every "Open" button sits on one line
    tops = page.evaluate(
        "() => Array.from(document.querySelectorAll('.wb-instrument button'))"
        ".filter(b => b.textContent.trim().startsWith('Open')).map(b => b.getBoundingClientRect().top)"
    )
    assert len(tops) == 5 and max(tops) - min(tops) < 1, tops
    first = next(t for t in tabs() if t.card)  # the first instrument opens from its card
    page.get_by_role("button", name=f"Open {first.title} →").click()
    page.wait_for_selector(f"#tab-{first.id}", state="visible")
    shot(page, "overview-after-refresh")


def test_the_status_timer_loop_runs_ten_frames_a_second(page, server_url):
    """Gradio's page-loading status tracker kept its timer's requestAnimationFrame loop running after
    the page had loaded: an idle page drew 60 frames a second for it (8-10 % of a core of the
    browser, as long as the tab stayed open). With the trackers' timer loops at ten frames a second
    (components.gradio_fixes.patches), that loop's calls over 3 s of an idle page are about 30, not 180."""
    import json

    from tests.helpers.browser import browser

    open_tab(page, server_url, "overview")
    b = browser()
    b.start_tracing(page=page, categories=["devtools.timeline"])
    page.wait_for_timeout(3000)
    events = json.loads(b.stop_tracing())["traceEvents"]
    timer_calls = [
        e
        for e in events
        if e.get("name") == "FunctionCall" and "statustracker" in e.get("args", {}).get("data", {}).get("url", "")
    ]
    assert 0 < len(timer_calls) <= 3 * 12, len(timer_calls)
