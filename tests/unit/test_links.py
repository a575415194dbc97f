"""Deep links: values round-trip through the query string; bad values are skipped, never raised."""

import math
from urllib.parse import parse_qsl, urlparse

import gradio as gr
import pytest

from components.links import deep_links as links


def _components():
    with gr.Blocks():
        comps = {
            "t": gr.Textbox(elem_id="t"),
            "s": gr.Slider(0, 10, value=3, step=1, elem_id="s"),
            "n": gr.Number(value=1, precision=0, minimum=1, elem_id="n"),
            "d": gr.Dropdown([("Alpha", "a"), ("Beta", "b")], value="a", elem_id="d"),
            "m": gr.Dropdown(["x", "y", "z"], value=["x"], multiselect=True, elem_id="m"),
            "r": gr.Radio(["p", "q"], value="p", elem_id="r"),
            "c": gr.Checkbox(value=False, elem_id="c"),
            "g": gr.CheckboxGroup(["u", "v"], value=[], elem_id="g"),
        }
    return comps


GOOD = {
    "t": "the film was superb & dull = 2?",
    "s": 7,
    "n": 4,
    "d": "b",
    "m": ["y", "z"],
    "r": "q",
    "c": True,
    "g": ["u", "v"],
}


def test_round_trip_through_a_query_string():
    comps = _components()
    registry = {c.elem_id: c for c in comps.values()}
    q = links.build_query("relevance", [(k, GOOD[k]) for k in comps])
    params = dict(parse_qsl(urlparse("http://h/" + q).query))
    assert params["tab"] == "relevance"
    values, notices = links.parse_query(params, registry)
    assert notices == []
    assert values == GOOD


@pytest.mark.parametrize(
    "key,raw",
    [
        ("s", 11),
        ("s", "seven"),
        ("s", math.nan),
        ("s", True),
        ("n", 0),
        ("n", [1]),
        ("d", "zzz"),
        ("m", ["x", "nope"]),
        ("m", "x"),
        ("r", "s"),
        ("c", "yes"),
        ("g", ["w"]),
        ("t", "x" * 20_000),
    ],
)
def test_bad_values_are_refused_with_a_reason(key, raw):
    comp = _components()[key]
    with pytest.raises(links.LinkValueError) as e:
        links.coerce(comp, raw)
    assert key in str(e.value)


def test_parse_query_skips_bad_and_unknown_keeps_good():
    comps = _components()
    registry = {c.elem_id: c for c in comps.values()}
    params = {
        "tab": "x",
        "s": "99",
        "t": "plain words",
        "r": '"q"',
        "nosuch": "1",
        "presenter": "1",
        "__theme": "dark",
        "n": "not json",
    }
    values, notices = links.parse_query(params, registry)
    assert values == {"t": "plain words", "r": "q"}
    assert len(notices) == 3 and any("nosuch" in n for n in notices)
    # a key a tab reads itself (its LINK_PARAMS) is neither a value nor a notice
    values, notices = links.parse_query({"feature": "5", "nosuch": "1"}, registry, own={"feature"})
    assert values == {} and len(notices) == 1 and "nosuch" in notices[0]


def test_bare_words_and_numbers_decode():
    assert links.decode("hello world") == "hello world"
    assert links.decode("3") == 3 and links.decode('"3"') == "3"
    # a number in a text field stays text
    assert links.coerce(_components()["t"], 3) == "3"


def test_deep_links_collect_only_event_inputs_with_elem_ids():
    dl = links.DeepLinks()
    with gr.Blocks() as demo:
        with gr.Tabs() as tabs:
            with gr.Tab("A", id="a") as ta:
                with gr.Row():
                    x = gr.Textbox(elem_id="a-x")
                    gr.Textbox(elem_id="a-unused")  # feeds no event
                    y = gr.Slider(0, 5, elem_id=None)  # no elem_id
                out = gr.Textbox(elem_id="a-out")  # output only
                gr.Button().click(lambda a, b: a, [x, y], out)
                dl.add_tab("a", ta)
            with gr.Tab("B", id="b") as tb:
                with gr.Accordion("more"):
                    z = gr.Checkbox(elem_id="b-z")
                z.change(lambda v: v, z, z)
                dl.add_tab("b", tb)
        dl.install(demo, tabs, default_tab="a")
    assert [c.elem_id for c in dl.tabs[0].inputs] == ["a-x"]
    assert [c.elem_id for c in dl.tabs[1].inputs] == ["b-z"]
    assert set(dl.registry) == {"a-x", "b-z"}


def test_a_validated_list_takes_values_outside_its_choices():
    with gr.Blocks():
        g = links.accept_link(
            gr.CheckboxGroup(choices=[], value=[], elem_id="neurons"),
            lambda vals: [v for v in vals if v.startswith("L") or links_bad(v)],
        )
    assert links.coerce(g, ["L1:3", "L2:5"]) == ["L1:3", "L2:5"]
    with pytest.raises(links.LinkValueError) as e:
        links.coerce(g, ["nope"])
    assert "neurons" in str(e.value) and "bad neuron" in str(e.value)
    with pytest.raises(links.LinkValueError):
        links.coerce(g, "L1:3")  # not a list
    with pytest.raises(links.LinkValueError):
        links.coerce(g, ["L1:3"] * 2000)  # bounded
    # the restore shows linked values as the choices, ticked
    upd = links._restored(g, ["L1:3"])
    assert upd["choices"] == ["L1:3"] and upd["value"] == ["L1:3"]
    plain = gr.Checkbox(elem_id="c")
    assert "choices" not in links._restored(plain, True)


