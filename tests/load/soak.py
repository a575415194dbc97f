"""Soak: many mixed requests across tabs; resident memory and every cache's size sampled.

    python -m tests.load.soak --requests 500

Prints the memory after warm-up and at the end, the growth, and each cache's bytes vs budget.
"""

from __future__ import annotations

import argparse
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tests.load.harness import make_client


@dataclass
class SoakReport:
    requests: int = 0
    errors: list[str] = field(default_factory=list)
    rss_mb: list[float] = field(default_factory=list)
    warm_rss_mb: float = 0.0
    caches_over_budget: list[str] = field(default_factory=list)
    cache_peaks: dict[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def growth(self) -> float:
        return self.rss_mb[-1] / self.warm_rss_mb - 1 if self.warm_rss_mb else 0.0

    def summary(self) -> str:
        lines = [
            f"{self.requests} requests, {len(self.errors)} errors; resident memory after warm-up "
            f"{self.warm_rss_mb:.0f} MB, at the end {self.rss_mb[-1]:.0f} MB, peak {max(self.rss_mb):.0f} MB "
            f"(growth {100 * self.growth:+.1f} %)"
        ]
        for name, (peak, budget) in sorted(self.cache_peaks.items()):
            lines.append(f"  cache {name:24s} peak {peak / 1e6:8.2f} MB of {budget / 1e6:8.2f} MB")
        return "\n".join(lines)


def soak(url: str, pid: int, calls, *, requests: int, warmup: int, seed: int = 0) -> SoakReport:
    import psutil
    from tests.load.fuzz import status

    rng = random.Random(seed)
    proc = psutil.Process(pid)
    client = make_client(url)
    rep = SoakReport()
    for i in range(requests):
        call = calls[i % len(calls)] if i < len(calls) else rng.choice(calls)
        try:
            client.predict(*call.args, api_name=call.api_name)
        except Exception as e:
            rep.errors.append(f"{call.label}: {type(e).__name__}: {e}")
        rep.requests += 1
        if i % 10 == 9 or i == requests - 1:
            rep.rss_mb.append(proc.memory_info().rss / 2**20)
            for c in status(client)["caches"]:
                peak = max(rep.cache_peaks.get(c["name"], (0, 0))[0], c["bytes"])
                rep.cache_peaks[c["name"]] = (peak, c["max_bytes"])
                if c["bytes"] > c["max_bytes"]:
                    rep.caches_over_budget.append(c["name"])
        if i == warmup - 1:
            rep.warm_rss_mb = proc.memory_info().rss / 2**20
    return rep


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=500)
    ap.add_argument("--warmup", type=int, default=100)
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tests.helpers.server import serve
    from tests.load.fuzz import endpoint_params
    from tests.load.scenarios import SOAK, available

    with serve() as (url, proc):
        calls = available(SOAK, set(endpoint_params(make_client(url))))
        rep = soak(url, proc.pid, calls, requests=args.requests, warmup=args.warmup)
    print(rep.summary())
    ok = rep.growth <= 0.10 and not rep.caches_over_budget and not rep.errors
    print(f"goal: growth <= 10 % after warm-up, every cache within budget: {'met' if ok else 'NOT met'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
