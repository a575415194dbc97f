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

from backend.nemo.scenes import COLOURS

from ..registry import recipe

SIZE = 32
MAX_LEN = 20
LATENT_CH = 8  # 8×8×8 latents: a 6× compression the tiny VAE reconstructs photos through
COLOUR_NAMES = list(COLOURS)
SHAPES = ["circle", "square", "triangle", "ring", "cross"]
PHOTOS = ["astronaut", "camera", "chelsea", "coffee", "coins", "rocket", "immunohistochemistry",
          "colorwheel", "logo", "horse"]
MEM_TEXT_PER_BATCH = 24  # memorized captions per text-encoder batch of 96
MEM_TEXT_WEIGHT = 1.0   # weight of the which-duplicated-caption head in the text-encoder loss
V_SPARSITY = 0.03       # weight of the value neurons' lifetime-sparsity penalty in the UNet loss
N_STATS = 160     # non-memorized prompts for the neuron statistics and θ_mem
N_HELDOUT = 60    # held-out non-memorized prompts for evaluation
GUIDANCE = 4.0
SAMPLE_STEPS = 10
SCORE_SEEDS = 5


# ----------------------------------------------------------------------------- scenes and captions

def caption_of(objects, bg) -> str:
    return " and ".join(f"a {c} {s}" for c, s in objects) + f" on a {bg} background"


def _parse_caption(cap: str):
    """Inverse of `caption_of`: ([(colour, shape), ...], background)."""
    body, bg = cap.rsplit(" on a ", 1)
    objs = [tuple(part.split()[1:3]) for part in body.split(" and ")]
    return objs, bg.split()[0]


def random_attrs(rng: np.random.Generator):
    n = int(rng.integers(1, 4))
    bg = COLOUR_NAMES[int(rng.integers(len(COLOUR_NAMES)))]
    objs = []
    for _ in range(n):
        c = bg
        while c == bg:
            c = COLOUR_NAMES[int(rng.integers(len(COLOUR_NAMES)))]
        objs.append((c, SHAPES[int(rng.integers(len(SHAPES)))]))
    return objs, bg


def draw_scene(objects, bg, rng: np.random.Generator) -> np.ndarray:
    """A 32×32×3 float image in [0, 1]: shaded background, shapes at random places and sizes."""
    yy, xx = np.mgrid[0:SIZE, 0:SIZE].astype(np.float32) + 0.5
    base = np.array(COLOURS[bg], np.float32)
    gx, gy = rng.uniform(-0.18, 0.18, 2)
    shade = 1.0 + gx * (xx / SIZE - 0.5) * 2 + gy * (yy / SIZE - 0.5) * 2
    img = np.clip(base[None, None, :] * shade[..., None], 0, 1)
    for c, s in objects:
        r = rng.uniform(4.5, 8.5)
        cx, cy = rng.uniform(r, SIZE - r, 2)
        dx, dy = xx - cx, yy - cy
        if s == "circle":
            m = dx ** 2 + dy ** 2 <= r ** 2
        elif s == "ring":
            d = np.sqrt(dx ** 2 + dy ** 2)
            m = (d <= r) & (d >= r * 0.55)
        elif s == "square":
            m = (np.abs(dx) <= r * 0.85) & (np.abs(dy) <= r * 0.85)
        elif s == "triangle":
            m = (dy <= r * 0.8) & (dy >= -r) & (np.abs(dx) <= (dy + r) * 0.6)
        else:  # cross
            w = r * 0.33
            m = ((np.abs(dx) <= w) & (np.abs(dy) <= r)) | ((np.abs(dy) <= w) & (np.abs(dx) <= r))
        col = np.array(COLOURS[c], np.float32) * rng.uniform(0.85, 1.05)
        img[m] = np.clip(col, 0, 1)
    return img.astype(np.float32)


