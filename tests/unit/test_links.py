"""Deep links: values round-trip through the query string; bad values are skipped, never raised."""
import math
from urllib.parse import parse_qsl, urlparse

import gradio as gr
import pytest

from components import links


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


GOOD = {"t": "the film was superb & dull = 2?", "s": 7, "n": 4, "d": "b", "m": ["y", "z"], "r": "q", "c": True,
        "g": ["u", "v"]}


def test_round_trip_through_a_query_string():
    comps = _components()
    registry = {c.elem_id: c for c in comps.values()}
    q = links.build_query("relevance", [(k, GOOD[k]) for k in comps])
    params = dict(parse_qsl(urlparse("http://h/" + q).query))
    assert params["tab"] == "relevance"
    values, notices = links.parse_query(params, registry)
    assert notices == []
    assert values == GOOD


@pytest.mark.parametrize("key,raw", [
    ("s", 11), ("s", "seven"), ("s", math.nan), ("s", True), ("n", 0), ("n", [1]), ("d", "zzz"),
    ("m", ["x", "nope"]), ("m", "x"), ("r", "s"), ("c", "yes"), ("g", ["w"]), ("t", "x" * 20_000),
])
def test_bad_values_are_refused_with_a_reason(key, raw):
    comp = _components()[key]
    with pytest.raises(links.LinkValueError) as e:
        links.coerce(comp, raw)
    assert key in str(e.value)


def test_parse_query_skips_bad_and_unknown_keeps_good():
    comps = _components()
    registry = {c.elem_id: c for c in comps.values()}
    params = {"tab": "x", "s": "99", "t": "plain words", "r": '"q"', "nosuch": "1", "presenter": "1",
              "__theme": "dark", "n": "not json"}
    values, notices = links.parse_query(params, registry)
    assert values == {"t": "plain words", "r": "q"}
    assert len(notices) == 3 and any("nosuch" in n for n in notices)


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
                    gr.Textbox(elem_id="a-unused")        # feeds no event
                    y = gr.Slider(0, 5, elem_id=None)     # no elem_id
                out = gr.Textbox(elem_id="a-out")         # output only
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
