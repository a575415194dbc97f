"""The llava-scenes captioner's training aids (backend.zoo.recipes.features): the swap that makes
it read its caption after the SAE's site, and the term that writes each concept along a direction of
its own there. Apart from the recipe, which reads as its steps."""

from __future__ import annotations

from contextlib import contextmanager

import torch
from torch import nn

from backend.sae import scenes as S


@contextmanager
def swapped_at(layer, positions: slice, rows: torch.Tensor, grab: list | None = None):
    """Within the context, `layer`'s output at `positions` is taken from the batch rows `rows` (and,
    after the swap, appended to `grab`)."""

    def hook(_mod, _args, out):
        hs = out[0] if isinstance(out, tuple) else out
        hs = torch.cat([hs[:, : positions.start], hs[rows, positions], hs[:, positions.stop :]], dim=1)
        if grab is not None:
            grab.append(hs[:, positions])
        return (hs, *out[1:]) if isinstance(out, tuple) else hs

    handle = layer.register_forward_hook(hook)
    try:
        yield
    finally:
        handle.remove()


# At the SAE's site (layer 0's output) each colour, shape and texture is also written along a fixed
# direction of its own, random orthonormal ones drawn from the recipe's seed: the projections of an
# image patch's residual are pulled towards SITE_PLANT × its one-hot concepts (zero on the background),
# by a mean squared error of weight SITE_WEIGHT within the auxiliary loss. Without it the captioner
# wrote circle there as nearly the mean object (the circle patches' mean residual 6.8 from the other
# objects', square's 16.4, triangle's 20.0) and no SAE of the recipe's size found a circle feature; at
# weight 1 the site became so easy to reconstruct (FVU 0.004) that 28-66 % of the latents of every
# 64 × 4 SAE on it never fired.
SITE_PLANT, SITE_WEIGHT = 8.0, 0.1


def concept_directions(d: int, seed: int) -> dict[str, torch.Tensor]:
    """Per family (colour, shape, texture), orthonormal rows [n_concepts, d], none shared."""
    q, _ = torch.linalg.qr(torch.randn(d, d, generator=torch.Generator().manual_seed(seed)))
    out, j = {}, 0
    for fam in ("colour", "shape", "texture"):
        out[fam] = q[:, j : j + len(S.FAMILIES[fam])].T.contiguous()
        j += len(S.FAMILIES[fam])
    return out


def site_loss(h: torch.Tensor, targets: dict[str, torch.Tensor], directions: dict[str, torch.Tensor]) -> torch.Tensor:
    """Mean squared error of the residual's projections [b, P, n] on each family's directions against
    SITE_PLANT × the one-hot concept of every patch (vlm.patch_targets: 0 = background, no concept)."""
    losses = []
    for fam, u in directions.items():
        want = nn.functional.one_hot(targets[fam], len(S.FAMILIES[fam]) + 1)[..., 1:].float()
        losses.append(nn.functional.mse_loss(h @ u.T, SITE_PLANT * want))
    return torch.stack(losses).sum()
