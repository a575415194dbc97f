"""The app served on 127.0.0.1 in a child process; Debian Chromium via playwright."""

import pytest

from components import tabs
from tests.conftest import ARTIFACTS, artifact
from tests.helpers.browser import chromium_page
from tests.helpers.server import serve


@pytest.fixture(scope="package")
def local_models(tmp_path_factory):
    """A folder of the "your own model" stand-ins (standins.LOCAL), an allowed root of the app."""
    from tests.helpers.standins import build_local

    return build_local(tmp_path_factory.mktemp("own-models"))


@pytest.fixture(scope="package")
def server_url(local_models):
    with serve(
        log_path=artifact("e2e-server.log"),
        # an index the Features tab builds for an own model is written under HF_HOME
        env={
            "WORKBENCH_MODEL_ROOTS": str(local_models),
            "HF_HOME": str(local_models.parent / "hf-home"),
            # a stand-in's GSM8K answers are noise at any length: 16 tokens, not 256 (the
            # answer rules are tested in tests/unit/test_mathneuro_hub.py)
            "WORKBENCH_MATH_NEW_TOKENS": "16",
        },
    ) as (url, _proc):
        yield url


@pytest.fixture
def page(server_url):
    with chromium_page() as p:
        p.set_default_timeout(60_000)
        yield p


# Once true in the page, the tab's first view is drawn: each tab declares it (components.tab.Tab)
FIRST_VIEW = {t.id: t.first_view_drawn for t in tabs() if t.first_view_drawn}


def first_view(page, tab_id: str, timeout_ms: int = 120_000):
    """Wait for the tab's first view: computed by a silent event when the tab first opens
    (components.common.on_first_open), so no status tracker shows it running and `settle` cannot."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_function(f"() => !!({FIRST_VIEW[tab_id]})", timeout=timeout_ms)
    except PlaywrightTimeout:
        raise AssertionError(
            f"{tab_id}: no first view within {timeout_ms / 1000:.0f} s ({FIRST_VIEW[tab_id]})"
        ) from None


def open_tab(page, url: str, tab_id: str):
    """Open the app on one tab through its deep link and wait for Gradio to settle."""
    page.goto(f"{url}?tab={tab_id}")
    page.wait_for_selector(f"#tab-{tab_id}", state="visible")
    settle(page)
    return page


# Counts the animation frames in a row on which no block shows a pending status tracker (Gradio
# drops `.hide` from it while busy): true after `frames` of them. Gradio marks an event's outputs
# pending in the same task that dispatches it (a click, a chained `.then`), so a few quiet frames
# mean no event is running and the last one's results are drawn.
_QUIET_FRAMES = """(frames) => {
  const busy = !!document.querySelector('.wrap.full:not(.hide), .progress-text, .eta-bar');
  window.wbQuietFrames = busy ? 0 : (window.wbQuietFrames || 0) + 1;
  return window.wbQuietFrames >= frames;
}"""


def settle(page, timeout_ms: int = 60_000):
    """Wait until no Gradio event is running: no pending status tracker on three frames in a row.

    Not `networkidle`: Gradio keeps streaming connections open, so the network is never idle.
    """
    page.evaluate("() => { window.wbQuietFrames = 0; }")
    page.wait_for_function(_QUIET_FRAMES, arg=3, polling="raf", timeout=timeout_ms)


def shot(page, name: str):
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
