"""What a reader sees: the presenter view's key figure first at 1000×800 and a presenter link made
from the page; the Relevance per-sentence table and long-range plot; Memorization's one progress
bar and its images as files; Features' clamp value per feature; Adapters after a refused pick. One
browser session per tab."""

import pytest

from tests.e2e.conftest import first_view, open_tab, settle, shot
from tests.helpers.browser import chromium_page
from tests.helpers.waits import result_of

LONG = 180_000
KEYFIRST = {
    "features": "#features-overlay",
    "memorization": "#memo-generate",
    "math_neurons": "#mn-accfig",
    "adapters": "#pissa-spectrum",
}


def _top(page, sel: str) -> float:
    return page.evaluate(f"() => document.querySelector('{sel}').getBoundingClientRect().top + window.scrollY")


def _boxes_apart(a, b) -> bool:
    return (
        a["x"] + a["width"] <= b["x"]
        or b["x"] + b["width"] <= a["x"]
        or a["y"] + a["height"] <= b["y"]
        or b["y"] + b["height"] <= a["y"]
    )


@pytest.mark.timeout(600)
def test_presenter_view_at_1000_by_800(server_url):
    with chromium_page(1000, 800) as page:
        page.set_default_timeout(LONG)
        for tab, sel in KEYFIRST.items():
            page.goto(f"{server_url}?tab={tab}&presenter=1")
            page.wait_for_selector(f"#tab-{tab}", state="visible")
            settle(page, LONG)
            assert _top(page, sel) < 450, (tab, _top(page, sel))  # on the first screen, before the controls
            shot(page, f"presenter-{tab}-1000")
        # the header's badge no longer runs under the Presenter box
        badge = page.locator(".wb-badge").first.bounding_box()
        assert _boxes_apart(badge, page.locator("#wb-presenter-toggle").bounding_box())
        # a presenter link from the page: the link row stays, and the link keeps the view
        page.click("#wb-link-btn-adapters")
        page.wait_for_function(
            "() => document.querySelector('#wb-link-url-adapters textarea, "
            "#wb-link-url-adapters input').value.includes('presenter=1')"
        )
        # the Math figure's title fits its plot (expert view: the accuracy card shows too)
        page.goto(f"{server_url}?tab=math_neurons")
        page.wait_for_selector("#mn-accfig .gtitle", timeout=LONG)
        fits = page.evaluate("""() => { const t = document.querySelector('#mn-accfig .gtitle').getBoundingClientRect();
                                         const p = document.querySelector('#mn-accfig .main-svg').getBoundingClientRect();
                                         return t.right <= p.right + 1; }""")
        assert fits
        # the accuracy card's table stays inside its card (it overflowed at 1000 px)
        page.wait_for_selector("#mn-acc table", timeout=LONG)
        inside = page.evaluate("""() => { const t = document.querySelector('#mn-acc table').getBoundingClientRect();
                                           const c = document.querySelector('#mn-acc .wb-card').getBoundingClientRect();
                                           return [t.right, c.right]; }""")
        assert inside[0] <= inside[1], inside
        # the tour's dropdown text stops before its arrow
        page.goto(f"{server_url}?tab=tour")
        settle(page, LONG)
        page.wait_for_selector("#tour-name input", timeout=LONG)  # the tab mounts once the link selects it
        gap = page.evaluate("""() => { const i = document.querySelector('#tour-name input');
                                        return parseFloat(getComputedStyle(i).paddingRight); }""")
        assert gap >= 20


