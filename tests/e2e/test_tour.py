"""Every guided tour runs start to end in Chromium at 1440×1000: each step computes its figure with a
caption; Back and Next stay in one place from step to step, Back is off on the first step and Next
on the last; the figure ends above the fold; it reads in dark mode; screenshots of every step."""

import io
import re

import pytest
from PIL import Image

from tests.e2e.conftest import first_view, open_tab, settle, shot
from tests.helpers.browser import chromium_page
from tests.helpers.waits import hover_until_shown, plots_fitted, result_of

pytestmark = pytest.mark.timeout(600)

WIDTH, HEIGHT = 1440, 1000
PREFIX = {
    "relevance": "Relevance",
    "features": "Features",
    "memorization": "Memorization",
    "math": "Math neurons",
    "adapters": "Adapters",
    "all": "All papers",
}


@pytest.fixture
def page(server_url):
    with chromium_page(WIDTH, HEIGHT) as p:
        p.set_default_timeout(60_000)
        yield p


def choose(page, tour_id):
    """Pick a tour and wait for its first step: another tour's own run to end, or, for the tour the
    tab holds already (no value changes, nothing runs), the tab's first view."""
    box = page.locator("#tour-name input")
    shown = box.input_value().startswith(PREFIX[tour_id])
    box.click()
    option = page.get_by_role("option", name=re.compile("^" + PREFIX[tour_id]))
    if shown:
        option.click()
        first_view(page, "tour", 180_000)
    else:
        with result_of(page, done="#tour-caption", timeout_ms=180_000):
            option.click()
    settle(page, 180_000)


def _box(page, sel):
    b = page.locator(sel).bounding_box()
    return round(b["x"]), round(b["y"]), round(b["width"]), round(b["height"])


def _figure_corner(page) -> float:
    """Brightness (0-255) of the figure's top-left corner as drawn: its (transparent) background."""
    png = page.locator("#tour-figure").screenshot()
    return float(Image.open(io.BytesIO(png)).convert("L").getpixel((4, 4)))


# The caption as shown once no progress tracker covers it: under load a step's event can still be
# running after the page settled, and its tracker's timer ("1.0s") reads as part of the text.
CAPTION_JS = """() => { const el = document.querySelector('#tour-caption');
  return el && !el.querySelector('.progress-text, .eta-bar')
         && !/^\\s*\\d+(\\.\\d+)?s\\b/.test(el.innerText) && el.innerText.trim().length > 0; }"""


def caption_of(page) -> str:
    page.wait_for_function(CAPTION_JS, timeout=180_000)
    return page.locator("#tour-caption").inner_text()


def _walk(page, tour_id, theme):
    choose(page, tour_id)
    page.wait_for_function("() => document.querySelector('#tour-header').innerText.includes('Step 1 of')")
    n = int(page.locator("#tour-header").inner_text().split(" of ")[1].split()[0])
    seen, nexts = [], set()
    for k in range(1, n + 1):
        if k > 1:  # the step's own run (its figure replaced, not the last step's still standing)
            with result_of(
                page, done="#tour-caption", changed={"#tour-header": f"Step {k} of {n}"}, timeout_ms=180_000
            ):
                page.click("#tour-next")
            settle(page, 180_000)
        page.wait_for_function(
            f"() => document.querySelector('#tour-header').innerText.includes('Step {k} of {n}')", timeout=180_000
        )
        page.wait_for_selector("#tour-figure .js-plotly-plot .main-svg")
        page.evaluate("() => window.scrollTo(0, 0)")
        caption = caption_of(page)
        assert len(caption) > 80 and caption not in seen, (k, caption)
        seen.append(caption)
        nexts.add(_box(page, "#tour-next"))
        assert page.locator("#tour-back").is_disabled() == (k == 1), k
        assert page.locator("#tour-next").is_disabled() == (k == n), k
        fig = page.locator("#tour-figure").bounding_box()
        assert fig["y"] + fig["height"] <= HEIGHT, (tour_id, k, fig)  # the whole figure above the fold
        corner = _figure_corner(page)
        assert (corner < 80) if theme == "dark" else (corner > 200), (tour_id, k, theme, corner)
        shot(page, f"tour-{tour_id}-{k}-{theme}")
    assert len(nexts) == 1, nexts  # Next never moved
    # Back goes back one and Next comes back on.
    with result_of(page, done="#tour-caption", changed={"#tour-header": f"Step {n - 1} of"}, timeout_ms=180_000):
        page.click("#tour-back")
    settle(page, 180_000)
    page.wait_for_function(f"() => document.querySelector('#tour-header').innerText.includes('Step {n - 1} of')")
    assert not page.locator("#tour-next").is_disabled()
    return seen, nexts.pop()


