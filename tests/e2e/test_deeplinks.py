"""A deep link copied from every tab restores the same view, results included, in a fresh browser.

The linked inputs of each tab and their defaults come from the app's config; every one is changed
to another valid value, all in one link; each tab is visited, its results (computed from the linked
values by the tab's own events) are read — texts of its result blocks and the data of every plotly
figure — and its "Link to this view" is copied (L1, which must carry the tab's changed inputs with
their values, the browser restored them, and no input left at its default). Then each L1 is opened in a fresh browser in
dark mode (a new session): the same results must appear without a click, every figure must carry
the shared transparent template, and the link copied there (L2) must equal L1. Each dark view is
screenshotted (test-artifacts/deeplink-dark-<tab>.png).
"""

import contextlib
import json
import urllib.request
from urllib.parse import parse_qsl, urlencode, urlparse

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from tests.e2e.conftest import settle, shot
from tests.helpers.browser import chromium_page
from tests.helpers.waits import plots_drawn, result_of

pytestmark = pytest.mark.timeout(600)
TITLES: dict = {}

# Result blocks per tab: each must show something after the link is opened, identical in both views.
RESULTS = {
    "relevance": ["#rel-conservation", "#rel-heatmap", "#rel-image-md"],
    "features": ["#features-header", "#features-table", "#features-steer-out"],
    "memorization": ["#memo-score", "#memo-compare"],
    "math_neurons": ["#mn-acc", "#mn-samples"],
    "adapters": ["#pissa-stats"],
    "tour": ["#tour-header", "#tour-caption"],
}
# Values the generic changer cannot invent (its "<text> linked" would be refused by the models, and
# the results compared below must exist): words of the zoo's vocabularies, and neuron tick boxes,
# empty until a search fills them, yet a link may carry any of the zoo model's value neurons.
EXTRA = {
    "rel-text": "this sequel is long and boring and the dialogue is awful",
    "rel-target": "positive",
    "features-query": "red",
    "memo-prompt": "a red ring on a purple background",
    "memo-free": "down0.attn0:3",
    "memo-neurons": ["mid.attn0:5", "down1.attn0:17"],
    # small but changed settings keep the first (uncached) computation short
    "memo-seeds": 2,
    "mn-n": 8,
    "pissa-rank": 4,
    # the contrast's concept filters and several clamps: values the tab accepts, a smaller set
    "features-contrast-a": "green",
    "features-contrast-b": "yellow",
    "features-contrast-n": 16,
    "features-more-clamps": "5=2",
    "features-suppress-ids": "7",
    # the Features tab's own SAE and hookpoint go with a picked model (tests/e2e/test_own_models.py)
    "feat-sae": None,
    "feat-hookpoint": None,
}

DRAWN_JS = """([tab, n]) => [...document.querySelectorAll('#tab-' + tab + ' .js-plotly-plot')]
  .filter((el) => el._fullLayout).length >= n"""
VIEW_JS = """(tab) => {
  const root = document.getElementById('tab-' + tab);
  const plots = [...root.querySelectorAll('.js-plotly-plot')].map((el) => ({
    data: JSON.stringify((el.data || []).map((t) => [t.type, t.name, t.x, t.y, t.z])),
    bg: el.layout && el.layout.paper_bgcolor, plotbg: el.layout && el.layout.plot_bgcolor,
    font: el.layout && el.layout.template && el.layout.template.layout.font.color,
    meta: el.layout && el.layout.meta && el.layout.meta.wb_template}));
  return plots;
}"""


# Accessibility of a tab: every visible control is in the keyboard's tab order (tabIndex >= 0, not
# disabled by a negative index), and every visible picture has alt text.
A11Y_JS = """(tab) => {
  const root = document.getElementById('tab-' + tab);
  const shown = (el) => el.offsetParent !== null && getComputedStyle(el).visibility !== 'hidden';
  const controls = [...root.querySelectorAll('button, input, select, textarea')].filter(shown);
  const unreachable = controls.filter((el) => el.tabIndex < 0 && !el.disabled)
    .map((el) => (el.closest('[id]') || {}).id + ':' + el.tagName + ':' + (el.type || ''));
  const noAlt = [...root.querySelectorAll('img')].filter(shown).filter((i) => !i.getAttribute('alt'))
    .map((i) => (i.closest('[id]') || {}).id);
  return {controls: controls.length, unreachable, noAlt};
}"""


