"""Contrasting two image sets: which SAE features fire differently on set A than on set B.

An image's activation of a feature is the feature's code averaged over the image-patch tokens (zero
where it does not fire): the score the feature index ranks a feature's top images by
(`index.IndexBuilder.update`), so a contrast's top images and a feature page's are ranked alike, and
indexed scenes can be read from the index where it holds them (`index_activations`).

    acts_a = image_activations(org, images_a)        # [n_a, F], one prompt pass per image, batched
    acts_b = scene_activations(org, specs_b)         # zoo scenes, rendered
    result = contrast(org, acts_a, acts_b)           # rows sorted by |effect|, with p, q, top images
    contrast_cost(org, n_a, n_b)                     # forward passes and seconds, before starting

Zoo scene sets by concept: backend.sae.contrast_scenes.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
from scipy import stats

from ..core import bounds, costs
from ..core.cache import ByteLRUCache, make_key
from ..core.interventions import locked
from ..core.zerogpu import capped, gpu
from . import ranktest, vlm
from . import scenes as S
from .analysis import model_image
from .loading import need_model
from .organism import Organism, shown_label

ALPHA = 0.05
SORTS = ("effect", "diff", "p")
TEST = "Mann–Whitney U, two-sided, normal approximation with tie and continuity corrections (scipy.stats.mannwhitneyu)"
EFFECT = "rank-biserial correlation r = 2·AUC − 1 (+1: every image of A above every image of B)"
CORRECTION = "Benjamini–Hochberg over the tested features (those that fire on at least one image of A or B)"
ZOO_BATCH, HUB_BATCH = 64, 4  # the index build's batch sizes (index.build_index, hub_index)
# seconds per image: the zoo's tiny captioner on one CPU thread (6 ms measured, with margin); the 8B hub
# model to layer 24 on a GPU (hub_index._index_seconds); and per set (the processor, the first batch)
ZOO_IMAGE_S, HUB_IMAGE_S = 0.02, 0.5
ZOO_SET_S, HUB_SET_S = 0.2, 2.0
# the rank test's seconds per (tested feature × image) on the host: 131,072 features × 128 images took
# 6.2 s on a 2-core CPU and 2.2 s on a GPU machine's host (benchmarks/sae_fullsize.py); milliseconds
# at the zoo's 64 features, seconds at a hub SAE's width when most features fire on the sets. With the
# SAE on a GPU the test runs there (ranktest), and this host figure is an upper bound
STATS_CELL_S = 4e-7
_ACTS = ByteLRUCache(16 * 2**20, name="features-contrast-acts")


# ------------------------------------------------------------------------------ activations
def pooled(vals: torch.Tensor, idx: torch.Tensor, n_features: int) -> torch.Tensor:
    """Sparse codes [B, P, k] → per-image activations [B, F]: the mean over the P patches, exactly as
    IndexBuilder.update scores an image (non-firing entries count as zero)."""
    B, P, _ = vals.shape
    vals = vals.float()
    scores = torch.zeros(B, n_features, device=vals.device)
    scores.scatter_add_(1, idx.reshape(B, -1), (vals * (vals > 0)).reshape(B, -1))
    return scores / P


def _batch(org: Organism) -> int:
    return HUB_BATCH if org.is_hub else ZOO_BATCH


def _set_seconds(org: Organism, n: int) -> float:
    return (HUB_SET_S + HUB_IMAGE_S * n) if org.is_hub else (ZOO_SET_S + ZOO_IMAGE_S * n)


def _activation_seconds(org: Organism, images, *args, **kwargs) -> float:
    return capped(_set_seconds(org, len(images)))


@gpu(duration=_activation_seconds)
@torch.no_grad()
def image_activations(org: Organism, images: Sequence[np.ndarray]) -> np.ndarray:
    """Per-image activations [n, F] (float32) of one image set, through the organism's VLM and SAE in
    the index's batches; cached per organism, index version and images."""
    n = len(images)
    if n == 0:
        raise ValueError("the image set is empty: add at least 2 images")
    bounds.check(bounds.CONTRAST_IMAGES, n)
    shaped = [model_image(org, im) for im in images]
    key = make_key(org.cache_id, shaped, ("contrast-acts",))
    hit = _ACTS.get(key)
    if hit is not None:
        return hit.copy()
    need_model(org)
    assert org.sae is not None  # need_model loaded it
    out = []
    with locked(org.model):
        if org.is_hub:
            from .hub_index import encode_images  # hub_index imports analysis, as this module does

            for i in range(0, n, HUB_BATCH):
                vals, idx = encode_images(org, shaped[i : i + HUB_BATCH])
                out.append(pooled(vals, idx, org.n_features))
        else:
            sl = vlm.image_slice(org.model)
            for _, h in vlm.residuals(org.model, org.tokenizer, np.stack(shaped), org.hookpoint, batch_size=ZOO_BATCH):
                vals, idx = org.sae.encode_sparse(h[:, sl])
                out.append(pooled(vals, idx, org.n_features))
    # one copy to the host at the end: a copy per batch would wait for each batch's kernels on a GPU
    acts = torch.cat(out).cpu().numpy().astype(np.float32)
    _ACTS.put(key, acts)
    return acts.copy()


