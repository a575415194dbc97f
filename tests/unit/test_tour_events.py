"""The Guided tour draws through one event, whatever changed: picking another tour changes the tour
box before its step box is reset to 1, and two events (one per box) could finish in either order
under load, leaving the last tour's step drawn under a box that reads 1."""

import app


def _by_elem_id(demo, elem_id):
    return next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == elem_id)


def test_one_event_draws_the_tour_for_both_boxes_and_the_last_run_wins():
    demo = app.build_app("zoo")
    tour, step, figure = (_by_elem_id(demo, e) for e in ("tour-name", "tour-step", "tour-figure"))
    boxes = {tour._id, step._id}
    drawing = [d for d in demo.fns.values() if figure in d.outputs and {t for t, _ in d.targets} & boxes]
    assert len(drawing) == 1, [d.targets for d in drawing]
    (draw,) = drawing
    (redo,) = [demo.blocks[t] for t, _ in draw.targets if t not in boxes]
    assert set(draw.targets) == {(tour._id, "change"), (step._id, "change"), (redo._id, "change")}
    assert not redo.visible and not redo.elem_id  # page state: no link carries it (components.links)
    assert draw.trigger_mode == "always_last" and draw.queue
    # Two runs can still overlap when both boxes change in one tick: each drawing that succeeds is
    # checked against the boxes, and a check that finds another step drawn bumps `redo`.
    (check,) = [d for d in demo.fns.values() if d.trigger_after == draw._id]
    assert check.trigger_only_on_success and redo in check.outputs and not check.queue
    # The API's strict step (an error past a tour's end) is its own endpoint, which nothing on the
    # page triggers: no box's change or input runs it.
    (api,) = [d for d in demo.fns.values() if d.api_name == "tour_step"]
    assert api is not draw and not {t for t, _ in api.targets} & boxes
    assert figure in api.outputs
