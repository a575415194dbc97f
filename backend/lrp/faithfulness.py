"""Input perturbation in relevance order (MoRF / LeRF) and the ΔA^F faithfulness score.

Tokens (or image patches) are replaced one at a time by a neutral token (or neutral patch), most
relevant first (MoRF) or least relevant first (LeRF); after each step the target logit is read.
A = area under that curve over the removed fraction in [0, 1] (trapezoid). ΔA^F = A_LeRF − A_MoRF:
a faithful explanation makes the logit fall fast under MoRF and slowly under LeRF (higher is better).
All perturbed inputs of one curve run as one batch, without gradients.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .forward import lm_forward
from .vision import VisionMamba

GRID = np.linspace(0.0, 1.0, 11)  # curves of different lengths are resampled here for averaging


@dataclass
class Curves:
    morf: np.ndarray  # target logit after removing 0..n items, most relevant first
    lerf: np.ndarray  # … least relevant first

    @staticmethod
    def area(curve: np.ndarray) -> float:
        x = np.linspace(0.0, 1.0, len(curve))
        return float(np.trapezoid(curve, x)) if len(curve) > 1 else float(curve[0])

    @property
    def a_morf(self) -> float:
        return self.area(self.morf)

    @property
    def a_lerf(self) -> float:
        return self.area(self.lerf)

    @property
    def delta(self) -> float:
        return self.a_lerf - self.a_morf

    def resampled(self) -> tuple[np.ndarray, np.ndarray]:
        x = np.linspace(0.0, 1.0, len(self.morf))
        return np.interp(GRID, x, self.morf), np.interp(GRID, x, self.lerf)


def rows_per_pass(model, length: int, *, budget_bytes: float = 1e9, all_layers: bool = False) -> int:
    """How many sequences of `length` tokens one pass may hold: the scan keeps ~3 float tensors of
    L × d_inner × N (one layer at a time without gradients, every layer with them). A 1.4B Mamba
    holds 50 MB per 64-token row and layer: a perturbation batch of a few sentences × 65 rows in one
    pass would need tens of GB."""
    cfg = getattr(model, "config", None)
    if cfg is None or not hasattr(cfg, "intermediate_size"):
        return 1 << 30
    per = 3 * int(length) * cfg.intermediate_size * cfg.state_size * 4
    if all_layers:
        per *= cfg.num_hidden_layers
    return int(max(1, budget_bytes // max(per, 1)))


def _last_logits(model, batch: torch.Tensor, pos: int) -> torch.Tensor:
    """lm_forward(batch)[:, pos] in chunks of rows that fit the memory budget (same values)."""
    step = rows_per_pass(model, batch.shape[1])
    return torch.cat([lm_forward(model, batch[i : i + step])[:, pos].float().cpu() for i in range(0, len(batch), step)])


def _orders(relevance: np.ndarray, candidates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    r = relevance[candidates]
    # stable sort; ties broken by position so the result is deterministic
    morf = candidates[np.argsort(-r, kind="stable")]
    lerf = candidates[np.argsort(r, kind="stable")]
    return morf, lerf


@torch.no_grad()
def text_curves(
    model, input_ids, relevance, *, target: int, position: int = -1, candidates=None, neutral_id: int
) -> Curves:
    """MoRF/LeRF curves of one sequence. `candidates`: positions that may be removed (default all
    but the explained position)."""
    ids = torch.as_tensor(input_ids).long().reshape(-1)
    L = ids.numel()
    pos = position % L
    rel = np.asarray(torch.as_tensor(relevance, dtype=torch.float32).reshape(-1))
    cand = np.array([i for i in range(L) if i != pos] if candidates is None else list(candidates), dtype=np.int64)
    out = []
    for order in _orders(rel, cand):
        batch = ids.repeat(len(order) + 1, 1)
        for k in range(1, len(order) + 1):
            batch[k, torch.as_tensor(order[:k])] = neutral_id
        out.append(_last_logits(model, batch, pos)[:, target].numpy())
    return Curves(morf=out[0], lerf=out[1])


@torch.no_grad()
def text_curves_batch(
    model, input_ids, relevance, *, targets, candidates, neutral_id: int, position: int = -1
) -> list[Curves]:
    """`text_curves` for a batch of equal-length sequences in one forward per order."""
    ids = torch.as_tensor(input_ids).long()
    Bsz, L = ids.shape
    pos = position % L
    rel = np.asarray(torch.as_tensor(relevance, dtype=torch.float32))
    cand = np.asarray(list(candidates), dtype=np.int64)
    n = len(cand)
    tg = torch.as_tensor(targets).long().reshape(-1).expand(Bsz)
    curves = []
    for which in (0, 1):
        batch = ids.repeat_interleave(n + 1, dim=0).clone()  # [B*(n+1), L]
        for b in range(Bsz):
            order = _orders(rel[b], cand)[which]
            for k in range(1, n + 1):
                batch[b * (n + 1) + k, torch.as_tensor(order[:k])] = neutral_id
        logits = _last_logits(model, batch, pos)
        vals = logits[torch.arange(len(batch)), tg.cpu().repeat_interleave(n + 1)].numpy()
        curves.append(vals.reshape(Bsz, n + 1))
    return [Curves(morf=curves[0][b], lerf=curves[1][b]) for b in range(Bsz)]


@torch.no_grad()
def image_curves(model: VisionMamba, image, relevance, *, target: int, neutral_value: float = 0.0) -> Curves:
    """MoRF/LeRF curves over patches: patch relevance = sum of its pixels' relevance; a removed
    patch is filled with `neutral_value`."""
    x = torch.as_tensor(image, dtype=torch.float32)
    if x.dim() == 2:
        x = x[None]
    p, g = model.patch_size, model.grid
    rel = torch.as_tensor(relevance, dtype=torch.float32).reshape(g, p, g, p).sum((1, 3)).reshape(-1).numpy()
    cand = np.arange(g * g)
    out = []
    for order in _orders(rel, cand):
        batch = x.repeat(len(order) + 1, 1, 1, 1)
        for k in range(1, len(order) + 1):
            for idx in order[:k]:
                r, c = divmod(int(idx), g)
                batch[k, :, r * p : (r + 1) * p, c * p : (c + 1) * p] = neutral_value
        out.append(model(batch)[:, target].float().cpu().numpy())
    return Curves(morf=out[0], lerf=out[1])


def summarize(curves: list[Curves]) -> dict:
    """Mean ΔA^F (± standard error) and the mean resampled curves of a set of inputs."""
    d = np.array([c.delta for c in curves])
    morf = np.mean([c.resampled()[0] for c in curves], axis=0)
    lerf = np.mean([c.resampled()[1] for c in curves], axis=0)
    return {
        "delta_af": float(d.mean()),
        "delta_af_se": float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else 0.0,
        "a_morf": float(np.mean([c.a_morf for c in curves])),
        "a_lerf": float(np.mean([c.a_lerf for c in curves])),
        "grid": GRID.tolist(),
        "morf": morf.tolist(),
        "lerf": lerf.tolist(),
        "n": len(curves),
    }