def result_view(page, tab, figures: int = 0) -> dict:
    """The results a tab shows: its result blocks' texts (waited for) and its figures' data, once
    at least `figures` figures are drawn (the tab's first view may arrive after its link's results)."""
    sels = RESULTS.get(tab, [])
    for sel in sels:
        page.wait_for_function(
            "(s) => { const el = document.querySelector(s); return el && el.innerText.trim().length > 0; }",
            arg=sel,
            timeout=120_000,
        )
    with contextlib.suppress(PlaywrightTimeout):  # fewer: the comparison below says which
        page.wait_for_function(DRAWN_JS, arg=[tab, figures], timeout=60_000)
    settle(page, 120_000)
    plots_drawn(page, f"#tab-{tab}", 120_000)  # plotly draws a figure after its event has ended
    return {"texts": {sel: page.locator(sel).first.inner_text() for sel in sels}, "plots": page.evaluate(VIEW_JS, tab)}


def _config(url):
    with urllib.request.urlopen(url + "config", timeout=30) as r:
        cfg = json.load(r)
    return {c["props"]["elem_id"]: c for c in cfg["components"] if c.get("props", {}).get("elem_id")}


LINKABLE = {"textbox", "slider", "number", "dropdown", "radio", "checkbox", "checkboxgroup"}


def linked_defaults(url) -> dict:
    """{tab: {elem_id: default value}} of the inputs a link carries, read from the app's config:
    elem_id set, a linkable type, inside the tab, input of at least one event."""
    with urllib.request.urlopen(url + "config", timeout=30) as r:
        cfg = json.load(r)
    by_id = {c["id"]: c for c in cfg["components"]}
    used = {i for d in cfg["dependencies"] for i in d.get("inputs", [])}

    def below(node):
        for ch in node.get("children", []) or []:
            yield ch["id"]
            yield from below(ch)

    out = {}

    def visit(node):
        comp = by_id.get(node["id"], {})
        eid = str(comp.get("props", {}).get("elem_id") or "")
        if comp.get("type") == "tabitem" and eid.startswith("tab-"):
            out[eid[4:]] = {
                by_id[i]["props"]["elem_id"]: by_id[i]["props"].get("value")
                for i in below(node)
                if by_id.get(i, {}).get("type") in LINKABLE
                and by_id[i]["props"].get("elem_id")
                and i in used
                and not by_id[i]["props"]["elem_id"].startswith("wb-link")
            }
            return
        for ch in node.get("children", []) or []:
            visit(ch)

    visit(cfg["layout"])
    return out


def _tab_ids(cfg):
    return [eid[4:] for eid, c in cfg.items() if c["type"] == "tabitem" and eid.startswith("tab-")]


def _read_link(page, tab_id) -> dict:
    page.click(f"#wb-link-btn-{tab_id}")
    box = page.locator(f"#wb-link-url-{tab_id} textarea, #wb-link-url-{tab_id} input").first
    page.wait_for_function("(el) => el.value.startsWith('http')", arg=box.element_handle(), timeout=30_000)
    link = box.input_value()
    return dict(parse_qsl(urlparse(link).query))


def links_of_all_tabs(page, url, query, tabs) -> tuple[dict, dict]:
    """Open `url + query`, then visit every tab by its header, read its results and copy its link."""
    page.goto(url + query)
    page.wait_for_selector(".tab-wrapper, [role=tablist]", state="visible")
    restored(page)
    out, views = {}, {}
    for tab in tabs:
        page.locator(f"button[role=tab]:has-text('{TITLES[tab]}')").first.click()
        page.wait_for_selector(f"#tab-{tab}", state="visible")
        runs_settled(page)  # a link's run for this tab starts once it mounts
        views[tab] = result_view(page, tab)
        out[tab] = _read_link(page, tab)
        assert out[tab]["tab"] == tab
    return out, views


