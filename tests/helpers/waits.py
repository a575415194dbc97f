"""Waits for what a browser test needs to have happened, never for a fixed time: on a loaded 2-core
machine a pause long enough on a quiet one is too short, and on a quiet one it is time wasted.

`settle` (tests/e2e/conftest.py) waits for Gradio's events to end; these wait for what follows an
event in the page: plotly's figures re-fitted to their boxes, the main thread idle, and, with
`result_of` (armed before one action), what that action itself produced: its toast, its blocks'
status going pending and done, its changed text, the content it rendered, its upload answered.
"""

from __future__ import annotations

import contextlib
import json
import time
from urllib.parse import urlparse

WAIT_MS = 60_000

# The shown plotly figures (under `scope`) not drawn at their box's width, by the id of the block
# around them. Plotly re-fits a figure only on a window resize, debounced (components.links.deep_links sends one
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


# --------------------------------------------------------------------------------------------------
# The result of one action: armed before it, it records in the page what the action itself produces,
# so the wait after it can never be answered by a state that was already true before the action (the
# last result's text, a card the first view filled, a quiet page before the event began), nor miss a
# result that came and went before the wait read it (a toast closed after its 10 s).
#
# Gradio 6.31's front end, as the watch reads it:
# - a toast is one `[data-testid=toast-text]` in a `.toast-message-item.<type>`; the toasts of one
#   type share ONE `.toast-body` ("Error (2)"), whose close timer, set when its first toast shows,
#   closes every toast of the group: a toast that joins the group late is gone before its 10 s. So a
#   count of `.toast-body` counts kinds, not toasts, and a toast is seen by its own element here.
# - a block's status tracker is its `[data-testid=status-tracker]`, without `.hide` while an event
#   writing to the block is pending or running (and when it failed: the 'Error' badge).
# - the content of an accordion that was closed when the page loaded (and of a tab not shown then) is
#   rendered when it opens, and one or two animation frames after it is on the page, Gradio writes
#   the stored props of every component in it again (`render_previously_invisible_children`: tick,
#   `settled()`, a frame, then each component's props, its value included): a value typed into a box
#   in between is wiped, and the next click sends the box's old value. `rendered=` waits for that
#   write. An accordion an event showed after the page loaded (Features' index builder) is rendered
#   whole as it opens, with no write after it (measured: a probe stayed 60-90 s): nothing to wait for.
_RESULT_ARM = """(spec) => {
  const all = (window.wbResults = window.wbResults || {});
  const r = all[spec.id] = {toasts: [], els: [], blocks: {}, changed: {}, probe: null, ok: false, stopped: false};
  const seen = new WeakSet();
  document.querySelectorAll('[data-testid="toast-text"]').forEach((el) => seen.add(el));
  const text = (el) => (el.matches('input, textarea, select') ? el.value : el.textContent);
  for (const sel of spec.changed) {
    const el = document.querySelector(sel);
    r.changed[sel] = {was: el ? text(el) : null, changed: false, now: el ? text(el) : null};
  }
  // a block busy now (an earlier event still running over it) counts only once it has been idle
  const busy = (block) => [...block.querySelectorAll('[data-testid="status-tracker"]:not(.hide)')]
    .some((t) => !t.querySelector('.error'));  // (its 'Error' badge: the event has ended)
  const armBlock = (sel, end) => {
    const block = document.querySelector(sel);
    r.blocks[sel] = {pending: false, done: false, end, stale: !!block && busy(block)};
  };
  spec.pending.forEach((sel) => armBlock(sel, false));
  spec.done.forEach((sel) => armBlock(sel, true));
  const BOX = ' textarea, ' + spec.rendered + ' input[type=number], ' + spec.rendered + ' input:not([type]), '
              + spec.rendered + ' input[type=text]';
  if (spec.rendered) {
    if (document.querySelector(spec.rendered + BOX)) return 'already on the page: the action cannot be what renders it';
    r.probe = {typed: null, pushed: false};
  }
  // a value the box takes that is not its own: a word in a text box, the other end of a slider's range
  const probeFor = (box) => {
    if (box.type !== 'number') return 'wb-probe-' + spec.id;
    const range = (box.closest('.block') || box).querySelector('input[type=range]') || box;
    const lo = Number(range.min), hi = Number(range.max), now = Number(box.value);
    return String(range.min !== '' && lo !== now ? lo : range.max !== '' && hi !== now ? hi : now + 1);
  };
  const look = () => {
    for (const el of document.querySelectorAll('[data-testid="toast-text"]')) {
      if (seen.has(el)) continue;
      seen.add(el);
      const item = el.closest('.toast-message-item') || el;
      r.els.push(el);
      r.toasts.push({kind: ['error', 'warning', 'info', 'success'].find((k) => item.classList.contains(k)) || '',
                     text: ''});
    }
    r.els.forEach((el, i) => { const t = el.isConnected && el.textContent.trim(); if (t) r.toasts[i].text = t; });
    for (const [sel, b] of Object.entries(r.blocks)) {
      const block = document.querySelector(sel);
      if (!block) continue;
      if (busy(block)) { if (!b.stale) b.pending = true; }
      else { b.stale = false; if (b.pending) b.done = true; }
    }
    for (const [sel, c] of Object.entries(r.changed)) {
      const el = document.querySelector(sel);
      if (!el) continue;
      c.now = text(el);
      if (c.now !== c.was) c.changed = true;
    }
    const p = r.probe;
    if (p && !p.pushed) {
      const box = document.querySelector(spec.rendered + BOX);
      if (box && box !== p.box) {
        // typed as a user types (the component takes it into its value): Gradio's write of the
        // stored props puts the box's own value back, and that is what the wait looks for
        p.box = box;
        p.typed = probeFor(box);
        const proto = box instanceof HTMLTextAreaElement ? HTMLTextAreaElement.prototype : HTMLInputElement.prototype;
        Object.getOwnPropertyDescriptor(proto, 'value').set.call(box, p.typed);
        box.dispatchEvent(new Event('input', {bubbles: true}));
      } else if (box && box.value !== p.typed) {
        p.pushed = true;
      }
    }
    r.ok = (spec.toast === null || r.toasts.some((t) => t.text.includes(spec.toast)))
      && Object.values(r.blocks).every((b) => b.pending && (b.done || !b.end))
      && Object.entries(r.changed).every(([sel, c]) => c.changed
           && (spec.texts[sel] == null || (c.now || '').includes(spec.texts[sel])))
      && (!p || p.pushed);
    return r.ok;
  };
  r.look = look;
  // `document` itself: armed on a page's load (an init script), the document has no element yet
  new MutationObserver(look).observe(document, {subtree: true, childList: true, characterData: true,
                                                attributes: true, attributeFilter: ['class']});
  // a box's value is no DOM mutation: read the page once a frame too, until the wait is over
  const frame = () => { if (!r.stopped) { look(); requestAnimationFrame(frame); } };
  requestAnimationFrame(frame);
  return '';
}"""

