"""The Memorization tab in Chromium: every control once, then a screenshot."""

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import first_view, open_tab, settle, shot
from tests.helpers.waits import result_of, toasts_from_now

pytestmark = pytest.mark.timeout(600)
LONG = 240_000


def assert_grid_layout(page, grid: str, n_seeds: int):
    """The grid at 1440×1000: one column per seed, the "on" row above the "off" row, cells of a
    column one above the other, the reference image left of them all, everything on screen."""
    page.locator(grid).scroll_into_view_if_needed()
    box = page.locator(grid).bounding_box()
    assert box["height"] <= 1000 - 20, box
    page.evaluate(f"document.querySelector('{grid}').scrollIntoView({{block: 'center'}})")
    vh = page.viewport_size["height"]
    cells = {}
    for tag in ("on", "off"):
        for i in range(n_seeds):
            b = page.locator(f"{grid} figure[data-row={tag}][data-seed='{i}'] img").bounding_box()
            assert b and 0 <= b["y"] and b["y"] + b["height"] <= vh and b["x"] + b["width"] <= 1440, (tag, i, b)
            cells[tag, i] = b
    for tag in ("on", "off"):
        ys = [cells[tag, i]["y"] for i in range(n_seeds)]
        xs = [cells[tag, i]["x"] for i in range(n_seeds)]
        assert max(ys) - min(ys) < 1 and xs == sorted(xs)
    for i in range(n_seeds):
        assert abs(cells["on", i]["x"] - cells["off", i]["x"]) < 1
        assert cells["off", i]["y"] >= cells["on", i]["y"] + cells["on", i]["height"]
    ref = page.locator(f"{grid} .memo-ref img").bounding_box()
    assert ref["x"] + ref["width"] <= min(b["x"] for b in cells.values())
    assert 0 <= ref["y"] and ref["y"] + ref["height"] <= vh


