"""The llava-scenes-sae organism's contrast truth (backend.zoo.recipes.features): contrast the scenes
of every pair of colours and every pair of shapes, and count how often the two concepts' planted
features are the top two rows. The recipe ranks its candidate SAEs by it on the selection scenes;
tests/organisms/test_features_contrast.py measures it on the held-out scenes."""

from __future__ import annotations

import itertools

import numpy as np
import torch

from backend.sae import contrast as C
from backend.sae import scenes as S
from backend.sae import vlm
from backend.sae.contrast_scenes import matches
from backend.sae.organism import concept_carriers

PAIRS = [(a, b) for fam in ("colour", "shape") for a, b in itertools.combinations(S.FAMILIES[fam], 2)]


@torch.no_grad()
def scene_activations(model, tok, sae, hookpoint, specs) -> np.ndarray:
    """Per-scene activations [n, F], pooled as the index pools them (contrast.pooled)."""
    imgs = np.stack([S.render(s)[0] for s in specs])
    sl = vlm.image_slice(model)
    out = []
    for _, h in vlm.residuals(model, tok, imgs, hookpoint, batch_size=64):
        vals, idx = sae.encode_sparse(h[:, sl])
        out.append(C.pooled(vals, idx, sae.n_latents))
    return torch.cat(out).numpy()


def top2_precision(labels: dict, acts: np.ndarray, specs: list[dict], n: int = 64) -> tuple[float, dict]:
    """Share of the top-two rows that are planted features of the pair's concepts, over PAIRS; sets
    are the first `n` scenes of each concept without the other (contrast_scenes.scene_sets' rule)."""
    hits = {}
    for a, b in PAIRS:
        ia = [i for i, s in enumerate(specs) if matches(s, (a,)) and not matches(s, (b,))][:n]
        ib = [i for i, s in enumerate(specs) if matches(s, (b,)) and not matches(s, (a,))][:n]
        rows = C.contrast_stats(acts[ia], acts[ib], rows=2)["rows"]
        planted = set(concept_carriers(labels, a)) | set(concept_carriers(labels, b))
        hits[f"{a}/{b}"] = sum(r["feature"] in planted for r in rows)
    return sum(hits.values()) / (2 * len(PAIRS)), hits