def links_bad(v):
    raise ValueError(f"bad neuron {v!r}")


def test_link_runs_chain_a_tabs_events_behind_its_hidden_button(monkeypatch):
    import types

    import components

    declared = [
        types.SimpleNamespace(id="a", link_runs=("first", "second"), link_params=()),
        types.SimpleNamespace(id="b", link_runs=(), link_params=()),
    ]
    monkeypatch.setattr(components, "tabs", lambda: declared)
    dl = links.DeepLinks()
    with gr.Blocks() as demo:
        with gr.Tabs() as tabs:
            with gr.Tab("A", id="a") as ta:
                x = gr.Textbox(elem_id="a-x")
                y = gr.Textbox(elem_id="a-y")
                gr.Button(elem_id="a-go").click(lambda v: v, x, y, api_name="first")
                gr.Button(elem_id="a-go2").click(lambda v: v + "!", y, y, api_name="second")
                dl.add_tab("a", ta)
            with gr.Tab("B", id="b") as tb:
                z = gr.Textbox(elem_id="b-z")
                z.submit(lambda v: v, z, z)
                dl.add_tab("b", tb)
        dl.install(demo, tabs, default_tab="a")
    run_a = dl.tabs[0].run
    fns = list(demo.fns.values())
    clicks = [f for f in fns if any(t[0] == run_a._id for t in f.targets or [])]
    assert len(clicks) == 1 and clicks[0].inputs == [x] and clicks[0].outputs == [y]
    then = [f for f in fns if f.trigger_after == clicks[0]._id]
    assert len(then) == 1 and then[0].inputs == [y]
    # the page clicks tab a's button when the URL carries a-x or a-y; tab b has no runs
    js = [f.js for f in fns if f.js and "wbLinkRuns" in f.js]
    assert len(js) == 1 and '"wb-linkrun-a", ["a-x", "a-y"]' in js[0] and "wb-linkrun-b" not in js[0]
    # the hidden buttons are not linkable inputs
    assert set(dl.registry) == {"a-x", "a-y", "b-z"}


def test_link_runs_naming_an_unknown_event_are_logged_and_skipped(monkeypatch, caplog):
    """A tab built without some of its link_runs events keeps the app up: logged, runs skipped."""
    import types

    import components

    monkeypatch.setattr(
        components, "tabs", lambda: [types.SimpleNamespace(id="a", link_runs=("nope",), link_params=())]
    )
    dl = links.DeepLinks()
    with gr.Blocks() as demo:
        with gr.Tabs() as tabs:
            with gr.Tab("A", id="a") as ta:
                x = gr.Textbox(elem_id="a-x")
                x.submit(lambda v: v, x, x)
                dl.add_tab("a", ta)
        dl.install(demo, tabs, default_tab="a")
    assert "nope" in caplog.text
    assert not any(getattr(fn, "js", None) and "wb-linkrun-a" in str(fn.js) for fn in demo.fns.values())


def test_every_zoo_tab_declares_link_runs_that_exist():
    import app
    from components import tabs

    demo = app.build_app("zoo")
    names = {fn.api_name for fn in demo.fns.values() if getattr(fn, "api_name", None)}
    for t in tabs():
        missing = [n for n in t.link_runs if n not in names]
        assert missing == [], (t.id, missing)


def _one_tab(make_inputs):
    """A page of one linked tab "a" whose inputs `make_inputs()` builds → (demo, its inputs, the link
    maker: the values of the inputs → the link's query)."""
    dl = links.DeepLinks()
    with gr.Blocks() as demo:
        with gr.Tabs() as tabs:
            with gr.Tab("A", id="a") as ta:
                entry = dl.add_tab("a", ta)
                inputs = make_inputs()
                gr.Button().click(lambda *v: v[0], inputs, inputs[0])
        dl.install(demo, tabs, default_tab="a")
    make = next(
        fn for fn in demo.fns.values() if entry.button._id in [t for t, _ in (fn.targets or [])] and fn.fn is not None
    ).fn
    return demo, inputs, make


def test_link_leaves_out_inputs_still_at_their_defaults_and_is_copied():
    demo, _, make = _one_tab(
        lambda: [
            gr.Textbox("the plot was dull", elem_id="a-x"),
            gr.Slider(1, 10, value=3, step=1, elem_id="a-n"),
            gr.CheckboxGroup(["gi", "ig"], value=["gi"], elem_id="a-m"),
        ]
    )
    assert make("the plot was dull", 3, ["gi"]) == "?tab=a"
    assert make("the plot was dull", 5, ["gi"]) == "?tab=a&a-n=5"
    assert make("good", 3, ["gi", "ig"]) == "?" + links.urlencode(
        [("tab", "a"), ("a-x", '"good"'), ("a-m", '["gi","ig"]')]
    )
    # the page copies the absolute URL and confirms on the button
    copy = [fn for fn in demo.fns.values() if getattr(fn, "js", None) and "clipboard" in str(fn.js)]
    assert copy and "Copied" in copy[0].js and "wb-link-btn-" in copy[0].js


