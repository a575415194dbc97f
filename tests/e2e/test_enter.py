"""One rule for Enter in every box (components.inputs.enter): Enter in a one-line box runs that box's
action, Ctrl+Enter (⌘+Enter) in a multi-line box runs it and the box says so, plain Enter there
starts a new line. Once, Enter computed in two boxes, did nothing in three and only broke the line
in two."""

import pytest
from playwright.sync_api import expect

from components.inputs.enter import MULTI_HINT
from tests.e2e.conftest import first_view, open_tab, settle, shot

pytestmark = pytest.mark.timeout(420)

# (tab, the box's element id, the button it runs, multi-line, the accordion it is in: its id and
# label); the zoo's boxes (Features' SAE and folder boxes show with hub checkpoints, Relevance's
# label words and prompt with an uploaded sentence file)
BOXES = [
    ("relevance", "rel-text", "rel-explain", True, None),
    ("relevance", "rel-target", "rel-explain", False, None),
    ("relevance", "rel-long-text", "rel-long-explain", True, ("rel-long-acc", "Long-range")),
    ("features", "features-id", "features-open", False, None),
    ("features", "features-steer-id", "features-steer", False, None),
    ("features", "features-clamp", "features-steer", False, None),
    ("memorization", "memo-prompt", "memo-check", True, None),
    ("memorization", "memo-free", "memo-generate", False, None),
    ("memorization", "memo-stats-own", "memo-stats-btn", True, ("memo-stats-acc", "Neuron statistics from the tab")),
    ("memorization", "memo-batch-text", "memo-batch-btn", True, ("memo-batch-acc", "Check a list of prompts")),
    ("math_neurons", "mn-prompt", "mn-ask-btn", False, None),
    ("adapters", "pissa-lr", "pissa-start", False, None),
]

# Records which button a key clicked and stops the click there (capture phase, before the button's
# own handler): the rule is checked without running every action.
_SPY = """() => {
  window.wbClicked = [];
  if (window.wbSpy) return;
  window.wbSpy = true;
  document.addEventListener('click', (e) => {
    const b = e.target.closest && e.target.closest('button[id]');
    if (b && window.wbSpying) { window.wbClicked.push(b.id); e.stopImmediatePropagation(); e.preventDefault(); }
  }, true);
}"""


def _box(page, elem_id: str):
    return page.locator(f"#{elem_id} textarea, #{elem_id} input:not([type=range])").first


def _keys(page, box, key: str) -> list[str]:
    page.evaluate(_SPY)
    page.evaluate("() => { window.wbSpying = true; }")
    box.focus()
    box.press(key)
    page.wait_for_timeout(0)  # the listener clicks on the next task
    page.evaluate("() => new Promise((r) => setTimeout(r, 50))")
    clicked = page.evaluate("() => window.wbClicked")
    page.evaluate("() => { window.wbSpying = false; }")
    return clicked


@pytest.mark.parametrize("tab", sorted({t for t, *_ in BOXES}))
def test_enter_runs_the_boxs_action_and_ctrl_enter_a_multiline_one(page, server_url, tab):
    open_tab(page, server_url, tab)
    first_view(page, tab)
    settle(page)
    for _, elem_id, button, multi, accordion in [b for b in BOXES if b[0] == tab]:
        holder = page.locator(f"#{elem_id}")
        if accordion and not holder.is_visible():
            page.locator(f"#{accordion[0]}").get_by_text(accordion[1]).first.click()
        expect(holder).to_be_visible()
        box = _box(page, elem_id)
        box.scroll_into_view_if_needed()
        if multi:
            expect(holder).to_contain_text(MULTI_HINT)
            before = box.input_value()
            assert _keys(page, box, "Enter") == [], f"{elem_id}: plain Enter ran an action"
            assert box.input_value().count("\n") == before.count("\n") + 1, f"{elem_id}: Enter made no new line"
            box.fill(before)
            assert _keys(page, box, "Control+Enter") == [button], elem_id
            assert _keys(page, box, "Meta+Enter") == [button], elem_id
        else:
            assert _keys(page, box, "Enter") == [button], elem_id
    shot(page, f"enter-{tab}")


def test_ctrl_enter_in_the_text_explains_it(page, server_url):
    """The key runs what the button runs: the heatmap of the new sentence."""
    open_tab(page, server_url, "relevance")
    first_view(page, "relevance")
    box = _box(page, "rel-text")
    box.fill("an utterly delightful story with a dull middle")
    box.press("Control+Enter")
    expect(page.locator("#rel-heatmap")).to_contain_text("delightful", timeout=120_000)
    settle(page)
