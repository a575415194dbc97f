"""Every guided tour runs start to end in Chromium: each step computes its figure, with a caption and
alt text; screenshots of every step in light and dark (and one in presenter view)."""
import pytest

import io

from PIL import Image

from tests.e2e.conftest import open_tab, settle, shot

pytestmark = pytest.mark.timeout(600)


def _state(page):
    return {
        "head": page.locator("#tour-header").inner_text(),
        "caption": page.locator("#tour-caption").inner_text(),
        "alt": page.locator("#tour-figure img").first.get_attribute("alt") or "",
        "src": page.locator("#tour-figure img").first.get_attribute("src") or "",
    }


def _background(page, src) -> float:
    """Brightness (0-255) of the figure's top-left corner: its background."""
    img = Image.open(io.BytesIO(page.request.get(src).body())).convert("L")
    return float(img.getpixel((2, 2)))


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
        bg = _background(page, st["src"])
        assert (bg < 80) if theme == "dark" else (bg > 240), (k, theme, bg)   # the figure follows the theme
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
    assert {"relevance", "features", "memorization", "math", "adapters", "all"} <= set(tours), tours
    captions = {}
    for tour_id in [t for t in tours if t != "all"]:
        captions[tour_id] = [s["caption"] for s in _walk(page, tour_id, "light")]
    assert "superb" in captions["relevance"][1]          # the planted evidence word is found
    assert "red" in captions["features"][3]               # the steered captions name the colour
    assert "neurons" in captions["memorization"][2]
    page.click("#wb-theme-toggle")
    assert "dark" in page.evaluate("() => document.body.className")
    for tour_id in [t for t in tours if t != "all"]:
        again = [s["caption"] for s in _walk(page, tour_id, "dark")]
        assert again == captions[tour_id]                 # cached: the same computation, same words
    # The light/dark button redraws the figure shown for the new theme.
    page.click("#wb-theme-toggle")
    page.wait_for_function("() => !document.body.classList.contains('dark')")
    settle(page)
    page.wait_for_function("() => { const i = document.querySelector('#tour-figure img'); return i && i.complete; }")
    assert _background(page, _state(page)["src"]) > 240
    page.click("#wb-theme-toggle")
    page.wait_for_function("() => document.body.classList.contains('dark')")
    settle(page)
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


def test_overview_buttons_open_each_tour(page, server_url):
    open_tab(page, server_url, "overview")
    for key, tour_id, first in (("features", "features", "A scene and the model"),
                                ("memorization", "memorization", "This prompt gives a copy"),
                                ("all", "all", "Relevance: The model and its answer")):
        page.get_by_role("tab", name="Overview").click()
        page.click(f"#overview-tour-{key}")
        page.wait_for_selector("#tab-tour", state="visible")
        page.wait_for_function(f"() => document.querySelector('#tour-header').innerText.includes({first!r})",
                               timeout=180_000)
        settle(page, 180_000)
        assert page.locator(f"#tour-name input[value='{tour_id}']").is_checked()
        assert "Step 1 of" in page.locator("#tour-header").inner_text()
    shot(page, "tour-from-overview-all")
    page.get_by_role("tab", name="Overview").click()
    page.wait_for_selector("#overview-tour-memorization", state="visible")
    shot(page, "tour-overview-buttons")
