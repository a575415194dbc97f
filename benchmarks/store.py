"""The model store: switching between loaded models, and its bytes against the budget.

    python -m benchmarks.store [--requests 200] [--loads 60]

(a) A request that switches to an already-loaded model: server time of the request scope +
    get_or_load + a trivial forward, against the same forward alone, measured in the same run
    (goal: at most 200 ms of server time).
(c) The same through the tabs' model picker, switching between two of the user's own model
    folders: picker.resolve (policy, architecture and size checks, remembered after the first) +
    the store + a forward, against the forward alone.
(b) A sequence of loads of tiny models of mixed sizes under a small budget: the store's peak bytes
    against the budget (goal: never above the budget plus the one model being loaded), with the
    evictions and reloads this cost.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from torch import nn  # noqa: E402

from backend.core import store  # noqa: E402
from tests.helpers.tiny import tiny_llama  # noqa: E402

MB = 10**6


def switching(requests: int) -> None:
    models = {f"bench:llama{i}": (lambda i=i: tiny_llama(seed=i)) for i in range(2)}
    ids = list(models)
    x = torch.randint(0, 64, (1, 16))
    for mid in ids:
        store.get_or_load(mid, models[mid])
    direct = {mid: store.get_or_load(mid, models[mid]) for mid in ids}
    served, alone = [], []
    with torch.no_grad():
        for r in range(requests):  # interleaved, so drift on a noisy machine hits both alike
            mid = ids[r % 2]  # every request switches model
            t0 = time.perf_counter()
            with store.request_scope():
                store.get_or_load(mid, models[mid])(x)
            served.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            direct[ids[(r + 1) % 2]](x)  # the other model: the baseline switches too
            alone.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    for r in range(requests * 10):
        with store.request_scope():
            store.get_or_load(ids[r % 2], models[ids[r % 2]])
    only = (time.perf_counter() - t0) / (requests * 10)
    s, a = statistics.median(served), statistics.median(alone)
    worst = max(served)
    print(
        f"(a) switch to a loaded model + forward: median {s * 1e3:.2f} ms, worst {worst * 1e3:.2f} ms "
        f"({requests} requests)"
    )
    print(f"    forward alone (baseline):           median {a * 1e3:.2f} ms")
    print(f"    request scope + get_or_load alone: {only * 1e6:.1f} us")
    print(
        f"    store overhead median {(s - a) * 1e3:.3f} ms; ratio {s / a:.3f}; "
        f"goal <= 200 ms server time: {'met' if worst <= 0.2 else 'NOT met'}"
    )
    for mid in ids:
        store.evict(mid)


def picker_switching(requests: int) -> None:
    import tempfile

    from backend.core import picker
    from backend.core import presets as P

    with tempfile.TemporaryDirectory() as tmp:
        os.environ["WORKBENCH_MODEL_ROOTS"] = tmp
        keys = []
        for i in range(2):
            tiny_llama(seed=i).save_pretrained(Path(tmp) / f"own{i}")
            keys.append(str(Path(tmp) / f"own{i}"))
        x = torch.randint(0, 64, (1, 16))

        def serve(key):
            p = picker.resolve(key, [], "adapters").preset
            return store.get_or_load(p.model_id, lambda: P.load_preset(p).eval())

        with store.request_scope():
            direct = {k: serve(k) for k in keys}
        first_check = []
        picker.forget()
        t0 = time.perf_counter()
        picker.resolve(keys[0], [], "adapters")
        first_check.append(time.perf_counter() - t0)
        served, alone = [], []
        with torch.no_grad():
            for r in range(requests):
                key = keys[r % 2]
                t0 = time.perf_counter()
                with store.request_scope():
                    serve(key)(x)
                served.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                direct[keys[(r + 1) % 2]](x)
                alone.append(time.perf_counter() - t0)
        s, a, worst = statistics.median(served), statistics.median(alone), max(served)
        print(
            f"(c) switch between two own model folders through the picker + forward: median {s * 1e3:.2f} ms, "
            f"worst {worst * 1e3:.2f} ms ({requests} requests); forward alone {a * 1e3:.2f} ms; "
            f"first check of a folder {first_check[0] * 1e3:.1f} ms"
        )
        print(
            f"    picker + store overhead median {(s - a) * 1e3:.3f} ms; ratio {s / a:.3f}; "
            f"goal <= 200 ms server time: {'met' if worst <= 0.2 else 'NOT met'}"
        )
        for p in store.items():
            store.evict(p[0])
        os.environ.pop("WORKBENCH_MODEL_ROOTS", None)


def block(mb: float, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    m = nn.Module()
    m.w = nn.Parameter(torch.randn(int(mb * MB) // 4))
    return m


def budgeted_loads(loads: int, budget_mb: int = 20) -> None:
    os.environ["WORKBENCH_MODEL_BUDGET"] = f"{budget_mb}MB"
    rng = random.Random(0)
    sizes = {f"bench:m{i}": rng.choice([1, 2, 4, 8]) for i in range(12)}
    observed, reloads, largest, before_load = 0, 0, 0, 0
    loaded_once: set[str] = set()

    def loader(mid: str):
        def load():
            nonlocal observed, reloads, largest, before_load
            model = block(sizes[mid], seed=len(loaded_once))
            # the store's bytes while this model exists beside them: the true peak of the sequence
            resident = store.stats()["resident_bytes"]
            before_load = max(before_load, resident)
            observed = max(observed, resident + store.nbytes_of(model))
            largest = max(largest, sizes[mid] * MB)
            reloads += mid in loaded_once
            loaded_once.add(mid)
            return model

        return load

    store.reset_peak()
    before = store.stats()["evictions"]
    ids = list(sizes)
    for _ in range(loads):
        mid = rng.choice(ids)
        with store.request_scope():
            store.get_or_load(mid, loader(mid))
    st = store.stats()
    budget = budget_mb * MB
    print(
        f"(b) {loads} requests over {len(ids)} models of 1-8 MB, budget {budget_mb} MB: "
        f"{st['evictions'] - before} evictions, {reloads} reloads"
    )
    print(
        f"    peak bytes {max(observed, st['peak_bytes']) / MB:.1f} MB; budget + largest model "
        f"{(budget + largest) / MB:.1f} MB; ratio peak / budget {max(observed, st['peak_bytes']) / budget:.2f}; "
        f"resident at the end {st['resident_bytes'] / MB:.1f} MB"
    )
    print(f"    most the store held beside a model being loaded: {before_load / MB:.1f} MB (budget {budget_mb} MB)")
    ok = before_load <= budget and st["resident_bytes"] <= budget
    print(f"    goal never above budget + the one loading: {'met' if ok else 'NOT met'}")
    for mid in ids:
        store.evict(mid)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--loads", type=int, default=60)
    args = ap.parse_args()
    torch.set_num_threads(1)
    switching(args.requests)
    picker_switching(args.requests)
    budgeted_loads(args.loads)


if __name__ == "__main__":
    main()