# No link run is left waiting for a tab that has mounted (components.links.deep_links.RUN_JS looks for its
# button every 200 ms): what the shown tabs will run has started.
RUNS_STARTED = """() => Array.isArray(window.wbLinkRuns)
  && [...window.wbLinkWaiting].every((id) => !document.getElementById(id))"""


def runs_settled(page):
    """Wait until the link runs of the tabs shown so far have started, and every event has ended."""
    page.wait_for_function(RUNS_STARTED, timeout=120_000)
    settle(page, 120_000)


def restored(page):
    """Wait for the link's restore (its silent load event) to finish: it then starts the tab runs."""
    runs_settled(page)


def copy_link(page, url, query, tab_id, figures: int = 0) -> tuple[dict, dict]:
    page.goto(url + query)
    page.wait_for_selector(f"#tab-{tab_id}", state="visible")
    restored(page)
    view = result_view(page, tab_id, figures)
    return _read_link(page, tab_id), view


def _choices(props):
    return [c[1] if isinstance(c, list) else c for c in props.get("choices") or []]


def other_value(comp, current):
    """A valid value different from `current`, or None when the component offers none."""
    t, p = comp["type"], comp["props"]
    if t == "textbox":
        return (current or "") + " linked"
    if t == "checkbox":
        return not current
    if t == "slider":
        lo, hi, step = p["minimum"], p["maximum"], p.get("step") or 1
        mid = lo + step * round((hi - lo) / step / 2)
        v = mid if mid != current else lo
        return v if v != current else None
    if t == "number":
        v = (current or 0) + 1
        return v if p.get("maximum") is None or v <= p["maximum"] else None
    ch = _choices(p)
    if t in ("radio", "dropdown") and not p.get("multiselect"):
        alts = [c for c in ch if c != current]
        return alts[-1] if alts else None
    if t in ("checkboxgroup", "dropdown"):
        cur = list(current or [])
        alt = [c for c in ch if c not in cur][:1] or ch[:1]
        return alt if alt and alt != cur else None
    return None


