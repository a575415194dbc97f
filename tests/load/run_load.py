"""Parallel users for a bounded time against the app on 127.0.0.1.

python -m tests.load.run_load --clients 16 --seconds 120
python -m tests.load.run_load --figures   # and issue 37's figures: fair turns, time limits, the
                                          # smallest settings under a cap, memory after sessions
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=120)
    ap.add_argument("--max-requests", type=int, default=5000)
    ap.add_argument("--figures", action="store_true")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tests.helpers.server import serve
    from tests.load.fuzz import endpoint_params, status
    from tests.load.harness import make_client, run_parallel
    from tests.load.scenarios import SCENARIOS, available

    with serve(env={"WORKBENCH_CHECK_WEIGHTS": "1"}) as (url, _):
        client = make_client(url)
        calls = available(SCENARIOS, set(endpoint_params(client)))
        print(f"{len(calls)} scenarios: {', '.join(c.label for c in calls)}")
        rep = run_parallel(url, calls, clients=args.clients, seconds=args.seconds, max_requests=args.max_requests)
        final = status(client)
    print(rep.summary())
    print(f"hooks left / weights changed: {final['integrity'] or 'none'}; handler defects: {final['internal_errors']}")
    for m in rep.mismatches[:20]:
        print("CROSS-TALK", m)
    for e in rep.errors[:20]:
        print("ERROR", e)
    if args.figures:  # each on a server of its own (its settings differ)
        import subprocess

        for mod in ("tests.load.turns_and_limits", "tests.load.session_memory"):
            subprocess.run([sys.executable, "-m", mod], cwd=Path(__file__).resolve().parents[2], check=False)
    sys.exit(1 if rep.mismatches or rep.errors or final["integrity"] or final["internal_errors"] else 0)


if __name__ == "__main__":
    main()
