"""What Gradio keeps per session, released when the session is over.

Gradio 6.31 keeps a `SessionState` for every session that ever called the server: a copy of the
page's configuration for each of its components (about 1 MB for this app's page) and its gr.State
values. A closed session (its page's heartbeat gone) only has its State values deleted an hour
later, and the SessionState itself stays until 10,000 sessions have come (`state_session_capacity`),
so memory grew by 0.7-2.8 MB with every visitor and never came back (the ids of its finished
events stay in the queue's table too). The app already ends a closed
session at once (components.serving.visitor removes its files), so its Gradio state goes too: here a closed
session's state is released `CLOSED_GRACE_S` after Gradio marked it closed (time for its unload
handlers, which read it, to run), and a session that never said goodbye (a raw HTTP client with no
heartbeat) when it has been idle past WORKBENCH_SESSION_TTL, as its files are. A session with an
event waiting or running is never touched. Freed memory is handed back to the system (glibc keeps
freed heap pages otherwise), at most once every `COLLECT_EVERY_S`: a full collection of the served
app's heap costs about a second of CPU with the interpreter held, and visitors leave a few seconds
apart when many come (67 s of the served app's 610 s of CPU over the browser tests, one collection
per sweep that released a session).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import os
import threading
import time
import weakref

from backend.core import sessions

log = logging.getLogger("workbench")
CLOSED_GRACE_S = 10.0
SWEEP_S = 5.0
COLLECT_EVERY_S = 30.0


def _busy_sessions(queue) -> set[str]:
    if queue is None:
        return set()
    busy: set[str] = set()  # (Gradio's pending event ids of a session include finished events)
    for events in getattr(queue, "active_jobs", ()) or ():
        busy.update(e.session_hash for e in events or ())
    for eq in getattr(queue, "event_queue_per_concurrency_id", {}).values():
        busy.update(e.session_hash for e in eq.queue)
    return busy


class Releaser:
    """Releases the state of one Blocks' sessions that are over (`sweep`)."""

    def __init__(
        self,
        demo,
        *,
        closed_grace_s: float = CLOSED_GRACE_S,
        idle_s: float | None = None,
        collect_every_s: float = COLLECT_EVERY_S,
    ):
        self.demo = demo
        self.closed_grace_s = closed_grace_s
        self.idle_s = idle_s
        self.collect_every_s = collect_every_s
        self._closed_since: dict[str, float] = {}
        self._uncollected = False  # sessions released since the last collection
        self._collected_at = float("-inf")
        self.released = 0
        self.collections = 0

    def sweep(self, now: float | None = None) -> list[str]:
        holder = getattr(self.demo, "state_holder", None)
        if holder is None:
            return []
        now = time.monotonic() if now is None else now
        idle_s = sessions.ttl_seconds() if self.idle_s is None else self.idle_s
        queue = getattr(self.demo, "_queue", None)
        busy = _busy_sessions(queue)
        gone = []
        for sid, state in list(holder.session_data.items()):
            last = holder.time_last_used.get(sid)
            idle = (time.time() - last.timestamp()) if last is not None else 0.0
            if state.is_closed:
                self._closed_since.setdefault(sid, now)
            closed_long = state.is_closed and now - self._closed_since[sid] >= self.closed_grace_s
            if sid in busy or not (closed_long or idle > idle_s):
                continue
            try:
                holder.delete_state(sid)  # the State values' delete callbacks run
            except Exception:  # noqa: BLE001 - a callback's failure must not keep the memory
                log.exception("releasing session state")
            with holder.lock:
                holder.session_data.pop(sid, None)
                holder.time_last_used.pop(sid, None)
            if queue is not None:
                queue.pending_messages_per_session.pop(sid, None)
                queue.pending_event_ids_session.pop(sid, None)
            gone.append(sid)
        for sid in list(self._closed_since):
            if sid not in holder.session_data:
                del self._closed_since[sid]
        if gone:
            self.released += len(gone)
            self._uncollected = True
            log.info("released the state of %d ended sessions (%d held)", len(gone), len(holder.session_data))
        if self._uncollected and now - self._collected_at >= self.collect_every_s:
            self._uncollected, self._collected_at = False, now
            self.collections += 1
            gc.collect()
            trim_heap()
            log.info("collected the heap after releasing sessions (collection %d)", self.collections)
        return gone


M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter (malloc.h)
LARGE_BLOCK_BYTES = 1 << 20


def large_blocks_returned(threshold: int = LARGE_BLOCK_BYTES) -> bool:
    """Serve every allocation of `threshold` bytes or more (a tensor of activations, a request's
    body) from its own mapping, handed back to the system when freed.

    glibc starts with that rule at 128 KB, then raises the threshold to the largest block freed so
    far (up to 32 MB): after the first scoring, a call's tensors came from the heap arenas of the
    threads that ran it, and what live objects pinned there stayed after every collection. Six MCP
    `math_neurons` calls with 5,000 items each, beside two busy processes, kept +22 to +57 MB after
    the app's collection (each calling thread can draw on an arena of its own); with the threshold
    fixed at 1 MB, +6 to +19, and the peak +27 MB instead of +100 to +200 MB. The cost: a large
    block is mapped afresh each time (the zoo's 200-item scoring 0.58 → 0.75 s on this CPU; on a
    GPU the tensors are not on the host). Kept as set where the owner set MALLOC_MMAP_THRESHOLD_."""
    if os.environ.get("MALLOC_MMAP_THRESHOLD_"):
        return False
    try:
        return bool(_libc().mallopt(M_MMAP_THRESHOLD, int(threshold)))
    except (OSError, AttributeError, TypeError):  # not glibc: its own allocator's rules
        return False


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c"))


def trim_heap() -> None:
    """Hand freed heap pages back to the system (glibc's malloc_trim; elsewhere nothing)."""
    try:
        _libc().malloc_trim(0)
    except (OSError, AttributeError, TypeError):
        pass


def install(demo, interval_s: float = SWEEP_S) -> Releaser:
    """Sweep `demo`'s sessions in a daemon thread every `interval_s`."""
    releaser = Releaser(weakref.proxy(demo))
    alive = weakref.ref(demo)  # the thread ends with the app, which it does not keep alive

    def loop():
        while alive() is not None:
            time.sleep(interval_s)
            try:
                releaser.sweep()
            except ReferenceError:
                return
            except Exception:  # noqa: BLE001 - the sweeper keeps going
                log.exception("session state sweep")

    threading.Thread(target=loop, name="workbench-session-state", daemon=True).start()
    return releaser
