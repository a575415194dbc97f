"""Issue 26: a refused or failed action leaves the view clean in Chromium: the message in a toast,
no server error, no "[object Object]", no Error badge, no broken-image icon."""

from playwright.sync_api import expect

from tests.e2e.conftest import open_tab, settle, shot
from tests.helpers.waits import result_of, statuses_cleared

BROKEN_PNG = b"\x89PNG\r\n\x1a\nnot really a png"


def _no_badges(page, scope: str):
    expect(page.locator(f"{scope} .wrap span.error")).to_have_count(0, timeout=10_000)


def _only_toast(result, text: str) -> None:
    """The action showed exactly one toast, an error saying `text` (Gradio groups the toasts of a
    kind in one `.toast-body`, so the toasts themselves are counted, as the watch saw them)."""
    toasts = result.toasts()
    assert len(toasts) == 1 and toasts[0][0] == "error" and text in toasts[0][1], toasts


def test_math_answer_on_an_empty_question_says_so(page, server_url):
    open_tab(page, server_url, "math_neurons")
    # the answer box is empty until asked; its event starts after a check with no outputs
    with result_of(page, done="#mn-ask-out", changed={"#mn-ask-out": "unmodified"}, timeout_ms=120_000):
        page.locator("#mn-ask-btn").click()
    before = page.locator("#mn-ask-out").inner_text()
    page.locator("#mn-prompt textarea").fill("")
    with result_of(page, toast="Type a question first", timeout_ms=30_000) as refused:
        page.locator("#mn-ask-btn").click()
    settle(page)  # the refused event and whatever it chains have ended
    statuses_cleared(page, ["#mn-ask-out"], 10_000)  # the hidden follow-up's timer is in the block's text
    _only_toast(refused, "Type a question first")
    # the single-output follow-up once failed with a server error and left "[object Object]"
    assert page.locator("#mn-ask-out").inner_text() == before
    assert "[object Object]" not in page.locator("#tab-math_neurons").inner_text()
    _no_badges(page, "#tab-math_neurons")
    shot(page, "math-empty-question")


# what backend.sae.loading.own_organism answers for the zoo's model with an SAE named beside it
ZOO_WITH_SAE = "the zoo organism comes with its own SAE and index: pick it with the SAE box empty"


def test_failed_features_load_leaves_no_error_badge(page, server_url):
    open_tab(page, server_url, "features")
    # The accordion is closed: Gradio renders its boxes as it opens and writes their stored values
    # (an empty SAE box) over them a frame or two later. A folder typed in between was wiped, the
    # click loaded the zoo's own model and SAE, and no toast ever came (issue 53).
    with result_of(page, rendered="#feat-sae"):
        page.locator("#features-own").get_by_text("Model and SAE").first.click()
    sae = page.locator("#feat-sae textarea")
    sae.fill("/nonexistent/sae-folder")
    expect(sae).to_have_value("/nonexistent/sae-folder")
    with result_of(page, toast=ZOO_WITH_SAE, timeout_ms=60_000) as refused:
        page.locator("#feat-load").click()
    settle(page)  # the refused event and whatever it chains have ended
    _only_toast(refused, ZOO_WITH_SAE)
    _no_badges(page, "#tab-features")
    expect(page.locator("#features-summary")).not_to_have_text("")
    shot(page, "features-failed-load")


def test_a_corrupt_upload_is_refused_and_taken_off(page, server_url, tmp_path):
    bad = tmp_path / "broken.png"
    bad.write_bytes(BROKEN_PNG)
    open_tab(page, server_url, "relevance")
    with result_of(page, toast="broken.png could not be read as an image", timeout_ms=30_000) as refused:
        page.locator("#rel-image input[type='file']").set_input_files(str(bad))
    settle(page)  # the refused event and whatever it chains have ended
    _only_toast(refused, "broken.png could not be read as an image")
    # taken off the component: no <img> left to show as a broken icon, and no Error badge
    expect(page.locator("#rel-image img")).to_have_count(0, timeout=10_000)
    _no_badges(page, "#tab-relevance")
    shot(page, "relevance-corrupt-upload")
