"""Every tab's first view on a cold start of the zoo app, from the tab click to a drawn result, with
the kept first views (components.serving.first_views) against the same app computing them live
(WORKBENCH_FIRST_VIEWS=off), in the same run.

    python -m benchmarks.first_views [--early]

For each tab a fresh server: the Overview is opened, settles, then the tab is clicked and the time to
its drawn first view is measured. The app's own start-up computes the views in the background: by
default the click comes once they are ready (a presenter opening the Space); `--early` clicks as soon
as the Overview has settled, in the first seconds after the start. A store of views kept from an
earlier start is not used (a fresh store folder each time): the views are computed in this run.
The goals (issue 50): ≤ 2 s once ready, ≤ 10 s early.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from components import tabs  # noqa: E402
from tests.e2e.conftest import FIRST_VIEW, settle  # noqa: E402
from tests.helpers.browser import chromium_page, close  # noqa: E402
from tests.helpers.server import serve  # noqa: E402

TABS = [t.id for t in tabs() if t.id != "overview"]  # every tab that computes a first view


def one(tab: str, kept: bool, early: bool) -> float:
    with tempfile.TemporaryDirectory() as store:
        env = {"WORKBENCH_FIRST_VIEWS": store if kept else "off"}
        log = Path(store) / "server.log"
        with serve(env=env, log_path=log) as (url, _), chromium_page(1000, 800) as page:
            page.goto(url)
            page.wait_for_selector("#tab-overview .wb-card", timeout=120_000)
            settle(page)
            if kept and not early:  # the start-up has kept the view: its log says so (a view with a
                # component update in it is kept in memory only, with no file to look for)
                deadline = time.monotonic() + 300
                while f"first view of {tab} ready" not in log.read_text() and time.monotonic() < deadline:
                    time.sleep(0.5)
            t0 = time.perf_counter()
            page.get_by_role(
                "tab", name={"math_neurons": "Math neurons", "tour": "Guided tour"}.get(tab, tab.capitalize())
            ).click()
            page.wait_for_function(f"() => !!({FIRST_VIEW[tab]})", timeout=300_000)
            return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--early", action="store_true", help="click in the first seconds after the start")
    ap.add_argument("--tabs", nargs="*", default=TABS)
    args = ap.parse_args()
    print(f"{'tab':14s} {'live':>7s} {'kept':>7s} {'ratio':>6s}   ({'early' if args.early else 'ready'})")
    try:
        for tab in args.tabs:
            live = one(tab, kept=False, early=args.early)
            kept = one(tab, kept=True, early=args.early)
            print(f"{tab:14s} {live:6.1f}s {kept:6.1f}s {live / kept:5.1f}×", flush=True)
    finally:
        close()


if __name__ == "__main__":
    main()
