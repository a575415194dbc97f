"""The checked inputs every tab uses: a value a control cannot take is refused with its name and
valid range before any handler runs; an unreadable upload is named; the stock front end is kept."""
import gradio as gr
import pytest
from gradio.data_classes import FileData

from components.inputs import CheckedNumber, checked_image, checked_slider, keep_on_failure


def test_slider_refuses_with_the_valid_range():
    s = checked_slider(1, 8, value=4, step=1, label="Seeds", what="the number of seeds")
    assert s.get_block_name() == "slider"  # same front end as gr.Slider
    for bad in (0, 9, 2.5, float("nan"), float("inf"), float("-inf"), None, "3", True):
        with pytest.raises(gr.Error, match=r"the number of seeds: a whole number from 1 to 8"):
            s.preprocess(bad)
    assert [s.preprocess(v) for v in (1, 8, 3.0)] == [1, 8, 3]


def test_number_refuses_nan_inf_out_of_range_and_fractions():
    n = CheckedNumber(value=3, minimum=0, maximum=255, precision=0, label="feature id (0–255)")
    assert n.get_block_name() == "number"
    for bad, words in (("nan", "finite number, between 0 and 255"), ("inf", "finite number"),
                       (300, "between 0 and 255; got 300. Nothing was computed"), (2.5, "whole number"),
                       ("abc", "must be a number")):
        with pytest.raises(gr.Error, match=words):
            n.preprocess(bad)
    assert n.preprocess(None) is None and n.preprocess(7) == 7


def test_image_names_an_unreadable_upload(tmp_path):
    img = checked_image(type="numpy", what="the reference image")
    assert img.get_block_name() == "image" and img.preprocess(None) is None
    bad = tmp_path / "broken.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\nnot really a png")
    with pytest.raises(gr.Error, match="The reference image could not be read as an image"):
        img.preprocess(FileData(path=str(bad), orig_name="broken.png"))


@pytest.mark.parametrize("n_outputs", [1, 3])
def test_a_failed_event_gets_a_silent_follow_up_on_its_outputs(n_outputs):
    import asyncio

    with gr.Blocks() as demo:
        box = gr.Textbox()
        outs = [gr.Markdown() for _ in range(n_outputs)]
        ev = keep_on_failure(gr.Button().click(lambda t: (t,) * n_outputs, box, outs), outs)
    follow = [fn for fn in demo.fns.values() if fn.outputs == outs and fn.fn is not None]
    assert ev is not None and len(follow) == 2
    silent = [fn for fn in follow if fn.show_progress == "hidden"]
    assert len(silent) == 1 and silent[0].trigger_mode is not None
    assert silent[0].api_visibility == "private"
    # it changes nothing, through Gradio's own output processing: a single output too (a 1-tuple
    # of skips was one value for one Markdown and failed with a server error)
    out = asyncio.run(demo.postprocess_data(silent[0], silent[0].fn(), None))
    assert len(out) == n_outputs
    assert all(u == {"__type__": "update"} for u in out), out
