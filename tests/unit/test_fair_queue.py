"""Turns across visitors in the model queue (components.serving.fair_queue), on Gradio's own Queue and
EventQueue: one visitor's five long calls never hold every model slot, and a newcomer starts next.
A visitor is a person (components.serving.people), however many sessions they make."""

from types import SimpleNamespace

from gradio.queueing import EventQueue, Queue

from components.common import MODEL_GROUP
from components.serving.fair_queue import fair_order, install, running_per_person


def _queue(limit: int) -> Queue:
    install()
    q = Queue.__new__(Queue)
    q.event_queue_per_concurrency_id = {MODEL_GROUP: EventQueue(MODEL_GROUP, limit)}
    q.active_jobs = [None] * 8
    return q


def _event(person: str, n: int, session: str | None = None):
    """An event of `person` (one session each unless `session` is given)."""
    return SimpleNamespace(
        session_hash=session or f"{person}{n}",
        _wb_person=person,
        concurrency_id=MODEL_GROUP,
        name=f"{person}{n}",
        fn=SimpleNamespace(batch=False, max_batch_size=1),
    )


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
    other.queue += [
        SimpleNamespace(
            session_hash="a", _wb_person="a", concurrency_id="reads", name=f"r{i}", fn=SimpleNamespace(batch=False)
        )
        for i in range(3)
    ]
    q.event_queue_per_concurrency_id[MODEL_GROUP].queue += [_event("a", 0), _event("a", 1)]
    started = _start_all(q)
    assert [s for s in started if s.startswith("r")] == ["r0", "r1", "r2"]
    assert "a0" in started and "a1" not in started  # the one spare slot of two stays free


def test_fair_order_is_round_robin_counting_running_calls():
    ev = [_event("a", 0), _event("a", 1), _event("b", 0), _event("a", 2), _event("c", 0), _event("b", 1)]
    running = running_per_person([[_event("c", 9)], None], MODEL_GROUP)
    assert [e.name for e in fair_order(ev, running)] == ["a0", "b0", "a1", "c0", "b1", "a2"]


def test_a_hundred_sessions_of_one_person_take_turns_as_one():
    """Each of a's calls comes from a session of its own (sessions are free): they still rank as one
    visitor's, behind b's first call."""
    ev = [_event("a", i) for i in range(100)] + [_event("b", 0)]
    assert len({e.session_hash for e in ev}) == 101
    order = [e.name for e in fair_order(ev, running_per_person([], MODEL_GROUP))]
    assert order[:3] == ["a0", "b0", "a1"]


def _request(addr: str, forwarded: str | None = None):
    from starlette.requests import Request

    headers = [(b"x-forwarded-for", forwarded.encode())] if forwarded else []
    return Request({"type": "http", "headers": headers, "client": (addr, 5000), "method": "POST", "path": "/"})


def test_the_queue_refuses_a_persons_calls_past_their_waiting_places(monkeypatch):
    """One person topping the queue up (67 races in 2.8 s once filled it for everyone: 'Queue is
    full') gets the refusal from the ninth waiting call on, whatever session each carries; another
    person still joins."""
    import asyncio

    from components.serving import fair_queue

    monkeypatch.setenv(fair_queue.WAITING_ENV, "8")
    monkeypatch.delenv("WORKBENCH_PROXY_HOPS", raising=False)
    monkeypatch.delenv("SPACE_ID", raising=False)
    q = _queue(1)
    joined = []

    async def push(self, body, request, username):  # Gradio's push, as far as the count sees it
        e = _event(str(len(joined)), 0)
        del e._wb_person
        e.request, e.username = request, username
        self.event_queue_per_concurrency_id[MODEL_GROUP].queue.append(e)
        joined.append(e)
        return True, e.name, "success"

    limited = fair_queue._limited_push(push)

    async def run():
        a = [await limited(q, None, _request("192.0.2.7"), None) for _ in range(12)]
        b = await limited(q, None, _request("198.51.100.3"), None)
        return a, b

    a, b = asyncio.run(run())
    assert [ok for ok, *_ in a] == [True] * 8 + [False] * 4
    assert a[8][2] == "error" and "8 calls waiting" in a[8][1]
    assert b[0] is True


def test_a_person_is_the_signed_in_user_else_the_address_the_proxy_reports(monkeypatch):
    from components.serving import people

    monkeypatch.delenv("SPACE_ID", raising=False)
    monkeypatch.delenv(people.HOPS_ENV, raising=False)
    # off a proxy: the connecting address; a header the client wrote is not read
    assert people.key(_request("192.0.2.7")) == people.key(_request("192.0.2.7", "203.0.113.9"))
    assert people.key(_request("192.0.2.7")) != people.key(_request("192.0.2.8"))
    # behind one proxy (a Space): the address it appended, never one the client put before it
    monkeypatch.setenv("SPACE_ID", "owner/space")
    proxy = "10.0.0.1"
    assert people.address(_request(proxy, "203.0.113.9").headers, proxy) == "203.0.113.9"
    assert people.key(_request(proxy, "198.51.100.1, 203.0.113.9")) == people.key(_request(proxy, "203.0.113.9"))
    assert people.key(_request(proxy, "203.0.113.9")) != people.key(_request(proxy, "203.0.113.10"))
    # signed in: one person from any address; the key never holds the name or the address
    # (a name with letters no hex digest holds: "ada" turned up inside one by chance)
    a = people.key(_request(proxy, "203.0.113.9"), username="grace")
    assert a == people.key(_request(proxy, "198.51.100.5"), username="grace") and "grace" not in a
    from starlette.requests import Request

    two_lines = Request(
        {
            "type": "http",
            "client": (proxy, 5000),
            "method": "GET",
            "path": "/",
            "headers": [(b"x-forwarded-for", b"198.51.100.1"), (b"x-forwarded-for", b"203.0.113.9")],
        }
    )
    assert people.address(two_lines.headers, proxy) == "203.0.113.9"  # the proxy's own line, the last
    monkeypatch.setenv(people.HOPS_ENV, "2")
    assert people.address(_request(proxy, "203.0.113.9, 10.0.0.2").headers, proxy) == "203.0.113.9"
