"""The tour's step is drawn by one event for a change of the tour and of the step: picking another
tour changes the tour and then resets the step, and as two events the new tour's step 1 and its
old step ended in either order under load (a browser test saw the page stay on the old step)."""
import gradio as gr
from gradio import helpers


def test_one_event_draws_a_tours_step_clamped_for_a_new_tour_and_refused_out_of_range_otherwise():
    import app

    demo = app.build_app("zoo")
    draw = next(f for f in demo.fns.values() if f.api_name == "tour_step")
    by_id = {getattr(b, "elem_id", None): b for b in demo.blocks.values()}
    tour, step = by_id["tour-name"], by_id["tour-step"]
    assert {(demo.blocks[t[0]].elem_id, t[1]) for t in draw.targets} == {("tour-name", "change"),
                                                                         ("tour-step", "change")}
    assert draw.trigger_mode == "always_last"
    # a new tour still carrying the previous tour's step 99: its last step is drawn, no refusal
    args, *_ = helpers.special_args(draw.fn, ["relevance", 99], None, gr.EventData(tour, {}))
    head = draw.fn(*args)[0]
    assert "wb-tour-head" in head and "Step 5 of 5" in head
    # the step typed (or asked through the API) out of range: refused, saying the range
    args, *_ = helpers.special_args(draw.fn, ["relevance", 99], None, gr.EventData(step, {}))
    try:
        draw.fn(*args)
    except gr.Error as e:
        assert "steps 1 to 5" in str(e)
    else:
        raise AssertionError("an out-of-range step was drawn")
