"""Every guided tour runs start to end in Chromium: each step computes its figure, with a caption and
alt text; screenshots of every step in light and dark (and one in presenter view)."""
import pytest

from tests.e2e.conftest import open_tab, settle, shot

pytestmark = pytest.mark.timeout(600)


def _state(page):
    return {
        "head": page.locator("#tour-header").inner_text(),
        "caption": page.locator("#tour-caption").inner_text(),
        "alt": page.locator("#tour-figure img").first.get_attribute("alt") or "",
        "src": page.locator("#tour-figure img").first.get_attribute("src") or "",
    }


def _walk(page, tour_id, theme):
    page.locator(f"#tour-name input[value='{tour_id}']").check()
    settle(page, 180_000)
    page.wait_for_function("() => document.querySelector('#tour-header').innerText.includes('Step 1 of')")
    n = int(page.locator("#tour-header").inner_text().split(" of ")[1].split()[0])
    seen = []
    for k in range(1, n + 1):
        if k > 1:
            page.click("#tour-next")
            settle(page, 180_000)
        page.wait_for_function(f"() => document.querySelector('#tour-header').innerText.includes('Step {k} of {n}')",
                               timeout=180_000)
        page.wait_for_selector("#tour-figure img")
        st = _state(page)
        assert len(st["caption"]) > 80, st
        assert st["alt"] and st["alt"] != "the tour's figure", st
        assert st["src"] not in [s["src"] for s in seen], f"step {k} shows the previous figure"
        seen.append(st)
        shot(page, f"tour-{tour_id}-{k}-{theme}")
    # Next stops at the last step; Back goes back one.
    page.click("#tour-next")
    settle(page)
    assert f"Step {n} of {n}" in page.locator("#tour-header").inner_text()
    page.click("#tour-back")
    settle(page, 180_000)
    page.wait_for_function(f"() => document.querySelector('#tour-header').innerText.includes('Step {n - 1} of')")
    return seen


def test_every_tour_start_to_end_light_and_dark(page, server_url):
    open_tab(page, server_url, "tour")
    tours = page.locator("#tour-name input[type=radio]").evaluate_all("els => els.map(e => e.value)")
    assert {"relevance", "adapters", "all"} <= set(tours), tours
    captions = {}
    for tour_id in [t for t in tours if t != "all"]:
        captions[tour_id] = [s["caption"] for s in _walk(page, tour_id, "light")]
    assert "superb" in captions["relevance"][1]          # the planted evidence word is found
    page.click("#wb-theme-toggle")
    assert "dark" in page.evaluate("() => document.body.className")
    for tour_id in [t for t in tours if t != "all"]:
        again = [s["caption"] for s in _walk(page, tour_id, "dark")]
        assert again == captions[tour_id]                 # cached: the same computation, same words
    # 'all' chains every paper's steps (same cached computations)
    page.locator("#tour-name input[value='all']").check()
    settle(page, 180_000)
    total = sum(len(c) for c in captions.values())
    page.wait_for_function(f"() => document.querySelector('#tour-header').innerText.includes('Step 1 of {total}')")
    assert _state(page)["caption"] == captions["relevance"][0]
    # Presenter view: the JSON export and link row disappear, the caption grows.
    size = page.evaluate("() => parseFloat(getComputedStyle(document.querySelector('.wb-tour-caption')).fontSize)")
    page.locator("#wb-presenter-toggle input").check()
    page.wait_for_timeout(300)
    assert "wb-presenter" in page.evaluate("() => document.body.className")
    assert not page.locator("#tour-numbers-acc").is_visible()
    assert not page.locator("#wb-link-btn-tour").is_visible()
    bigger = page.evaluate("() => parseFloat(getComputedStyle(document.querySelector('.wb-tour-caption')).fontSize)")
    assert bigger > size
    shot(page, "tour-presenter-dark")
