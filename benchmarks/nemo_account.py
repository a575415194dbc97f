"""The GPU-shape account of NeMo's search at Stable Diffusion 1.4's full shape (fp16, 10 seeds,
64 × 64 latents, the CLIP text encoder's config), on the meta device: one evaluation before (the
sequential path: ε to the host, float64 SSIM there, a range-checked channel index in every hook), one
now (on the device), a batch of the search's selections per UNet forward, each against one UNet
forward of the same latents; and from them a projection of the localisation of the benchmark's
prompt on an H200. Printed by `python -m benchmarks.fullsize` with the other accounts
(benchmarks.fullsize_account); `python -m benchmarks.nemo_account` prints it alone.

Nothing is computed on the meta device, so the search's decisions cannot be run here (every SSIM
would be made up): the localisation's number of UNet batches is derived from the sequential search's
1120 evaluations measured on the H200 (H200_OLD) and the batch size the search uses, as a lower bound
(every speculative guess right, no near tie settled exactly), with the room 25 s leaves for the extra
batches of wrong guesses and near ties, and with those at the rates a relaxed search showed on the
tiny random UNet (ANALOGUE). Each at the roofline's rates and at the UNet's measured forwards'
(MEASURED_FORWARDS).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.account import account  # noqa: E402
from benchmarks.account_projection import H200, project  # noqa: E402
from benchmarks.fullsize_parts import account_row, cfg_latents, sd_pipeline  # noqa: E402

META = torch.device("meta")
# The old (sequential) code measured on the H200, 2026-11-28 (../shared/gpu/2026-11-28/nemo.json,
# the project at b744b62): one evaluation 83.9 ms vs one UNet forward 38.3 ms; the benchmark's
# prompt localised in 99.8 s with 1120 evaluations (relaxed: the refinement tried every neuron of the
# last initial selection).
H200_OLD = {
    "evaluation_s": 0.0839038,
    "forward_s": 0.0383496,
    "ratio": 2.188,
    "localisation_s": 99.80,
    "evaluations": 1120,
}
TARGET_S = 25.0
# What a relaxed batched search spent beyond its floor, per decision, on the tiny random-weight UNet
# (benchmarks/nemo_speculation.py, CPU, 2026-11-28, 10 seeds, 6 selections per batch, two models):
# extra batches with float32's near-tie margin (wrong guesses, 1-2 exact evaluations): 8/112 and
# 10/122; exact evaluations with half precision's margin (1e-4, SD-1.4's fp16 on a GPU): 60/112 and
# 81/122. An analogue, not SD-1.4: its neurons move the SSIM by other amounts.
ANALOGUE = {
    "wrong_guess_batches_per_decision": (8 + 10) / (112 + 122),
    "exact_per_decision_fp16_margin": (60 - 2 + 81 - 1) / (112 + 122),
}
# One UNet forward of SD-1.4 (fp16, 64 × 64 latents) measured on a GPU, by latents in the batch: the
# H200 of 2026-11-28 (10 latents, guidance 0) and the H100 of 2026-11-22 (20 latents, a CFG batch;
# docs/benchmarks.md). A line through both puts a forward at about 10 ms plus 2.8 ms per latent,
# the account's roofline at about 18 ms for 10: its rates, near the measured ones for the LLMs' products,
# are too fast for this UNet, so the localisation is also given with the measured line.
MEASURED_FORWARDS = ((10, 0.0383496), (20, 0.0666))


def measured_forward_s(latents: int) -> float:
    (n0, t0), (n1, t1) = MEASURED_FORWARDS
    per = (t1 - t0) / (n1 - n0)
    return t0 + per * (latents - n0)


def _setup(scale: str):
    from backend import nemo
    from backend.nemo.service import GENERIC_PROMPTS

    pipe = sd_pipeline(scale, META)
    seeds = {"full": 10, "width": 2, "tiny": 2}[scale]
    return nemo, pipe, seeds, GENERIC_PROMPTS[0]


def nemo_accounts(scale: str = "full") -> dict:
    """The accounts (Account objects) of NeMo's evaluation paths and their baseline at `scale`."""
    from backend.nemo.evaluate import Checker
    from tests.helpers.nemo_sequential import SequentialChecker

    nemo, pipe, seeds, prompt = _setup(scale)
    unet = pipe.unet
    g = nemo.SEARCH_GUIDANCE
    # θ_mem under every seed's agreement (an SSIM is > −1), so the seed filter keeps every seed, as the
    # H200 run's threshold did; on the meta device the differences it filters are made up
    theta = -1.0
    acc = {}
    acc["setup_now"], new = account(lambda: Checker(pipe, prompt, range(seeds), g, theta), meta=True, time_host=True)
    acc["activations"], _ = account(lambda: nemo.activations(pipe, [prompt]), meta=True, time_host=True)
    _, old = account(lambda: SequentialChecker(pipe, prompt, range(seeds), g, theta), meta=True)
    assert len(new.seeds) == len(old.seeds) == seeds
    lat, t, cond = new.inputs.x_t_dev, new.inputs.t, new.inputs.cond.expand(seeds, -1, -1)

    @torch.no_grad()
    def forward():  # one UNet step on the seeds' batch: the unit NeMo repeats
        return unet(lat, t, encoder_hidden_states=cond).sample

    # five neurons of every value layer off (the channels do not change the counts: the new path's
    # mask is dense, the old one indexes five channels wherever they are)
    spec = {n: list(range(5)) for n in nemo.layer_sizes(unet)}
    acc["forward"], _ = account(forward, meta=True, time_host=True)
    # the old hooks' `if idx.min() < -size or idx.max() >= size: raise` read False on a real run
    # its host work timed on a shared CPU: the least of three runs at full size
    acc["before"] = min(
        (
            account(lambda: old.similarity(spec), meta=True, flag=False, time_host=True)[0]
            for _ in range(3 if scale == "full" else 1)
        ),
        key=lambda a: a.host_compute_s,
    )
    acc["now"], _ = account(lambda: new.similarities([spec]), meta=True, time_host=True)
    acc["exact"], _ = account(lambda: new.exact(spec), meta=True, time_host=True)
    acc["batch"], _ = account(lambda: new.similarities([spec] * new.groups), meta=True, time_host=True)
    return {
        "acc": acc,
        "groups": new.groups,
        "seeds": seeds,
        "guidance": g,
        "latents": cfg_latents(unet),
        "value_layers": len(spec),
    }