def test_every_tour_start_to_end(page, server_url):
    open_tab(page, server_url, "tour")
    captions, places = {}, set()
    for tour_id in ("relevance", "features", "memorization", "math", "adapters"):
        captions[tour_id], place = _walk(page, tour_id, "light")
        places.add(place)
    assert len(places) == 1, places  # the same place in every tour
    assert "superb" in captions["relevance"][1]  # the planted evidence word is found
    assert "red" in captions["features"][3]  # the steered captions name the colour
    assert "neurons" in captions["memorization"][2]
    # Exact values on hover: a bar of the relevance step names its word and value.
    choose(page, "relevance")
    page.fill("#tour-step input", "2")
    page.keyboard.press("Enter")
    settle(page, 180_000)
    page.wait_for_function("() => document.querySelector('#tour-header').innerText.includes('Step 2 of')")
    hover_until_shown(page, "#tour-figure .point path", 14, "#tour-figure .hoverlayer .hovertext")
    assert "relevance" in page.locator("#tour-figure .hoverlayer .hovertext").first.text_content()
    # Dark mode: the same figures on a dark background, no redraw needed.
    page.click("#wb-theme-toggle")
    page.wait_for_function("() => document.body.classList.contains('dark')")
    again, _ = _walk(page, "memorization", "dark")
    assert again == captions["memorization"]  # cached: the same computation, same words
    # 'all' chains every paper's steps (same cached computations)
    choose(page, "all")
    total = sum(len(c) for c in captions.values())
    page.wait_for_function(f"() => document.querySelector('#tour-header').innerText.includes('Step 1 of {total}')")
    settle(page, 180_000)
    assert caption_of(page) == captions["relevance"][0]
    # Presenter view: the JSON export disappears, the caption grows; the link row stays, so a link
    # made there carries presenter=1.
    size = page.evaluate("() => parseFloat(getComputedStyle(document.querySelector('.wb-tour-caption')).fontSize)")
    page.locator("#wb-presenter-toggle input").check()
    page.wait_for_function("() => document.body.classList.contains('wb-presenter')")  # its CSS applies at once
    plots_fitted(page, "#tour-figure")  # the figure drawn at its presenter width before its box is measured
    assert "wb-presenter" in page.evaluate("() => document.body.className")
    assert not page.locator("#tour-numbers-acc").is_visible()
    assert page.locator("#wb-link-btn-tour").is_visible()
    bigger = page.evaluate("() => parseFloat(getComputedStyle(document.querySelector('.wb-tour-caption')).fontSize)")
    assert bigger > size
    page.evaluate("() => window.scrollTo(0, 0)")
    fig, cap = page.locator("#tour-figure").bounding_box(), page.locator("#tour-caption").bounding_box()
    assert fig["y"] + fig["height"] <= HEIGHT and cap["x"] > fig["x"] + fig["width"] - 1  # one screen, side by side
    shot(page, "tour-presenter-dark")


def test_overview_buttons_open_each_tour(page, server_url):
    open_tab(page, server_url, "overview")
    # first the tour the tab already holds: no value changes, so only the tab's first opening draws it
    for key, tour_id, first in (
        ("all", "all", "Relevance: The model and its answer"),
        ("features", "features", "A scene and the model"),
        ("memorization", "memorization", "This prompt gives a copy"),
        ("all", "all", "Relevance: The model and its answer"),
    ):
        page.get_by_role("tab", name="Overview").click()
        page.click(f"#overview-tour-{key}")
        page.wait_for_selector("#tab-tour", state="visible")
        page.wait_for_function(
            f"() => document.querySelector('#tour-header').innerText.includes({first!r})", timeout=180_000
        )
        settle(page, 180_000)
        assert page.locator("#tour-name input").input_value().startswith(PREFIX[tour_id])
        assert "Step 1 of" in page.locator("#tour-header").inner_text()
    shot(page, "tour-from-overview-all")
    page.get_by_role("tab", name="Overview").click()
    page.wait_for_selector("#overview-tour-memorization", state="visible")
    shot(page, "tour-overview-buttons")


def test_a_link_to_a_step_ends_on_that_step_whichever_box_changes_first(page, server_url):
    """A link sets the tour and the step: the link's own run draws that step once both are restored,
    and the boxes' two changes, in either order, end on it too (one drawing event, checked against
    both boxes when it ends). Then picking another tour from that step ends on its step 1."""
    from playwright.sync_api import TimeoutError as NotSeen

    with result_of(page, load=True) as seen:  # nothing to wait for: the page's toasts, for a failure's message
        page.goto(server_url + "?tab=tour&tour-name=%22all%22&tour-step=3")
    page.wait_for_selector("#tab-tour", state="visible")
    try:
        page.wait_for_function(
            "() => document.querySelector('#tour-header').innerText.includes('Step 3 of')", timeout=180_000
        )
    except NotSeen:
        # Seen once in a run beside a second suite, with nothing in the server's log: what the page
        # held then tells a drawing that never ran from one that ended on another step.
        shot(page, "tour-link-not-drawn")
        raise AssertionError(f"the link's step 3 was not drawn within 180 s: {_tour_state(page, seen)}") from None
    settle(page, 180_000)
    assert "Step 3 of" in page.locator("#tour-header").inner_text()
    assert page.locator("#tour-step input").input_value() == "3"
    # the link's own run drew it (the tab's link_runs), whether or not the boxes' changes fired
    assert page.evaluate("() => window.wbLinkRuns") == ["wb-linkrun-tour"]
    choose(page, "relevance")
    page.wait_for_function(
        "() => document.querySelector('#tour-header').innerText.includes('Step 1 of 5')", timeout=180_000
    )
    settle(page, 180_000)
    assert "Step 1 of 5" in page.locator("#tour-header").inner_text()
    assert page.locator("#tour-step input").input_value() == "1"
    assert page.locator("#tour-back").is_disabled() and not page.locator("#tour-next").is_disabled()


def _tour_state(page, seen) -> dict:
    """What the tour's page shows: the boxes, the header, the step its numbers name, its blocks still
    busy and every toast since the page loaded."""
    return {
        **page.evaluate(
            """() => {
              const text = (sel) => { const el = document.querySelector(sel); return el ? el.innerText : null; };
              const value = (sel) => { const el = document.querySelector(sel); return el ? el.value : null; };
              return {
                tour: value('#tour-name input'), step: value('#tour-step input'), header: text('#tour-header'),
                numbers: (text('#tour-numbers') || '').slice(0, 200),
                busy: [...document.querySelectorAll('[id^="tour-"] .wrap.default:not(.hide), [id^="tour-"] .pending')]
                  .map((el) => (el.closest('[id]') || {}).id),
              };
            }"""
        ),
        "toasts": seen.toasts(),
    }
