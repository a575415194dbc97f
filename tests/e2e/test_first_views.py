"""Each tab's default first view on the zoo, kept (components.serving.first_views): a server computes them in
the background at its start and keeps them on disk; every tab then opens on its kept view, drawn as
a live one is, and a restarted server reads them back instead of computing them again. (How fast:
benchmarks/first_views.py, against the same app computing them live.)"""

import time

import pytest

from components import tabs
from tests.conftest import ARTIFACTS
from tests.e2e.conftest import FIRST_VIEW, first_view, settle, shot
from tests.helpers.browser import chromium_page
from tests.helpers.server import serve
from tests.helpers.until import until

pytestmark = pytest.mark.timeout(900)
TABS = [t.id for t in tabs() if t.id != "overview"]  # every tab that computes a first view


def _kept(store) -> dict:
    return {tab: p.stat().st_mtime_ns for tab in TABS for p in store.glob(f"*/{tab}/view.json")}


def _wait_kept(store, timeout_s: float = 400) -> dict:
    deadline = time.monotonic() + timeout_s
    while len(kept := _kept(store)) < len(TABS) and time.monotonic() < deadline:
        time.sleep(1)
    return kept


def test_first_views_are_kept_served_and_read_back_after_a_restart(tmp_path):
    store = tmp_path / "views"
    env = {"WORKBENCH_FIRST_VIEWS": str(store)}
    ARTIFACTS.mkdir(exist_ok=True)
    with serve(env=env, log_path=ARTIFACTS / "first-views-server.log") as (url, _):
        kept = _wait_kept(store)
        assert set(kept) == set(TABS), f"kept: {sorted(kept)}"
        with chromium_page(1000, 800) as page:
            errors = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            for tab in TABS:
                page.goto(f"{url}?tab={tab}")
                page.wait_for_selector(f"#tab-{tab}", state="visible")
                first_view(page, tab)
                settle(page)
                assert page.locator(".toast-body").count() == 0, (tab, page.locator(".toast-body").all_inner_texts())
                shot(page, f"first-view-kept-{tab}")
            page.goto(f"{url}?tab=relevance")
            first_view(page, "relevance")
            kept_heat = page.locator("#rel-heatmap").inner_text()
            assert not errors, errors
    # the same view computed live: what the kept one showed
    with serve(env={"WORKBENCH_FIRST_VIEWS": "off"}) as (url, _), chromium_page(1000, 800) as page:
        page.goto(f"{url}?tab=relevance")
        page.wait_for_function(f"() => !!({FIRST_VIEW['relevance']})", timeout=120_000)
        assert page.locator("#rel-heatmap").inner_text() == kept_heat
    # a restart reads the kept views back: none is computed (written) again
    restart_log = ARTIFACTS / "first-views-restart-server.log"
    with serve(env=env, log_path=restart_log) as (url, _), chromium_page(1000, 800) as page:
        page.goto(f"{url}?tab=memorization")
        first_view(page, "memorization")
        # the server's pass over the views at its start has ended (it logs each one it read back or
        # computed, the tour's last): a view it wrote again would be written by now
        until(
            lambda: "first view of tour ready" in restart_log.read_text(),
            timeout=120,
            what="the restarted server's pass over the kept views",
        )
        assert _kept(store) == kept