def schedule_length(theta_start=5.0, theta_step=0.25, theta_min=1.0, k_start=0, max_k=20) -> int:
    """Selections the initial search lists at most (search.initial_selection's loop, before any
    selection is complete): θ from 5 down to 1.25 with k from 0, max_k 20 as the benchmark runs it."""
    n, theta, k = 1, theta_start, k_start
    while True:
        nxt = theta - theta_step if theta > theta_min else theta
        if nxt <= theta_min or k + 1 >= max_k:
            return n
        theta, k, n = nxt, k + 1, n + 1


def localisation(
    p: dict, groups: int, evaluations: int = H200_OLD["evaluations"], layers: int = 7, target_s: float = TARGET_S
) -> dict:
    """The localisation of the benchmark's prompt on the GPU, projected from the sequential count.

    The sequential search's evaluations are the seeds' vanilla pass, the initial selections (at most
    `schedule_length()`), the layer pass (at most one per value layer) and the neuron pass, the rest.
    The batched search evaluates each pass `groups` selections per UNet forward; a batch commits its
    decisions up to its first wrong guess, so each wrong guess costs at most one batch more, and each
    near tie one exact evaluation (one selection per forward). A relaxed search adds one exact
    evaluation for its threshold. `p`: projected seconds of the parts ("setup", "activations",
    "batch", "exact")."""
    initial = schedule_length()
    neurons = evaluations - 1 - initial - layers  # at least; fewer initial or layer trials leave more
    batches = math.ceil(initial / groups) + math.ceil(layers / groups) + math.ceil(neurons / groups)
    fixed = p["setup"] + p["activations"] + p["exact"]  # vanilla pass and seed filter, z-scores, threshold
    lower = fixed + batches * p["batch"]
    room = max(0.0, target_s - lower)
    out = {
        "sequential_evaluations": evaluations,
        "groups": groups,
        "initial_selections": initial,
        "layer_trials": layers,
        "neuron_trials_at_least": neurons,
        "unet_batches_lower_bound": 1 + batches + 1,
        "projected_s_lower_bound": lower,
        "extra_batches_within_target": int(room // p["batch"]),
        "extra_exact_within_target": int(room // p["exact"]),
        "target_s": target_s,
        "sequential_projected_s": fixed + (evaluations - 1) * p["exact"],
    }
    if "seeds" in p:  # the UNet's share at the measured forwards' rate, the rest as projected
        beside = p["now"] - p["forward"]  # mask, min-max, SSIM and the scalar back, per evaluation
        batch = measured_forward_s(groups * p["seeds"]) + groups * beside
        one = measured_forward_s(p["seeds"]) + beside
        fixed_m = fixed - p["setup_forward"] - p["exact"] + 2 * measured_forward_s(p["seeds"])
        out.update(
            measured_rate_batch_s=batch,
            measured_rate_exact_s=one,
            measured_rate_s_lower_bound=fixed_m + beside + batches * batch,
            measured_rate_sequential_s=fixed_m + beside + (evaluations - 1) * one,
        )
    # with the tiny analogue's rates of wrong guesses and near ties (ANALOGUE) over the decisions
    decisions = evaluations - 1
    wrong = round(ANALOGUE["wrong_guess_batches_per_decision"] * decisions)
    ties = round(ANALOGUE["exact_per_decision_fp16_margin"] * decisions)
    out.update(
        analogue_extra_batches=wrong,
        analogue_exact=ties,
        analogue_projected_s=lower + wrong * p["batch"] + ties * p["exact"],
    )
    if "measured_rate_batch_s" in out:
        out["analogue_measured_rate_s"] = (
            out["measured_rate_s_lower_bound"]
            + wrong * out["measured_rate_batch_s"]
            + ties * out["measured_rate_exact_s"]
        )
    return out


def account_nemo(scale: str = "full") -> list[dict]:
    """The rows of benchmarks.fullsize_account's table for NeMo (their `lines` printed below it)."""
    r = nemo_accounts(scale)
    a, G = r["acc"], r["groups"]
    fwd = project(a["forward"], H200)["total_s"]
    # The check against the H200: the old path's device work, and the host work the measured ratio
    # leaves to the H200's host. The host work timed on this shared CPU swings with its load (the seed
    # filter's float64 SSIMs: seconds), so at full size every other path's host work is taken at the
    # H200 host's speed that this implies against this CPU's (`host_scale`); the old path keeps this
    # CPU's, which its row reports.
    dev_before = project(dataclasses.replace(a["before"], host_compute_s=0.0), H200)["total_s"]
    implied_host = H200_OLD["evaluation_s"] - H200_OLD["forward_s"] * dev_before / fwd
    host_scale = 1.0
    if scale == "full":  # the GPU's measurements are SD-1.4's: they calibrate the full shape only
        host_scale = max(implied_host, 0.0) / max(a["before"].host_compute_s, 1e-9)
        a = {
            k: v if k == "before" else dataclasses.replace(v, host_compute_s=v.host_compute_s * host_scale)
            for k, v in a.items()
        }
    proj = {k: project(v, H200)["total_s"] for k, v in a.items()}
    what = (
        f"SD-1.4 {'full ' if scale == 'full' else scale + ' '}config, fp16, {r['seeds']} seeds, {r['latents']} latents"
    )
    base = "one UNet forward of the same latents"
    rows = [
        account_row(
            "Memorization",
            f"NeMo, one search evaluation before (sequential: ε to the host, float64 SSIM there), {what}",
            a["before"],
            a["forward"],
            base,
        ),
        account_row(
            "Memorization", f"NeMo, one search evaluation now (on the device), {what}", a["now"], a["forward"], base
        ),
        account_row(
            "Memorization",
            f"NeMo, one UNet batch of {G} selections now ({G} evaluations), {what}",
            a["batch"],
            a["forward"],
            base,
        ),
    ]
    rows[0]["measured_h200_ratio_old_code"] = H200_OLD["ratio"]
    rows[0]["value_layers"] = r["value_layers"]
    per = proj["batch"] / G / proj["forward"]
    rows[0]["device_projected_ratio"] = dev_before / proj["forward"]
    rows[0]["h200_implied_host_s"] = implied_host
    rows[2]["groups"], rows[2]["projected_ratio_per_evaluation"] = G, per
    parts = {
        "setup": proj["setup_now"],
        "activations": proj["activations"],
        "batch": proj["batch"],
        "exact": proj["exact"],
    }
    if scale == "full":
        parts.update(now=proj["now"], forward=proj["forward"], setup_forward=proj["forward"], seeds=r["seeds"])
    loc = localisation(parts, G)
    loc["host_scale"] = host_scale
    full = scale == "full"
    host_ms = 1e3 * a["before"].host_compute_s
    lines = [
        f"NeMo ({what}; {H200.name}, a projection, not a measurement):",
        f"- one evaluation before: {1e3 * proj['before']:.1f} ms vs a forward {1e3 * proj['forward']:.1f} ms, "
        f"ratio {rows[0]['projected_ratio']:.2f}, of which host tensor work (min-max, float64 SSIM) "
        f"{host_ms:.1f} ms on this CPU ({torch.get_num_threads()} thread(s)); without it "
        f"{rows[0]['device_projected_ratio']:.2f} of a forward"
        + (
            f". H200 measured, old code: {1e3 * H200_OLD['evaluation_s']:.1f} vs {1e3 * H200_OLD['forward_s']:.1f} ms, "
            f"{H200_OLD['ratio']:.2f}: the device work it projects leaves {1e3 * implied_host:.1f} ms to the "
            f"H200 host's share of the same host work"
            if full
            else ""
        ),
        f"- one evaluation now: ratio {rows[1]['projected_ratio']:.2f}"
        + (" (its host work at the H200 host's implied speed, as every path's below)" if full else "")
        + f"; the exact path (a near tie) "
        f"{1e3 * proj['exact']:.1f} ms; a batch of {G}: {1e3 * proj['batch']:.1f} ms, "
        f"{per:.2f} of a forward per evaluation",
        f"- localisation of the benchmark's prompt (projection): {loc['sequential_evaluations']} sequential "
        f"evaluations (H200, old code) = 1 vanilla + ≤ {loc['initial_selections']} initial + ≤ "
        f"{loc['layer_trials']} layer + ≥ {loc['neuron_trials_at_least']} neuron trials → ≥ "
        f"{loc['unet_batches_lower_bound']} UNet batches of ≤ {G} selections → ≥ "
        f"{loc['projected_s_lower_bound']:.1f} s (every guess right, no near tie"
        + (f"; host work at the H200 host's implied speed, × {host_scale:.2f} this CPU's" if full else "")
        + f"); {TARGET_S:g} s leaves room "
        f"for {loc['extra_batches_within_target']} more batches (wrong guesses) or "
        f"{loc['extra_exact_within_target']} exact evaluations (near ties); one selection per forward on the "
        f"device: {loc['sequential_projected_s']:.1f} s"
        + (f" (H200 measured, old code: {H200_OLD['localisation_s']:.1f} s)" if full else ""),
    ]
    if "measured_rate_batch_s" in loc:
        lines.append(
            f"- the same with the UNet at the measured forwards' rate ({1e3 * measured_forward_s(r['seeds']):.1f} "
            f"ms for {r['seeds']} latents, {1e3 * measured_forward_s(G * r['seeds']):.1f} ms for "
            f"{G * r['seeds']}), the rest as above: a batch {1e3 * loc['measured_rate_batch_s']:.1f} "
            f"ms → ≥ {loc['measured_rate_s_lower_bound']:.1f} s; one selection per forward: "
            f"{loc['measured_rate_sequential_s']:.1f} s"
        )
    lines.append(
        f"- with the wrong guesses ({loc['analogue_extra_batches']} batches) and near ties settled exactly "
        f"({loc['analogue_exact']}) at the rates of a relaxed search on the tiny random UNet "
        f"(benchmarks.nemo_speculation, half precision's 1e-4 margin): {loc['analogue_projected_s']:.1f} s"
        + (
            f"; at the measured forwards' rate {loc['analogue_measured_rate_s']:.1f} s"
            if "analogue_measured_rate_s" in loc
            else ""
        )
    )
    lines.append(
        f"- setup (vanilla pass, seed filter on the host): {1e3 * proj['setup_now']:.1f} ms, of which "
        f"host tensor work {1e3 * a['setup_now'].host_compute_s:.1f} ms"
        + (f" ({1e3 * r['acc']['setup_now'].host_compute_s:.0f} ms on this CPU)" if full else "")
    )
    lines += [f"  account, {k}: {v.line()}" for k, v in r["acc"].items()]  # host work as timed here
    rows[-1]["localisation"] = loc
    rows[-1]["lines"] = lines
    return rows


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", choices=("full", "tiny"), default="full")
    ap.add_argument("--threads", type=int, default=1, help="CPU threads (the host's own tensor work is timed)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    for row in account_nemo(args.scale):
        print("\n".join(row.get("lines", [])))
