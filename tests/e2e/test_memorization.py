"""The Memorization tab in Chromium: every control once, then a screenshot."""
import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import open_tab, shot

pytestmark = pytest.mark.timeout(600)
LONG = 240_000


def test_memorization_controls_and_screenshot(page, server_url):
    open_tab(page, server_url, "memorization")
    prompt = page.locator("#memo-prompt textarea")
    expect(prompt).not_to_have_value("", timeout=LONG)

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

    page.click("#memo-find")
    expect(page.locator("#memo-found")).to_contain_text("found in", timeout=LONG)
    boxes = page.locator("#memo-neurons input[type=checkbox]")
    expect(boxes.first).to_be_visible(timeout=LONG)
    assert boxes.count() >= 1

    page.locator("#memo-seeds input[type=number]").fill("3")
    page.locator("#memo-seeds input[type=number]").press("Enter")
    page.click("#memo-generate")
    expect(page.locator("#memo-compare")).to_contain_text("neuron(s) off", timeout=LONG)
    expect(page.locator("#memo-gallery img")).to_have_count(7, timeout=LONG)

    # untick the first neuron and add one by hand
    boxes.first.click()
    page.locator("#memo-free textarea, #memo-free input").first.fill("mid.attn0:0")
    page.click("#memo-generate")
    expect(page.locator("#memo-compare")).to_contain_text("mid.attn0:0", timeout=LONG)

    page.locator("#memo-table-n input[type=number]").fill("1")  # reuses the localisation above
    page.locator("#memo-table-n input[type=number]").press("Enter")
    page.click("#memo-table-btn")
    expect(page.locator("#memo-summary")).to_contain_text("1 memorized prompts", timeout=LONG)
    expect(page.locator("#memo-hist .js-plotly-plot")).to_be_visible(timeout=LONG)

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
    assert not page.locator(".toast-body.error").count()
    shot(page, "memorization")