def scene_activations(org: Organism, specs: Sequence[dict]) -> np.ndarray:
    """`image_activations` of zoo scenes (specs), rendered as the index renders them."""
    if org.is_hub:
        raise ValueError("scene specs describe the zoo's synthetic scenes; a hub model takes images")
    return image_activations(org, [S.render(s)[0] for s in specs])


@dataclass
class IndexedActivations:
    """What the feature index knows of some indexed images' activations. It keeps each feature's top-K
    images only, so an entry is `known` where the image is among them, or where the feature fired on
    fewer than K indexed images (an image outside its list then scored 0); elsewhere the value is at
    most `ceiling[f]`, the lowest score the list kept, and `acts` holds 0."""

    acts: np.ndarray  # [n, F]
    known: np.ndarray  # [n, F] bool
    ceiling: np.ndarray  # [F]

    @property
    def complete(self) -> bool:
        return bool(self.known.all())


def index_activations(org: Organism, image_ids: Sequence[int]) -> IndexedActivations:
    """The activations of indexed images (ids of the index's image set) read from the index, no model call."""
    if org.index is None:
        raise ValueError("this preset has no feature index to read activations from")
    n_images = int(org.index.meta.get("n_images", len(org.index_specs)))
    ids = np.asarray([int(i) for i in image_ids], np.int64)
    if len(ids) == 0:
        raise ValueError("no image ids given")
    if ids.min() < 0 or ids.max() >= n_images:
        raise ValueError(f"image ids must be in 0..{n_images - 1}")
    t = org.index.tensors
    top_ids, top_scores = t["top_ids"].numpy(), t["top_scores"].float().numpy()  # [F, K]
    F = top_ids.shape[0]
    full = (top_ids >= 0).all(1) & (top_scores[:, -1] > 0)
    uniq, inverse = np.unique(ids, return_inverse=True)
    fs, ks = np.nonzero(np.isin(top_ids, uniq))  # every listed entry of an asked image, at once
    rows = np.searchsorted(uniq, top_ids[fs, ks])
    acts = np.zeros((len(uniq), F), np.float32)
    known = np.repeat(~full[None], len(uniq), 0)
    acts[rows, fs], known[rows, fs] = top_scores[fs, ks], True
    ceiling = np.where(full, top_scores[:, -1], 0.0).astype(np.float32)
    return IndexedActivations(acts[inverse], known[inverse], ceiling)


# ------------------------------------------------------------------------------ statistics
def _check_set(acts, name: str) -> np.ndarray:
    a = np.asarray(acts, dtype=np.float64)
    if a.ndim != 2:
        raise ValueError(f"set {name} must be a table of images × features, not an array of shape {a.shape}")
    if a.shape[0] == 0:
        raise ValueError(f"set {name} is empty: add at least {bounds.CONTRAST_IMAGES.lo:g} images")
    if not bounds.CONTRAST_IMAGES.lo <= a.shape[0] <= bounds.CONTRAST_IMAGES.hi:
        raise ValueError(f"set {name} holds {a.shape[0]} images; " + bounds.CONTRAST_IMAGES.refusal(a.shape[0]))
    if not np.isfinite(a).all():
        raise ValueError(f"set {name} holds NaN or infinite activations")
    return a


def smallest_p(n_a: int, n_b: int) -> float:
    """The smallest p-value the test can give two sets of these sizes (complete separation, no ties):
    with few images per set no feature can pass the correction, whatever it does."""
    r = stats.mannwhitneyu(np.arange(n_a, n_a + n_b), np.arange(n_a), method="asymptotic")
    return float(r.pvalue)