_RESULT_DONE = "(id) => window.wbResults[id].look()"
_RESULT_SEEN = """(id) => { const r = window.wbResults[id];
  return {toasts: r.toasts, blocks: r.blocks, changed: r.changed, probe: r.probe && {typed: r.probe.typed,
          pushed: r.probe.pushed, box: !!r.probe.box}}; }"""


class Result:
    """What an action produced in the page, as `result_of` recorded it (readable after the wait)."""

    def __init__(self, page, key: str):
        self.page, self.key = page, key

    def toasts(self) -> list[tuple[str, str]]:
        """(kind, text) of every toast shown since the watch was armed, in order, closed ones included."""
        return [(t["kind"], t["text"]) for t in self.seen()["toasts"]]

    def seen(self) -> dict:
        return self.page.evaluate(_RESULT_SEEN, self.key)


_KEYS = iter(range(1, 1 << 62))


def _names(x) -> list[str]:
    return [] if not x else [x] if isinstance(x, str) else list(x)


@contextlib.contextmanager
def result_of(
    page,
    *,
    toast: str | None = None,
    pending=(),
    done=(),
    changed=(),
    rendered: str | None = None,
    upload: bool = False,
    load: bool = False,
    timeout_ms: int = WAIT_MS,
):
    """Around ONE action (a click, a key, setting files): arm a watch in the page before it, and on
    leaving the block wait until the page has shown what that action produces — never a state that
    may have been true before it. Everything named must be seen:

    - `toast`: a toast containing this text appeared after arming ("" for any toast; seen when it
      appears, so one closed again before the wait still counts). Whatever is named, `Result.toasts()`
      lists every toast shown since arming, also after the wait (a check that none came).
    - `pending`: these blocks' status trackers showed busy (an event writing to them began; a block
      busy at arming counts only after it has been idle once).
    - `done`: these blocks' status trackers showed busy and then no longer (the event ended, done or
      failed: an 'Error' badge is not busy).
    - `changed`: these elements' text (an input's value) differs from what it was at arming; a
      mapping {selector: text} also waits until the changed text contains `text`.
    - `rendered`: a text box or slider the action renders: one in an accordion closed since the page
      loaded (or in a tab not shown yet), which Gradio writes again a frame or two after rendering it
      (see above; not one an event showed later, which Gradio never writes again). The watch
      types a probe into the box as it appears (a word; a slider's other end) and waits until Gradio
      has put the box's value back: Gradio writes every component of the accordion in that one pass,
      so after it what the test types or picks there stays. The box must have no event of its own on
      a change of its value (a slider's release is fine).
    - `upload`: the server has answered Gradio's upload of the files set by the action (the
      component holds the server's copy before the next click sends it).
    - `load`: the action loads a page (a `goto`): the watch is armed in that page as it loads (an
      init script of `page`, run again at every later load of it), so a toast of the page's first
      events is seen too.

    Yields a `Result`. On timeout, an AssertionError says what was and was not seen."""
    from playwright.sync_api import TimeoutError as NotSeen

    changed_texts = dict(changed) if isinstance(changed, dict) else {}
    spec = {
        "id": f"r{next(_KEYS)}",
        "toast": toast,
        "pending": _names(pending),
        "done": _names(done),
        "changed": list(changed_texts) or _names(changed),
        "texts": changed_texts,
        "rendered": rendered,
    }
    if load:
        page.add_init_script(script=f"({_RESULT_ARM})({json.dumps(spec)});")
        refused = ""
    else:
        refused = page.evaluate(_RESULT_ARM, spec)
    if refused:
        raise AssertionError(f"result_of(rendered={rendered!r}): {refused}")
    result = Result(page, spec["id"])

    def is_upload(response) -> bool:
        return response.request.method == "POST" and urlparse(response.url).path.endswith("/upload")

    try:
        with contextlib.ExitStack() as stack:
            answer = stack.enter_context(page.expect_response(is_upload, timeout=timeout_ms)) if upload else None
            yield result
        if answer is not None:
            answer.value.finished()
        try:
            page.wait_for_function(_RESULT_DONE, arg=spec["id"], timeout=timeout_ms)
        except NotSeen:
            wanted = {k: v for k, v in spec.items() if v and k not in ("id", "texts")}
            seen = result.seen()
            probe = seen["probe"] or {}
            why = (
                (
                    " (the probe was typed and never written back: Gradio rendered this box without writing"
                    " it again, as it does in an accordion an event showed after the page loaded; there is"
                    " nothing to wait for there)"
                )
                if probe.get("typed") and not probe.get("pushed")
                else ""
            )
            raise AssertionError(
                f"the action's result was not seen within {timeout_ms / 1000:.0f} s: wanted {wanted}, seen {seen}{why}"
            ) from None
    finally:  # the frame loop ends; the toasts are still recorded (Result.toasts after a settle)
        with contextlib.suppress(Exception):
            page.evaluate("(id) => { window.wbResults[id].stopped = true; }", spec["id"])


