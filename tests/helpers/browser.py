"""Debian Chromium driven by playwright (never a downloaded browser).

Debian's `chromium-headless-shell` where installed (scripts/install.sh --dev installs it), else its
`chromium`: the same Blink and V8 build without the full browser's user interface, and a page open
costs about a quarter less CPU (the Overview: 5.1-6.5 s of the machine's CPU against 7.7-8.5 s, shown
in 2.4-3.0 s against 3.4-3.9 s). The browser tests as a whole ran only 4 % faster for it: Chromium's
CPU there (about twice the served app's) is mostly Gradio's front end handling each event's status
messages and plotly drawing figures while a test works the page, not opening it.

One browser serves a test module: each page gets a context of its own (its own cookies, storage and
cache, as a fresh profile had), since starting Chromium costs about a second and a core's worth of
work each time. tests/conftest.py closes it at the module's end: while playwright's sync API is
started, the main thread cannot run an event loop of its own (`asyncio.run`).
"""

from __future__ import annotations

import contextlib
import shutil

CHROMIUM = shutil.which("chromium-headless-shell") or shutil.which("chromium") or "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]

_STARTED: dict = {}  # "playwright" and "browser", while a module uses them

# How long an `expect(...)` waits for its state when the test names no time: playwright's 5 s is
# less than a redraw after a server round trip takes on a busy machine (a parallel job beside the
# suite). A wait for a state, not a limit on the app: the timing checks measure their own figures.
EXPECT_TIMEOUT_MS = 30_000


def _expect_defaults() -> None:
    from playwright.sync_api import expect

    expect.set_options(timeout=EXPECT_TIMEOUT_MS)


def browser():
    """The module's Chromium, started on first use (and again if it went away)."""
    if "browser" not in _STARTED or not _STARTED["browser"].is_connected():
        close()
        from playwright.sync_api import sync_playwright

        _expect_defaults()
        _STARTED["playwright"] = sync_playwright().start()
        b = _STARTED["playwright"].chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        _STARTED["browser"] = _a_person_per_context(b)
    return _STARTED["browser"]


def _a_person_per_context(b):
    """Each new context (a visitor with nothing stored yet) is a person of its own: its requests say
    they come from an address of their own (tests/helpers/people.py), unless the test gives one."""
    from tests.helpers.people import as_person

    make = b.new_context

    def new_context(**kwargs):
        headers = dict(kwargs.pop("extra_http_headers", None) or {})
        if not any(k.lower() == "x-forwarded-for" for k in headers):
            headers.update(as_person())
        return make(extra_http_headers=headers, **kwargs)

    b.new_context = new_context
    return b


def close() -> None:
    """Stop the browser and playwright, if started; the next `browser()` starts them again."""
    b, pw = _STARTED.pop("browser", None), _STARTED.pop("playwright", None)
    with contextlib.suppress(Exception):
        if b is not None:
            b.close()
    if pw is not None:
        pw.stop()


@contextlib.contextmanager
def chromium_page(width: int = 1440, height: int = 900):
    """A page in a new context of the module's browser: a visitor with nothing stored yet."""
    ctx = browser().new_context(viewport={"width": width, "height": height})
    try:
        yield ctx.new_page()
    finally:
        ctx.close()
