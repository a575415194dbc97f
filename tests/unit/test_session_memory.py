"""Gradio's per-session state released when the session is over (components.session_memory), on
Gradio's own StateHolder and SessionState: a closed session's after a grace, an idle one after the
TTL, never one with an event waiting or running."""
import datetime
from types import SimpleNamespace

import gradio as gr
from gradio.state_holder import StateHolder

from components.session_memory import Releaser


def _app():
    with gr.Blocks() as demo:
        gr.Textbox()
        gr.State([1, 2, 3])
    holder = StateHolder()
    holder.set_blocks(demo)
    demo._queue = SimpleNamespace(active_jobs=[None], event_queue_per_concurrency_id={},
                                  pending_messages_per_session={}, pending_event_ids_session={})
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