def test_link_leaves_out_refused_values_and_an_empty_box():
    _, (free, n, k), make = _one_tab(
        lambda: [
            gr.Textbox(elem_id="a-free"),  # built empty (None); the browser sends ""
            gr.Slider(0, 199, value=0, step=1, elem_id="a-idx"),
            gr.Number(value=1, precision=0, minimum=0, maximum=9, elem_id="a-k"),
        ]
    )
    assert make("", 0, 1) == "?tab=a"  # a fresh view: no memo-free=""
    with pytest.warns(UserWarning, match="Left out of the link: a-idx .*; a-k must be a number from 0 up to 9"):
        assert make("", 3.5, 12) == "?tab=a"  # refused by their controls: not carried
    assert make("", 3, 2) == "?tab=a&a-idx=3&a-k=2"
    # and a link that names such a value is refused on restore with a notice, not rounded
    with pytest.raises(links.LinkValueError, match="whole number"):
        links.coerce(n, 3.5)
    with pytest.raises(links.LinkValueError, match="whole number"):
        links.coerce(k, 2.5)


def _link_call(demo, entry_button, values):
    """Call the link button's event as the server does (its preprocessing included) → the link."""
    import asyncio

    from gradio.state_holder import SessionState

    fn = next(
        f for f in demo.fns.values() if entry_button._id in [t for t, _ in (f.targets or [])] and f.fn is not None
    )
    state = SessionState(demo)
    return asyncio.run(demo.process_api(block_fn=fn, inputs=list(values), state=state))["data"][0]


def test_a_value_past_a_boxs_maximum_gives_a_link_and_a_notice_not_a_server_error():
    """A feature id of 999 in a box whose maximum is 63: the request used to fail in Gradio's
    preprocessing (HTTP 500, the old link kept); now the link is written without it, with a notice."""
    dl = links.DeepLinks()
    with gr.Blocks() as demo:
        with gr.Tabs() as tabs:
            with gr.Tab("A", id="a") as ta:
                entry = dl.add_tab("a", ta)
                fid = gr.Number(value=5, precision=0, minimum=0, maximum=63, elem_id="a-fid")
                gr.Button().click(lambda v: v, fid, fid)
        dl.install(demo, tabs, default_tab="a")
    assert _link_call(demo, entry.button, [7]) == "?tab=a&a-fid=7"
    with pytest.warns(UserWarning, match=r"a-fid must be a number from 0 up to 63 \(got 999\)"):
        assert _link_call(demo, entry.button, [999]) == "?tab=a"


def test_a_refused_model_pick_is_never_written_into_a_link(tmp_path):
    """The picker remembers the session's last accepted pick; the link carries that one (or none)
    instead of a pick the tab refused (a Llama folder in a tab that takes Mamba)."""
    from backend.core import presets as P
    from components.inputs.model_picker import model_picker

    listed = [
        P.Preset("relevance", "zoo", "zoo/a", "x.A", "zoo A"),
        P.Preset("relevance", "zoo", "zoo/b", "x.B", "zoo B"),
    ]
    dl = links.DeepLinks()
    with gr.Blocks() as demo:
        with gr.Tabs() as tabs:
            with gr.Tab("A", id="a") as ta:
                entry = dl.add_tab("a", ta)
                box, line = model_picker(listed, "relevance", elem_id="a-model")
                gr.Button().click(lambda v: v, box, line)
        dl.install(demo, tabs, default_tab="a")
    check = next(
        f
        for f in demo.fns.values()
        if box._id in [t for t, _ in (f.targets or [])] and f.fn is not None and len(f.outputs) == 2
    )
    refused = "no-such-model"  # not a listed key, not a hub id or folder: refused by the check
    assert check.fn("zoo/b", "zoo/a")[1] == "zoo/b"  # accepted: remembered
    assert check.fn(refused, "zoo/b")[1] == "zoo/b"  # refused: the last accepted pick stays
    assert "✗" in check.fn(refused, "zoo/b")[0]
    make = next(
        f for f in demo.fns.values() if entry.button._id in [t for t, _ in (f.targets or [])] and f.fn is not None
    ).fn
    assert make("zoo/b", "zoo/b") == "?tab=a&a-model=%22zoo%2Fb%22"
    with pytest.warns(UserWarning, match="a-model: the pick 'no-such-model' was refused, the link keeps 'zoo/b'"):
        assert make(refused, "zoo/b") == "?tab=a&a-model=%22zoo%2Fb%22"
    with pytest.warns(UserWarning, match="the link keeps the default"):
        assert make(refused, "zoo/a") == "?tab=a"
    with pytest.warns(UserWarning, match="the link keeps the default"):
        assert make(refused, None) == "?tab=a"
