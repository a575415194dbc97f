"""Resident memory of a served app as visitors come and go: rounds of gradio_client sessions that
each make one call and close, then the server's RSS some seconds after the last one closed.

    python -m tests.load.session_memory --rounds 3 --sessions 30
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class MemoryReport:
    start_mb: float = 0.0
    after_rounds_mb: list[float] = field(default_factory=list)  # each round's RSS as it closed
    settled_mb: float = 0.0
    settle_s: float = 0.0
    sessions: int = 0

    @property
    def kept_mb(self) -> float:
        return self.settled_mb - self.start_mb

    def summary(self) -> str:
        rounds = ", ".join(f"{m:.0f}" for m in self.after_rounds_mb)
        return (
            f"RSS {self.start_mb:.0f} MB at the start; after each round of sessions {rounds} MB; "
            f"{self.settle_s:.0f} s after all {self.sessions} sessions closed {self.settled_mb:.0f} MB "
            f"({self.kept_mb:+.0f} MB kept)"
        )


def _visit(url: str) -> None:
    from tests.load.harness import make_client

    client = make_client(url)
    try:
        client.predict(api_name="/status")
    finally:
        client.close()  # the heartbeat goes: Gradio marks the session closed


def sessions_memory(
    url: str, pid: int, *, rounds: int = 3, per_round: int = 30, parallel: int = 6, settle_s: float = 60.0
) -> MemoryReport:
    import psutil

    from tests.load.harness import make_client

    proc = psutil.Process(pid)
    rss = lambda: proc.memory_info().rss / 2**20  # noqa: E731
    warm = make_client(url)  # a first session warms the server's imports up
    warm.predict(api_name="/status")
    warm.close()
    time.sleep(2)
    rep = MemoryReport(start_mb=rss(), settle_s=settle_s)
    with ThreadPoolExecutor(parallel) as pool:
        for _ in range(rounds):
            list(pool.map(_visit, [url] * per_round))
            rep.sessions += per_round
            rep.after_rounds_mb.append(rss())
    time.sleep(settle_s)
    rep.settled_mb = rss()
    return rep


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sessions", type=int, default=30)
    ap.add_argument("--settle", type=float, default=60.0)
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tests.helpers.server import serve

    with serve() as (url, proc):
        rep = sessions_memory(url, proc.pid, rounds=args.rounds, per_round=args.sessions, settle_s=args.settle)
    print(rep.summary())
    print(
        f"goal: within 50 MB of the start {args.settle:.0f} s after {rep.sessions} sessions closed: "
        f"{'met' if rep.kept_mb <= 50 else 'NOT met'}"
    )


if __name__ == "__main__":
    main()
