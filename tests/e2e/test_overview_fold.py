"""The Overview's first screen shows all five instruments and the one obvious first step (the guided
tour) at 1000×800 and 1440×900: once, the Adapters card and the tour lay below the fold at 1000 px."""

import pytest

from tests.e2e.conftest import settle, shot
from tests.helpers.browser import chromium_page

pytestmark = pytest.mark.timeout(300)


@pytest.mark.parametrize("width,height", [(1000, 800), (1440, 900)])
def test_five_instruments_and_the_start_on_the_first_screen(server_url, width, height):
    with chromium_page(width, height) as page:
        page.goto(f"{server_url}?tab=overview")
        page.wait_for_selector("#overview-tour-all", state="visible")
        settle(page)
        start = page.locator("#overview-tour-all").bounding_box()
        cards = [page.locator(".wb-instrument .wb-card").nth(i).bounding_box() for i in range(5)]
        opens = [
            page.get_by_role("button", name=f"Open {t} →").bounding_box()
            for t in ("Relevance", "Features", "Memorization", "Math neurons", "Adapters")
        ]
        shot(page, f"overview-fold-{width}")
    for box in [start, *cards, *opens]:
        assert box is not None and box["y"] >= 0 and box["y"] + box["height"] <= height, (box, height)
    assert len({round(c["y"]) for c in cards}) == 1  # one row
    assert start["y"] < min(c["y"] for c in cards)  # the first step comes first
