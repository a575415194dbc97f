"""NeMo localisation time per memorized prompt on the zoo, against a baseline measured in the same
run (one memorization-score evaluation: the unit of work localisation repeats).

    OMP_NUM_THREADS=1 python -m benchmarks.nemo [--prompts N] [--threads 1]

Prints seconds per prompt (median, max), the baseline, their ratio, the number of noise
evaluations and UNet batches and neurons per prompt, the same for the sequential search the batched
one replaced (tests/helpers/nemo_sequential.py) with whether both found the same neurons, and the mitigation numbers the issue asks for. Goal: ≤ 5 s per
memorized prompt on this CPU. With a CUDA device it also times localisation on a random-weight
UNet built from Stable Diffusion 1.4's config (goal ≤ 2 s per prompt; the paper: most under 10 s).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402


def zoo_benchmark(n_prompts: int | None) -> dict:
    from backend import nemo
    from backend.nemo import service

    m = service.get("zoo")
    stats = m.stats()
    items = m.memorized[:n_prompts] if n_prompts else m.memorized
    prompts = [x["prompt"] for x in items]
    # baseline: one memorization score (2 UNet steps on num_seeds × 2 latents)
    base = []
    for p in prompts:
        t0 = time.perf_counter()
        nemo.memorization_score(m.pipe, p, num_seeds=m.num_seeds, guidance_scale=m.guidance_scale)
        base.append(time.perf_counter() - t0)
    from tests.helpers.nemo_sequential import sequential_localize

    skipped, relaxed, batches, seq_times, seq_batches, same = [], [], [], [], [], []
    times, evals, counts, below, below_rnd, s_on, s_off, s_rnd = [], [], [], [], [], [], [], []
    seeds = [0, 1, 2, 3]
    for i, (p, _item) in enumerate(zip(prompts, items)):
        t0 = time.perf_counter()
        loc = nemo.localize(m.pipe, p, stats, m.theta_mem, num_seeds=m.num_seeds, guidance_scale=m.search_guidance)
        skipped.append(loc.skipped)
        relaxed.append(loc.relaxed)
        times.append(time.perf_counter() - t0)
        evals.append(loc.evaluations)
        batches.append(loc.unet_batches)
        counts.append(loc.n_neurons)
        # the sequential search it replaced (one selection per UNet forward, SSIM on the host)
        t0 = time.perf_counter()
        want, seq = sequential_localize(
            m.pipe, p, stats, m.theta_mem, num_seeds=m.num_seeds, guidance_scale=m.search_guidance
        )
        seq_times.append(time.perf_counter() - t0)
        seq_batches.append(seq.calls)
        same.append(
            loc.skipped
            if want is None
            else (loc.initial, loc.neurons, loc.threshold) == (want[0], want[5], float(want[4]))
        )
        rnd = nemo.random_like(m.pipe.unet, loc.neurons, seed=i)
        score = lambda spec: nemo.memorization_score(  # noqa: E731
            m.pipe,
            p,
            num_seeds=m.num_seeds,
            guidance_scale=m.guidance_scale,
            spec=spec,
        )
        below.append(score(loc.neurons) <= m.theta_mem)
        below_rnd.append(score(rnd) <= m.theta_mem)
        train = m.train_image(p)
        ref = np.repeat(train[None], len(seeds), 0)
        g = lambda spec: nemo.generate(  # noqa: E731
            m.pipe,
            p,
            seeds,
            guidance_scale=m.guidance_scale,
            num_inference_steps=m.num_inference_steps,
            spec=spec,
        )
        s_on.append(float(np.median(nemo.ssim_images(g({}), ref))))
        s_off.append(float(np.median(nemo.ssim_images(g(loc.neurons), ref))))
        s_rnd.append(float(np.median(nemo.ssim_images(g(rnd), ref))))
    b = statistics.median(base)
    return {
        "prompts": len(prompts),
        "localisation_s_median": round(statistics.median(times), 3),
        "localisation_s_max": round(max(times), 3),
        "baseline_score_s_median": round(b, 4),
        "ratio_localisation_to_one_score": round(statistics.median(times) / b, 1),
        "noise_evaluations_median": statistics.median(evals),
        "unet_batches_median": statistics.median(batches),
        "sequential_localisation_s_median": round(statistics.median(seq_times), 3),
        "sequential_unet_forwards_median": statistics.median(seq_batches),
        "same_result_as_sequential": f"{sum(same)}/{len(same)}",
        "neurons_per_prompt": counts,
        # the seed filter skips a prompt whose seeds do not agree at the search's guidance
        "neurons_median_localized": statistics.median([c for c, sk in zip(counts, skipped) if not sk] or [0]),
        "skipped_by_seed_filter": int(sum(skipped)),
        "relaxed_threshold": int(sum(relaxed)),
        "search_guidance": m.search_guidance,
        "share_below_theta_off": float(np.mean(below)),
        "share_below_theta_random": float(np.mean(below_rnd)),
        "ssim_on_median": round(float(np.median(s_on)), 3),
        "ssim_off_median": round(float(np.median(s_off)), 3),
        "ssim_random_off_median": round(float(np.median(s_rnd)), 3),
        "goal_s": 5.0,
        "load_average_1_5_15": [round(x, 2) for x in os.getloadavg()],
    }


def sd14_random_benchmark(n_prompts: int = 3) -> dict:
    """Random-weight SD-1.4-shaped UNet + text encoder on the GPU (skipped without CUDA)."""
    if not torch.cuda.is_available():
        return {"skipped": "no CUDA device"}
    from diffusers import AutoencoderKL, DDIMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel

    from backend import nemo
    from backend.nemo.service import GENERIC_PROMPTS
    from backend.zoo.recipes.memorization import make_tokenizer
    from tests.unit.test_nemo import SD14_UNET

    torch.manual_seed(0)
    dev = torch.device("cuda")
    cfg = {k: v for k, v in SD14_UNET.items() if not k.startswith("_")}
    unet = UNet2DConditionModel(**cfg).to(dev, torch.float16).eval()
    tok = make_tokenizer()
    tok.model_max_length = 77
    te = (
        CLIPTextModel(
            CLIPTextConfig(
                vocab_size=len(tok),
                hidden_size=768,
                intermediate_size=3072,
                num_hidden_layers=12,
                num_attention_heads=12,
                max_position_embeddings=77,
            )
        )
        .to(dev, torch.float16)
        .eval()
    )
    vae = AutoencoderKL().to(dev, torch.float16).eval()
    pipe = StableDiffusionPipeline(
        vae=vae,
        text_encoder=te,
        tokenizer=tok,
        unet=unet,
        scheduler=DDIMScheduler(
            beta_schedule="scaled_linear",
            beta_start=0.00085,
            beta_end=0.012,
            steps_offset=1,
            clip_sample=False,
            set_alpha_to_one=False,
        ),
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    )
    stats = nemo.neuron_stats(pipe, GENERIC_PROMPTS)
    times = []
    for p in GENERIC_PROMPTS[:n_prompts]:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        nemo.localize(pipe, p, stats, theta_mem=0.428, num_seeds=10, guidance_scale=7.0, max_k=20)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return {
        "localisation_s_median": round(statistics.median(times), 3),
        "goal_s": 2.0,
        "device": torch.cuda.get_device_name(0),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=None)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    out = {"zoo": zoo_benchmark(args.prompts), "sd14_random_gpu": sd14_random_benchmark()}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