def _top(col: np.ndarray, n: int) -> list[int]:
    order = np.argsort(-col, kind="stable")[:n]
    return [int(i) for i in order if col[i] > 0]


def contrast_stats(
    acts_a,
    acts_b,
    *,
    alpha: float = ALPHA,
    rows: int = 50,
    top_images: int = 5,
    sort: str = "effect",
    device: torch.device | str | None = None,
) -> dict:
    """Rank features by how differently they fire on set A than on set B ([n_a, F] and [n_b, F] per-image
    activations). Rows: feature, mean_a, mean_b, diff, rate_a, rate_b (share of images where it fires),
    effect (rank-biserial), p, q (Benjamini–Hochberg), significant (q ≤ alpha), top_a / top_b (row numbers
    of the set's images where it fires most). `device`: run the rank test there in torch (ranktest)
    rather than with scipy on the host; `contrast` passes a CUDA device where the SAE has one."""
    a, b = _check_set(acts_a, "A"), _check_set(acts_b, "B")
    if a.shape[1] != b.shape[1]:
        raise ValueError(
            f"the sets have different feature widths ({a.shape[1]} and {b.shape[1]}): "
            "activations of the same SAE are needed"
        )
    rows = bounds.check_whole(bounds.CONTRAST_ROWS, rows)
    top_images = bounds.check_whole(bounds.CONTRAST_TOP_IMAGES, top_images)
    bounds.check_choice("sort", sort, SORTS)
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not 0 < float(alpha) < 1:
        raise ValueError(f"alpha must be a number between 0 and 1 (got {alpha!r})")
    n_a, n_b, F = a.shape[0], b.shape[0], a.shape[1]
    both = np.concatenate([a, b])
    # A feature constant over A ∪ B (nearly always: silent on every image) is left out of the test and
    # of the correction's count. The choice reads the pooled values only, never which set an image is
    # in, so under the null it is independent of the rank statistic and BH keeps its FDR guarantee
    # (independent filtering, Bourgon, Gentleman & Huber, PNAS 2010); counting those features would
    # only make the correction stricter for no information (their p-value is 1 by construction).
    tested = both.max(0) > both.min(0)
    p = np.full(F, np.nan)
    effect = np.zeros(F)
    q = np.full(F, np.nan)
    if tested.any():
        # Activations are sparse (many exact zeros) and heavy-tailed: a rank test assumes no shape, and
        # the normal approximation with the tie correction holds for the zeros' large ties. Its effect
        # size, the rank-biserial correlation, is the same statistic scaled to [-1, 1], invariant to each
        # feature's own activation scale (Cohen's d would divide by a standard deviation that is ~0 for a
        # feature silent in one set, and assume normal data).
        if device is None:
            res = stats.mannwhitneyu(a[:, tested], b[:, tested], axis=0, method="asymptotic")
            u1, p[tested] = res.statistic, res.pvalue
        else:
            on = [torch.from_numpy(np.ascontiguousarray(x[:, tested])).to(device) for x in (a, b)]
            u, pv = ranktest.mann_whitney(*on)
            u1, p[tested] = u.cpu().numpy(), pv.cpu().numpy()
        effect[tested] = 2.0 * u1 / (n_a * n_b) - 1.0
        q[tested] = stats.false_discovery_control(p[tested], method="bh")
    mean_a, mean_b = a.mean(0), b.mean(0)
    diff = mean_a - mean_b
    rate_a, rate_b = (a > 0).mean(0), (b > 0).mean(0)
    sig = tested & (np.nan_to_num(q, nan=1.0) <= alpha)
    p_key = np.nan_to_num(p, nan=2.0)
    primary = {"effect": -np.abs(effect), "diff": -np.abs(diff), "p": p_key}[sort]
    # ties (a perfect separation gives |r| = 1 to several features) go to the smaller p, then the larger
    # difference of means, then the feature id: one order whatever the input's column order
    order = np.lexsort((np.arange(F), -np.abs(diff), p_key, primary, ~tested))
    out_rows = []
    for f in order[:rows]:
        f = int(f)
        out_rows.append(
            {
                "feature": f,
                "mean_a": float(mean_a[f]),
                "mean_b": float(mean_b[f]),
                "diff": float(diff[f]),
                "rate_a": float(rate_a[f]),
                "rate_b": float(rate_b[f]),
                "effect": float(effect[f]),
                "p": float(p[f]) if tested[f] else None,
                "q": float(q[f]) if tested[f] else None,
                "significant": bool(sig[f]),
                "tested": bool(tested[f]),
                "direction": "A" if diff[f] > 0 else "B" if diff[f] < 0 else "",
                "top_a": _top(a[:, f], top_images),
                "top_b": _top(b[:, f], top_images),
            }
        )
    n_tested = int(tested.sum())
    min_p = smallest_p(n_a, n_b)
    return {
        "rows": out_rows,
        "n_a": n_a,
        "n_b": n_b,
        "n_features": F,
        "n_tested": n_tested,
        "n_significant": int(sig.sum()),
        "alpha": float(alpha),
        "sort": sort,
        "smallest_p": min_p,
        # BH passes the best feature only if its p ≤ alpha / m (its rank 1 of m): below that nothing can
        "can_be_significant": bool(n_tested and min_p * n_tested <= alpha),
        "test": TEST,
        "effect_size": EFFECT,
        "correction": CORRECTION,
    }


