"""The checked inputs every tab uses: a value a control cannot take is refused with its name and
valid range before any handler runs; an unreadable upload is named; the stock front end is kept."""

import gradio as gr
import pytest
from gradio.data_classes import FileData

from backend.core import bounds
from components.inputs.fields import CheckedNumber, bounded_slider, checked_image, checked_radio, keep_on_failure


def test_slider_refuses_with_the_valid_range():
    s = bounded_slider(bounds.MEMO_SEEDS, value=4, step=1, label="Seeds")
    assert s.get_block_name() == "slider"  # same front end as gr.Slider
    for bad in (0, 9, 2.5, float("nan"), float("inf"), float("-inf"), None, "three", True):
        with pytest.raises(gr.Error, match=r"The number of seeds must be a whole number between 1 and 8 \(got "):
            s.preprocess(bad)
    assert [s.preprocess(v) for v in (1, 8, 3.0)] == [1, 8, 3]


def test_number_refuses_nan_inf_out_of_range_and_fractions():
    n = CheckedNumber(value=3, minimum=0, maximum=255, precision=0, label="feature id (0–255)")
    assert n.get_block_name() == "number"
    for bad, words in (
        ("nan", "between 0 and 255 \\(got 'nan'\\)"),
        ("inf", "got 'inf'"),
        (300, "The feature id must be a whole number between 0 and 255 \\(got 300\\). Nothing was computed"),
        (2.5, "whole number"),
        ("abc", "got 'abc'"),
    ):
        with pytest.raises(gr.Error, match=words):
            n.preprocess(bad)
    assert n.preprocess(None) is None and n.preprocess(7) == 7


def test_radio_refuses_in_the_words_of_the_api_and_the_tools():
    r = checked_radio("init", [("full SVD", "pissa"), ("fast", "pissa_niter_4")], value="pissa", label="PiSSA init")
    assert r.get_block_name() == "radio"
    with pytest.raises(ValueError) as want:
        bounds.check_choice("init", "pissa_niter_9", bounds.PISSA_INITS)
    with pytest.raises(gr.Error) as got:
        r.preprocess("pissa_niter_9")
    assert got.value.message == str(want.value)
    assert r.preprocess("pissa_niter_4") == "pissa_niter_4" and r.preprocess(None) is None


def test_image_names_an_unreadable_upload(tmp_path):
    img = checked_image(type="numpy", what="the reference image")
    assert img.get_block_name() == "image" and img.preprocess(None) is None
    bad = tmp_path / "broken.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\nnot really a png")
    with pytest.raises(
        gr.Error,
        match="broken.png could not be read as an image: it is not a PNG, JPEG or WebP "
        "picture, or it is damaged. Upload another image; nothing was computed.",
    ):
        img.preprocess(FileData(path=str(bad), orig_name="broken.png"))
    with pytest.raises(gr.Error, match="The reference image could not be read as an image: it is not a PNG"):
        img.preprocess(FileData(path=str(bad)))


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


def test_the_pages_refusal_of_a_typed_number_is_the_apis():
    """components.serving.range_guard: what the page reports about a number typed past a slider's range is
    refused in the words the slider's own check (the API's) uses."""
    import json

    from components.serving import range_guard

    s = bounded_slider(bounds.MEMO_SEEDS, value=4, step=1, label="Seeds", elem_id="t-seeds")
    with pytest.raises(gr.Error) as api:
        s.preprocess(99)
    report = {"id": "t-seeds", "label": "Seeds", "value": 99, "min": 1, "max": 8, "step": 1, "n": 1}
    with pytest.raises(gr.Error) as page:
        range_guard.refusal(json.dumps(report))
    assert page.value.message == api.value.message == bounds.MEMO_SEEDS.refusal(99)
    assert range_guard.refusal("not json") is None  # a broken report computes nothing and says nothing


def test_one_wording_for_an_unreadable_image_in_every_tab(tmp_path):
    """Relevance, Features and Memorization refused a corrupt upload in three wordings; now one."""
    import gradio as gr
    from gradio.data_classes import FileData

    from components.features.steering import _image_input
    from components.inputs.fields import CheckedImage, unreadable
    from components.relevance.layout import refuse_unreadable

    bad = tmp_path / "broken.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\nnot really a png")
    payload = FileData(path=str(bad), orig_name="broken.png")
    said = []
    for preprocess in (
        refuse_unreadable(gr.Image(type="numpy")).preprocess,  # Relevance
        CheckedImage(type="numpy").preprocess,  # Features, Memorization
        lambda p: _image_input(None, p.path, None),
    ):  # Features' API path
        with pytest.raises(gr.Error) as e:
            preprocess(payload)
        said.append(e.value.message)
    assert said == [unreadable("broken.png")] * 3
