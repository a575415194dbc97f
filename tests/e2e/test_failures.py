"""Issue 26: a refused or failed action leaves the view clean in Chromium: the message in a toast,
no server error, no "[object Object]", no Error badge, no broken-image icon."""
from playwright.sync_api import expect

from tests.e2e.conftest import open_tab, settle, shot

BROKEN_PNG = b"\x89PNG\r\n\x1a\nnot really a png"


def _no_badges(page, scope: str):
    expect(page.locator(f"{scope} .wrap span.error")).to_have_count(0, timeout=10_000)


def test_math_answer_on_an_empty_question_says_so(page, server_url):
    open_tab(page, server_url, "math_neurons")
    page.locator("#mn-ask-btn").click()
    page.locator("#mn-ask-out").get_by_text("unmodified").wait_for(timeout=120_000)
    before = page.locator("#mn-ask-out").inner_text()
    page.locator("#mn-prompt textarea").fill("")
    page.locator("#mn-ask-btn").click()
    expect(page.locator(".toast-body").filter(has_text="Type a question first")).to_have_count(1, timeout=30_000)
    settle(page)  # the refused event and whatever it chains have ended
    # the single-output follow-up once failed with a server error and left "[object Object]"
    assert page.locator("#mn-ask-out").inner_text() == before
    assert "[object Object]" not in page.locator("#tab-math_neurons").inner_text()
    _no_badges(page, "#tab-math_neurons")
    shot(page, "math-empty-question")


def test_failed_features_load_leaves_no_error_badge(page, server_url):
    open_tab(page, server_url, "features")
    page.locator("#features-own").get_by_text("Model and SAE").first.click()
    page.locator("#feat-sae textarea, #feat-sae input").first.fill("/nonexistent/sae-folder")
    page.locator("#feat-load").click()
    expect(page.locator(".toast-body")).to_have_count(1, timeout=60_000)
    settle(page)  # the refused event and whatever it chains have ended
    _no_badges(page, "#tab-features")
    expect(page.locator("#features-summary")).not_to_have_text("")
    shot(page, "features-failed-load")


def test_a_corrupt_upload_is_refused_and_taken_off(page, server_url, tmp_path):
    bad = tmp_path / "broken.png"
    bad.write_bytes(BROKEN_PNG)
    open_tab(page, server_url, "relevance")
    page.locator("#rel-image input[type='file']").set_input_files(str(bad))
    expect(page.locator(".toast-body").filter(has_text="broken.png could not be read as an image")).to_have_count(
        1, timeout=30_000)
    settle(page)  # the refused event and whatever it chains have ended
    # taken off the component: no <img> left to show as a broken icon, and no Error badge
    expect(page.locator("#rel-image img")).to_have_count(0, timeout=10_000)
    _no_badges(page, "#tab-relevance")
    shot(page, "relevance-corrupt-upload")