@pytest.mark.timeout(600)
def test_relevance_sentence_table_and_long_range_plot(page, server_url):
    page.goto(f"{server_url}?tab=relevance&rel-n=20")  # 20 sentences: a quick evaluation
    page.wait_for_selector("#tab-relevance", state="visible")
    settle(page, LONG)
    page.locator("#rel-heldout-acc").get_by_text("Held-out evaluation").first.click()
    page.click("#rel-heldout")
    settle(page, LONG)
    page.wait_for_selector("#rel-sentences thead")
    head = page.evaluate("() => document.querySelector('#rel-sentences thead').getBoundingClientRect().height")
    assert head < 110, head  # was 331 of the table's 360 px
    page.locator("#rel-long-acc").get_by_text("Long-range").first.click()
    page.click("#rel-long-explain")
    settle(page, LONG)
    rows = page.evaluate("() => [...document.querySelectorAll('#rel-long-plot .ytick text')].map(t => t.textContent)")
    assert rows[-1] == "MambaLRP"  # the top row: never drawn under another method's marker
    shot(page, "relevance-longrange")


@pytest.mark.timeout(600)
def test_memorization_one_progress_bar_and_no_off_row_when_nothing_is_off(page, server_url):
    open_tab(page, server_url, "memorization")
    # the tab's first view finds the example's neurons and ticks them: wait for its generations, then
    # untick every neuron so that this Generate switches nothing off
    page.wait_for_selector("#memo-found-card", state="attached", timeout=LONG)
    settle(page, LONG)
    ticked = page.locator("#memo-neurons input:checked")
    assert ticked.count() > 0  # the first view ticked what it found
    for _ in range(ticked.count()):
        ticked.first.uncheck()  # the locator is live: its first is the next ticked box
    assert page.locator("#memo-neurons input:checked").count() == 0
    page.locator("#memo-gallery-acc .label-wrap").click()
    page.fill("#memo-prompt textarea", "a red ring and a red square and a red square on a yellow background")
    # every block shown busy on any frame from the click until the generation has ended
    page.evaluate("""() => {
      window.wbBusy = new Set(); window.wbWatch = true;
      const look = () => {
        for (const e of document.querySelectorAll('.wrap.full:not(.hide)')) {
          if (e.offsetParent) window.wbBusy.add((e.closest('[id]') || {}).id);
        }
        if (window.wbWatch) requestAnimationFrame(look);
      };
      requestAnimationFrame(look);
    }""")
    page.click("#memo-generate")
    page.wait_for_function("() => window.wbBusy.has('memo-compare')", timeout=60_000)  # its bar came
    settle(page, LONG)
    busy = set(page.evaluate("() => { window.wbWatch = false; return [...window.wbBusy]; }"))
    assert busy <= {"memo-compare"}, busy
    caps = page.evaluate("() => [...document.querySelectorAll('#memo-gallery .caption-label')].map(e => e.innerText)")
    assert caps and not any("off" in c for c in caps), caps
    shot(page, "memorization-nothing-off")


@pytest.mark.timeout(600)
def test_features_clamp_value_follows_the_feature(page, server_url):
    open_tab(page, server_url, "features")
    # the first view sets the feature to clamp and its value too: it lands before this test's own
    first_view(page, "features")
    box = page.locator("#features-clamp input")
    feat = page.locator("#features-steer-id input")
    with result_of(page, changed="#features-clamp input", timeout_ms=30_000):
        feat.fill("31")
    from backend.sae import analysis, loading

    org = loading.get_organism("zoo")
    assert float(box.input_value()) == pytest.approx(analysis.default_clamp_value(org, 31))


@pytest.mark.timeout(600)
def test_adapters_refused_pick_leaves_no_error_badges(page, server_url):
    open_tab(page, server_url, "adapters")
    model = page.locator("#pissa-model input")
    model.fill("/nonexistent/model")
    with result_of(page, toast="", timeout_ms=60_000) as refused:  # a toast this pick brought
        model.press("Enter")
    settle(page, LONG)
    assert all(kind == "error" for kind, _ in refused.toasts()), refused.toasts()
    for sel in ("#pissa-layer", "#pissa-rank"):
        assert page.locator(f"{sel} .error").count() == 0, sel
    shot(page, "adapters-refused-pick")
