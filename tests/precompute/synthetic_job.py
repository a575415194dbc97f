"""A synthetic precompute job for the sharding tests: sums and a top-k over a seeded dataset.

torchrun --nproc_per_node 2 tests/precompute/synthetic_job.py OUT_DIR [--stop-after N]
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from backend.core.precompute import ShardedJob, merge_sum, merge_topk  # noqa: E402

N, D, K = 103, 16, 5


def data(start, end):
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(N, D, generator=g)
    x[7] = x[3]  # a tie, to exercise the tie-break
    return x[start:end]


def compute(start, end):
    x = data(start, end)
    ids = torch.arange(start, end).expand(D, -1)
    k = min(K, end - start)
    v, i = merge_topk([x.T.contiguous()], [ids.contiguous()], k)
    return {"sum": x.sum(0), "sq": (x**2).sum(0), "top_v": v, "top_i": i}


def merge(parts):
    out = merge_sum([{k: p[k] for k in ("sum", "sq")} for p in parts])
    out["top_v"], out["top_i"] = merge_topk([p["top_v"] for p in parts], [p["top_i"] for p in parts], K)
    return out


if __name__ == "__main__":
    out = Path(sys.argv[1])
    stop_after = int(sys.argv[3]) if len(sys.argv) > 3 and sys.argv[2] == "--stop-after" else None
    calls = []

    def counted(s, e):
        if stop_after is not None and len(calls) >= stop_after:
            raise SystemExit(3)  # simulate an interruption
        calls.append((s, e))
        return compute(s, e)

    from accelerate import PartialState

    ShardedJob("synthetic", out, N, 10, counted, merge).run(PartialState(cpu=True))
