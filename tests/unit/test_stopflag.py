"""The race's Stop request crosses processes: under ZeroGPU the race runs in a worker forked from
the server while the Stop button is handled in the server process."""

import multiprocessing as mp
import uuid

from backend.core.stopflag import StopFlag


def _request(session, q):
    q.put(StopFlag(session).request())


def _run_in(ctx_name, session):
    ctx = mp.get_context(ctx_name)
    q = ctx.Queue()
    p = ctx.Process(target=_request, args=(session, q))
    p.start()
    p.join(60)
    return q.get(timeout=5)


def test_lifecycle():
    s = f"t-{uuid.uuid4().hex}"
    flag = StopFlag(s)
    assert not StopFlag(s).request()  # nothing running: nothing to stop
    flag.start()
    assert flag.running() and not flag.is_set()
    assert StopFlag(s).request() and flag.is_set()
    flag.start()  # a new job of the same session starts unstopped
    assert not flag.is_set()
    flag.finish()
    assert not flag.running() and not flag.is_set()
    assert not StopFlag(f"other-{s}").running()
    flag.start().set()
    flag.finish(keep_stop=True)  # a worker that has not exited yet still sees the stop
    assert flag.is_set() and not flag.running() and not StopFlag(s).request()
    flag.finish()


def test_a_forked_process_stops_the_job_and_another_server_cannot():
    s = f"t-{uuid.uuid4().hex}"
    flag = StopFlag(s).start()
    try:
        assert _run_in("spawn", s) is False  # a fresh interpreter is another server run
        assert not flag.is_set()
        assert _run_in("fork", s) is True  # a worker forked from this server
        assert flag.is_set()
    finally:
        flag.finish()