def block_busy(page, block: str, timeout_ms: int = WAIT_MS):
    """Around an action whose event first runs a check without outputs (a refused value stops there)
    and then the model's work: wait until `block` has shown its status tracker. Until the check has
    answered, no block is pending, so a `settle` right after the click would find the page quiet
    before the work has even started; after this one, `settle` waits for the work's end."""
    return result_of(page, pending=block, timeout_ms=timeout_ms)


def uploaded(page, timeout_ms: int = WAIT_MS):
    """Around setting the files of an upload: wait until the server has answered Gradio's upload of
    them, so the component holds the server's copy before the next click sends it."""
    return result_of(page, upload=True, timeout_ms=timeout_ms)


def toasts_from_now(page) -> Result:
    """A watch (result_of with nothing to wait for) whose `toasts()` lists every toast the page shows
    from now on, one closed again after its 10 s included: for a check that no error came."""
    with result_of(page) as seen:
        pass
    return seen


_STATUSES = """(sels) => Object.fromEntries(sels.map((s) => [s,
  [...document.querySelectorAll(s + ' .wrap')].map((w) => w.innerText.trim()).filter((t) => t)]))"""


def statuses_cleared(page, outputs: list[str], timeout_ms: int = WAIT_MS) -> None:
    """After a refused action's toast: wait until these blocks' status trackers hold nothing, neither
    an 'Error' badge nor the timer of the follow-up that takes it off (components.inputs.fields.
    keep_on_failure; its progress is hidden, yet its tracker's running timer is in the block's text).
    The toast and the failed status come in one task of the page, so a tracker still empty when the
    toast is seen means the chain has ended, never that it has not begun. On timeout, says what stayed."""
    from playwright.sync_api import TimeoutError as NotSeen

    try:
        page.wait_for_function(
            f"(sels) => Object.values(({_STATUSES})(sels)).every((t) => t.length === 0)",
            arg=outputs,
            timeout=timeout_ms,
        )
    except NotSeen:
        stayed = page.evaluate(_STATUSES, outputs)
        raise AssertionError(f"status still shown after {timeout_ms / 1000:.0f} s: {stayed}") from None