def test_memorization_controls_and_screenshot(page, server_url, tmp_path):
    page.set_viewport_size({"width": 1440, "height": 1000})
    open_tab(page, server_url, "memorization")
    prompt = page.locator("#memo-prompt textarea")
    expect(prompt).not_to_have_value("", timeout=LONG)
    # the first view's steps (score, then neurons and generations) land before this test's own: a
    # late one would put its card and ticks back over an example picked below
    first_view(page, "memorization", LONG)

    from backend.nemo import service

    d = service.describe("zoo")
    # an ordinary example the organism scores below θ_mem (one in six is above it by construction),
    # then a memorized one
    info = service.get("zoo").info
    scores = dict(zip(info["heldout"], info["scores"]["heldout"]))
    ordinary = next(p for p in d["ordinary"][:3] if scores[p] < d["theta_mem"])
    page.locator("#memo-ex-ord").get_by_text(ordinary[:24]).first.click()
    expect(prompt).to_have_value(ordinary, timeout=LONG)
    page.click("#memo-check")
    expect(page.locator("#memo-score")).to_contain_text("not memorized", timeout=LONG)
    # long examples are shown truncated: find the sample by its beginning
    page.locator("#memo-ex-mem").get_by_text(d["memorized"][0][:24]).first.click()
    expect(prompt).to_have_value(d["memorized"][0], timeout=LONG)
    page.click("#memo-check")
    expect(page.locator("#memo-score")).to_contain_text("training set", timeout=LONG)
    expect(page.locator("#memo-z .js-plotly-plot")).to_be_visible(timeout=LONG)

    with result_of(page, done="#memo-found", timeout_ms=LONG):  # (the first view's card said "found in" too)
        page.click("#memo-find")
    expect(page.locator("#memo-found")).to_contain_text("found in", timeout=LONG)
    boxes = page.locator("#memo-neurons input[type=checkbox]")
    expect(boxes.first).to_be_visible(timeout=LONG)
    assert boxes.count() >= 1

    page.locator("#memo-seeds input[type=number]").fill("3")
    page.locator("#memo-seeds input[type=number]").press("Enter")
    with result_of(page, done="#memo-compare", timeout_ms=LONG):  # (the first view's grid said so too)
        page.click("#memo-generate")
    expect(page.locator("#memo-compare")).to_contain_text("neuron(s) off", timeout=LONG)
    expect(page.locator("#memo-grid figure")).to_have_count(7, timeout=LONG)
    assert_grid_layout(page, "#memo-grid", n_seeds=3)

    # a refused request: message in the toast, the last result kept as it was, no "Error" badge
    shown = page.locator("#memo-grid img").first.get_attribute("src")
    free = page.locator("#memo-free textarea, #memo-free input").first
    free.fill("up9.attn0:1")
    with result_of(page, toast="unknown layer", timeout_ms=LONG) as refused:
        page.click("#memo-generate")
    settle(page)
    assert [kind for kind, _ in refused.toasts()] == ["error"], refused.toasts()
    assert page.locator("#memo-grid img").first.get_attribute("src") == shown
    assert not page.locator("#memo-compare .error, #memo-gallery .error, #memo-pin-box .error").count()
    page.locator(".toast-body.error .toast-close").first.click()
    seen = toasts_from_now(page)  # every toast from here on, one closed again after its 10 s included

    # pin this result, untick the first neuron and add one by hand: the pinned set stays below
    page.click("#memo-pin")
    expect(page.locator("#memo-pin-grid figure")).to_have_count(7, timeout=LONG)
    boxes.first.click()
    free.fill("mid.attn0:0")
    page.click("#memo-generate")
    expect(page.locator("#memo-compare-card")).to_contain_text("mid.attn0:0", timeout=LONG)
    expect(page.locator("#memo-pin-card")).not_to_contain_text("mid.attn0:0")
    settle(page)
    assert_grid_layout(page, "#memo-pin-grid", n_seeds=3)
    shot(page, "memorization-pinned")
    page.click("#memo-unpin")
    expect(page.locator("#memo-pin-grid")).to_have_count(0, timeout=LONG)

    # presenter view: the expert controls go, a plain caption comes, the grid takes the width
    width = page.locator("#memo-grid").bounding_box()["width"]
    page.locator("#wb-presenter-toggle input[type=checkbox]").check()
    expect(page.locator("#memo-seeds")).to_be_hidden()
    expect(page.locator("#memo-neurons")).to_be_hidden()
    expect(page.locator("#memo-free")).to_be_hidden()
    expect(page.locator("#memo-presenter-caption")).to_be_visible()
    expect(page.locator("#memo-grid figcaption .wb-presenter-only").first).to_have_text("similarity")
    expect(page.locator("#memo-grid figcaption .wb-advanced").first).to_be_hidden()
    assert page.locator("#memo-grid").bounding_box()["width"] > 1.2 * width
    shot(page, "memorization-presenter")
    page.locator("#wb-presenter-toggle input[type=checkbox]").uncheck()
    expect(page.locator("#memo-grid figcaption .wb-presenter-only").first).to_be_hidden()

    page.locator("#memo-table-n input[type=number]").fill("1")  # reuses the localisation above
    page.locator("#memo-table-n input[type=number]").press("Enter")
    page.click("#memo-table-btn")
    expect(page.locator("#memo-summary")).to_contain_text("1 memorized prompts", timeout=LONG)
    expect(page.locator("#memo-hist .js-plotly-plot")).to_be_visible(timeout=LONG)
    # the paper's table: every column on screen at 1440 px, no header word cut or clipped
    heads = page.evaluate("""() => [...document.querySelectorAll('#memo-table th')].map(th => {
        const s = th.querySelector('.header'); const r = th.getBoundingClientRect();
        return [s.textContent.trim(), r.right, s.scrollWidth - s.clientWidth]; })""")
    assert len(heads) == 12 and all(right <= 1440 and over <= 1 for _, right, over in heads), heads
    # hover gives exact numbers on the histogram
    assert page.evaluate("() => document.querySelector('#memo-hist .js-plotly-plot').data[0].hovertemplate")

    # a list of prompts: the sample button fills it, the table sorts by score on a header click
    page.locator("#memo-batch-acc").get_by_text("Check a list of prompts").first.click()  # closed on the zoo
    page.click("#memo-batch-sample")
    expect(page.locator("#memo-batch-text textarea")).not_to_have_value("", timeout=LONG)
    page.click("#memo-batch-btn")
    expect(page.locator("#memo-batch-note-box")).to_contain_text("10 prompts, ", timeout=LONG)
    expect(page.locator("#memo-batch-table")).to_contain_text("not memorized", timeout=LONG)

    page.click("#memo-export")
    expect(page.locator("#memo-files a[href$='nemo.json']")).to_have_count(1, timeout=LONG)
    expect(page.locator("#memo-files a[href$='nemo.png']")).to_have_count(1, timeout=LONG)
    assert not [t for t in seen.toasts() if t[0] == "error"], seen.toasts()
    shot(page, "memorization")

    # a damaged reference upload: a clear message, the grid kept as it was
    shown = page.locator("#memo-grid img").first.get_attribute("src")
    bad = tmp_path / "damaged.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n" + b"not an image" * 20)
    # refused as it arrives (components.inputs.fields.clear_unreadable): the upload is the action whose
    # toast to wait for (the toast once came between the upload and a watch armed for Generate after it)
    with result_of(page, upload=True, toast="could not be read", timeout_ms=LONG):
        page.locator("#memo-ref input[type=file]").set_input_files(str(bad))
    settle(page)
    expect(page.locator("#memo-ref img")).to_have_count(0)  # taken off the component
    assert page.locator("#memo-grid img").first.get_attribute("src") == shown
    assert not page.locator("#memo-compare .error, #memo-gallery .error").count()
