"""Explaining features: activation regions, IoU against planted concept masks, and the explainer
interface (offline concept explainer by default; a model explainer that a hub preset can fill).

Activation region of a feature on an image (paper, §3): its per-patch activation map upsampled
bilinearly to the image, thresholded relative to the map's maximum. A feature's score for a concept
= mean IoU of that region with the concept's mask over the feature's top-5 images; the explanation
is the best-scoring concept (the paper's Table 1 uses IoU with a segmentation of the explanation).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Callable, Protocol, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from . import scenes as S

REL_THRESHOLD = 0.5


def upsample(maps: torch.Tensor, size) -> torch.Tensor:
    """[n, gh, gw] per-patch maps → [n, H, W] (bilinear); `size` is H = W or (H, W). A square map
    over a picture of another shape (LLaVA-NeXT's base image is the picture squashed to a square)
    is stretched back onto the picture."""
    maps = torch.as_tensor(maps)
    if maps.ndim == 2:
        maps = maps[None]
    hw = (int(size), int(size)) if isinstance(size, (int, np.integer)) else tuple(int(x) for x in size)
    return F.interpolate(maps.float()[:, None], size=hw, mode="bilinear", align_corners=False)[:, 0]


def regions(maps: torch.Tensor, size, rel: float = REL_THRESHOLD) -> torch.Tensor:
    """Boolean activation regions [n, H, W]; an all-zero map gives an empty region."""
    up = upsample(maps, size)
    mx = up.flatten(1).max(1).values.view(-1, 1, 1)
    return (up >= rel * mx) & (mx > 0)


def iou(a: np.ndarray | torch.Tensor, b: np.ndarray | torch.Tensor) -> float:
    a = torch.as_tensor(a, dtype=torch.bool)
    b = torch.as_tensor(b, dtype=torch.bool)
    union = (a | b).sum().item()
    return float((a & b).sum().item() / union) if union else 0.0


def concept_ious(
    region_list: torch.Tensor, specs: Sequence[dict], concepts: Sequence[str] = S.CONCEPTS
) -> dict[str, float]:
    """Mean IoU over the images, for every concept."""
    masks = [S.render(s)[1] for s in specs]
    return {
        c: float(np.mean([iou(r, m[c]) for r, m in zip(region_list, masks)])) if len(masks) else 0.0 for c in concepts
    }


@dataclass
class Explanation:
    feature: int
    label: str
    family: str
    score: float  # IoU of the label's mask with the activation regions over the top images
    scores: dict[str, float] = field(default_factory=dict)
    explainer: str = "concept-iou"

    def to_dict(self) -> dict:
        return asdict(self)


class Explainer(Protocol):
    name: str

    def explain(self, feature: int, specs: Sequence[dict], images: np.ndarray, maps: torch.Tensor) -> Explanation:
        """Explain a feature from its top images (uint8 [n, H, W, 3]) and per-patch maps [n, g, g]."""


class ConceptExplainer:
    """Offline: the planted concept whose masks best match the feature's activation regions."""

    name = "concept-iou"

    def __init__(self, concepts: Sequence[str] = S.CONCEPTS, rel: float = REL_THRESHOLD):
        self.concepts = tuple(concepts)
        self.rel = rel

    def explain(self, feature, specs, images, maps) -> Explanation:
        size = int(images.shape[1]) if len(images) else S.IMAGE_SIZE
        reg = regions(maps, size, self.rel) if len(maps) else torch.zeros(0, size, size, dtype=torch.bool)
        scores = concept_ious(reg, specs, self.concepts)
        best = max(scores, key=lambda c: scores[c]) if scores else ""
        if not scores or scores[best] <= 0:  # a feature that never fires (or matches nothing) has no label
            best = ""
        return Explanation(
            feature,
            best,
            S.FAMILY_OF.get(best, ""),
            round(scores.get(best, 0.0), 4),
            {k: round(v, 4) for k, v in scores.items()},
            self.name,
        )


def dim_outside(image: np.ndarray, region: np.ndarray, factor: float = 0.25) -> np.ndarray:
    """The paper's view: the image with everything outside the activation region dimmed."""
    img = image.astype(np.float32)
    keep = region[..., None].astype(np.float32)
    return (img * (keep + (1 - keep) * factor)).clip(0, 255).astype(np.uint8)


class ModelExplainer:
    """The paper's explainer: a (large) VLM is shown the top images with the activation region
    highlighted and asked for the common concept. `describe(images, prompt) -> str` is any callable
    a hub preset provides; its text is matched to concept words when a concept list is known."""

    name = "model"
    PROMPT = (
        "These images are highlighted where one feature of a vision-language model fires. "
        "In one or two words, what do the highlighted regions have in common?"
    )

    def __init__(self, describe: Callable[[list[np.ndarray], str], str], concepts: Sequence[str] = S.CONCEPTS):
        self.describe = describe
        self.concepts = tuple(concepts)

    def explain(self, feature, specs, images, maps) -> Explanation:
        size = int(images.shape[1])
        reg = regions(maps, size).numpy()
        text = str(self.describe([dim_outside(im, r) for im, r in zip(images, reg)], self.PROMPT)).strip()
        scores = concept_ious(torch.as_tensor(reg), specs, self.concepts) if specs else {}
        named = [c for c in self.concepts if c in text.lower()]
        score = max((scores.get(c, 0.0) for c in named), default=0.0)
        return Explanation(
            feature,
            text,
            S.FAMILY_OF.get(named[0], "") if named else "",
            round(score, 4),
            {k: round(v, 4) for k, v in scores.items()},
            self.name,
        )


def explain_all(
    index,
    specs_all: Sequence[dict],
    explainer: Explainer | None = None,
    n_top: int = 5,
    features: Sequence[int] | None = None,
) -> dict[int, Explanation]:
    explainer = explainer or ConceptExplainer()
    out = {}
    for f in features if features is not None else range(index.n_features):
        ids, maps, _ = index.top(f, n_top)
        specs = [specs_all[i] for i in ids]
        imgs = (
            np.stack([S.render(s)[0] for s in specs])
            if specs
            else np.zeros((0, S.IMAGE_SIZE, S.IMAGE_SIZE, 3), np.uint8)
        )
        out[f] = explainer.explain(f, specs, imgs, maps)
    return out


def localisation_summary(explanations: dict[int, Explanation], concepts: Sequence[str] = S.CONCEPTS) -> dict:
    """For every concept: the best-matching feature and its IoU over that feature's top-5 images."""
    best = {}
    for c in concepts:
        f, e = max(explanations.items(), key=lambda kv: kv[1].scores.get(c, 0.0))
        best[c] = {"feature": int(f), "iou": round(e.scores.get(c, 0.0), 4)}
    return best


def random_baseline(
    index,
    explanations: dict[int, Explanation],
    random_specs: Sequence[dict],
    random_maps: torch.Tensor,
    top_n_features: int = 50,
    n_random: int = 5,
    seed: int = 0,
) -> dict:
    """The paper's statistic over the top features by density: mean IoU of each feature's label
    concept with its regions on its top-5 images vs on random images (random_maps: [N, F, g, g])."""
    dens = index.tensors["density"]
    feats = [int(f) for f in torch.argsort(dens, descending=True)[:top_n_features] if dens[f] > 0]
    rng = np.random.default_rng(seed)
    size = int(random_specs[0].get("size", S.IMAGE_SIZE)) if random_specs else S.IMAGE_SIZE
    masks = [S.render(s)[1] for s in random_specs]
    top, rnd = [], []
    for f in feats:
        e = explanations[f]
        top.append(e.score)
        if not e.label:
            rnd.append(0.0)
            continue
        pick = rng.choice(len(random_specs), size=min(n_random, len(random_specs)), replace=False)
        reg = regions(random_maps[pick, f], size)
        rnd.append(float(np.mean([iou(reg[j], masks[p][e.label]) for j, p in enumerate(pick)])))
    mt, mr = float(np.mean(top)) if top else 0.0, float(np.mean(rnd)) if rnd else 0.0
    return {
        "n_features": len(feats),
        "top5_iou": round(mt, 4),
        "random_iou": round(mr, 4),
        "ratio": round(mt / mr, 2) if mr > 0 else float("inf"),
    }