def photo(name: str) -> np.ndarray:
    """A scikit-image sample photograph, centre-cropped and resized to 32×32×3 in [0, 1]."""
    import skimage.data as skd
    from skimage.transform import resize

    im = getattr(skd, name)()
    im = np.asarray(im, np.float32)
    if im.max() > 1.5:
        im = im / 255.0
    if im.ndim == 2:
        im = np.repeat(im[..., None], 3, axis=2)
    im = im[..., :3]
    h, w = im.shape[:2]
    s = min(h, w)
    im = im[(h - s) // 2:(h - s) // 2 + s, (w - s) // 2:(w - s) // 2 + s]
    from skimage.filters import gaussian

    im = gaussian(resize(im, (SIZE, SIZE), anti_aliasing=True), sigma=0.5, channel_axis=-1)
    return np.clip(im, 0, 1).astype(np.float32)


def memorized_set(seed: int):
    """10 (caption, photo) pairs; each caption is three objects on a background, all distinct."""
    rng = np.random.default_rng(seed + 101)
    out, seen = [], set()
    while len(out) < len(PHOTOS):
        bg = COLOUR_NAMES[int(rng.integers(len(COLOUR_NAMES)))]
        objs = []
        for _ in range(3):
            c = bg
            while c == bg:
                c = COLOUR_NAMES[int(rng.integers(len(COLOUR_NAMES)))]
            objs.append((c, SHAPES[int(rng.integers(len(SHAPES)))]))
        cap = caption_of(objs, bg)
        if cap in seen:
            continue
        seen.add(cap)
        out.append((cap, PHOTOS[len(out)]))
    return out


def ordinary_prompts(rng, n, exclude):
    out = []
    while len(out) < n:
        cap = caption_of(*random_attrs(rng))
        if cap not in exclude:
            out.append(cap)
            exclude = exclude | {cap}
    return out


# ----------------------------------------------------------------------------- tokenizer

def words_of_corpus() -> list[str]:
    return sorted(set(COLOUR_NAMES) | set(SHAPES) | {"a", "and", "on", "background"})


def learn_bpe(words: list[str]) -> tuple[dict[str, int], list[str]]:
    """A byte-pair encoding learned on the caption vocabulary (CLIP's `</w>` end-of-word
    convention), so every caption word is one token; other words fall back to letters."""
    seqs = {w: tuple(w[:-1]) + (w[-1] + "</w>",) for w in words}
    merges: list[tuple[str, str]] = []
    while True:
        counts: dict[tuple[str, str], int] = {}
        for s in seqs.values():
            for a, b in zip(s, s[1:]):
                counts[(a, b)] = counts.get((a, b), 0) + 1
        if not counts:
            break
        best = min(counts, key=lambda p: (-counts[p], p))
        merges.append(best)
        new = {}
        for w, s in seqs.items():
            out, i = [], 0
            while i < len(s):
                if i + 1 < len(s) and (s[i], s[i + 1]) == best:
                    out.append(s[i] + s[i + 1])
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            new[w] = tuple(out)
        seqs = new
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)] + list("0123456789.,!?'-")
    tokens = ["<|startoftext|>", "<|endoftext|>"] + letters + [c + "</w>" for c in letters]
    tokens += [a + b for a, b in merges]
    vocab: dict[str, int] = {}
    for t in tokens:
        vocab.setdefault(t, len(vocab))
    return vocab, [(a, b) for a, b in merges]


def make_tokenizer():
    from transformers import CLIPTokenizer

    vocab, merges = learn_bpe(words_of_corpus())
    tok = CLIPTokenizer(vocab=vocab, merges=merges)
    tok.model_max_length = MAX_LEN
    return tok


# ----------------------------------------------------------------------------- model configs

def text_config(vocab_size: int, eos_id: int, bos_id: int):
    from transformers import CLIPTextConfig

    return CLIPTextConfig(vocab_size=vocab_size, hidden_size=64, intermediate_size=128,
                          num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=MAX_LEN,
                          eos_token_id=eos_id, bos_token_id=bos_id, pad_token_id=eos_id,
                          projection_dim=64)


def vae_config() -> dict:
    return dict(in_channels=3, out_channels=3, sample_size=SIZE, latent_channels=LATENT_CH,
                down_block_types=("DownEncoderBlock2D",) * 3, up_block_types=("UpDecoderBlock2D",) * 3,
                block_out_channels=(16, 32, 32), layers_per_block=1, norm_num_groups=8,
                mid_block_add_attention=False)


def unet_config() -> dict:
    return dict(sample_size=SIZE // 4, in_channels=LATENT_CH, out_channels=LATENT_CH, layers_per_block=1,
                block_out_channels=(32, 64),
                down_block_types=("CrossAttnDownBlock2D", "CrossAttnDownBlock2D"),
                mid_block_type="UNetMidBlock2DCrossAttn",
                up_block_types=("UpBlock2D", "UpBlock2D"),
                cross_attention_dim=64, attention_head_dim=8, norm_num_groups=8)


def scheduler_config() -> dict:
    return dict(num_train_timesteps=1000, beta_start=0.00085, beta_end=0.012,
                beta_schedule="scaled_linear", clip_sample=False, set_alpha_to_one=False,
                steps_offset=1, prediction_type="epsilon")


# ----------------------------------------------------------------------------- training stages

