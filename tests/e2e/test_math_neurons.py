"""The Math neurons tab in Chromium: every control once, then a screenshot."""

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import open_tab, settle, shot
from tests.helpers.waits import block_busy, hover_until_shown, plots_fitted, result_of, toasts_from_now

pytestmark = pytest.mark.timeout(420)
LONG = 150_000


def set_slider(page, elem_id: str, value: str):
    box = page.locator(f"#{elem_id} input[type=number]")
    box.fill(value)
    box.press("Enter")


def test_math_neurons_controls_and_screenshot(page, server_url):
    open_tab(page, server_url, "math_neurons")
    seen = toasts_from_now(page)  # every toast of the test, one closed again after its 10 s included
    acc = page.locator("#mn-acc")
    # The default setting (MathNeuro, K 15 %, pruned) is evaluated when the page opens on the tab.
    expect(acc).to_contain_text("MathNeuro set pruned", timeout=LONG)
    expect(page.locator("#mn-samples")).to_contain_text("✓", timeout=LONG)

    page.locator("#mn-method").get_by_text("Random (same count)").click()
    expect(acc).to_contain_text("Random (same count) set pruned", timeout=LONG)
    page.locator("#mn-method").get_by_text("MathNeuro").click()
    expect(acc).to_contain_text("MathNeuro set pruned", timeout=LONG)

    set_slider(page, "mn-k", "10")
    set_slider(page, "mn-factor", "1.1")
    set_slider(page, "mn-n", "32")
    page.click("#mn-run")
    expect(acc).to_contain_text("scaled × 1.1", timeout=LONG)
    expect(acc).to_contain_text("K = 10 %", timeout=LONG)
    expect(acc).to_contain_text("32 samples", timeout=LONG)

    page.click("#mn-fig2-btn")
    expect(page.locator("#mn-fig2 .js-plotly-plot")).to_be_visible(timeout=LONG)
    page.click("#mn-curve-btn")
    expect(page.locator("#mn-curve .js-plotly-plot")).to_be_visible(timeout=LONG)
    page.click("#mn-cons-btn")
    expect(page.locator("#mn-cons .js-plotly-plot")).to_be_visible(timeout=LONG)
    expect(page.locator("#mn-layers .js-plotly-plot")).to_be_visible(timeout=LONG)

    page.locator("#mn-prompt textarea").fill("kim has 41 eggs . she buys 27 more . how many eggs does kim have now ?")
    page.click("#mn-ask-btn")
    expect(page.locator("#mn-ask-out")).to_contain_text("unmodified:", timeout=LONG)

    page.click("#mn-export-btn")
    expect(page.locator("#mn-files a[href$='mathneuro.json']")).to_have_count(1, timeout=LONG)
    expect(page.locator("#mn-files a[href$='mathneuro.png']")).to_have_count(1, timeout=LONG)
    assert not [t for t in seen.toasts() if t[0] == "error"], seen.toasts()
    shot(page, "math_neurons")


def test_a_refused_number_leaves_the_last_view_clean(page, server_url):
    """K = 500 is refused in the toast with the range; the accuracies on screen stay as they were,
    no result block carries an 'Error' badge, and the box shows the setting on screen again (so the
    next click cannot compute with a value the browser clamped). A failing computation (an empty
    question) leaves its block clean too."""
    open_tab(page, server_url, "math_neurons")
    acc = page.locator("#mn-acc")
    expect(acc).to_contain_text("K = 3 %", timeout=LONG)
    before = acc.inner_text()
    box = page.locator("#mn-k input[type=number]")
    box.fill("500")
    with result_of(page, toast="K must be between 1 % and 30 % (got 500 %)", timeout_ms=30_000):
        box.press("Tab")  # the slider sends its value when the box loses focus
    expect(box).to_have_value("3")
    assert acc.inner_text() == before
    badges = page.locator("#tab-math_neurons .wrap span.error")
    expect(badges).to_have_count(0)

    page.locator("#mn-prompt textarea").fill("   ")
    # (the K toast may still be up, and a toast joining its group closes with it, before its 10 s)
    with result_of(page, toast="Type a question first", timeout_ms=30_000):
        page.click("#mn-ask-btn")
    settle(page)  # the refused event has ended: a badge it left would show now
    expect(badges).to_have_count(0)
    with block_busy(page, "#mn-acc"):  # the same setting again: computed, not a quiet page before it
        page.click("#mn-run")
    settle(page, LONG)  # its timer gone
    assert acc.inner_text() == before
    shot(page, "math_neurons-refused")


