"""Presenter view: every tab's key figure lies wholly inside the first screen, at 1000×800 and at
1440×900, before any scrolling. Once, Relevance's heatmap ran from 270 to 909 px at 1000×800 (its
fourth method cut) and Memorization's comparison to 930 px (1,018 px at 1440×900)."""

import pytest

from components import tabs
from tests.e2e.conftest import first_view, settle, shot
from tests.helpers.browser import chromium_page

pytestmark = pytest.mark.timeout(600)
KEY_FIGURE = {t.id: t.key_figure for t in tabs() if t.paper}  # the papers' tabs (components.tab.Tab)


@pytest.mark.parametrize("width,height", [(1000, 800), (1440, 900)])
def test_every_key_figure_is_whole_on_the_first_screen(server_url, width, height):
    outside = {}
    with chromium_page(width, height) as page:
        for tab, sel in KEY_FIGURE.items():
            page.goto(f"{server_url}?tab={tab}&presenter=1")
            page.wait_for_selector(f"#tab-{tab}", state="visible")
            first_view(page, tab)
            settle(page)
            page.wait_for_function("() => window.scrollY === 0")
            box = page.evaluate(f"""() => {{ const r = document.querySelector('{sel}').getBoundingClientRect();
                                             return [r.top, r.bottom, r.height]; }}""")
            shot(page, f"keyfig-{tab}-{width}")
            if not (box[2] > 50 and box[0] >= 0 and box[1] <= height):
                outside[tab] = box
    assert not outside, f"key figures not whole on the first {width}×{height} screen (top, bottom, height): {outside}"