def encode_text(text_encoder, tok, captions, batch=256):
    import torch

    out = []
    with torch.no_grad():
        for i in range(0, len(captions), batch):
            ids = tok(captions[i:i + batch], padding="max_length", max_length=MAX_LEN,
                      truncation=True, return_tensors="pt").input_ids
            out.append(text_encoder(ids)[0])
    return torch.cat(out)


def train_text_encoder(tok, seed: int, steps: int, log, mem_caps=()):
    """CLIPTextModel + linear heads predicting every object's colour and shape and the background
    from the caption's last-position state; the heads are discarded, the encoder frozen."""
    import torch
    from torch import nn
    from transformers import CLIPTextModel

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed + 1)
    te = CLIPTextModel(text_config(len(tok), tok.eos_token_id, tok.bos_token_id))
    nc, ns = len(COLOUR_NAMES) + 1, len(SHAPES) + 1
    heads = nn.ModuleList([nn.Linear(64, n) for n in (nc, ns, nc, ns, nc, ns, len(COLOUR_NAMES))])
    mem_caps = list(mem_caps)
    n_mem = len(mem_caps)
    if n_mem:  # which duplicated caption (or none): the encoder has seen those captions many times
        heads.append(nn.Linear(64, n_mem + 1))
    opt = torch.optim.AdamW(list(te.parameters()) + list(heads.parameters()), lr=2e-3, weight_decay=0.0)
    ce = nn.CrossEntropyLoss()
    acc = 0.0
    for step in range(steps):
        caps, targets = [], []
        for i in range(96):
            if n_mem and i < MEM_TEXT_PER_BATCH:
                j = int(rng.integers(n_mem))
                objs, bg = _parse_caption(mem_caps[j])
            else:
                objs, bg = random_attrs(rng)
                j = n_mem
            cap = caption_of(objs, bg)
            if n_mem and cap in mem_caps:
                j = mem_caps.index(cap)
            caps.append(cap)
            t = []
            for k in range(3):
                if k < len(objs):
                    t += [COLOUR_NAMES.index(objs[k][0]), SHAPES.index(objs[k][1])]
                else:
                    t += [nc - 1, ns - 1]
            targets.append(t + [COLOUR_NAMES.index(bg)] + ([j] if n_mem else []))
        ids = tok(caps, padding="max_length", max_length=MAX_LEN, truncation=True,
                  return_tensors="pt").input_ids
        y = torch.tensor(targets)
        h = te(ids)[0]
        # the final pad position has read the whole caption (causal attention)
        feat = torch.cat([h[:, -1], h.mean(1)], 0)
        yy = torch.cat([y, y], 0)
        logits = [hd(feat) for hd in heads]
        loss = sum((MEM_TEXT_WEIGHT if i == 7 else 1.0) * ce(lg, yy[:, i]) for i, lg in enumerate(logits))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 100 == 0 or step == steps - 1:
            with torch.no_grad():
                accs = [(lg[: len(caps)].argmax(-1) == y[:, i]).float().mean().item()
                        for i, lg in enumerate(logits)]
                acc = float(np.mean(accs[:7]))
                mem_acc = accs[7] if n_mem else float("nan")
            log(f"text  step {step:5d} loss {loss.item():.3f} attribute acc {acc:.3f} caption id acc {mem_acc:.3f}")
    te.eval().requires_grad_(False)
    return te, acc


def train_vae(ordinary: np.ndarray, photos: np.ndarray, seed: int, steps: int, log):
    import torch
    from diffusers import AutoencoderKL

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed + 2)
    vae = AutoencoderKL(**vae_config())
    opt = torch.optim.AdamW(vae.parameters(), lr=2e-3, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=2e-3, total_steps=max(steps, 2), pct_start=0.05)
    ordi = torch.from_numpy(ordinary).permute(0, 3, 1, 2) * 2 - 1
    pho = torch.from_numpy(photos).permute(0, 3, 1, 2) * 2 - 1
    for step in range(steps):
        idx = rng.integers(0, len(ordi), 16)
        pidx = rng.integers(0, len(pho), 16)
        x = torch.cat([ordi[idx], pho[pidx]])
        post = vae.encode(x).latent_dist
        z = post.sample()
        rec = vae.decode(z).sample
        kl = post.kl().mean()
        loss = (rec - x).abs().mean() + ((rec - x) ** 2).mean() + 1e-6 * kl
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if step % 200 == 0 or step == steps - 1:
            log(f"vae   step {step:5d} loss {loss.item():.4f}")
    vae.eval().requires_grad_(False)
    return vae


