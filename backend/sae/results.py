"""The Features tab's main answers (backend.sae.analysis, backend.sae.pages, backend.sae.ood),
declared: plain dicts at run time (cached, dumped as the API's and the MCP tools' JSON), their keys
and types checked by mypy."""

from __future__ import annotations

from typing import NotRequired, TypedDict

import numpy as np


class Shift(TypedDict):
    """backend.sae.ood.assess: how far one picture's SAE error lies from the training scenes'."""

    error: float  # the SAE's reconstruction error (squared, per patch, averaged)
    median: float
    edge: float  # the scenes' error at `edge_percentile`
    threshold: float  # `factor` × edge: above it the picture is out of the distribution
    times_median: float
    percentile: float
    n_scenes: int
    out: bool
    beyond_edge: bool
    edge_percentile: float
    factor: float


class FeatureActivation(TypedDict):
    """One of the features that fire most on an image, by mean activation over its patches."""

    feature: int
    mean_act: float
    label: str


class ImageAnalysis(TypedDict):
    """`analyse_image`: the features that fire on one image and where."""

    image: np.ndarray  # the picture as the model saw it (uint8 RGB)
    caption: str
    features: list[FeatureActivation]
    maps: dict[int, np.ndarray]  # feature → its activation over the base image's patch grid
    tile_maps: dict[int, np.ndarray]  # anyres: over the stitched tiles' patches; {} without tiles
    positions: str  # which tokens are the image's positions, in words
    ood: Shift | None  # None for a model without a scene set to compare with


class SteeringDefaults(TypedDict):
    """`steering_defaults`: the steering controls' starting values for an organism."""

    positions: str
    multiple: float  # of the feature's max activation
    suppress: bool  # zero the clamped feature's family rivals (the other colours)
    hookpoint: str
    feature: int | None  # the feature the steering was calibrated for (the first colour's), if any


class SteeredCaption(TypedDict):
    """The cached part of `steer_caption`: the captions with and without one clamped feature."""

    feature: int
    value: float
    positions: str
    add_error: bool
    suppressed: list[int]
    hookpoint: str
    baseline: str
    steered: str
    well_formed: bool | None  # the steered caption follows the scene template; None on a hub model
    edited_positions: int | None  # positions "active" wrote the clamp at; None for the other modes


class NamesConcept(TypedDict):
    """Whether each caption names the feature's concept."""

    baseline: bool
    steered: bool


class SteeringVerdict(SteeredCaption):
    """`steer_caption`: the captions and whether they name the feature's concept (its label now)."""

    concept: str  # "" for a feature without a label
    names_concept: NamesConcept | None  # None for a feature without a label


class CaptionVerdict(TypedDict):
    """What one caption says under a set of clamps."""

    caption: str
    well_formed: bool | None  # None on a hub model (free text)
    concepts: list[str]  # the scene template's concepts it names; [] on a hub model
    names_concept: dict[str, bool | None]  # clamped feature → whether it names its concept (None: no label)
    changed: list[str] | None  # attributes changed from the caption without clamps (zoo only)


class ClampShown(TypedDict):
    """A clamp as checked, with its feature's label."""

    feature: int
    value: float
    concept: str


class AloneVerdict(CaptionVerdict):
    """The caption with one clamp alone, beside all together."""

    feature: int
    value: float


class Steering(TypedDict):
    """`steer_caption_many` and `steer_combination`: captions with several clamps at once."""

    clamps: list[ClampShown]
    suppressed: list[int]
    positions: str
    add_error: bool
    hookpoint: str
    baseline: CaptionVerdict
    together: CaptionVerdict
    alone: NotRequired[list[AloneVerdict]]  # `steer_combination`'s only: each clamp by itself


class FeatureRow(TypedDict):
    """One alive feature of `feature_table`."""

    feature: int
    label: str
    family: str
    iou: float  # the label's concept IoU (0 without a concept label)
    density: float
    max_act: float


class TopImage(TypedDict):
    """One of a feature's top images on its page."""

    image_id: int
    score: float
    caption: str
    iou_label: float | None  # the map's IoU with the label's concept mask (zoo, concept labels only)


class FeaturePage(TypedDict):
    """`feature_page`: a feature's page, from the index alone."""

    feature: int
    label: str
    family: str
    iou: float
    concept_scores: dict[str, float]
    labelled_by: str
    density: float
    max_act: float
    mean_act: float
    hist_counts: list[int]
    hist_edges: list[float]
    top: list[TopImage]
    images: list[np.ndarray]
    maps: list[np.ndarray] | np.ndarray  # upsampled to each image: a list (hub, sizes differ) or one array (zoo)
    regions: list[np.ndarray] | np.ndarray
    patch_maps: list[np.ndarray]  # the index's own per-patch values


class ModelLabel(TypedDict):
    """`model_label`: the label the loaded model gives a hub feature, as labels.json keeps it."""

    feature: int
    label: str
    family: str
    score: float
    explainer: str
    images: int  # the top images the model was shown
