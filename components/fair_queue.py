"""Fair turns in the model queue: one visitor's long calls never take every model slot.

Gradio starts the events of a concurrency group first come, first served, so a visitor who starts
five long calls (two races, a held-out evaluation, an 8-seed generation, a scale curve) holds every
slot of the model group, and another visitor's half-second call waits minutes behind them. Here the
model group's waiting events are ordered by turns across sessions (round robin: a session's next
call ranks behind every other session's call of an earlier round, counting its calls already
running), and a session that already has a model call running never takes the group's last free
slot: that one is kept for a visitor with none. Gradio's queue status reports each waiting event's
rank in this order, so a waiting page shows its true place in the queue.

Gradio 6.31 has no hook for the choice, so `Queue.get_events` is replaced (`install`); the other
groups keep Gradio's order.
"""
from __future__ import annotations

from collections import Counter

from .common import MODEL_GROUP


def running_per_session(active_jobs, concurrency_id: str) -> Counter:
    """How many events of `concurrency_id` each session has running."""
    running: Counter = Counter()
    for events in active_jobs:
        for event in events or ():
            if event.concurrency_id == concurrency_id:
                running[event.session_hash] += 1
    return running


def fair_order(waiting: list, running: Counter) -> list:
    """`waiting` in turns across sessions: an event's round is its session's running count plus the
    number of that session's events waiting ahead of it; rounds first, arrival within a round."""
    seen: Counter = Counter()
    rounds = []
    for event in waiting:
        rounds.append(running[event.session_hash] + seen[event.session_hash])
        seen[event.session_hash] += 1
    return [e for _, _, e in sorted(zip(rounds, range(len(waiting)), waiting), key=lambda t: t[:2])]


def may_start(event, running: Counter, current: int, limit: int | None) -> bool:
    """A session with a model call running may start another only while a slot stays free after it."""
    return limit is None or not running[event.session_hash] or current + 1 < limit


def get_events(self):
    """Gradio's `Queue.get_events` (6.31), with the model group's choice made by `fair_order`."""
    import random

    concurrency_ids = list(self.event_queue_per_concurrency_id.keys())
    random.shuffle(concurrency_ids)
    for concurrency_id in concurrency_ids:
        event_queue = self.event_queue_per_concurrency_id[concurrency_id]
        limit = event_queue.concurrency_limit
        if not event_queue.queue or (limit is not None and event_queue.current_concurrency >= limit):
            continue
        if concurrency_id == MODEL_GROUP:
            running = running_per_session(self.active_jobs, concurrency_id)
            event_queue.queue[:] = fair_order(event_queue.queue, running)
            if not may_start(event_queue.queue[0], running, event_queue.current_concurrency, limit):
                continue
        first_event = event_queue.queue[0]
        events = [first_event]
        if first_event.fn.batch:
            events += [e for e in event_queue.queue[1:] if e.fn == first_event.fn][
                : first_event.fn.max_batch_size - 1]
        for event in events:
            event_queue.queue.remove(event)
        return events, first_event.fn.batch, concurrency_id
    return None


def install() -> None:
    """Replace Gradio's choice of the next event (once per process)."""
    from gradio import queueing

    if getattr(queueing.Queue.get_events, "_wb_fair", False):
        return
    get_events._wb_fair = True
    queueing.Queue.get_events = get_events
