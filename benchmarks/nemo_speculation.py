"""How many UNet batches the batched NeMo search spends beyond its floor on a relaxed search, measured
on a CPU on the tiny random-weight UNet of the tests (3 value layers, 160 neurons), with the batch
size the search uses for SD-1.4 on a GPU (6 selections) and the half-precision near-tie margin: an
analogue, not SD-1.4, for the extra batches that benchmarks.nemo_account's localisation projection
cannot count on the meta device (wrong speculative guesses, near ties settled exactly).

    OMP_NUM_THREADS=1 python -m benchmarks.nemo_speculation [--seeds 10] [--groups 6]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def relaxed_search(seeds: int = 10, groups: int = 6, tie: float | None = None, seed: int = 0) -> dict:
    from backend import nemo
    from backend.nemo import core, search
    from backend.nemo.evaluate import HALF_TIE, Checker
    from tests.helpers.nemo_sequential import sequential_localize
    from tests.unit.test_nemo import PROMPT, tiny_pipe

    pipe = tiny_pipe(seed)
    generic = [
        "a red circle on a blue background",
        "a white square on a black background",
        "a green ring on a yellow background",
        "a black cross on a white background",
    ]
    stats = nemo.neuron_stats(pipe, generic)
    # θ_mem just under the seeds' own agreement (random weights memorize nothing): every seed kept and
    # the search relaxed, as the H200's SD-1.4 run of the benchmark's prompt was
    theta_mem = (
        float(nemo.seed_agreement(nemo.noise_differences(pipe, PROMPT, range(seeds), guidance_scale=0.0)).min()) - 1e-3
    )
    with core.locked(pipe.unet):
        ch = Checker(pipe, PROMPT, range(seeds), 0.0, theta_mem, groups=groups)
        ch.tie = HALF_TIE if tie is None else tie
        passes = []
        initial, theta, k, found, thr = search.initial_selection(pipe, PROMPT, stats, ch, max_k=20)
        passes.append(("initial", ch.calls - 1, ch.batches - 1))
        layers = len(initial)
        neurons = search.refine(initial, ch, thr, start_sim=None if found else thr)
    want, seq = sequential_localize(pipe, PROMPT, stats, theta_mem, num_seeds=seeds, guidance_scale=0.0, max_k=20)
    decisions = ch.calls - 1  # the sequential search's evaluations after the vanilla pass
    n_initial = passes[0][1]
    n_refine = decisions - n_initial
    floor = (
        1
        + math.ceil(n_initial / groups)
        + (0 if found else 1)
        + math.ceil(min(layers, n_refine) / groups)
        + math.ceil(max(0, n_refine - layers) / groups)
    )
    return {
        "seeds": seeds,
        "groups": groups,
        "tie": ch.tie,
        "relaxed": not found,
        "evaluations": ch.calls,
        "initial_neurons": nemo.count(initial),
        "neurons": nemo.count(neurons),
        "unet_batches": ch.batches,
        "exact_evaluations": ch.exact_calls,
        "batch_floor": floor,
        "extra_batches": ch.batches - floor,
        "extra_per_decision": (ch.batches - floor) / max(decisions, 1),
        "same_result_as_sequential": want is not None and want[5] == neurons and seq.calls == ch.calls,
    }


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--groups", type=int, default=6)
    ap.add_argument("--model-seeds", default="0,1", help="random-weight models to search (torch seeds)")
    ap.add_argument("--ties", default="1e-4,1e-6", help="near-tie margins: half precision's, float32's")
    args = ap.parse_args()
    torch.set_num_threads(1)
    rows = [
        relaxed_search(args.seeds, args.groups, float(t), seed=int(s))
        for s in args.model_seeds.split(",")
        for t in args.ties.split(",")
    ]
    print(json.dumps(rows, indent=1))
