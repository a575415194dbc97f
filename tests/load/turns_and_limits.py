"""Fair turns and time limits on a served app: one visitor holds five long model calls, another
visitor's short call is timed; every call's time is held against the job limit; the smallest
settings are called under a per-call cap.

    python -m tests.load.turns_and_limits --job-seconds 60 --cap 60
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

MEMO = "a purple cross and a yellow circle and a blue triangle on a green background"
# One visitor's five long calls (the issue's: two races, a held-out evaluation, an 8-seed generation,
# a scale curve), at their largest settings.
LONG = [
    ("/race", dict(key="pissa-toy", methods=["lora", "pissa", "full"], n_seeds=5, steps=500, rank=8, lr=0)),
    ("/race", dict(key="pissa-toy", methods=["lora", "pissa", "full"], n_seeds=5, steps=500, rank=16, lr=0)),
    ("/heldout_eval", dict(ms=["mambalrp", "gi", "ig", "smoothgrad"], n=240)),
    ("/memo_generate", dict(prompt=MEMO, selected=[], free="", n_seeds=8)),
    ("/mn_scale_curve", dict(method_label="MathNeuro", k_pct=30, n_samples=64)),
]
# Another visitor's short call, on a model none of the five uses (calls on one model take turns on its
# lock: a wait behind that is the model's, not the queue's).
SHORT = ("/steer", (None, "3", 5, 20.0, "image", False, True))  # as tests.load.scenarios
# What a long call's time, as the client measures it, may exceed the job limit: the answer's way
# back (the harness polls the job every 0.1 s). The server ends every model call within the limit:
# its limit counts from the call's wait at the load gate, a loop stops before the step that would
# pass it (backend.core.limits.Steps), a load is not begun without the time it took last time, and
# waits at the gate or on a model's lock end at it (backend.core.loadgate). Measured with a 15 s limit
# on the 2-core machine, server side against client side: the race 14.94 / 15.4 s and 15.27 /
# 15.7 s with two busy processes beside it (before its wind-down grew from 2 to 3 s), the others
# 12.0-14.9 s on the server; quiet, client side, at most 14.4 s in three runs. Before: up to 2.8 s
# past (a generation that waited at the gate behind a load, then ran its full limit).
PAST_LIMIT_S = 1.0
# The smallest setting of each call the cap refused (issue 37).
SMALLEST = [
    ("/memo_find", dict(prompt=MEMO)),
    ("/memo_table", dict(n_prompts=1)),
    ("/errors", dict(key="pissa-toy", rank=1, heat="qpissa-1")),
    ("/convert", dict(key="pissa-toy", rank=1, steps=1, layer="fc2")),
    ("/memo_stats", dict(n=2, own_text="")),
    ("/mn_evaluate", dict(method_label="MathNeuro", k_pct=1, factor=0.0, n_samples=1)),
    ("/tour_step", dict(tour_id="all", k=1)),
]


@dataclass
class Timed:
    name: str
    seconds: float  # from its start on the server (the end of its wait in the queue) to its answer
    error: str = ""
    waited: float = 0.0  # in the queue


@dataclass
class TurnsReport:
    short_wait_s: float = 0.0  # in the queue
    short_busy_s: float = 0.0  # from its start to its answer, beside the long calls
    short_alone_s: float = 0.0
    long: list[Timed] = field(default_factory=list)

    def summary(self, limit: float) -> str:
        lines = [
            f"another visitor's short call ({SHORT[0]}): waited {self.short_wait_s:.1f} s in the queue and "
            f"answered in {self.short_busy_s:.1f} s while one visitor held {len(self.long)} long calls "
            f"({self.short_alone_s:.1f} s alone)"
        ]
        for t in self.long:
            lines.append(
                f"  {t.name:16s} ran {t.seconds:6.1f} s (job limit {limit:g} s) after {t.waited:5.1f} s "
                f"in the queue{'  ' + t.error[:90] if t.error else ''}"
            )
        return "\n".join(lines)


def _call(client, name: str, kw: dict | tuple, on_start: threading.Event | None = None) -> Timed:
    """The call, timed; `on_start` is set once the server has started it (or it has ended)."""
    from gradio_client.utils import Status

    t0 = time.perf_counter()
    job = client.submit(*kw, api_name=name) if isinstance(kw, tuple) else client.submit(api_name=name, **kw)
    started = None
    while not job.done():  # the queue's status tells when the server started it
        if started is None and job.status().code not in (
            Status.STARTING,
            Status.JOINING_QUEUE,
            Status.IN_QUEUE,
            Status.SENDING_DATA,
        ):
            started = time.perf_counter()
            if on_start is not None:
                on_start.set()
        time.sleep(0.1)
    started = started or t0
    if on_start is not None:
        on_start.set()
    try:
        job.result()
        error = ""
    except Exception as e:  # a refusal or a stop at the limit is an answer: its time is what counts
        error = f"{type(e).__name__}: {e}"
    return Timed(name, time.perf_counter() - started, error, started - t0)


def fair_turns(url: str, *, long=LONG, start_timeout_s: float = 120.0) -> TurnsReport:
    from components.common import DEFAULT_MODEL_CONCURRENCY
    from tests.helpers.until import until
    from tests.load.harness import make_client

    rep = TurnsReport()
    other = make_client(url)
    _call(other, *SHORT)  # the model is loaded and the call warm
    rep.short_alone_s = _call(other, *SHORT).seconds
    holder = make_client(url)  # one visitor (one session), five tabs' calls at once
    started = [threading.Event() for _ in long]
    threads = [
        threading.Thread(target=lambda c=c, e=e: rep.long.append(_call(holder, *c, on_start=e)), daemon=True)
        for c, e in zip(long, started)
    ]
    for t in threads:
        t.start()
    # the long calls hold the queue: the server runs as many as it has model slots (the served app's
    # default WORKBENCH_MODEL_CONCURRENCY), the rest wait in the queue
    holding = min(len(long), DEFAULT_MODEL_CONCURRENCY)
    until(
        lambda: sum(e.is_set() for e in started) >= holding,
        timeout=start_timeout_s,
        what=f"{holding} of the long calls starting on the server",
    )
    short = _call(other, *SHORT)
    rep.short_wait_s, rep.short_busy_s = short.waited, short.seconds
    for t in threads:
        t.join(timeout=1200)
    holder.close()
    other.close()
    return rep


def smallest_under_cap(url: str) -> list[Timed]:
    from tests.load.harness import make_client

    client = make_client(url)
    try:
        return [_call(client, *c) for c in SMALLEST]
    finally:
        client.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--job-seconds", type=float, default=60)
    ap.add_argument("--cap", type=float, default=60)
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tests.helpers.server import serve

    with serve(env={"WORKBENCH_JOB_SECONDS": str(args.job_seconds)}) as (url, _):
        rep = fair_turns(url)
    print(rep.summary(args.job_seconds))
    slack = PAST_LIMIT_S  # the answer's way back
    over = [t for t in rep.long if t.seconds > args.job_seconds + slack]
    print(
        f"goal: short call waits <= 10 s: {'met' if rep.short_wait_s <= 10 else 'NOT met'}; every long call "
        f"within its job limit (+{slack:g} s to stop and answer): {'met' if not over else 'NOT met'}"
    )
    with serve(env={"WORKBENCH_CALL_CAP_S": str(args.cap)}) as (url, _):
        small = smallest_under_cap(url)
    for t in small:
        print(f"  {t.name:14s} {t.seconds:6.1f} s  {t.error[:120] if t.error else 'answered'}")
    refused = [t for t in small if "per-call cap" in t.error]
    print(
        f"goal: no smallest setting refused under a cap of {args.cap:g} s: {'met' if not refused else 'NOT met'}; "
        f"every one within the cap: {'met' if all(t.seconds <= args.cap + slack for t in small) else 'NOT met'}"
    )


if __name__ == "__main__":
    main()
