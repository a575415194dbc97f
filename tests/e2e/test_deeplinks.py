"""A deep link copied from every tab restores the same values in a fresh browser.

The linked inputs of each tab and their defaults come from the app's config; every one is changed
to another valid value, all in one link; each tab's "Link to this view" is copied (L1, which must
carry exactly the tab's linked inputs with the changed values: the browser restored them); then each
L1 is opened in a fresh page (a new session) and copied once more (L2): L2 must equal L1.
"""
import json
import urllib.request
from urllib.parse import parse_qsl, urlencode, urlparse

import pytest

from tests.e2e.conftest import settle, shot
from tests.helpers.browser import chromium_page

pytestmark = pytest.mark.timeout(600)
TITLES: dict = {}


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
            out[eid[4:]] = {by_id[i]["props"]["elem_id"]: by_id[i]["props"].get("value") for i in below(node)
                            if by_id.get(i, {}).get("type") in LINKABLE and by_id[i]["props"].get("elem_id")
                            and i in used and not by_id[i]["props"]["elem_id"].startswith("wb-link")}
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


def links_of_all_tabs(page, url, query, tabs) -> dict:
    """Open `url + query`, then visit every tab by its header and copy its link."""
    page.goto(url + query)
    page.wait_for_selector(".tab-wrapper, [role=tablist]", state="visible")
    settle(page, 120_000)
    out = {}
    for tab in tabs:
        page.locator(f"button[role=tab]:has-text('{TITLES[tab]}')").first.click()
        page.wait_for_selector(f"#tab-{tab}", state="visible")
        settle(page, 120_000)
        out[tab] = _read_link(page, tab)
        assert out[tab]["tab"] == tab
    return out


def copy_link(page, url, query, tab_id) -> dict:
    page.goto(url + query)
    page.wait_for_selector(f"#tab-{tab_id}", state="visible")
    settle(page, 120_000)
    return _read_link(page, tab_id)


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
    defaults = linked_defaults(server_url)
    assert set(defaults) == set(tabs)
    with chromium_page() as page:
        page.set_default_timeout(90_000)
        changed = {}
        for tab in tabs:
            changed[tab], dropdowns = {}, 0
            for key, value in defaults[tab].items():
                comp = cfg[key]
                single_dropdown = comp["type"] == "dropdown" and not comp["props"].get("multiselect")
                # A single-choice dropdown often decides another's choices (model -> its layers); a
                # link holds a consistent pair, so change only the first one of a tab here.
                if single_dropdown and dropdowns:
                    continue
                v = other_value(comp, value)
                if v is not None:
                    changed[tab][key] = v
                    dropdowns += single_dropdown
        # One link may carry the inputs of every tab: restore them all at once, then copy each tab's link.
        everything = {k: json.dumps(v) for c in changed.values() for k, v in c.items()}
        l1 = links_of_all_tabs(page, server_url, "?" + urlencode({"tab": tabs[0], **everything}), tabs)
        for tab in tabs:
            # the link carries exactly the inputs the config says it should
            assert set(l1[tab]) - {"tab"} == set(defaults[tab]), tab
            for k, v in changed[tab].items():
                assert json.loads(l1[tab][k]) == v, f"{tab}: {k} was not restored ({l1[tab][k]} != {v})"
    with chromium_page() as fresh_browser:
        for tab in tabs:
            fresh = fresh_browser.context.new_page()  # a new page, a new Gradio session
            fresh.set_default_timeout(90_000)
            l2 = copy_link(fresh, server_url, "?" + urlencode(l1[tab]), tab)
            assert l2 == l1[tab], tab
            if tab == tabs[-1]:
                shot(fresh, f"deeplink-{tab}")
            fresh.close()
    assert sum(len(v) for v in changed.values()) >= 5, changed


def test_bad_link_values_are_ignored_with_a_notice(server_url):
    with chromium_page() as page:
        page.set_default_timeout(90_000)
        page.goto(server_url + "?tab=tour&tour-step=%22many%22&no-such-input=1&tour-name=%22nope%22")
        page.wait_for_selector("#tab-tour", state="visible")
        settle(page, 120_000)
        toast = page.locator(".toast-body, [data-testid='toast-body']").first
        toast.wait_for(timeout=30_000)
        text = page.locator(".toast-body, [data-testid='toast-body']").all_inner_texts()
        assert any("ignored" in t and "no-such-input" in t for t in text), text
        # the tab still opened, with its defaults
        assert page.locator("#tour-step input").input_value() == "1"
