"""The Adapters tab in Chromium: every control exercised, screenshots saved."""

import re
import time

import pytest

from tests.e2e.conftest import first_view, settle, shot
from tests.helpers.waits import main_thread_idle, plots_fitted, result_of, statuses_cleared


def open_adapters(page, url):
    # no "networkidle" wait: other tabs may keep a connection busy; wait for this tab's controls
    page.goto(f"{url}?tab=adapters", timeout=120_000)
    page.wait_for_selector("#tab-adapters", state="visible", timeout=120_000)
    page.wait_for_selector("#pissa-analyse", state="visible", timeout=120_000)
    # the tab's first view drawn, whose first figure also imports plotly (seconds of main thread)
    first_view(page, "adapters")


STEPS_SHOWN = """(total) => +((new RegExp('(\\\\d+)/' + total + ' steps')).exec(
  document.querySelector('#pissa-race-live').innerText) || [0, -1])[1]"""


def _race_moves_on(page, total: int, times: int) -> None:
    """Wait until the live race view's count of steps done (of `total`) has moved on `times` times."""
    for _ in range(times):
        page.wait_for_function(
            f"([total, n]) => ({STEPS_SHOWN})(total) > n",
            arg=[total, page.evaluate(STEPS_SHOWN, total)],
            timeout=60_000,
        )


def _set_number(page, elem_id: str, value) -> None:
    box = page.locator(f"#{elem_id} input[type='number']").first
    box.fill(str(value))
    box.press("Enter")


@pytest.mark.alone  # the page answers a click within 5 s while a race streams
@pytest.mark.timeout(600)
def test_adapters_tab_controls(page, server_url):
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    open_adapters(page, server_url)

    # 1. layer picker, rank, init → spectrum + histograms + stats + exports
    page.locator("#pissa-layer input").first.click()
    page.get_by_role("option", name="fc2", exact=True).click()
    page.locator("#pissa-list-layers").click()
    _set_number(page, "pissa-rank", 8)
    page.locator("#pissa-init").get_by_text("fast SVD (pissa_niter_4)").click()
    # the first view drew a spectrum, its stats and exports already: wait for this click's own run
    with result_of(page, done="#pissa-stats", timeout_ms=90_000):
        page.locator("#pissa-analyse").click()
    page.wait_for_selector("#pissa-spectrum .js-plotly-plot", timeout=90_000)
    page.wait_for_selector("#pissa-hist .js-plotly-plot")
    page.get_by_text("reproduces W to a relative error").wait_for()
    assert page.locator("#pissa-spectrum").inner_text().count("principal part") >= 1
    page.locator("#pissa-analysis-files").get_by_text(".png").first.wait_for()

    # 2. quantization error table, heatmap method picker
    page.locator("#pissa-heat-method input").first.click()
    page.get_by_role("option", name="qpissa-5", exact=True).click()
    page.locator("#pissa-errors").click()
    page.locator("#pissa-error-summary").get_by_text("QPiSSA-5 on").wait_for(timeout=90_000)
    page.wait_for_selector("#pissa-heatmap .js-plotly-plot")
    page.wait_for_selector("#pissa-bars .js-plotly-plot")
    assert page.locator("#pissa-error-table").get_by_text("fc2").count() >= 1

    # 3. the race: methods, seeds, steps, lr; run to the end
    page.locator("#pissa-methods").get_by_text("full fine-tuning").click()
    _set_number(page, "pissa-seeds", 2)
    _set_number(page, "pissa-steps", 60)
    page.locator("#pissa-lr input").fill("0.003")
    page.locator("#pissa-start").click(no_wait_after=True)
    page.locator("#pissa-race-live .wb-race-live-status").get_by_text("finished").wait_for(timeout=120_000)
    page.wait_for_selector("#pissa-race-live svg polyline")
    status = page.locator("#pissa-race-live .wb-race-live-status").inner_text()
    assert "360/360 steps" in status and "PiSSA's loss is below LoRA's" in status
    page.locator("#pissa-race-files").get_by_text(".png").first.wait_for()
    shot(page, "adapters-race")

    # ... and a long one: the page answers other controls while it streams, and Stop ends it
    _set_number(page, "pissa-steps", 500)
    _set_number(page, "pissa-seeds", 3)
    page.locator("#pissa-start").click(no_wait_after=True)
    page.locator("#pissa-race-live").get_by_text("/4500 steps in").wait_for(timeout=90_000)
    _race_moves_on(page, 4500, times=2)  # a few figure updates in
    t0 = time.perf_counter()
    page.locator("#pissa-init").get_by_text("full SVD (pissa)").click(timeout=10_000)
    page.wait_for_function("() => document.querySelector('#pissa-init input[value=pissa]').checked", timeout=10_000)
    clicked = time.perf_counter() - t0
    # (the race once kept the page busy for 5-24 s at a time; a loaded 2-core machine takes < 1 s)
    assert clicked < 5.0, clicked
    t0 = time.perf_counter()
    page.locator("#pissa-stop").click(no_wait_after=True, timeout=10_000)
    try:
        page.locator("#pissa-race-live .wb-race-live-status").get_by_text("stopped").wait_for(timeout=10_000)
        page.locator("#pissa-stop-msg").get_by_text("Race stopped").wait_for(timeout=10_000)
    finally:
        shot(page, "adapters-stopped")
    stopped = time.perf_counter() - t0
    assert stopped < 5.0, stopped  # the race ends within a second of the request; the rest is the page
    status = page.locator("#pissa-race-live .wb-race-live-status").inner_text()
    done = int(re.search(r"(\d+)/4500 steps", status).group(1))
    assert 0 < done < 4500, status  # stopped mid-race
    print(f"click handled in {clicked:.2f} s, race shown stopped {stopped:.2f} s after Stop")

    # 4. PiSSA → LoRA conversion
    _set_number(page, "pissa-conv-steps", 10)
    page.locator("#pissa-convert").click()
    page.locator("#pissa-convert-result").get_by_text("the same outputs").wait_for(timeout=60_000)

    page.locator("#pissa-analyse").scroll_into_view_if_needed()
    shot(page, "adapters")

    # 5. the zoo LM: the layer list follows the model; analyse and a short race on its new task
    page.locator("#pissa-model input").first.click()
    page.get_by_role("option", name="math-llama (tiny Llama)", exact=True).click()
    page.wait_for_function(
        "() => document.querySelector('#pissa-layer input').value.endsWith('q_proj')", timeout=60_000
    )
    page.locator("#pissa-analyse").click()
    page.locator("#pissa-stats").get_by_text("q_proj").wait_for(timeout=90_000)
    page.locator("#pissa-methods").get_by_text("full fine-tuning").click()  # untick
    _set_number(page, "pissa-seeds", 1)
    _set_number(page, "pissa-steps", 20)
    page.locator("#pissa-lr input").fill("0")
    page.locator("#pissa-start").click(no_wait_after=True)
    page.locator("#pissa-race-live .wb-race-live-status").get_by_text("40/40 steps").wait_for(timeout=120_000)
    page.locator("#pissa-race-live .wb-race-live-status").get_by_text("finished").wait_for(timeout=60_000)
    assert "task difference" in page.locator("#pissa-race-live").inner_text()
    shot(page, "adapters-lm")
    assert errors == []


