"""Waits for what a browser test needs to have happened, never for a fixed time: on a loaded 2-core
machine a pause long enough on a quiet one is too short, and on a quiet one it is time wasted.

`settle` (tests/e2e/conftest.py) waits for Gradio's events to end; these wait for what follows an
event in the page: an upload answered, plotly's figures re-fitted to their boxes, the main thread idle.
"""
from __future__ import annotations

import contextlib
import time
from urllib.parse import urlparse

WAIT_MS = 60_000

# The shown plotly figures (under `scope`) not drawn at their box's width, by the id of the block
# around them. Plotly re-fits a figure only on a window resize, debounced (components.links sends one
# after the presenter switch), so a figure whose column grew or shrank keeps its old width a moment;
# one given a fixed size is never re-fitted.
_UNFITTED = """(scope) => [...document.querySelectorAll(scope + ' .js-plotly-plot')]
  .filter((gd) => gd.checkVisibility() && gd.getBoundingClientRect().width > 0)
  .filter((gd) => {
    const svg = gd.querySelector('.main-svg');
    if (!svg || !gd._fullLayout) return true;
    if (gd.layout && gd.layout.width && gd.layout.height) return false;
    return Math.abs(svg.getBoundingClientRect().width - gd.getBoundingClientRect().width) > 2;
  })
  .map((gd) => (gd.closest('[id]') || {}).id || 'a figure')"""


def unfitted(page, scope: str = "body") -> list[str]:
    """The shown plotly figures under `scope` not (yet) drawn at their box's width."""
    return page.evaluate(_UNFITTED, scope)


def plots_fitted(page, scope: str = "body", timeout_ms: int = WAIT_MS) -> None:
    """Wait until every shown plotly figure under `scope` is drawn at the width of its box."""
    page.wait_for_function(f"(scope) => ({_UNFITTED})(scope).length === 0", arg=scope, timeout=timeout_ms)


@contextlib.contextmanager
def uploaded(page, timeout_ms: int = WAIT_MS):
    """Around setting the files of an upload: wait until the server has answered Gradio's upload of
    them, so the component holds the server's copy before the next click sends it."""
    def is_upload(response) -> bool:
        return response.request.method == "POST" and urlparse(response.url).path.endswith("/upload")

    with page.expect_response(is_upload, timeout=timeout_ms) as answer:
        yield
    answer.value.finished()


# Resolves once the browser has given the page `n` idle periods in a row of at least 10 ms each
# (nothing left to run or draw), or with false after `ms`.
_IDLE = """([n, ms]) => new Promise((done) => {
  let quiet = 0;
  const timer = setTimeout(() => done(false), ms);
  const step = (d) => {
    quiet = !d.didTimeout && d.timeRemaining() >= 10 ? quiet + 1 : 0;
    if (quiet >= n) { clearTimeout(timer); done(true); } else { requestIdleCallback(step, {timeout: 1000}); }
  };
  requestIdleCallback(step, {timeout: 1000});
})"""


def main_thread_idle(page, periods: int = 5, timeout_ms: int = WAIT_MS) -> bool:
    """Wait until the page's main thread has nothing left to do (what an earlier event drew is drawn);
    False if it was still busy after `timeout_ms` (the caller's measurement then says so)."""
    return page.evaluate(_IDLE, [periods, timeout_ms])


# The plot blocks shown under `scope` that neither show Gradio's empty state nor hold a figure plotly
# has drawn: a figure's value has arrived but plotly (imported on first use) has not drawn it yet.
_UNDRAWN = """(scope) => (window.gradio_config.components || [])
  .filter((c) => c.type === 'plot' && c.props && c.props.elem_id)
  .map((c) => document.getElementById(c.props.elem_id))
  .filter((b) => b && b.closest(scope) && b.checkVisibility())
  .filter((b) => !b.querySelector('.empty') && !(b.querySelector('.js-plotly-plot') || {})._fullLayout)
  .map((b) => b.id)"""


def plots_drawn(page, scope: str = "body", timeout_ms: int = WAIT_MS) -> None:
    """Wait until every shown plot block under `scope` is empty or has its figure drawn."""
    page.wait_for_function(f"(scope) => ({_UNDRAWN})(scope).length === 0", arg=scope, timeout=timeout_ms)


# Arms a watch on one block: true once its status tracker has shown (Gradio drops `.hide` from the
# block's `.wrap` while an event writing to it is pending or running).
_ARM_PENDING = """(block) => {
  const root = document.querySelector(block);
  window.wbPending = window.wbPending || {};
  window.wbPending[block] = false;
  const watch = new MutationObserver(() => {
    if (root.querySelector('.wrap:not(.hide)')) { window.wbPending[block] = true; watch.disconnect(); }
  });
  watch.observe(root, {subtree: true, attributes: true, childList: true});
}"""


@contextlib.contextmanager
def block_busy(page, block: str, timeout_ms: int = WAIT_MS):
    """Around an action whose event first runs a check without outputs (a refused value stops there)
    and then the model's work: wait until `block` has shown its status tracker. Until the check has
    answered, no block is pending, so a `settle` right after the click would find the page quiet
    before the work has even started; after this one, `settle` waits for the work's end."""
    page.evaluate(_ARM_PENDING, block)
    yield
    page.wait_for_function("(block) => window.wbPending[block]", arg=block, timeout=timeout_ms)


def hover_until_shown(page, target: str, nth: int, shown: str, timeout_ms: int = WAIT_MS) -> None:
    """Hover the `nth` match of `target` until `shown` (plotly's hover text) appears. A figure that
    plotly draws again after the hover (its step's value arriving, a re-fit) drops the hover with
    the old points; the hover is repeated on the new ones, and the wait ends at the state, not a time."""
    from playwright.sync_api import TimeoutError as NotYet

    end = time.monotonic() + timeout_ms / 1000
    while True:
        left_ms = max(1.0, (end - time.monotonic()) * 1000)  # every try within the one limit
        page.locator(target).nth(nth).hover(force=True, timeout=left_ms)
        try:
            page.wait_for_selector(shown, timeout=min(2_000, left_ms))
            return
        except NotYet:
            if time.monotonic() >= end:
                raise
