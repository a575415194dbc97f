"""The Features tab's contrast of two image sets and its several-clamps steering, in Chromium at 1440
and 1000 px: a concept contrast drawn with its table and CSV, a row opening its feature page, a
refused filter said in a toast, and each clamp alone beside all together."""

import pytest

from backend.core.presets import ZOO_ROOT as _ZOO_ROOT
from tests.e2e.conftest import first_view, shot
from tests.helpers.browser import chromium_page
from tests.helpers.waits import result_of

if not (_ZOO_ROOT / "llava-scenes-sae" / "manifest.json").exists():
    pytest.skip("the Features organism is not built", allow_module_level=True)

pytestmark = pytest.mark.timeout(300)


@pytest.mark.parametrize("width", [1440, 1000])
def test_contrast_and_several_clamps(server_url, width):
    from backend.sae import loading
    from backend.sae.contrast_scenes import concept_features

    org = loading.get_organism("zoo")
    red, blue = ({str(f) for f in concept_features(org, c)} for c in ("red", "blue"))  # a colour may have several
    with chromium_page(width, 900) as page:
        page.set_default_timeout(60_000)
        page.goto(f"{server_url}?tab=features")
        first_view(page, "features")
        run = page.locator("#features-contrast-run")
        run.scroll_into_view_if_needed()
        with result_of(page, done="#features-contrast-plot"):
            run.click()
        head = page.locator("#features-contrast-summary").inner_text()
        assert "tested features" in head and "fire differently" in head, head
        table = page.locator("#features-contrast-table")
        rows = table.locator("[role=row].virtual-row")  # Gradio's virtual table: one div per body row

        def cell(row, col=0):  # as shown: aria-rowindex counts the header as 1
            return table.locator(f"[role=gridcell][aria-rowindex='{row + 2}'][aria-colindex='{col + 1}']")

        assert rows.count() >= 2
        top2 = [cell(i).inner_text().strip() for i in range(2)]
        assert len(set(top2) & red) == 1 and len(set(top2) & blue) == 1, (top2, red, blue)
        assert page.locator("#features-contrast-plot .js-plotly-plot").count() == 1
        assert page.locator("#features-contrast-csv a, #features-contrast-csv .file-preview").count() >= 1
        assert page.locator("#features-contrast-images img").count() == 10
        page.locator("#features-contrast-plot").scroll_into_view_if_needed()
        shot(page, f"features-contrast-{width}")
        # a row opens that feature's page
        shown = page.locator("#features-header").inner_text()
        row = next(i for i in range(rows.count()) if f"Feature {cell(i).inner_text().strip()} " not in shown + " ")
        wanted = cell(row).inner_text().strip()
        with result_of(page, done="#features-header") as clicked:
            cell(row).click()
        assert f"Feature {wanted}" in page.locator("#features-header").inner_text()
        assert clicked.toasts() == []
        # a filter the scenes do not know: a toast naming the known concepts, the last result kept
        page.locator("#features-contrast-a textarea, #features-contrast-a input").first.fill("purple")
        with result_of(page, toast="unknown concept"):
            run.click()
        assert rows.count() >= 2 and cell(0).inner_text().strip() in top2
        # several clamps: no clamp, each alone, all together
        page.locator("#features-steer-id input").fill(min(red, key=int))
        page.locator("#features-more-clamps textarea, #features-more-clamps input").first.fill(
            f"{min(blue, key=int)}=3"
        )
        many = page.locator("#features-steer-many")
        many.scroll_into_view_if_needed()
        with result_of(page, done="#features-steer-many-out"):
            many.click()
        table = page.locator("#features-steer-many-out").inner_text()
        assert "no clamp" in table and "alone" in table and "all together" in table, table
        page.locator("#features-steer-many-out").scroll_into_view_if_needed()
        shot(page, f"features-several-clamps-{width}")