LONGTASKS = """
window.wbLong = [];
new PerformanceObserver((l) => { for (const e of l.getEntries()) window.wbLong.push([e.startTime, e.duration]); })
  .observe({type: 'longtask', buffered: true});
"""
WATCH = """() => {
  window.wbRace = {};
  const mark = (k) => { if (!window.wbRace[k]) window.wbRace[k] = performance.now(); };
  document.querySelector('#pissa-stop').addEventListener('click', () => mark('clicked'), {capture: true});
  const files = document.querySelector('#pissa-race-files');
  new MutationObserver(() => {
    const said = document.querySelector('#pissa-stop-msg').innerText;
    if (said) mark('acknowledged');
    if (/Race stopped/.test(said)) mark('answered');
    const live = document.querySelector('#pissa-race-live .wb-race-live-status').innerText;
    if (/(^|\\D)[1-9]\\d*\\/\\d+ steps in/.test(live)) mark('running');  // its first steps done
    if (/\\b(stopped|finished)\\b/.test(live)) mark('ended');
    const now = files.innerText;
    if (!/\\.png/.test(now)) mark('cleared');
    if (window.wbRace.cleared && /\\.png/.test(now) && /\\.json/.test(now)) mark('exports');
  }).observe(document.body, {subtree: true, childList: true, characterData: true});
}"""
STATUS = "#pissa-race-live .wb-race-live-status"