def contrast(
    org: Organism, acts_a, acts_b, *, alpha: float = ALPHA, rows: int = 50, top_images: int = 5, sort: str = "effect"
) -> dict:
    """`contrast_stats` for this organism's SAE (feature widths checked against it), rows labelled."""
    for name, acts in (("A", acts_a), ("B", acts_b)):
        width = np.shape(acts)[-1] if np.ndim(acts) == 2 else None
        if width is not None and width != org.n_features:
            raise ValueError(f"set {name} has {width} features per image but the SAE has {org.n_features}")
    sae_device = org.sae.W_enc.device if org.sae is not None else None
    device = sae_device if sae_device is not None and sae_device.type == "cuda" else None
    out = contrast_stats(acts_a, acts_b, alpha=alpha, rows=rows, top_images=top_images, sort=sort, device=device)
    for r in out["rows"]:
        r["label"] = shown_label(org.labels.get(str(r["feature"]), {}))
    return out


def _stats_seconds(org: Organism, n_a: int, n_b: int) -> float:
    return STATS_CELL_S * org.n_features * (n_a + n_b)


def _contrast_seconds(org: Organism, images_a, images_b, *args, **kwargs) -> float:
    n_a, n_b = len(images_a), len(images_b)
    return capped(_set_seconds(org, n_a) + _set_seconds(org, n_b) + _stats_seconds(org, n_a, n_b))


@gpu(duration=_contrast_seconds)
def contrast_images(org: Organism, images_a: Sequence[np.ndarray], images_b: Sequence[np.ndarray], **kw) -> dict:
    """Activations of two image sets, then `contrast`; the result also holds both activation tables."""
    for name, imgs in (("A", images_a), ("B", images_b)):
        if len(imgs) == 0:
            raise ValueError(f"set {name} is empty: add at least {bounds.CONTRAST_IMAGES.lo:g} images")
        bounds.check(bounds.CONTRAST_IMAGES, len(imgs))
    acts_a, acts_b = image_activations(org, images_a), image_activations(org, images_b)
    return {**contrast(org, acts_a, acts_b, **kw), "acts_a": acts_a, "acts_b": acts_b}


def contrast_cost(org: Organism, n_a: int, n_b: int) -> dict:
    """What a contrast of n_a and n_b new images costs, for the UI to show before it starts: the images'
    prompt passes (in batches) and an estimate in seconds, from this server's measured times of the
    same computation when there are some, else from the per-image figure above; and the statistics'
    share (`statistics_seconds`, included), milliseconds at the zoo's width, seconds at a hub SAE's."""
    n_a, n_b = (bounds.check_whole(bounds.CONTRAST_IMAGES, n) for n in (n_a, n_b))
    batch = _batch(org)
    # the rate this server measured for the marked call, per unit of its formula (backend.core.costs)
    measured = [costs.estimate("image_activations", org.model_id, (), _set_seconds(org, n)) for n in (n_a, n_b)]
    seconds = (
        sum(m for m in measured if m is not None)
        if all(m is not None for m in measured)
        else _set_seconds(org, n_a) + _set_seconds(org, n_b)
    )
    stats_s = _stats_seconds(org, n_a, n_b)
    return {
        "images": n_a + n_b,
        "forward_passes": n_a + n_b,
        "batches": math.ceil(n_a / batch) + math.ceil(n_b / batch),
        "seconds": round(float(seconds + stats_s), 1),
        "statistics_seconds": round(float(stats_s), 3),
        "measured": all(m is not None for m in measured),
    }
