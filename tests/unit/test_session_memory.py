"""Gradio's per-session state released when the session is over (components.serving.session_memory), on
Gradio's own StateHolder and SessionState: a closed session's after a grace, an idle one after the
TTL, never one with an event waiting or running."""

import datetime
from types import SimpleNamespace

import gradio as gr
from gradio.state_holder import StateHolder

from components.serving.session_memory import Releaser


def _app():
    with gr.Blocks() as demo:
        gr.Textbox()
        gr.State([1, 2, 3])
    holder = StateHolder()
    holder.set_blocks(demo)
    demo._queue = SimpleNamespace(
        active_jobs=[None],
        event_queue_per_concurrency_id={},
        pending_messages_per_session={},
        pending_event_ids_session={},
    )
    return demo, holder


def test_closed_and_idle_sessions_are_released_and_busy_ones_kept():
    demo, holder = _app()
    for sid in ("closed", "open", "idle", "busy"):
        holder[sid]  # Gradio makes a SessionState at a session's first call
        demo._queue.pending_event_ids_session[sid] = {"finished-event"}
    holder.session_data["closed"].is_closed = True
    holder.session_data["busy"].is_closed = True
    holder.time_last_used["idle"] = datetime.datetime.now() - datetime.timedelta(seconds=100)
    demo._queue.active_jobs = [[SimpleNamespace(session_hash="busy")]]
    rel = Releaser(demo, closed_grace_s=10, idle_s=60)
    assert rel.sweep(now=0.0) == ["idle"]  # closed only now: its unload handlers may still read it
    assert rel.sweep(now=5.0) == []
    assert rel.sweep(now=10.0) == ["closed"]
    assert set(holder.session_data) == {"open", "busy"} and set(holder.time_last_used) == {"open", "busy"}
    assert set(demo._queue.pending_event_ids_session) == {"open", "busy"}
    demo._queue.active_jobs = [None]  # the busy session's call ended
    assert rel.sweep(now=11.0) == ["busy"]
    assert list(holder.session_data) == ["open"] and rel.released == 3


def test_the_heap_is_collected_at_most_once_per_period_after_releases():
    """A full collection (about a second of the served app's CPU) follows the first release at once,
    later releases within `collect_every_s` of it wait for the period's end, and no release, no
    collection."""
    demo, holder = _app()
    rel = Releaser(demo, closed_grace_s=0, idle_s=60, collect_every_s=30)
    assert rel.sweep(now=0.0) == [] and rel.collections == 0  # nothing released: nothing to collect
    for t, sid in ((1.0, "a"), (6.0, "b"), (11.0, "c")):
        holder[sid]
        holder.session_data[sid].is_closed = True
        assert rel.sweep(now=t) == [sid]
    assert rel.collections == 1  # at 1 s; b and c were released within 30 s of it
    assert rel.sweep(now=30.0) == [] and rel.collections == 1
    assert rel.sweep(now=31.0) == [] and rel.collections == 2  # the period's end: b and c's memory
    assert rel.sweep(now=70.0) == [] and rel.collections == 2  # nothing released since
