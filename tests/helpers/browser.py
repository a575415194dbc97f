"""Debian Chromium driven by playwright (never a downloaded browser)."""
from __future__ import annotations

import contextlib
import shutil
import tempfile

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]


@contextlib.contextmanager
def chromium_page(width: int = 1440, height: int = 900):
    from playwright.sync_api import sync_playwright

    profile = tempfile.mkdtemp(prefix="wb-chromium-")
    with sync_playwright() as pw:
        ctx = pw.chromium.launch_persistent_context(
            profile, executable_path=CHROMIUM, headless=True, args=ARGS,
            viewport={"width": width, "height": height})
        try:
            page = ctx.pages[0] if ctx.pages else ctx.new_page()
            yield page
        finally:
            ctx.close()
            shutil.rmtree(profile, ignore_errors=True)
