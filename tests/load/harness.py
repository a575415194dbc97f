"""Parallel users against a served app: every concurrent answer must equal its solo answer.

Used by tests/load/test_load.py (short, in CI) and `python -m tests.load.run_load` (2 minutes).
Requests go to 127.0.0.1 only and are bounded in count and time.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any


def make_client(url: str):
    """A gradio_client with a long read timeout: under load a request may wait in the queue behind
    many others, which is not an error."""
    from gradio_client import Client

    return Client(url, verbose=False, httpx_kwargs={"timeout": 600})


@dataclass(frozen=True)
class Call:
    api_name: str
    args: tuple = ()
    label: str = ""


def _file_digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def normalize(value: Any) -> Any:
    """Make an answer comparable: files by content, dicts by sorted keys, floats exactly."""
    if isinstance(value, str):
        if os.path.isfile(value):
            return ("file", _file_digest(value))
        return value
    if isinstance(value, dict):
        if "path" in value and isinstance(value.get("path"), str) and os.path.isfile(value["path"]):
            return ("file", _file_digest(value["path"]))
        return {k: normalize(v) for k, v in sorted(value.items()) if k not in ("url", "orig_name")}
    if isinstance(value, (list, tuple)):
        return [normalize(v) for v in value]
    return value


def fingerprint(value: Any) -> str:
    return hashlib.sha256(json.dumps(normalize(value), sort_keys=True, default=repr).encode()).hexdigest()


@dataclass
class LoadReport:
    requests: int = 0
    mismatches: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def summary(self) -> str:
        return (
            f"{self.requests} requests in {self.seconds:.1f} s; cross-talk (answers differing "
            f"from solo): {len(self.mismatches)}; server errors: {len(self.errors)}"
        )


def solo_answers(url: str, calls: list[Call]) -> list[str]:
    cl = make_client(url)
    return [fingerprint(cl.predict(*c.args, api_name=c.api_name)) for c in calls]


def run_parallel(
    url: str, calls: list[Call], *, clients: int = 16, seconds: float = 30.0, max_requests: int = 2000, seed: int = 0
) -> LoadReport:
    """`clients` threads, each with its own gradio_client, call random scenarios until time or
    count runs out; each answer is compared with the solo answer of the same call."""
    expected = solo_answers(url, calls)
    report = LoadReport()
    lock = threading.Lock()
    deadline = time.perf_counter() + seconds
    t0 = time.perf_counter()

    def worker(i: int) -> None:
        rng = random.Random(seed + i)
        cl = make_client(url)
        while time.perf_counter() < deadline:
            with lock:
                if report.requests >= max_requests:
                    return
                report.requests += 1
            k = rng.randrange(len(calls))
            call = calls[k]
            try:
                got = fingerprint(cl.predict(*call.args, api_name=call.api_name))
            except Exception as e:  # a server error is a failure too
                with lock:
                    report.errors.append(f"{call.label or call.api_name}: {type(e).__name__}: {e}")
                continue
            if got != expected[k]:
                with lock:
                    report.mismatches.append(call.label or call.api_name)

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=seconds + 600)
    report.seconds = time.perf_counter() - t0
    return report