def test_deep_link_from_every_tab_restores_in_a_fresh_browser(server_url):
    cfg = _config(server_url)
    tabs = _tab_ids(cfg)
    TITLES.update({t: cfg[f"tab-{t}"]["props"]["label"] for t in tabs})
    assert "relevance" in tabs and "tour" in tabs
    assert set(RESULTS) <= set(tabs)
    defaults = linked_defaults(server_url)
    assert set(defaults) == set(tabs)
    with chromium_page() as page:
        page.set_default_timeout(90_000)
        changed = {}
        for tab in tabs:
            changed[tab], dropdowns = {}, 0
            for key, value in defaults[tab].items():
                comp = cfg[key]
                if key.endswith("-model"):
                    # a model picker lists the papers' checkpoints, which cannot load offline; links
                    # carrying a picked model (a user's own folder) are in tests/e2e/test_own_models.py
                    continue
                single_dropdown = comp["type"] == "dropdown" and not comp["props"].get("multiselect")
                # A single-choice dropdown often decides another's choices (model -> its layers); a
                # link holds a consistent pair, so change only the first one of a tab here.
                if single_dropdown and dropdowns:
                    continue
                v = EXTRA.get(key, other_value(comp, value))
                if v is not None:
                    changed[tab][key] = v
                    dropdowns += single_dropdown
        assert changed["memorization"]["memo-neurons"] == EXTRA["memo-neurons"]
        # One link may carry the inputs of every tab: restore them all at once, then copy each tab's link.
        everything = {k: json.dumps(v) for c in changed.values() for k, v in c.items()}
        l1, views = links_of_all_tabs(page, server_url, "?" + urlencode({"tab": tabs[0], **everything}), tabs)
        for tab in tabs:
            # the link carries the inputs that differ from their defaults, and only those: every
            # changed one, plus any that followed a changed one (a model's layer list)
            carried = set(l1[tab]) - {"tab"}
            assert set(changed[tab]) <= carried <= set(defaults[tab]), tab
            for k in carried - set(changed[tab]):
                assert json.loads(l1[tab][k]) != defaults[tab][k], (tab, k)
            for k, v in changed[tab].items():
                if cfg[k]["type"] == "dropdown" and tab == "adapters" and k == "pissa-layer":
                    continue  # follows the linked model
                assert json.loads(l1[tab][k]) == v, f"{tab}: {k} was not restored ({l1[tab][k]} != {v})"
    with chromium_page() as fresh_browser:
        for tab in tabs:
            fresh = fresh_browser.context.new_page()  # a new page, a new Gradio session
            fresh.set_default_timeout(90_000)
            l2, view = copy_link(
                fresh, server_url, "?" + urlencode({**l1[tab], "__theme": "dark"}), tab, len(views[tab]["plots"])
            )
            l2.pop("__theme", None)
            assert l2 == l1[tab], tab
            if tab in RESULTS:
                # the results came back without a click, the same as in the view the link was copied from
                assert fresh.evaluate("() => window.wbLinkRuns") == [f"wb-linkrun-{tab}"], tab
                assert view["texts"] == views[tab]["texts"], tab
                assert [p["data"] for p in view["plots"]] == [p["data"] for p in views[tab]["plots"]], tab
                drawn = [p for p in view["plots"] if p["data"] != "[]"]
                assert drawn, f"{tab}: no figure drawn"
                for p in view["plots"]:  # every figure carries the shared, dark-safe template
                    clear = {str(p["bg"]).replace(" ", ""), str(p["plotbg"]).replace(" ", "")}
                    assert clear == {"rgba(0,0,0,0)"} and p["meta"] == "workbench", (tab, p)
                assert fresh.evaluate("() => document.body.classList.contains('dark')")
                a11y = fresh.evaluate(A11Y_JS, tab)
                assert a11y["controls"] > 5 and a11y["unreachable"] == [] and a11y["noAlt"] == [], (tab, a11y)
            shot(fresh, f"deeplink-dark-{tab}")
            fresh.close()
    assert sum(len(v) for v in changed.values()) >= 5, changed
    # a link that names no tab input runs nothing
    with chromium_page() as plain:
        plain.goto(server_url + "?tab=math_neurons")
        plain.wait_for_selector("#tab-math_neurons", state="visible")
        restored(plain)
        assert plain.evaluate("() => window.wbLinkRuns") == []


def test_feature_parameter_opens_the_feature_page(server_url):
    with chromium_page() as page:
        page.set_default_timeout(90_000)
        with result_of(page, load=True) as opened:  # its toasts from the first events on
            page.goto(server_url + "?tab=features&feature=5")
        page.wait_for_selector("#tab-features", state="visible")
        page.locator("#features-header").get_by_text("Feature 5").wait_for(timeout=60_000)
        assert page.locator("#features-id input").input_value() == "5"
        # `feature` is the tab's own link key: no "unknown link parameter" notice for it (nor one
        # that came and closed again while the page was read)
        texts = [t for _, t in opened.toasts()]
        assert not any("feature" in t for t in texts), texts


def test_bad_link_values_are_ignored_with_a_notice(server_url):
    with chromium_page() as page:
        page.set_default_timeout(90_000)
        # the notice is the restore's, as the page loads: armed before, it is seen even if it has
        # closed (after its 10 s) by the time the tab's first view has ended
        with result_of(page, toast="ignored", load=True, timeout_ms=120_000) as opened:
            page.goto(server_url + "?tab=tour&tour-step=%22many%22&no-such-input=1&tour-name=%22nope%22")
        page.wait_for_selector("#tab-tour", state="visible")
        settle(page, 120_000)
        text = [t for _, t in opened.toasts()]
        assert any("ignored" in t and "no-such-input" in t for t in text), text
        # the tab still opened, with its defaults
        assert page.locator("#tour-step input").input_value() == "1"
