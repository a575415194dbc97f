"""Training a TopK SAE on activations streamed from one residual-stream site of a model.

`activation_stream(...)` yields [tokens, d] batches from the VLM's prompt pass over generated
scenes; `train_sae(...)` fits the SAE with FVU + AuxK (dead latents revived by reconstructing the
residual), unit-norm decoder rows (gradient parallel to them removed), decoder init from the data
mean (b_dec = geometric-ish centre), and reports held-out FVU and the dead fraction.
"""

from __future__ import annotations

import math
import time
from typing import Callable, Iterable

import torch

from .sae import TopKSAE


def collect(stream: Iterable[torch.Tensor], max_tokens: int) -> torch.Tensor:
    chunks, n = [], 0
    for x in stream:
        x = x.reshape(-1, x.shape[-1]).float()
        chunks.append(x)
        n += x.shape[0]
        if n >= max_tokens:
            break
    return torch.cat(chunks)[:max_tokens]


@torch.no_grad()
def evaluate(sae: TopKSAE, x: torch.Tensor, batch: int = 8192) -> dict[str, float]:
    """Held-out FVU (over the whole set), dead fraction (latents that never fire), mean L0."""
    err = tot = 0.0
    fired = torch.zeros(sae.n_latents, dtype=torch.bool)
    mean = x.mean(0)
    l0 = 0.0
    for i in range(0, len(x), batch):
        xb = x[i : i + batch]
        vals, idx = sae.encode_sparse(xb)
        recon = sae.decode_sparse(vals, idx)
        err += (xb - recon).pow(2).sum().item()
        tot += (xb - mean).pow(2).sum().item()
        fired[idx[vals > 0]] = True
        l0 += (vals > 0).sum().item()
    return {
        "fvu": err / max(tot, 1e-12),
        "dead_fraction": 1.0 - fired.float().mean().item(),
        "l0": l0 / len(x),
        "n_tokens": int(len(x)),
    }


def train_sae(
    train_x: torch.Tensor,
    *,
    n_latents: int,
    k: int,
    steps: int,
    batch: int = 1024,
    lr: float = 2e-3,
    seed: int = 0,
    dead_after: int | None = None,
    auxk_alpha: float = 1 / 32,
    hookpoint: str = "",
    log: Callable[[dict], None] | None = None,
    log_every: int = 250,
    init_from_data: bool = True,
) -> tuple[TopKSAE, list[dict]]:
    """Fit a TopK SAE to activations `train_x` [N, d] (sampled with replacement, seeded)."""
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    d = train_x.shape[1]
    sae = TopKSAE(d, n_latents, k, hookpoint=hookpoint)
    with torch.no_grad():
        sae.b_dec.copy_(train_x.median(0).values)
        if init_from_data:
            # Decoder rows start on (centred) data points, so every latent owns a piece of the data
            # and few die on low-dimensional activations; encoder rows start as the decoder directions.
            pick = train_x[torch.randperm(len(train_x), generator=g)[:n_latents]] - sae.b_dec
            sae.W_dec.copy_(pick + 1e-3 * torch.randn(pick.shape, generator=g))
            sae.set_decoder_norm_to_unit_norm()
            scale = 1.0
        else:
            scale = 1.0 / math.sqrt(d)
        sae.W_enc.copy_(sae.W_dec * scale)
    dead_after = dead_after or max(batch * 50, 10_000)
    opt = torch.optim.Adam(sae.parameters(), lr=lr, betas=(0.9, 0.999))
    warm = max(1, steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * (1.0 if s < 0.8 * steps else max(0.0, (steps - s) / (0.2 * steps)))
    )
    history = []
    t0 = time.perf_counter()
    for step in range(steps):
        xb = train_x[torch.randint(len(train_x), (batch,), generator=g)]
        out = sae.losses(xb, dead_after=dead_after, auxk_alpha=auxk_alpha)
        opt.zero_grad(set_to_none=True)
        out["loss"].backward()
        sae.remove_gradient_parallel_to_decoder_directions()
        torch.nn.utils.clip_grad_norm_(sae.parameters(), 1.0)
        opt.step()
        sched.step()
        sae.set_decoder_norm_to_unit_norm()
        if step % log_every == 0 or step == steps - 1:
            rec = {
                "step": step,
                "fvu": round(out["fvu"].item(), 4),
                "dead_fraction": round(float(out.get("dead_fraction", torch.tensor(0.0))), 4),
                "t": round(time.perf_counter() - t0, 1),
            }
            history.append(rec)
            if log:
                log(rec)
    sae.steps_since_fired.zero_()
    return sae.eval(), history