def _race(page, stop: bool) -> dict:
    """Start a 300-step, 3-seed race (Stop it after its first steps on the page); the moments it
    started, ran, was stopped, ended and showed its exports, and the main thread's long tasks from
    the click to a second after the exports appeared. (Start clears the live view's status line and
    the exports, so the last race's words and files mark nothing.)"""
    page.evaluate(WATCH)
    t_start = page.evaluate("performance.now()")
    page.locator("#pissa-start").click(no_wait_after=True)
    page.wait_for_function("() => window.wbRace.running", timeout=120_000)
    if stop:
        page.locator("#pissa-stop").click(no_wait_after=True)
        page.wait_for_function(
            "() => /\\.$/.test(document.querySelector('#pissa-stop-msg').innerText)", timeout=30_000
        )  # the server's answer, whatever it says
        assert "Race stopped" in page.locator("#pissa-stop-msg").inner_text(), page.evaluate("window.wbRace")
    page.wait_for_function("() => window.wbRace.ended", timeout=120_000)
    page.locator(STATUS).get_by_text("stopped" if stop else "finished").wait_for(timeout=60_000)
    page.wait_for_function("() => window.wbRace.exports", timeout=60_000)
    # kept: the assertion covers a fixed second after the exports appeared (the docstring's window)
    page.wait_for_timeout(1000)
    marks = page.evaluate("window.wbRace")
    marks["tasks"] = [(t - t_start, d) for t, d in page.evaluate("window.wbLong") if t >= t_start]
    marks["start"] = t_start
    return marks


@pytest.mark.alone  # no browser task over 200 ms
@pytest.mark.timeout(300)
def test_race_keeps_the_page_responsive_and_stops_within_a_second(page, server_url):
    """Issue 26: a 300-step, 3-seed race once blocked the browser ~14 s of 15 (Gradio's front end
    copied and stored every streamed figure and status) and Stop arrived seconds late. Now: no
    main-thread task over 200 ms from the Start click until a second after the race's exports
    appeared, Stop acknowledged on the page within 1 s of the click, the race shown ended within
    1 s after that, and the answer truthful."""
    from playwright.sync_api import expect

    page.add_init_script(LONGTASKS)
    open_adapters(page, server_url)
    _set_number(page, "pissa-steps", 300)
    _set_number(page, "pissa-seeds", 3)
    settle(page)  # what the page computes when it opens (other tabs' first views) is not the race's,
    main_thread_idle(page)  # nor what the page draws of it (plotly's import: open_adapters)

    run = _race(page, stop=False)
    final = page.locator(STATUS).inner_text()
    assert "1800/1800 steps" in final and "PiSSA's loss is below LoRA's" in final, final
    longest = max((d for _, d in run["tasks"]), default=0)
    print(
        f"race: first steps on the page {(run['running'] - run['start']) / 1000:.1f} s after Start, "
        f"ended {(run['ended'] - run['start']) / 1000:.1f} s, exports {(run['exports'] - run['start']) / 1000:.1f} s; "
        f"longest main-thread task from Start to exports + 1 s: {longest:.0f} ms; tasks over 50 ms "
        f"(ms after Start, ms): {[(round(t), round(d)) for t, d in run['tasks'] if d > 50]}"
    )
    assert longest <= 200, run["tasks"]

    # the finished race stays drawn, and the pointer reads every run's values at its step
    plot = page.locator("#pissa-race-live svg")
    expect(plot.locator("polyline")).to_have_count(2 * 6)  # 6 runs x (loss, gradient norm)
    box = page.locator("#pissa-race-live .wb-race-panel").first.bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.5, box["y"] + box["height"] * 0.5)
    tip = page.locator("#pissa-race-live .wb-race-hover")
    expect(tip).to_be_visible()
    readout = tip.inner_text()
    assert re.search(r"step (14\d|15\d|16\d)\b", readout), readout  # about the middle of 300 steps
    assert re.search(r"LoRA · seed 0: loss [\d.]+ · grad norm [\d.e+-]+", readout), readout
    assert readout.count("seed") == 6, readout
    shot(page, "adapters-race-finished")
    page.mouse.move(0, 0)
    expect(tip).to_be_hidden()

    stop = _race(page, stop=True)
    said = page.locator("#pissa-stop-msg").inner_text()
    final = page.locator(STATUS).inner_text()
    shot(page, "adapters-race-stopped")
    longest = max((d for _, d in stop["tasks"]), default=0)
    print(
        f"Stop acknowledged {stop['acknowledged'] - stop['clicked']:.0f} ms after the click, race shown "
        f"ended {stop['ended'] - stop['acknowledged']:.0f} ms after that: {said}; longest task {longest:.0f} ms"
    )
    assert stop["acknowledged"] - stop["clicked"] <= 1000, stop
    assert stop["ended"] - stop["acknowledged"] <= 1000, stop
    assert longest <= 200, stop["tasks"]
    took = re.fullmatch(r"Race stopped, ([\d.]+) s after the request\.", said)
    assert took and float(took.group(1)) <= 1.0, said
    done = int(re.search(r"(\d+)/1800 steps", final).group(1))
    assert 0 < done < 1800 and "**" not in final, final  # stopped mid-race
    # a stopped race says where it stopped and compares the runs only at the step all of them reached
    at = re.search(r"Race stopped at step (\d+) of 300[.:]", final)
    assert at and "at the end" not in final, final
    assert f"below LoRA's at step {at.group(1)} (of the 300 planned)" in final or int(at.group(1)) == 0, final
    expect(page.locator("#pissa-race-live .wb-race-live")).to_be_visible()
    # nothing of the races is kept in the browser's storage (Gradio's run history is off)
    assert page.evaluate("JSON.stringify(localStorage).length") < 10_000


