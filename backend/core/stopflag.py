"""A stop request that every process of one server sees.

A long job (the PiSSA race) checks its flag between steps; the Stop button sets it from another
request. On a ZeroGPU Space the job runs in a GPU worker process forked from the server while Stop
is handled in the server process itself, so an in-memory Event would never reach the job: the flag
is a pair of files instead, under a folder named for this server run (forked workers inherit the
run id, another server on the same machine has its own).

    flag = StopFlag(session)
    flag.start()           # the job begins: running, not stopped
    ... if flag.is_set(): break
    flag.finish()          # the job is over: both files removed
    StopFlag(session).request()   # from anywhere: True if a job of that session was running
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import uuid
from pathlib import Path

_RUN_ID = uuid.uuid4().hex  # drawn once per server process; a forked worker keeps it
_ROOT = Path(os.environ.get("WORKBENCH_FLAG_DIR", tempfile.gettempdir())) / f"workbench-flags-{_RUN_ID[:12]}"


class StopFlag:
    def __init__(self, session: str):
        key = hashlib.sha256(f"{_RUN_ID}:{session}".encode()).hexdigest()[:24]
        self._running = _ROOT / f"{key}.running"
        self._stop = _ROOT / f"{key}.stop"

    def start(self) -> "StopFlag":
        _ROOT.mkdir(parents=True, exist_ok=True)
        self._stop.unlink(missing_ok=True)
        self._running.touch()
        return self

    def running(self) -> bool:
        return self._running.exists()

    def is_set(self) -> bool:
        return self._stop.exists()

    def set(self) -> None:
        _ROOT.mkdir(parents=True, exist_ok=True)
        self._stop.touch()

    def request(self) -> bool:
        """Ask the session's running job to stop; False when none is running."""
        if not self.running():
            return False
        self.set()
        return True

    def finish(self, *, keep_stop: bool = False) -> None:
        """The job is over (no longer `running`). `keep_stop`: leave the stop request in place, for a
        worker that has not exited yet and must still see it."""
        self._running.unlink(missing_ok=True)
        if not keep_stop:
            self._stop.unlink(missing_ok=True)
