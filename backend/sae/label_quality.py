"""How well a feature's label holds, in the words shown beside it wherever the label appears (the
feature list, the page header, "which features fire", steering): a label is a claim about the
feature, and a stakeholder reads a bare word as a fact.

The concept explainer's score is the IoU of the feature's activation regions with the concept's
planted masks over its top images. The paper reports a mean IoU of 0.20 for its labels (random
0.005): below that the label reads as weak. A feature that fires on a large share of all image
patches is broad whatever its IoU (a dense feature overlaps any large mask), and says so."""

from __future__ import annotations

from .organism import LABEL_MIN_IOU as NO_CONCEPT_IOU  # below it the best concept explains nothing

WEAK_IOU = 0.20  # the paper's mean IoU of its labelled features
BROAD_DENSITY = 0.25  # fires on a quarter of all image patches or more


def quality(lab: dict, density: float | None = None) -> str:
    """'IoU 0.79', 'weak: IoU 0.11', 'IoU 0.79; broad: fires on 43% of patches', 'model's words, not
    scored', or '' for no label."""
    if not lab.get("label"):
        return ""
    if lab.get("explainer") == "model":
        return "named by the model, not scored"
    iou = float(lab.get("score", 0.0))
    words = f"IoU {iou:.2f}" if iou >= WEAK_IOU else f"weak: IoU {iou:.2f}"
    if density is not None and density >= BROAD_DENSITY:
        words += f"; broad: fires on {density:.0%} of patches"
    return words


def with_quality(lab: dict, density: float | None = None, unlabelled: str = "no concept") -> str:
    """The label as shown: 'green (weak: IoU 0.11)', 'square (IoU 0.79; broad: …)'; a concept
    below LABEL_MIN_IOU is no label at all ('no concept (best guess circle, IoU 0.00)')."""
    label = lab.get("label") or ""
    if not label:
        return unlabelled
    if lab.get("explainer") != "model" and float(lab.get("score", 0.0)) < NO_CONCEPT_IOU:
        return f"{unlabelled} (best guess {label}, IoU {float(lab.get('score', 0.0)):.2f})"
    return f"{label} ({quality(lab, density)})"
