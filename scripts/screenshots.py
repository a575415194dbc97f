"""Regenerate the README screenshots from the running app in Debian Chromium.

    OMP_NUM_THREADS=1 .venv/bin/python scripts/screenshots.py            # every tab, light and dark
    .venv/bin/python scripts/screenshots.py --tabs tour relevance --presenter --out docs/screenshots

Starts the app on 127.0.0.1 (a free port, offline, zoo models), opens each tab through its deep
link, presses the tab's main button where one is known (so the shot shows a result, computed live),
and writes docs/screenshots/<tab>-<light|dark>[-presenter].png. Nothing is fetched from a network.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.helpers.browser import chromium_page, close as close_browser  # noqa: E402
from tests.helpers.server import serve  # noqa: E402

# The button pressed on each tab before the shot (if present); the tour computes its first step on load.
ACTIONS = {
    "relevance": ["rel-explain"],
    "math_neurons": ["mn-run"],
    "adapters": ["pissa-analyse"],
    "memorization": ["memo-check"],
}
BUSY = "() => !document.querySelector('.wrap.full:not(.hide), .progress-text, .eta-bar')"


def tab_ids(url: str) -> list[str]:
    with urllib.request.urlopen(url + "config", timeout=30) as r:
        cfg = json.load(r)
    return [
        c["props"]["elem_id"][4:]
        for c in cfg["components"]
        if c["type"] == "tabitem" and str(c["props"].get("elem_id", "")).startswith("tab-")
    ]


def settle(page, timeout_ms: int = 180_000) -> None:
    page.wait_for_timeout(400)
    page.wait_for_function(BUSY, timeout=timeout_ms)
    page.wait_for_timeout(300)


def shoot(page, url: str, tab: str, theme: str, presenter: bool, out: Path, full: bool) -> Path:
    query = f"?tab={tab}&__theme={theme}" + ("&presenter=1" if presenter else "")
    page.goto(url + query)
    page.wait_for_selector(f"#tab-{tab}", state="visible")
    settle(page)
    for button in ACTIONS.get(tab, []):
        loc = page.locator(f"#{button}")
        if loc.count() and loc.first.is_visible() and loc.first.is_enabled():
            loc.first.click()
            settle(page)
    if tab == "tour":
        page.wait_for_selector("#tour-figure .js-plotly-plot", timeout=180_000)
    page.evaluate("() => window.scrollTo(0, 0)")
    path = out / f"{tab}-{theme}{'-presenter' if presenter else ''}.png"
    page.screenshot(path=str(path), full_page=full)
    shrink(path)
    return path


def shrink(path: Path) -> None:
    """A 256-colour palette PNG: a third of the size, indistinguishable for UI screenshots."""
    from PIL import Image

    with Image.open(path) as im:
        small = im.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    small.save(path, optimize=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    ap.add_argument("--tabs", nargs="*", help="tab ids (default: every tab)")
    ap.add_argument("--themes", nargs="*", default=["light", "dark"], choices=["light", "dark"])
    ap.add_argument("--presenter", action="store_true", help="also shoot each tab in presenter view")
    ap.add_argument("--full-page", action="store_true", help="the whole page, not the first screen")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with serve(log_path=args.out.parent / ".screenshots-server.log") as (url, _proc):
        tabs = args.tabs or tab_ids(url)
        try:
            with chromium_page(width=1440, height=1000) as page:
                page.set_default_timeout(180_000)
                for tab in tabs:
                    for theme in args.themes:
                        for presenter in [False, True] if args.presenter else [False]:
                            path = shoot(page, url, tab, theme, presenter, args.out, args.full_page)
                            print(
                                f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}"
                                f"  ({time.perf_counter() - t0:.0f} s)",
                                flush=True,
                            )
        finally:
            close_browser()
    log = args.out.parent / ".screenshots-server.log"
    log.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
