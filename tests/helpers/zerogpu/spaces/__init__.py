"""A stand-in for Hugging Face's `spaces` package, for testing the ZeroGPU process model anywhere.

Put this folder's parent on PYTHONPATH and `backend.core.zerogpu` finds `spaces` as on a ZeroGPU
Space: every `@spaces.GPU` call made outside a worker runs in a forked child process, its arguments
pickled into it and its result (every item of a generator, or its exception) pickled back, as
ZeroGPU's workers do. Whatever the call loads, caches or computes in memory dies with the child;
only what the main process had before the call (the preloaded models) and what the call wrote to
disk outlive it. A result that holds a tensor off the CPU is refused, as ZeroGPU cannot return one.
A marked call made inside a worker runs directly. `CALLS_FILE` (env WORKBENCH_FAKE_SPACES_LOG), when
set, gets one line per worker started (its pid and function), so a test can count them.
"""

from __future__ import annotations

import functools
import inspect
import io
import multiprocessing
import os
import pickle

_IN_WORKER = False
CALLS_FILE = os.environ.get("WORKBENCH_FAKE_SPACES_LOG", "")


class WorkerDied(RuntimeError):
    """The child ended without an answer."""


class _CpuOnly(pickle.Pickler):
    def reducer_override(self, obj):
        import torch

        if isinstance(obj, torch.Tensor) and obj.device.type != "cpu":
            raise TypeError(f"a tensor on {obj.device} cannot leave a ZeroGPU worker: return CPU values")
        return NotImplemented


def _dumps(obj) -> bytes:
    buf = io.BytesIO()
    _CpuOnly(buf, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return buf.getvalue()


def _send(conn, kind: str, value) -> None:
    try:
        data = _dumps((kind, value))
    except Exception as e:  # an unpicklable result or exception: say what, as ZeroGPU would fail
        data = pickle.dumps(
            (
                "err",
                RuntimeError(f"ZeroGPU could not send back a {kind} ({type(e).__name__}: {e}); value: {value!r:.300}"),
            )
        )
    conn.send_bytes(data)


def _child(fn, payload: bytes, conn, stream: bool) -> None:
    global _IN_WORKER
    _IN_WORKER = True
    import torch

    # the parent's OpenMP pool does not survive a fork: a child that uses it can hang
    torch.set_num_threads(1)
    if CALLS_FILE:
        with open(CALLS_FILE, "a") as f:
            f.write(f"{os.getpid()} {getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', fn)}\n")
    try:
        args, kwargs = pickle.loads(payload)
        if stream:
            for item in fn(*args, **kwargs):
                _send(conn, "item", item)
            _send(conn, "done", None)
        else:
            _send(conn, "ok", fn(*args, **kwargs))
    except BaseException as e:  # noqa: BLE001 - everything travels back to the caller
        _send(conn, "err", e)
    finally:
        conn.close()


def _start(fn, args, kwargs, stream: bool):
    payload = pickle.dumps((args, kwargs))  # in the caller, as ZeroGPU's queue does
    ctx = multiprocessing.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(fn, payload, send, stream), daemon=True)
    proc.start()
    send.close()
    return proc, recv


def _answers(proc, recv):
    try:
        while True:
            try:
                kind, value = pickle.loads(recv.recv_bytes())
            except EOFError:
                raise WorkerDied(f"the GPU worker ended with exit code {proc.exitcode}") from None
            yield kind, value
    finally:
        recv.close()
        if proc.is_alive():
            proc.terminate()
        proc.join()


def GPU(fn=None, *, duration=60, **_kw):  # noqa: N802 - the real package's name
    def wrap(f):
        if inspect.isgeneratorfunction(f):

            @functools.wraps(f)
            def g(*args, **kwargs):
                if _IN_WORKER:
                    yield from f(*args, **kwargs)
                    return
                if callable(duration):
                    duration(*args, **kwargs)
                for kind, value in _answers(*_start(f, args, kwargs, True)):
                    if kind == "item":
                        yield value
                    elif kind == "err":
                        raise value
                    else:
                        return
        else:

            @functools.wraps(f)
            def g(*args, **kwargs):
                if _IN_WORKER:
                    return f(*args, **kwargs)
                if callable(duration):
                    duration(*args, **kwargs)
                for kind, value in _answers(*_start(f, args, kwargs, False)):
                    if kind == "err":
                        raise value
                    return value

        return g

    return wrap(fn) if fn is not None else wrap
