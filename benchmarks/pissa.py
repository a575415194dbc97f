"""PiSSA benchmarks, each against a baseline measured in the same run.

1. Fast init: peft's `pissa_niter_4` (torch.svd_lowrank, 4 subspace iterations) vs `pissa` (full SVD)
   on a 4096 × 4096 weight: speed-up, and the error of the principal subspace / principal part.
   Target: ≥ 10× faster, principal-subspace error ≤ 1e-3.
2. The race's update cadence in the tab (the generator Gradio streams): largest gap between two
   updates while runs train. Target: an update at least every second.
3. Quantization error-reduction ratios (NF4, block 64) on every zoo linear layer at r = 8.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/pissa.py [--size 4096] [--rank 16] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")


def llm_like(n: int, spike_rank: int, seed: int = 0, gap: float = 2.0) -> torch.Tensor:
    """Gaussian bulk (singular values ≤ ~2) plus a planted principal part with singular values
    from 4·gap down to 2·gap: trained LLM weights have top singular values standing out of the
    bulk; `gap` is σ_r / σ_(r+1), which decides how fast subspace iteration converges."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(n, n, generator=g) / n**0.5
    u = torch.linalg.qr(torch.randn(n, spike_rank, generator=g))[0]
    v = torch.linalg.qr(torch.randn(n, spike_rank, generator=g))[0]
    s = torch.linspace(4.0 * gap, 2.0 * gap, spike_rank)
    return (w + (u * s) @ v.T) * 0.02


def subspace_error(b_fast: torch.Tensor, b_full: torch.Tensor) -> float:
    """sin of the largest principal angle between the column spaces (spectral norm of the
    difference of the two orthogonal projectors)."""
    qf = torch.linalg.qr(b_fast.double())[0]
    qe = torch.linalg.qr(b_full.double())[0]
    return float(torch.linalg.matrix_norm(qf @ qf.T - qe @ qe.T, ord=2))


def bench_init(size: int, rank: int, repeats: int = 3, gap: float = 2.0) -> dict:
    from backend.pissa import pissa_split

    w = llm_like(size, rank, gap=gap)
    pissa_split(w[:256, :256], 8, init="pissa_niter_4")  # warm up peft
    t0 = time.perf_counter()
    full = pissa_split(w, rank, init="pissa")
    t_full = time.perf_counter() - t0
    fast_times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fast = pissa_split(w, rank, init="pissa_niter_4")
        fast_times.append(time.perf_counter() - t0)
    t_fast = min(fast_times)
    p_full, p_fast = full.principal(), fast.principal()
    q = torch.linalg.qr(fast.lora_B.double())[0]
    sv = torch.linalg.svdvals(full.principal().double())
    captured = float(torch.linalg.matrix_norm(q.T @ w.double()) ** 2 / (sv**2).sum())
    out = {
        "size": size,
        "rank": rank,
        "gap": gap,
        "principal_energy_deficit": 1.0 - captured,
        "full_svd_s": t_full,
        "niter4_s": t_fast,
        "speedup": t_full / t_fast,
        "principal_subspace_error_left": subspace_error(fast.lora_B, full.lora_B),
        "principal_subspace_error_right": subspace_error(fast.lora_A.T, full.lora_A.T),
        "principal_part_rel_error": float((p_fast - p_full).norm() / p_full.norm()),
        "reconstruction_rel_error_fast": float((fast.residual + p_fast - w).norm() / w.norm()),
    }
    # where the fast init is NOT accurate: a pure Gaussian matrix has no gap after r
    g = torch.randn(1024, 1024, generator=torch.Generator().manual_seed(1)) * 0.02
    out["gaussian_1024_subspace_error"] = subspace_error(
        pissa_split(g, rank, init="pissa_niter_4").lora_B, pissa_split(g, rank, init="pissa").lora_B
    )
    return out


def bench_race_cadence(key: str, methods, seeds: int, steps: int) -> dict:
    from components.adapters import layout as ui

    stamps = []
    statuses = []
    t0 = time.perf_counter()
    for out in ui.run_race(key, list(methods), seeds, steps, 8, 0):
        stamps.append(time.perf_counter())
        statuses.append(out[1])
    gaps = [b - a for a, b in zip(stamps, stamps[1:])]
    # the last update writes the export files after the race has finished
    running = gaps[:-1]
    return {
        "model": key,
        "methods": list(methods),
        "seeds": seeds,
        "steps": steps,
        "updates": len(stamps),
        "wall_s": time.perf_counter() - t0,
        "max_gap_s": max(running),
        "mean_gap_s": sum(running) / len(running),
        "final_status": next((s for s in reversed(statuses) if isinstance(s, str)), ""),
    }