def test_pin_a_result_and_compare_it_in_presenter_view(page, server_url):
    """'Pin this result' keeps K = 3 % beside K = 10 % in the accuracy figure; presenter view shows
    that figure large with a one-line caption and hides the expert controls; 'Clear pin' drops it."""
    open_tab(page, server_url, "math_neurons")
    acc, fig = page.locator("#mn-acc"), page.locator("#mn-accfig")
    expect(acc).to_contain_text("K = 3 %", timeout=LONG)
    expect(fig.locator(".legendtext")).to_have_count(2, timeout=LONG)
    page.click("#mn-pin")
    expect(fig.locator(".legendtext", has_text="pinned: MathNeuro, K 3 %, pruned")).to_have_count(1)
    box = page.locator("#mn-k input[type=number]")
    box.fill("10")
    box.press("Tab")
    expect(acc).to_contain_text("K = 10 %", timeout=LONG)
    legend = fig.locator(".legendtext")
    expect(legend).to_have_text(
        ["unmodified", "now: MathNeuro, K 10 %, pruned", "pinned: MathNeuro, K 3 %, pruned"], timeout=LONG
    )
    expect(fig.locator(".trace.bars")).to_have_count(3)
    # exact values on hover (plotly reads the pointer)
    hover_until_shown(page, "#mn-accfig .trace.bars .point", 0, "#mn-accfig .hoverlayer .hovertext")
    expect(fig.locator(".hoverlayer")).to_contain_text("math accuracy: 78.0 %")

    page.locator("#wb-presenter-toggle input").check()
    expect(page.locator("body.wb-presenter")).to_have_count(1)
    expect(page.locator("#tab-math_neurons .block.wb-presenter-only")).to_contain_text("Switch off the few weights")
    for hidden in ("#mn-acc", "#mn-n", "#mn-samples", "#mn-layers", "#mn-cons"):
        expect(page.locator(hidden)).to_be_hidden()
    expect(page.locator("#mn-export-btn")).to_be_visible()  # a presenter can hand a result out
    plots_fitted(page, "#mn-accfig")  # plotly re-fits to the wider column
    page.evaluate("window.scrollTo(0, 0)")
    box_ = fig.bounding_box()
    assert box_["height"] >= 0.5 * 900 and box_["y"] + box_["height"] < 1000, box_  # large, on the first screen
    shot(page, "math_neurons-presenter-pinned")
    page.locator("#wb-presenter-toggle input").uncheck()
    page.click("#mn-unpin")
    expect(legend).to_have_text(["unmodified", "now: MathNeuro, K 10 %, pruned"])


def test_math_neurons_on_your_own_llama_folder(page, server_url, local_models):
    """A user's Llama-3.2-style folder typed into the picker: checked from its config (class, size) before
    loading, then the main action prunes its MathNeuro set and shows its accuracy."""
    from tests.e2e.test_own_models import open_and_pick

    line, errors = open_and_pick(page, server_url, "math_neurons", "#mn-run", "mn-model", local_models / "own-llama")
    seen = toasts_from_now(page)  # every toast from here on, one closed again after its 10 s included
    assert "LlamaForCausalLM" in line and "parameters" in line and not line.startswith("✗"), line
    # the data card names the chat template the questions go through and the answer rule
    expect(page.locator("#mn-data")).to_contain_text("chat template", timeout=LONG)
    expect(page.locator("#mn-data")).to_contain_text("last number", timeout=LONG)
    set_slider(page, "mn-k", "3")
    set_slider(page, "mn-n", "16")
    page.click("#mn-run")
    acc = page.locator("#mn-acc")
    # the slider releases queue runs of their own; the one to wait for has both new numbers
    expect(acc).to_contain_text("16 samples", timeout=LONG)
    expect(acc).to_contain_text("K = 3 %", timeout=LONG)
    expect(acc).to_contain_text("MathNeuro set pruned", timeout=LONG)
    expect(page.locator("#tab-math_neurons .wrap.pending")).to_have_count(0, timeout=LONG)
    expect(page.locator("#mn-accfig .js-plotly-plot")).to_be_visible(timeout=LONG)
    expect(page.locator("#mn-data")).to_contain_text("own-llama")
    settle(page)
    assert not [t for t in seen.toasts() if t[0] == "error"], seen.toasts()
    shot(page, "math-own-model")
    assert not errors, errors