def test_refusal_pin_and_presenter_view(page, server_url):
    """Issue 19 on this tab: a refused rank and an unknown layer leave the last spectrum on screen
    without an 'Error' badge (message in the toast); a pinned analysis is drawn dotted over the next
    one on the same axes and 'Clear pin' drops it; presenter view shows a one-line plain caption and
    the spectrum large, with init, rank, lr, methods and seeds hidden."""
    from playwright.sync_api import expect

    open_adapters(page, server_url)
    # the first view also reads "rank 8": wait for the Analyse click's own run to end
    with result_of(page, done="#pissa-stats", timeout_ms=90_000):
        page.locator("#pissa-analyse").click()
    spec = page.locator("#pissa-spectrum")
    page.locator("#pissa-stats").get_by_text("rank 8").wait_for(timeout=90_000)
    settle(page, 90_000)
    legend = spec.locator(".legendtext")
    expect(legend).to_have_count(3, timeout=30_000)
    page.click("#pissa-pin")
    expect(page.locator("#pissa-pin-msg")).to_contain_text("pinned: pissa-toy · fc2 · r 8 · pissa")

    # a refused rank: the toast names the range, the spectrum stays, no Error badge
    settle(page)
    before = page.locator("#pissa-stats").inner_text()
    box = page.locator("#pissa-rank input[type='number']")
    box.fill("500")
    # Tab refuses it; the next click is the user's and computes with the rank in use: its own run
    with result_of(
        page,
        toast="The rank r must be a whole number between 1 and 128 (got 500)",
        done="#pissa-stats",
        timeout_ms=30_000,
    ):
        box.press("Tab")
        page.locator("#pissa-analyse").click()
    settle(page)
    badges = page.locator("#tab-adapters .wrap span.error")
    expect(badges).to_have_count(0)
    assert page.locator("#pissa-stats").inner_text() == before

    # a failing computation (rank 64 on the 10-row head) leaves the spectrum clean too
    page.locator("#pissa-layer input").first.click()
    page.get_by_role("option", name="head", exact=True).click()
    _set_number(page, "pissa-rank", 64)
    # the failed run's progress gives way to the kept result (its own run: pending, then hidden)
    with result_of(page, toast="between 1 and 10", done="#pissa-stats", timeout_ms=30_000) as failed:
        page.locator("#pissa-analyse").click()
    settle(page)
    assert len([t for _, t in failed.toasts() if "between 1 and 10" in t]) == 1, failed.toasts()
    statuses_cleared(page, ["#pissa-stats"], 10_000)  # its hidden follow-up's timer is in the block's text
    expect(badges).to_have_count(0)
    assert page.locator("#pissa-stats").inner_text() == before
    page.locator("#pissa-layer input").first.click()
    page.get_by_role("option", name="fc2", exact=True).click()

    # another rank, drawn beside the pinned one on the same axes
    _set_number(page, "pissa-rank", 3)
    page.locator("#pissa-analyse").click()
    page.locator("#pissa-stats").get_by_text("rank 3").wait_for(timeout=90_000)
    expect(legend.filter(has_text="pinned: pissa-toy · fc2 · r 8")).to_have_count(2, timeout=30_000)
    expect(spec.locator(".gtitle")).to_contain_text("pinned one dotted")
    shot(page, "adapters-pinned")

    page.locator("#wb-presenter-toggle input").check()
    expect(page.locator("body.wb-presenter")).to_have_count(1)
    expect(page.locator("#tab-adapters .block.wb-presenter-only")).to_contain_text("biggest directions")
    for hidden in (
        "#pissa-init",
        "#pissa-rank",
        "#pissa-lr",
        "#pissa-methods",
        "#pissa-seeds",
        "#pissa-hist",
        "#pissa-stats",
    ):
        expect(page.locator(hidden)).to_be_hidden()
    plots_fitted(page, "#pissa-spectrum")  # plotly re-fits to the wider row
    box = spec.bounding_box()
    assert box["width"] >= 0.6 * 1440, box  # the key figure takes the row
    shot(page, "adapters-presenter")
    page.locator("#wb-presenter-toggle input").uncheck()
    page.click("#pissa-unpin")
    expect(legend).to_have_count(3)  # redrawn without the pinned traces