def bench_ratios(key: str, rank: int = 8) -> dict:
    from backend.pissa import service

    t0 = time.perf_counter()
    t = service.error_table(key, rank)
    return {"model": key, "rank": rank, "seconds": time.perf_counter() - t0, **t["summary"], "rows": t["rows"]}


def bench_race_losses(key: str, steps: int = 100, seeds=(0, 1, 2)) -> dict:
    from backend.pissa import service
    from backend.pissa.race import RaceConfig, loss_at, race

    task = service.task_for(key)
    curves = {}
    t0 = time.perf_counter()
    for e in race(task, RaceConfig(methods=("lora", "pissa", "full"), seeds=seeds, steps=steps)):
        if "step" in e:
            curves.setdefault((e["method"], e["seed"]), []).append(e["loss"])
    at = {f"{m}-{s}": loss_at(c, steps) for (m, s), c in curves.items()}
    wins = sum(at[f"pissa-{s}"] < at[f"lora-{s}"] for s in seeds)
    return {
        "model": key,
        "steps": steps,
        "seconds": time.perf_counter() - t0,
        "loss_at_step": at,
        "pissa_wins": f"{wins}/{len(seeds)}",
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--quick", action="store_true", help="1024 × 1024 and the toy only")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    from backend.pissa import service

    size = 1024 if args.quick else args.size
    results = {"threads": torch.get_num_threads(), "init": []}
    for gap in (4.0, 2.0):
        init = bench_init(size, args.rank, gap=gap)
        results["init"].append(init)
        sub = max(init["principal_subspace_error_left"], init["principal_subspace_error_right"])
        print(
            f"[init] {size}x{size}, r={args.rank}, spectral gap sigma_r/sigma_r+1 = {gap:g}: full SVD "
            f"{init['full_svd_s']:.2f} s, pissa_niter_4 {init['niter4_s']:.3f} s -> {init['speedup']:.1f}x "
            f"faster (target >= 10x); principal-subspace error (sin of largest angle) {sub:.2e} "
            f"(target <= 1e-3); principal part rel. error {init['principal_part_rel_error']:.2e}; "
            f"principal energy missed {init['principal_energy_deficit']:.1e}; W_res + AB vs W "
            f"{init['reconstruction_rel_error_fast']:.1e}"
        )
    print(
        f"[init] no spectral gap (Gaussian 1024x1024): subspace error "
        f"{results['init'][0]['gaussian_1024_subspace_error']:.2f} -- the fast init needs a principal part"
    )
    models = [k for _, k in service.choices("zoo")]
    if args.quick:
        models = models[:1]
    for key in models:
        c = bench_race_cadence(key, ("lora", "pissa", "full"), 3, 100 if key == "pissa-toy" else 40)
        results.setdefault("cadence", []).append(c)
        print(
            f"[race cadence] {key}: {c['updates']} updates in {c['wall_s']:.1f} s, largest gap "
            f"{c['max_gap_s']:.2f} s (target <= 1 s), mean {c['mean_gap_s']:.2f} s"
        )
        r = bench_ratios(key)
        results.setdefault("ratios", []).append(r)
        print(
            f"[NF4 error reduction] {key} r=8 over {r['layers']} layers: QPiSSA-1 > LoftQ-1 on "
            f"{r['qpissa1_beats_loftq1']}, QPiSSA-5 > LoftQ-1 on {r['qpissa5_beats_loftq1']}; means "
            + ", ".join(f"{k} {v:.3f}" for k, v in r["mean"].items())
        )
        loss = bench_race_losses(key)
        results.setdefault("race", []).append(loss)
        print(
            f"[race] {key}: PiSSA below LoRA at step 100 for {loss['pissa_wins']} seeds; "
            + ", ".join(f"{k} {v:.3f}" for k, v in sorted(loss["loss_at_step"].items()))
            + f" ({loss['seconds']:.0f} s)"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=float))
    init = results["init"][0]
    ok = (
        init["speedup"] >= 10
        and max(init["principal_subspace_error_left"], init["principal_subspace_error_right"]) <= 1e-3
    )
    ok = ok and all(c["max_gap_s"] <= 1.0 for c in results.get("cadence", []))
    print("all targets met" if ok else "SOME TARGETS MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
