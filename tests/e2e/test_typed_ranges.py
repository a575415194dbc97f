"""A number typed into a slider's box past its range, in Chromium: refused with the range (the API's
own message), nothing computed, and the box shows the value in use (components.serving.range_guard).

Gradio's slider used to clamp it silently and compute: held-out example 500 loaded example 199,
Memorization seeds 99 became 8 and 0 became 1, and Math's card said "scaled × 2" after "5" was
refused while its box went back to 0.5.
"""

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import open_tab, settle, shot
from tests.helpers import waits

pytestmark = pytest.mark.timeout(300)
LONG = 150_000


def api_refusal(server_url, *args, api_name) -> str:
    from gradio_client import Client
    from gradio_client.exceptions import AppError

    with pytest.raises(AppError) as e:
        Client(server_url, verbose=False).predict(*args, api_name=api_name)
    return str(e.value)


def test_held_out_example_past_the_range_is_refused_and_nothing_loads(page, server_url):
    open_tab(page, server_url, "relevance")
    box = page.locator("#rel-ex-idx input[type=number]")
    box.scroll_into_view_if_needed()
    box.fill("7")
    box.press("Enter")
    page.click("#rel-ex-load")
    expect(page.locator("#rel-image img")).to_have_count(1, timeout=LONG)
    settle(page, LONG)
    shown = page.locator("#rel-image img").get_attribute("src")

    box.fill("500")
    message = "The held-out example must be a whole number between 0 and 199 (got 500). Nothing was computed."
    with waits.result_of(page, toast=message, timeout_ms=30_000):
        page.click("#rel-ex-load")  # the click that leaves the box: refused, and it loads nothing
    expect(box).to_have_value("7")
    settle(page, LONG)  # whatever the click started has ended: a clamped load would have shown
    assert page.locator("#rel-image img").get_attribute("src") == shown  # example 199 never loaded
    assert message in api_refusal(server_url, 500, api_name="/image_example")  # the same words as the API
    shot(page, "typed-range-relevance")


@pytest.mark.parametrize("typed", ["99", "0"])
def test_memorization_seeds_past_the_range_are_refused_not_clamped(page, server_url, typed):
    open_tab(page, server_url, "memorization")
    box = page.locator("#memo-seeds input[type=number]")
    box.scroll_into_view_if_needed()
    before = box.input_value()
    box.fill(typed)
    message = f"The number of seeds must be a whole number between 1 and 8 (got {typed}). Nothing was computed."
    with waits.result_of(page, toast=message, timeout_ms=30_000):
        box.press("Tab")
    expect(box).to_have_value(before)  # neither 8 nor 1: the value in use
    settle(page)  # and it stays so once every event the typing started has ended
    expect(box).to_have_value(before)
    if typed == "99":
        shot(page, "typed-range-memorization")


def test_math_card_agrees_with_the_box_after_a_refusal(page, server_url):
    open_tab(page, server_url, "math_neurons")
    acc = page.locator("#mn-acc")
    expect(acc).to_contain_text("MathNeuro set pruned", timeout=LONG)
    box = page.locator("#mn-factor input[type=number]")
    box.fill("0.5")
    box.press("Enter")
    page.click("#mn-run")
    expect(acc).to_contain_text("scaled × 0.5", timeout=LONG)
    settle(page, LONG)
    box.fill("5")
    with waits.result_of(
        page, toast="The scale factor must be between 0 and 2 (got 5). Nothing was computed.", timeout_ms=30_000
    ) as refused:
        page.click("#mn-run")
    settle(page, LONG)
    expect(box).to_have_value("0.5")
    assert "scaled × 0.5" in acc.inner_text() and "× 2" not in acc.inner_text()
    # one refusal, one toast: counted one by one (Gradio shows a kind's toasts in one `.toast-body`)
    assert len([t for _, t in refused.toasts() if "got 5" in t]) == 1, refused.toasts()
    shot(page, "typed-range-math")


def test_enter_in_a_number_box_computes_as_tab_does(page, server_url):
    """Math's factor 0.5 + Enter used to send nothing while Tab computed; after "5" is refused the
    card and the box agree on 0.5."""
    open_tab(page, server_url, "math_neurons")
    acc = page.locator("#mn-acc")
    expect(acc).to_contain_text("MathNeuro set pruned", timeout=LONG)
    box = page.locator("#mn-factor input[type=number]")
    box.fill("0.5")
    box.press("Enter")  # no click on Apply
    expect(acc).to_contain_text("scaled × 0.5", timeout=LONG)
    settle(page, LONG)
    box.fill("5")
    with waits.result_of(page, toast="(got 5). Nothing was computed.", timeout_ms=30_000):
        box.press("Enter")
    with waits.block_busy(page, "#mn-acc"):  # Enter refused it: this click is the user's next action and computes
        page.click("#mn-run")
    settle(page, LONG)  # its end
    expect(box).to_have_value("0.5")
    assert "scaled × 0.5" in acc.inner_text() and "pruned" not in acc.inner_text()


def test_a_refusal_by_tab_soon_after_a_click_lets_the_next_click_compute(page, server_url):
    """Only the click whose press left a refused box is swallowed. It was any click within 300 ms of
    the last pointer press: a click elsewhere, a quick fill and Tab, and the user's next click on
    Analyse computed nothing (a fresh-clone run of the Adapters test saw it)."""
    open_tab(page, server_url, "math_neurons")
    acc = page.locator("#mn-acc")
    expect(acc).to_contain_text("MathNeuro set pruned", timeout=LONG)
    settle(page, LONG)
    box = page.locator("#mn-factor input[type=number]")
    page.click("#mn-explain")  # a press on text: no event of its own
    box.fill("5")  # at once: well within 300 ms of that press
    with waits.result_of(page, toast="(got 5). Nothing was computed.", timeout_ms=30_000):
        box.press("Tab")
    with waits.block_busy(page, "#mn-acc"):  # the user's next action computes
        page.click("#mn-run")
    settle(page, LONG)
    expect(box).to_have_value("0")
    assert "pruned" in acc.inner_text()
