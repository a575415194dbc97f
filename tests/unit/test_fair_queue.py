"""Turns across visitors in the model queue (components.fair_queue), on Gradio's own Queue and
EventQueue: one visitor's five long calls never hold every model slot, and a newcomer starts next."""
from types import SimpleNamespace

from gradio.queueing import EventQueue, Queue

from components.common import MODEL_GROUP
from components.fair_queue import fair_order, install, running_per_session


def _queue(limit: int) -> Queue:
    install()
    q = Queue.__new__(Queue)
    q.event_queue_per_concurrency_id = {MODEL_GROUP: EventQueue(MODEL_GROUP, limit)}
    q.active_jobs = [None] * 8
    return q


def _event(session: str, n: int):
    return SimpleNamespace(session_hash=session, concurrency_id=MODEL_GROUP, name=f"{session}{n}",
                           fn=SimpleNamespace(batch=False, max_batch_size=1))


def _start_all(q: Queue) -> list[str]:
    """What Gradio's processing loop would start now (Queue.start_processing)."""
    started = []
    while (got := q.get_events()) is not None:
        events, _, cid = got
        q.active_jobs[q.active_jobs.index(None)] = events
        q.event_queue_per_concurrency_id[cid].current_concurrency += 1
        started += [e.name for e in events]
    return started


def _finish(q: Queue, name: str) -> None:
    for i, events in enumerate(q.active_jobs):
        if events and events[0].name == name:
            q.active_jobs[i] = None
            q.event_queue_per_concurrency_id[MODEL_GROUP].current_concurrency -= 1


def test_one_visitor_with_five_long_calls_leaves_a_slot_for_the_next_visitor():
    q = _queue(4)
    waiting = q.event_queue_per_concurrency_id[MODEL_GROUP].queue
    waiting += [_event("a", i) for i in range(5)]
    assert _start_all(q) == ["a0", "a1", "a2"]  # the fourth slot is kept for someone else
    waiting.append(_event("b", 0))
    assert _start_all(q) == ["b0"]  # the newcomer starts at once, not after a's calls
    waiting += [_event("c", 0), _event("b", 1)]
    _finish(q, "a0")
    # a slot came free: c (nothing running) goes before b's second call and a's remaining ones
    assert _start_all(q) == ["c0"]
    assert [e.name for e in waiting] == ["b1", "a3", "a4"]  # the ranks the pages are told
    _finish(q, "a1")
    assert _start_all(q) == []  # everyone waiting has a call running: the free slot stays free
    waiting.append(_event("d", 0))
    assert _start_all(q) == ["d0"] and [e.name for e in waiting] == ["b1", "a3", "a4"]


def test_alone_a_visitor_still_runs_side_by_side_and_other_groups_keep_their_order():
    q = _queue(2)
    other = EventQueue("reads", None)
    q.event_queue_per_concurrency_id["reads"] = other
    other.queue += [SimpleNamespace(session_hash="a", concurrency_id="reads", name=f"r{i}",
                                    fn=SimpleNamespace(batch=False)) for i in range(3)]
    q.event_queue_per_concurrency_id[MODEL_GROUP].queue += [_event("a", 0), _event("a", 1)]
    started = _start_all(q)
    assert [s for s in started if s.startswith("r")] == ["r0", "r1", "r2"]
    assert "a0" in started and "a1" not in started  # the one spare slot of two stays free


def test_fair_order_is_round_robin_counting_running_calls():
    ev = [_event("a", 0), _event("a", 1), _event("b", 0), _event("a", 2), _event("c", 0), _event("b", 1)]
    running = running_per_session([[_event("c", 9)], None], MODEL_GROUP)
    assert [e.name for e in fair_order(ev, running)] == ["a0", "b0", "a1", "c0", "b1", "a2"]
