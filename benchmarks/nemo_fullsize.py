"""NeMo's rows of benchmarks.fullsize: one search evaluation against one UNet forward of the same
latents, today's path (on the device, several selections per UNet batch) beside the sequential one it
replaced (tests/helpers/nemo_sequential.py: ε to the host, float64 SSIM there, one selection per
forward), each with its GPU-shape account (benchmarks.account); and, except at `--scale width`,
the localisation of one prompt both ways with its evaluations and UNet batches."""

from __future__ import annotations

import statistics
import time

import torch

from benchmarks.account import account
from benchmarks.account_projection import projection_line
from benchmarks.fullsize_parts import cfg_latents, measure, row, sd_pipeline, sync


def bench_nemo(scale: str, dev: torch.device, repeats: int) -> list[dict]:
    from backend import nemo
    from backend.nemo.evaluate import Checker
    from backend.nemo.service import GENERIC_PROMPTS
    from tests.helpers.nemo_sequential import SequentialChecker, sequential_localize

    pipe = sd_pipeline(scale, dev)
    seeds = {"full": 10, "width": 2, "tiny": 2}[scale]
    max_k = 20 if scale == "full" else 2
    stats = nemo.neuron_stats(pipe, GENERIC_PROMPTS)
    prompt = GENERIC_PROMPTS[0]
    unet = pipe.unet
    g = nemo.SEARCH_GUIDANCE  # the search's own guidance (0: one conditional pass per seed)
    # the latents and text states one search evaluation feeds the UNet (x_T at the search's t₁)
    sched = nemo.core._scheduler(pipe, 50)
    t = sched.timesteps[1]
    lat = sched.scale_model_input(nemo.initial_latents(pipe, range(seeds)) * sched.init_noise_sigma, t)
    p = next(unet.parameters())
    lat = lat.to(dev, p.dtype)
    text = nemo.encode_prompts(pipe, [prompt]).to(dev, p.dtype).expand(seeds, -1, -1)

    @torch.no_grad()
    def forward():  # one UNet step on the seeds' batch: the unit NeMo repeats
        return unet(lat, t, encoder_hidden_states=text).sample

    base = measure(forward, dev, repeats)
    # random weights memorize nothing, so θ_mem 0.428 would let the seed filter skip the prompt after
    # one evaluation; a threshold just under the seeds' own agreement keeps them all and runs the search
    agree = nemo.seed_agreement(nemo.noise_differences(pipe, prompt, range(seeds), guidance_scale=g))
    theta_mem = float(agree.min()) - 1e-3
    # one evaluation: the top 5 neurons of every layer by this prompt's activation switched off
    acts = nemo.activations(pipe, [prompt])
    spec = {n: a[0].topk(5).indices.tolist() for n, a in acts.items()}
    new = Checker(pipe, prompt, range(seeds), g, theta_mem)
    old = SequentialChecker(pipe, prompt, range(seeds), g, theta_mem)
    groups = new.groups
    one = measure(lambda: new.similarities([spec]), dev, repeats)
    before = measure(lambda: old.similarity(spec), dev, repeats)
    batch = measure(lambda: new.similarities([spec] * groups), dev, max(1, repeats // 2))
    per = {**batch, "s": batch["s"] / groups}
    acc_base, _ = account(forward)
    acc_new, _ = account(lambda: new.similarities([spec]))
    acc_old, _ = account(lambda: old.similarity(spec), host=[old.inputs.latents, old.inputs.x_t, old.vanilla])
    acc_batch, _ = account(lambda: new.similarities([spec] * groups))
    per_acc = acc_batch.scaled(1 / groups)
    what = f"({seeds} seeds, guidance {g:g}, {cfg_latents(unet)} latents)"
    notes = [
        f"account, one UNet forward: {acc_base.line()}",
        f"account, one evaluation before (sequential, host SSIM): {acc_old.line()}",
        f"  {projection_line(acc_old, acc_base)}",
        f"account, one evaluation now (on the device): {acc_new.line()}",
        f"  {projection_line(acc_new, acc_base)}",
        f"account, a batch of {groups} evaluations now: {acc_batch.line()}",
        f"  per evaluation: {projection_line(per_acc, acc_base)}",
    ]
    rows = [
        row(
            "Memorization",
            f"NeMo, one search evaluation {what}",
            one,
            base,
            "one UNet forward of the same latents",
            before_s=before["s"],
            before_ratio=before["s"] / base["s"],
            account={
                "forward": acc_base.as_dict(),
                "before": acc_old.as_dict(),
                "now": acc_new.as_dict(),
                f"batch_of_{groups}": acc_batch.as_dict(),
            },
            notes=notes,
        ),
        row(
            "Memorization",
            f"NeMo, one search evaluation in a batch of {groups} selections {what}",
            per,
            base,
            "one UNet forward of the same latents",
            groups=groups,
        ),
    ]
    if scale == "width":  # a whole search is tens of UNet forwards: minutes per row on a CPU
        return rows
    locs = []

    def localise():
        locs.append(
            nemo.localize(pipe, prompt, stats, theta_mem=theta_mem, num_seeds=seeds, guidance_scale=g, max_k=max_k)
        )

    main = measure(localise, dev, max(1, repeats // 2))
    t0 = time.perf_counter()  # the sequential search once (warm: the runs above warmed the kernels)
    (_, _, _, _, thr, neurons), seq = sequential_localize(
        pipe, prompt, stats, theta_mem, num_seeds=seeds, guidance_scale=g, max_k=max_k
    )
    sync(dev)
    seq_s = time.perf_counter() - t0
    loc = locs[-1]
    n_eval = statistics.median(x.evaluations for x in locs)
    return rows + [
        row(
            "Memorization",
            f"NeMo localisation per prompt ({seeds} seeds, guidance {g:g})",
            main,
            base,
            "forward (one UNet step, the seeds' batch)",
            noise_evaluations=n_eval,
            ratio_per_evaluation=main["s"] / n_eval / base["s"],
            unet_batches=loc.unet_batches,
            before_s=seq_s,
            before_evaluations=seq.calls,
            same_result=(loc.neurons == neurons and loc.threshold == thr),
        )
    ]
