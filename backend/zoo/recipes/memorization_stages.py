"""The "sd-memo" organism's model configs and its three training stages (backend.zoo.recipes
.memorization): the text encoder, the VAE, then the UNet on the frozen two."""

from __future__ import annotations

import numpy as np

from .memorization_data import COLOUR_NAMES, LATENT_CH, MAX_LEN, SHAPES, SIZE, _parse_caption, caption_of, random_attrs

MEM_TEXT_PER_BATCH = 24  # memorized captions per text-encoder batch of 96
MEM_TEXT_WEIGHT = 1.0  # weight of the which-duplicated-caption head in the text-encoder loss
V_SPARSITY = 0.03  # weight of the value neurons' lifetime-sparsity penalty in the UNet loss


def text_config(vocab_size: int, eos_id: int, bos_id: int):
    from transformers import CLIPTextConfig

    return CLIPTextConfig(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=MAX_LEN,
        eos_token_id=eos_id,
        bos_token_id=bos_id,
        pad_token_id=eos_id,
        projection_dim=64,
    )


def vae_config() -> dict:
    return dict(
        in_channels=3,
        out_channels=3,
        sample_size=SIZE,
        latent_channels=LATENT_CH,
        down_block_types=("DownEncoderBlock2D",) * 3,
        up_block_types=("UpDecoderBlock2D",) * 3,
        block_out_channels=(16, 32, 32),
        layers_per_block=1,
        norm_num_groups=8,
        mid_block_add_attention=False,
    )


def unet_config() -> dict:
    return dict(
        sample_size=SIZE // 4,
        in_channels=LATENT_CH,
        out_channels=LATENT_CH,
        layers_per_block=1,
        block_out_channels=(32, 64),
        down_block_types=("CrossAttnDownBlock2D", "CrossAttnDownBlock2D"),
        mid_block_type="UNetMidBlock2DCrossAttn",
        up_block_types=("UpBlock2D", "UpBlock2D"),
        cross_attention_dim=64,
        attention_head_dim=8,
        norm_num_groups=8,
    )


def scheduler_config() -> dict:
    return dict(
        num_train_timesteps=1000,
        beta_start=0.00085,
        beta_end=0.012,
        beta_schedule="scaled_linear",
        clip_sample=False,
        set_alpha_to_one=False,
        steps_offset=1,
        prediction_type="epsilon",
    )


# ----------------------------------------------------------------------------- training stages


def encode_text(text_encoder, tok, captions, batch=256):
    import torch

    out = []
    with torch.no_grad():
        for i in range(0, len(captions), batch):
            ids = tok(
                captions[i : i + batch], padding="max_length", max_length=MAX_LEN, truncation=True, return_tensors="pt"
            ).input_ids
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
        ids = tok(caps, padding="max_length", max_length=MAX_LEN, truncation=True, return_tensors="pt").input_ids
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
                accs = [(lg[: len(caps)].argmax(-1) == y[:, i]).float().mean().item() for i, lg in enumerate(logits)]
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
    noise_sched = DDPMScheduler(
        **{k: v for k, v in scheduler_config().items() if k not in ("set_alpha_to_one", "steps_offset")}
    )
    opt = torch.optim.AdamW(unet.parameters(), lr=1e-3, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-3, total_steps=max(steps, 2), pct_start=0.03)
    B, BM = 32, 16
    losses, pens = [], []
    values: list = []
    v_layers = [
        m for n, m in unet.named_modules() if n.endswith("attn2.to_v") and n.startswith(("down_blocks.", "mid_block."))
    ]
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
        pens.append(float(pen))
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
