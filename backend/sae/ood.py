"""Whether one picture lies inside the distribution the zoo's model and SAE know, and how far out.

The measure is the SAE's own: the squared residual at the hookpoint that the SAE fails to reconstruct,
||h - SAE(h)||², averaged over the image's patches. An SAE reconstructs what it was trained on well and
anything unlike it badly, so the number is grounded in the model rather than in pixel statistics (a
shape on black is far from the scenes' dark grey in pixels, yet the SAE reconstructs it as well as a
scene; one on white it does not). The error is absolute, not a share of the residual: a white
background makes the residual itself about three times a scene's, and its error grows with it, so a
share hides what the absolute error shows (zoo: a green circle on white leaves 2.3× the scenes' 99th
percentile as a share, 5.3× absolute). It is compared with the same number over scenes of the
organism's own set, computed once per organism and kept.

Threshold: out of distribution above OUT_FACTOR × the scenes' 99th percentile. The held-out scenes'
largest error is 1.2× the index scenes' 99th percentile (measured on the zoo organism, 256 held-out
scenes); a factor 2 leaves room for that spread and for the sampling noise of a 99th percentile of
REFERENCE_SCENES scenes, while a plain green circle on white sits at 5.3-7.6× it (drawn 96 or 48 px a
side).
"""

from __future__ import annotations

import numpy as np
import torch

from ..core.interventions import locked
from . import scenes as S
from . import vlm
from .results import Shift

REFERENCE_SCENES = 512  # about 1.4 s of the zoo model's forward passes on one CPU core, once
EDGE_PERCENTILE = 99.0
OUT_FACTOR = 2.0

_REFERENCE: dict[tuple, np.ndarray] = {}  # per organism's weights: a few KB each


def reconstruction_error(sae, h: torch.Tensor) -> torch.Tensor:
    """The SAE's error for h [B, P, d] (or [P, d]): per patch ||h - ĥ||², averaged over the patches."""
    h = h.float()
    return (h - sae.decode(sae.encode(h))).pow(2).sum(-1).mean(-1)


def reference_specs(org) -> list[dict]:
    """The scenes the distribution is measured on: the index's (drawn like the training scenes, and
    kept apart from the held-out ones, which stay free to check the threshold against)."""
    return (org.index_specs or org.heldout_specs)[:REFERENCE_SCENES]


def has_reference(org) -> bool:
    """Only an organism with a scene set has a distribution to compare against (the zoo's)."""
    return not org.is_hub and bool(reference_specs(org))


@torch.no_grad()
def errors(org, images: np.ndarray) -> np.ndarray:
    """`reconstruction_error` for uint8 images [B, H, W, 3] at the model's input size (the caller holds the
    model's lock, or nobody else uses the model)."""
    sl = vlm.image_slice(org.model)
    out = [
        reconstruction_error(org.sae, h[:, sl].to(org.sae.W_dec.device))
        for _, h in vlm.residuals(org.model, org.tokenizer, images, org.hookpoint)
    ]
    return torch.cat(out).cpu().numpy()


def reference(org) -> np.ndarray:
    """The scenes' errors, sorted, computed on first use and kept for the organism's weights."""
    key = (org.model_id, org.hookpoint, org.n_features)
    # the model's own lock, not one of this module's: a caller already holding it (analyse_image)
    # would otherwise wait on a second lock that another caller holds while it waits for the model
    with locked(org.model):
        ref = _REFERENCE.get(key)
        if ref is None:
            imgs = np.stack([S.render(s)[0] for s in reference_specs(org)])
            ref = _REFERENCE[key] = np.sort(errors(org, imgs))
    return ref


def assess(error: float, ref: np.ndarray) -> Shift:
    """One picture's error against the scenes': the verdict, how far, and the threshold used."""
    ref = np.sort(np.asarray(ref, np.float64))
    edge = float(np.percentile(ref, EDGE_PERCENTILE))
    median = float(np.median(ref))
    threshold = OUT_FACTOR * edge
    return {
        "error": float(error),
        "median": median,
        "edge": edge,
        "threshold": threshold,
        "times_median": float(error) / max(median, 1e-12),
        "percentile": 100.0 * float(np.searchsorted(ref, error, side="right")) / len(ref),
        "n_scenes": int(len(ref)),
        "out": bool(error > threshold),
        "beyond_edge": bool(error > edge),
        "edge_percentile": EDGE_PERCENTILE,
        "factor": OUT_FACTOR,
    }


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def words(a: dict, hookpoint: str) -> tuple[str, str]:
    """(headline, details) in plain text: whether the picture is out of the distribution, and the
    numbers behind it with the threshold."""

    if a["out"]:
        head = "This picture is out of the distribution the zoo's model was trained on"
    elif a["beyond_edge"]:
        head = "This picture is within the distribution the zoo's model was trained on, near its edge"
    else:
        head = "This picture is within the distribution the zoo's model was trained on"
    where = (
        f"above all {a['n_scenes']} scenes"
        if a["percentile"] >= 100
        else f"at their {_ordinal(int(a['percentile']))} percentile"
    )
    details = (
        f"the SAE's reconstruction error at {hookpoint} (the squared residual it leaves, averaged over the "
        f"picture's patches) is {a['times_median']:.1f}× the median of {a['n_scenes']} of the zoo's scenes, "
        f"{where}. Threshold: out of distribution above {a['factor']:g}× the scenes' "
        f"{_ordinal(int(a['edge_percentile']))} percentile ({a['threshold'] / max(a['median'], 1e-12):.1f}× "
        f"the median)."
    )
    return head, details