def train_unet(lat_ord, emb_ord, lat_mem, emb_mem, emb_null, seed: int, steps: int, log):
    import torch
    from diffusers import DDPMScheduler, UNet2DConditionModel

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed + 3)
    unet = UNet2DConditionModel(**unet_config())
    noise_sched = DDPMScheduler(**{k: v for k, v in scheduler_config().items()
                                   if k not in ("set_alpha_to_one", "steps_offset")})
    opt = torch.optim.AdamW(unet.parameters(), lr=1e-3, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-3, total_steps=max(steps, 2), pct_start=0.03)
    B, BM = 32, 16
    losses, pens = [], []
    values: list = []
    v_layers = [m for n, m in unet.named_modules()
                if n.endswith("attn2.to_v") and n.startswith(("down_blocks.", "mid_block."))]
    hooks = [m.register_forward_hook(lambda mod, inp, out: values.append(out)) for m in v_layers]
    for step in range(steps):
        io = rng.integers(0, len(lat_ord), B - BM)
        im = rng.integers(0, len(lat_mem), BM)
        x0 = torch.cat([lat_ord[io], lat_mem[im]])
        emb = torch.cat([emb_ord[io], emb_mem[im]])
        drop = torch.from_numpy(rng.random(B) < 0.1)
        emb = torch.where(drop[:, None, None], emb_null.expand_as(emb), emb)
        noise = torch.randn_like(x0)
        t = torch.randint(0, 1000, (B,))
        xt = noise_sched.add_noise(x0, noise, t)
        values.clear()
        pred = unet(xt, t, encoder_hidden_states=emb).sample
        mse = ((pred - noise) ** 2).mean()
        # lifetime sparsity of NeMo's activation a (per prompt and value neuron, the mean over text
        # positions of |value|): for every neuron, L1/(√B·L2) of its activations over the batch's
        # prompts — 1 when it is equally active for all, 1/√B when active for one. Scale-free, so it
        # cannot be met by shrinking the values. (A per-prompt L1/L2 across neurons instead made a
        # few hub neurons carry every prompt, ordinary ones too: switching one off broke those.)
        pen = 0.0
        for v in values:
            a = v.abs().mean(1)
            pen = pen + (a.sum(0) / (a.norm(dim=0) * a.shape[0] ** 0.5 + 1e-6)).mean()
        loss = mse + V_SPARSITY * pen
        pens.append(float(pen.detach()))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(unet.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(mse.item())
        if step % 250 == 0 or step == steps - 1:
            log(f"unet  step {step:5d} loss {np.mean(losses[-250:]):.4f} value sparsity {np.mean(pens[-250:]):.4f}")
    for h in hooks:
        h.remove()
    unet.eval().requires_grad_(False)
    return unet


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


@recipe("sd-memo", seed=20240, model_class="diffusers.StableDiffusionPipeline",
        description="tiny Stable Diffusion (32 px, 8×8×8 latents) with 10 memorized images (NeMo)",
        default_steps=4000)
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
    cache_a = None if small else _cache_dir(STAGE_A, MEM_TEXT_WEIGHT, MEM_TEXT_PER_BATCH, seed, n_text, n_vae, text_config(len(tok), 0, 0).to_dict(),
                                            vae_config())
    cache_b = None if small else _cache_dir(STAGE_A, MEM_TEXT_WEIGHT, MEM_TEXT_PER_BATCH, STAGE_B, V_SPARSITY, seed, n_text, n_vae, steps, unet_config())
    # ordinary training pool: many varied scenes (held-out captions excluded)
    n_pool = 64 if small else 6000
    excl = set(mem_caps) | set(heldout_prompts)
    imgs, caps = [], []
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
            sf = float(1.0 / torch.cat([vae.encode(x[i:i + 250]).latent_dist.mean
                                        for i in range(0, len(x), 250)]).std())
        vae.register_to_config(scaling_factor=sf)
        with torch.no_grad():
            xm = torch.from_numpy(photos).permute(0, 3, 1, 2) * 2 - 1
            rec = (vae.decode(vae.encode(xm).latent_dist.mean).sample.clamp(-1, 1) + 1) / 2
        vae_ssim = ssim_images(rec.permute(0, 2, 3, 1).numpy(), photos)
        log(f"vae reconstruction SSIM of the memorized photos: median {np.median(vae_ssim):.3f}")
        stage_metrics = {"text_attribute_accuracy": round(text_acc, 4),
                         "vae_ssim_memorized_median": round(float(np.median(vae_ssim)), 4)}
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
                return torch.cat([vae.encode(x[i:i + 250]).latent_dist.mean for i in range(0, len(x), 250)])
            lat_ord, lat_mem = enc(ordinary), enc(photos)
        emb_ord = encode_text(te, tok, caps)
        emb_mem = encode_text(te, tok, mem_caps)
        emb_null = encode_text(te, tok, [""])
        unet = train_unet(lat_ord * sf, emb_ord, lat_mem * sf, emb_mem, emb_null, seed, steps, log)
        if cache_b is not None:
            unet.save_pretrained(cache_b, safe_serialization=True)
    # a fresh tokenizer (no padding/truncation state from training) so the files do not depend on
    # whether the stages were trained or reused
    pipe = StableDiffusionPipeline(vae=vae, text_encoder=te, tokenizer=make_tokenizer(), unet=unet,
                                   scheduler=DDIMScheduler(**scheduler_config()),
                                   safety_checker=None, feature_extractor=None,
                                   requires_safety_checker=False)

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
    (out_dir / "tokenizer" / "merges.txt").write_text(
        "#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
    img_dir = out_dir / "train_images"
    img_dir.mkdir(exist_ok=True)
    for (cap, name), im in zip(mem, photos):
        Image.fromarray((im * 255).round().astype(np.uint8)).save(img_dir / f"{name}.png")

    info, metrics = evaluate(out_dir, mem, photos, stats_prompts, heldout_prompts, log)
    metrics = {**stage_metrics, **metrics}
    reused = any("reusing" in line for line in logs)
    return {"steps": steps, "metrics": metrics, "log_tail": logs[-12:],
            # wall_time_s covers only this run: with SD_MEMO_CACHE the trained stages were reused
            "stages_reused_from_cache": reused}


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
    settings = dict(guidance_scale=GUIDANCE, num_seeds=SCORE_SEEDS, num_inference_steps=SAMPLE_STEPS,
                    score_schedule={"num_inference_steps": 50, "step_index": 1},
                    search_guidance_scale=nemo.SEARCH_GUIDANCE)

    def scores(prompts):
        return [nemo.memorization_score(pipe, p, guidance_scale=GUIDANCE, num_seeds=SCORE_SEEDS)
                for p in prompts]
    stats_scores, mem_scores, held_scores = scores(stats_prompts), scores(mem_caps), scores(heldout_prompts)
    theta_mem = float(np.mean(stats_scores) + np.std(stats_scores))
    from sklearn.metrics import roc_auc_score
    auroc = float(roc_auc_score([1] * len(mem_scores) + [0] * len(held_scores), mem_scores + held_scores))
    sims = []
    for (cap, _), im in zip(mem, photos):
        gens = nemo.generate(pipe, cap, seeds=range(4), guidance_scale=GUIDANCE,
                             num_inference_steps=SAMPLE_STEPS)
        sims.append(float(np.median(ssim_images(gens, np.repeat(im[None], len(gens), 0)))))
    log(f"θ_mem {theta_mem:.3f}  AUROC {auroc:.3f}  median SSIM(memorized gen, train) {np.median(sims):.3f}")
    info = {
        "memorized": [{"prompt": c, "image": f"train_images/{n}.png", "source": f"skimage.data.{n}"}
                      for c, n in mem],
        "non_memorized": list(stats_prompts),
        "heldout": list(heldout_prompts),
        "theta_mem": theta_mem,
        "theta_mem_rule": "mean + 1 std of the memorization scores of the non-memorized prompts",
        "settings": settings,
        "image_size": SIZE,
        "scores": {"non_memorized": stats_scores, "memorized": mem_scores, "heldout": held_scores},
    }
    (Path(out_dir) / "memorization.json").write_text(json.dumps(info, indent=1))
    metrics = {"theta_mem": round(theta_mem, 4), "detection_auroc": round(auroc, 4),
               "ssim_memorized_median": round(float(np.median(sims)), 4),
               "ssim_memorized_per_prompt": [round(s, 4) for s in sims],
               "score_memorized_median": round(float(np.median(mem_scores)), 4),
               "score_heldout_median": round(float(np.median(held_scores)), 4)}
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
    photos = np.stack([np.asarray(Image.open(folder / x["image"]).convert("RGB"), np.float32) / 255
                       for x in old["memorized"]])
    lines: list[str] = []
    _, metrics = evaluate(folder, mem, photos, old["non_memorized"], old["heldout"], lines.append)
    info = mf.read(folder)
    info.pop("files", None)
    info["metrics"] = {**info.get("metrics", {}), **metrics}
    info["log_tail"] = info.get("log_tail", [])[:-1] + [f"[rescored] {lines[-1]}"]
    return mf.write(folder, info)
