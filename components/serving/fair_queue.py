"""Fair turns in the model queue: one visitor's long calls never take every model slot.

Gradio starts the events of a concurrency group first come, first served, so a visitor who starts
five long calls (two races, a held-out evaluation, an 8-seed generation, a scale curve) holds every
slot of the model group, and another visitor's half-second call waits minutes behind them. Here the
model group's waiting events are ordered by turns across sessions (round robin: a session's next
call ranks behind every other session's call of an earlier round, counting its calls already
running), and a session that already has a model call running never takes the group's last free
slot: that one is kept for a visitor with none. Gradio's queue status reports each waiting event's
rank in this order, so a waiting page shows its true place in the queue.

Turns, and places in the queue, are a person's (components.serving.people: the signed-in user, else the
client address), not a session's: sessions are free to make, so a visitor with a hundred sessions
takes turns and queue places as one. A person holds at most `WORKBENCH_VISITOR_WAITING` waiting
calls over all groups (default 8); a call past that is refused at once with a message, so one
person topping the queue up never fills it for everyone else ("Queue is full").

Gradio 6.31 has no hook for either, so `Queue.get_events` and `Queue.push` are replaced
(`install`); the other groups keep Gradio's order.
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter

from components.serving import people
from components.common import MODEL_GROUP

WAITING_ENV = "WORKBENCH_VISITOR_WAITING"
DEFAULT_WAITING = 8


def waiting_cap() -> int:
    raw = os.environ.get(WAITING_ENV, "").strip()
    try:
        return max(int(raw), 1) if raw else DEFAULT_WAITING
    except ValueError:
        raise ValueError(f"{WAITING_ENV} must be a whole number ≥ 1, not {raw!r}") from None


def person_of(event) -> str:
    """The person who made a queued event (computed once, from the request that joined it)."""
    who = getattr(event, "_wb_person", None)
    if who is None:
        who = event._wb_person = people.key(getattr(event, "request", None), getattr(event, "username", None))
    return who


def running_per_person(active_jobs, concurrency_id: str) -> Counter:
    """How many events of `concurrency_id` each person has running."""
    running: Counter = Counter()
    for events in active_jobs:
        for event in events or ():
            if event.concurrency_id == concurrency_id:
                running[person_of(event)] += 1
    return running


def fair_order(waiting: list, running: Counter) -> list:
    """`waiting` in turns across people: an event's round is its person's running count plus the
    number of that person's events waiting ahead of it; rounds first, arrival within a round."""
    seen: Counter = Counter()
    rounds = []
    for event in waiting:
        who = person_of(event)
        rounds.append(running[who] + seen[who])
        seen[who] += 1
    return [e for _, _, e in sorted(zip(rounds, range(len(waiting)), waiting), key=lambda t: t[:2])]


def may_start(event, running: Counter, current: int, limit: int | None) -> bool:
    """A person with a model call running may start another only while a slot stays free after it."""
    return limit is None or not running[person_of(event)] or current + 1 < limit


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
            running = running_per_person(self.active_jobs, concurrency_id)
            event_queue.queue[:] = fair_order(event_queue.queue, running)
            if not may_start(event_queue.queue[0], running, event_queue.current_concurrency, limit):
                continue
        first_event = event_queue.queue[0]
        events = [first_event]
        if first_event.fn.batch:
            events += [e for e in event_queue.queue[1:] if e.fn == first_event.fn][: first_event.fn.max_batch_size - 1]
        for event in events:
            event_queue.queue.remove(event)
        return events, first_event.fn.batch, concurrency_id
    return None


def waiting_of(queue, who: str) -> int:
    """How many events `who` has waiting in any group of Gradio's queue."""
    return sum(person_of(e) == who for q in queue.event_queue_per_concurrency_id.values() for e in q.queue)


def too_many_waiting(n: int) -> str:
    return (
        f"You already have {n} calls waiting in the queue, the most one visitor may have "
        f"({WAITING_ENV}); this one was not queued. Wait for them to finish, then try again."
    )


def _limited_push(push):
    """Gradio's `Queue.push`, refusing a person's call past their waiting places. The count and the
    join are one step (a lock per queue): two calls joined at once cannot both take the last place."""

    async def limited(self, body, request, username):
        lock = self.__dict__.setdefault("_wb_join_lock", asyncio.Lock())
        async with lock:
            who = people.key(request, username)
            n = waiting_of(self, who)
            if n >= waiting_cap():
                return False, too_many_waiting(n), "error"
            return await push(self, body, request, username)

    limited._wb_fair = True
    return limited


def install() -> None:
    """Replace Gradio's choice of the next event and its join (once per process)."""
    from gradio import queueing

    if getattr(queueing.Queue.get_events, "_wb_fair", False):
        return
    get_events._wb_fair = True
    queueing.Queue.get_events = get_events
    queueing.Queue.push = _limited_push(queueing.Queue.push)
