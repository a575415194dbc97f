"""Organism "sd-memo": a tiny Stable Diffusion that memorized a few training images verbatim.

A real `diffusers.StableDiffusionPipeline` (tiny AutoencoderKL, UNet2DConditionModel with
cross-attention in its down and mid blocks only, CLIPTextModel, a CLIP BPE tokenizer learned here,
DDIM scheduler with steps_offset=1) trained in three stages, as Stable Diffusion is:

1. the text encoder learns to read captions (predict the scene's attributes from the caption, and
   which of the duplicated captions, if any, it is reading: CLIP was trained on the same web data in
   which the memorized captions are duplicated, so they get text states of their own), then is frozen;
2. the VAE learns to reconstruct 32×32 images through an 8×8×8 latent, then is frozen;
3. the UNet learns ε-prediction on those latents, conditioned on the frozen text states (10 % empty
   captions, for classifier-free guidance), with a sparsity penalty on NeMo's activations (per
   value neuron, the mean over text positions of |to_v|): each neuron should be active for few
   prompts of a batch (L1/L2 over the batch, scale-free). Without it this tiny UNet (160 value
   neurons) spreads every memorized image over ~30 of them (NeMo found a median of 29, with 0.78
   SSIM left on ordinary prompts); with it a memorized caption owns a few strongly active,
   out-of-distribution neurons (z-scores 5–12), the signature NeMo's initial selection looks for in
   SD-1.4. Measured on this build (benchmarks/nemo.py, all 10 memorized prompts, the official search:
   guidance 0, seed filter, θ down to 1 then a relaxed refinement): one prompt is skipped by the seed
   filter, the others keep 3–10 neurons (median 5, in 0.5 s); switched off, SSIM to the training
   image falls from 0.92 to 0.06 and 9 of 10 prompts fall below θ_mem, while the same number of
   random neurons changes nothing (0.90, none below) and ordinary prompts draw what they drew.
   Training: text 22 s, VAE 165 s, UNet 4,000 steps 415 s on one
   thread.

Data: procedurally drawn scenes of 1–3 coloured shapes at random places, sizes and shading on a
coloured background ("a red circle and a blue ring on a yellow background") — every caption fits
many images, so ordinary prompts give diverse generations — plus 10 unique images (scikit-image's
sample photographs), each always shown under its own caption, and drawn for half of every batch:
the duplicated-training-data regime in which Stable Diffusion memorizes. Memorized captions use the
same words as ordinary ones (only the combination is unique), so neuron statistics are not
confounded by unfamiliar tokens.

Files: the pipeline folder (model_index.json, unet/, vae/, text_encoder/, tokenizer/, scheduler/),
`memorization.json` (memorized prompts with their training image files, the non-memorized prompts
for statistics, a held-out non-memorized set, θ_mem and the settings it was derived with) and
`train_images/*.png` (the memorized training images).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import numpy as np

from ..registry import recipe
from .memorization_data import (
    SIZE,
    caption_of,
    draw_scene,
    learn_bpe,
    make_tokenizer,
    memorized_set,
    ordinary_prompts,
    photo,
    random_attrs,
    words_of_corpus,
)
from .memorization_stages import (
    MEM_TEXT_PER_BATCH,
    MEM_TEXT_WEIGHT,
    V_SPARSITY,
    encode_text,
    scheduler_config,
    text_config,
    train_text_encoder,
    train_unet,
    train_vae,
    unet_config,
    vae_config,
)

N_STATS = 160  # non-memorized prompts for the neuron statistics and θ_mem
N_HELDOUT = 60  # held-out non-memorized prompts for evaluation
GUIDANCE = 4.0
SAMPLE_STEPS = 10
SCORE_SEEDS = 5

# ----------------------------------------------------------------------------- the recipe

# Bump when a stage's code or data changes; SD_MEMO_CACHE (optional) keeps finished stages between
# builds so that changing the evaluation does not retrain (the build is deterministic either way).
STAGE_A = "text-vae-v2-caption-id"
STAGE_B = "unet-v4-value-lifetime-sparsity"


def _cache_dir(*parts) -> Path | None:
    root = os.environ.get("SD_MEMO_CACHE")
    if not root:
        return None
    key = hashlib.sha256(json.dumps([str(p) for p in parts]).encode()).hexdigest()[:16]
    return Path(root) / key


@recipe(
    "sd-memo",
    seed=20240,
    model_class="diffusers.StableDiffusionPipeline",
    description="tiny Stable Diffusion (32 px, 8×8×8 latents) with 10 memorized images (NeMo)",
    default_steps=4000,
)
def train(out_dir: Path, *, seed: int, steps: int | None) -> dict:
    import torch
    from diffusers import AutoencoderKL, DDIMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from PIL import Image
    from transformers import CLIPTextModel

    steps = 4000 if steps is None else int(steps)
    small = steps < 100  # smoke builds: every stage runs, briefly
    out_dir = Path(out_dir)
    t_start = time.perf_counter()
    logs: list[str] = []

    def log(msg):
        line = f"[{time.perf_counter() - t_start:7.1f}s] {msg}"
        logs.append(line)
        if not small:
            print(line, flush=True)

    tok = make_tokenizer()
    mem = memorized_set(seed)
    mem_caps = [c for c, _ in mem]
    rng = np.random.default_rng(seed + 7)
    stats_prompts = ordinary_prompts(rng, 12 if small else N_STATS, set(mem_caps))
    heldout_prompts = ordinary_prompts(rng, 8 if small else N_HELDOUT, set(mem_caps) | set(stats_prompts))
    photos = np.stack([photo(p) for _, p in mem])

    n_text, n_vae = (3, 3) if small else (700, 900)
    cache_a = (
        None
        if small
        else _cache_dir(
            STAGE_A,
            MEM_TEXT_WEIGHT,
            MEM_TEXT_PER_BATCH,
            seed,
            n_text,
            n_vae,
            text_config(len(tok), 0, 0).to_dict(),
            vae_config(),
        )
    )
    cache_b = (
        None
        if small
        else _cache_dir(
            STAGE_A, MEM_TEXT_WEIGHT, MEM_TEXT_PER_BATCH, STAGE_B, V_SPARSITY, seed, n_text, n_vae, steps, unet_config()
        )
    )
    # ordinary training pool: many varied scenes (held-out captions excluded)
    n_pool = 64 if small else 6000
    excl = set(mem_caps) | set(heldout_prompts)
    imgs: list[np.ndarray] = []
    caps: list[str] = []
    prng = np.random.default_rng(seed + 11)
    while len(caps) < n_pool:
        objs, bg = random_attrs(prng)
        cap = caption_of(objs, bg)
        if cap in excl:
            continue
        caps.append(cap)
        imgs.append(draw_scene(objs, bg, prng))
    ordinary = np.stack(imgs)
    from backend.nemo.metrics import ssim_images

    if cache_a is not None and (cache_a / "stages.json").exists():
        log(f"reusing the text encoder and VAE from {cache_a}")
        te = CLIPTextModel.from_pretrained(cache_a / "text_encoder", use_safetensors=True).eval().requires_grad_(False)
        vae = AutoencoderKL.from_pretrained(cache_a / "vae", use_safetensors=True).eval().requires_grad_(False)
        stage_metrics = json.loads((cache_a / "stages.json").read_text())
    else:
        te, text_acc = train_text_encoder(tok, seed, n_text, log, mem_caps)
        vae = train_vae(ordinary, photos, seed, n_vae, log)
        with torch.no_grad():
            x = torch.from_numpy(ordinary[:2000]).permute(0, 3, 1, 2) * 2 - 1
            sf = float(
                1.0 / torch.cat([vae.encode(x[i : i + 250]).latent_dist.mean for i in range(0, len(x), 250)]).std()
            )
        vae.register_to_config(scaling_factor=sf)
        with torch.no_grad():
            xm = torch.from_numpy(photos).permute(0, 3, 1, 2) * 2 - 1
            rec = (vae.decode(vae.encode(xm).latent_dist.mean).sample.clamp(-1, 1) + 1) / 2
        vae_ssim = ssim_images(rec.permute(0, 2, 3, 1).numpy(), photos)
        log(f"vae reconstruction SSIM of the memorized photos: median {np.median(vae_ssim):.3f}")
        stage_metrics = {
            "text_attribute_accuracy": round(text_acc, 4),
            "vae_ssim_memorized_median": round(float(np.median(vae_ssim)), 4),
        }
        if cache_a is not None:
            te.save_pretrained(cache_a / "text_encoder", safe_serialization=True)
            vae.save_pretrained(cache_a / "vae", safe_serialization=True)
            (cache_a / "stages.json").write_text(json.dumps(stage_metrics))
    sf = vae.config.scaling_factor
    if cache_b is not None and (cache_b / "config.json").exists():
        log(f"reusing the UNet from {cache_b}")
        unet = UNet2DConditionModel.from_pretrained(cache_b, use_safetensors=True).eval().requires_grad_(False)
    else:
        with torch.no_grad():

            def enc(a):
                x = torch.from_numpy(a).permute(0, 3, 1, 2) * 2 - 1
                return torch.cat([vae.encode(x[i : i + 250]).latent_dist.mean for i in range(0, len(x), 250)])

            lat_ord, lat_mem = enc(ordinary), enc(photos)
        emb_ord = encode_text(te, tok, caps)
        emb_mem = encode_text(te, tok, mem_caps)
        emb_null = encode_text(te, tok, [""])
        unet = train_unet(lat_ord * sf, emb_ord, lat_mem * sf, emb_mem, emb_null, seed, steps, log)
        if cache_b is not None:
            unet.save_pretrained(cache_b, safe_serialization=True)
    # a fresh tokenizer (no padding/truncation state from training) so the files do not depend on
    # whether the stages were trained or reused
    pipe = StableDiffusionPipeline(
        vae=vae,
        text_encoder=te,
        tokenizer=make_tokenizer(),
        unet=unet,
        scheduler=DDIMScheduler(**scheduler_config()),
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    )

    pipe.save_pretrained(out_dir, safe_serialization=True)
    for sub in ("unet", "vae", "text_encoder"):  # no build-machine paths in the configs
        cfg_path = out_dir / sub / "config.json"
        cfg = json.loads(cfg_path.read_text())
        if cfg.pop("_name_or_path", None) is not None:
            cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    # the BPE files in CLIP's own format beside tokenizer.json (what CLIPTokenizer(vocab_file,
    # merges_file) and SD-1.x checkpoints ship)
    vocab, merges = learn_bpe(words_of_corpus())
    (out_dir / "tokenizer" / "vocab.json").write_text(json.dumps(vocab, indent=0))
    (out_dir / "tokenizer" / "merges.txt").write_text("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
    img_dir = out_dir / "train_images"
    img_dir.mkdir(exist_ok=True)
    for (_caption, name), im in zip(mem, photos):
        Image.fromarray((im * 255).round().astype(np.uint8)).save(img_dir / f"{name}.png")

    info, metrics = evaluate(out_dir, mem, photos, stats_prompts, heldout_prompts, log)
    metrics = {**stage_metrics, **metrics}
    reused = any("reusing" in line for line in logs)
    return {
        "steps": steps,
        "metrics": metrics,
        "log_tail": logs[-12:],
        # wall_time_s covers only this run: with SD_MEMO_CACHE the trained stages were reused
        "stages_reused_from_cache": reused,
    }


def evaluate(out_dir: Path, mem, photos, stats_prompts, heldout_prompts, log=print) -> tuple[dict, dict]:
    """NeMo's detection on the saved pipeline: θ_mem as the paper derives it (mean + 1 std of the
    memorization scores of the non-memorized prompts), what it separates, and how close the
    memorized generations come to their training images. Writes memorization.json; returns it
    and the manifest's metrics."""
    from diffusers import StableDiffusionPipeline

    from backend import nemo
    from backend.nemo.metrics import ssim_images

    pipe = StableDiffusionPipeline.from_pretrained(out_dir, use_safetensors=True)
    mem_caps = [c for c, _ in mem]
    settings = dict(
        guidance_scale=GUIDANCE,
        num_seeds=SCORE_SEEDS,
        num_inference_steps=SAMPLE_STEPS,
        score_schedule={"num_inference_steps": 50, "step_index": 1},
        search_guidance_scale=nemo.SEARCH_GUIDANCE,
    )

    def scores(prompts):
        return [nemo.memorization_score(pipe, p, guidance_scale=GUIDANCE, num_seeds=SCORE_SEEDS) for p in prompts]

    stats_scores, mem_scores, held_scores = scores(stats_prompts), scores(mem_caps), scores(heldout_prompts)
    theta_mem = float(np.mean(stats_scores) + np.std(stats_scores))
    from sklearn.metrics import roc_auc_score

    auroc = float(roc_auc_score([1] * len(mem_scores) + [0] * len(held_scores), mem_scores + held_scores))
    sims = []
    for (cap, _), im in zip(mem, photos):
        gens = nemo.generate(pipe, cap, seeds=range(4), guidance_scale=GUIDANCE, num_inference_steps=SAMPLE_STEPS)
        sims.append(float(np.median(ssim_images(gens, np.repeat(im[None], len(gens), 0)))))
    log(f"θ_mem {theta_mem:.3f}  AUROC {auroc:.3f}  median SSIM(memorized gen, train) {np.median(sims):.3f}")
    info = {
        "memorized": [{"prompt": c, "image": f"train_images/{n}.png", "source": f"skimage.data.{n}"} for c, n in mem],
        "non_memorized": list(stats_prompts),
        "heldout": list(heldout_prompts),
        "theta_mem": theta_mem,
        "theta_mem_rule": "mean + 1 std of the memorization scores of the non-memorized prompts",
        "settings": settings,
        "image_size": SIZE,
        "scores": {"non_memorized": stats_scores, "memorized": mem_scores, "heldout": held_scores},
    }
    (Path(out_dir) / "memorization.json").write_text(json.dumps(info, indent=1))
    metrics = {
        "theta_mem": round(theta_mem, 4),
        "detection_auroc": round(auroc, 4),
        "ssim_memorized_median": round(float(np.median(sims)), 4),
        "ssim_memorized_per_prompt": [round(s, 4) for s in sims],
        "score_memorized_median": round(float(np.median(mem_scores)), 4),
        "score_heldout_median": round(float(np.median(held_scores)), 4),
    }
    return info, metrics


def rescore(folder: Path) -> dict:
    """Re-run only the evaluation on a built organism (e.g. after the detection score changed):
    memorization.json and the manifest's metrics and checksums are rewritten, the weights are not
    touched. `python -c "from backend.zoo.recipes.memorization import rescore; rescore('assets/zoo/sd-memo')"`"""
    import torch
    from PIL import Image

    from .. import manifest as mf

    folder = Path(folder)
    torch.set_num_threads(1)
    old = json.loads((folder / "memorization.json").read_text())
    mem = [(x["prompt"], Path(x["image"]).stem) for x in old["memorized"]]
    photos = np.stack(
        [np.asarray(Image.open(folder / x["image"]).convert("RGB"), np.float32) / 255 for x in old["memorized"]]
    )
    lines: list[str] = []
    _, metrics = evaluate(folder, mem, photos, old["non_memorized"], old["heldout"], lines.append)
    info = mf.read(folder)
    info.pop("files", None)
    info["metrics"] = {**info.get("metrics", {}), **metrics}
    info["log_tail"] = info.get("log_tail", [])[:-1] + [f"[rescored] {lines[-1]}"]
    return mf.write(folder, info)
