"""The Adapters tab's answers (backend.pissa.service, the race's summary from backend.pissa.race),
declared: plain dicts at run time (cached, dumped as the API's and the MCP tools' JSON), their keys
and types checked by mypy."""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

import numpy as np


class LayerAnalysis(TypedDict):
    """`layer_analysis`: one layer's spectrum, its PiSSA split at a rank and weight histograms' samples."""

    model: str
    layer: str
    shape: list[int]
    rank: int
    init: str
    singular_values: list[float]
    residual_singular_values: list[float]
    energy_top_r: float  # share of Σσ² in the top `rank` singular values
    reconstruction_rel_error: float
    init_output_rel_gap: float  # the adapted layer's output at init against the base layer's (should be ~0)
    w_sample: np.ndarray  # the weights, or MAX_HIST of them drawn at random, for the histogram
    w_res_sample: np.ndarray  # the residual's weights at the same places
    w_absmax: float
    w_res_absmax: float
    w_std: float
    w_res_std: float
    seconds: float


# The error table's ratio columns: QLoRA and LoftQ / QPiSSA with 1 or 5 alternating iterations
Ratio = Literal["qlora", "loftq-1", "loftq-5", "qpissa-1", "qpissa-5"]

# One layer's row of `error_table`: each method's error-reduction ratio at the table's rank, None
# for all of them where the rank exceeds the layer's own (the functional form: keys hold hyphens)
ErrorRow = TypedDict(
    "ErrorRow",
    {
        "layer": str,
        "shape": list[int],
        "qlora": float | None,
        "loftq-1": float | None,
        "loftq-5": float | None,
        "qpissa-1": float | None,
        "qpissa-5": float | None,
    },
)


class ErrorHeatmap(TypedDict):
    """One method's error-reduction ratio over layers × ranks."""

    method: str  # e.g. "qpissa-1"
    layers: list[str]
    ranks: list[int]
    values: list[list[float | None]]  # [layer][rank]; None where the rank exceeds the layer's


class ErrorSummary(TypedDict):
    """The error table over the layers the rank fits."""

    layers: int
    skipped_layers: list[str]
    qpissa1_beats_loftq1: int  # layers where QPiSSA-1 reduces the error more than LoftQ-1
    qpissa5_beats_loftq1: int
    mean: dict[str, float]  # ratio column → its mean


class ErrorTable(TypedDict):
    """`error_table`: quantisation error reduction per layer and method, a heatmap and a summary."""

    model: str
    rank: int
    rows: list[ErrorRow]
    heatmap: ErrorHeatmap
    summary: ErrorSummary


class Wins(TypedDict):
    """Seeds where PiSSA's smoothed last loss is below LoRA's, of those both ran."""

    seeds: int
    wins: int


class RaceSummary(TypedDict):
    """backend.pissa.race.summarize: the race's losses at the last step every run completed."""

    settings: dict[str, Any]  # the race's rank, alpha, lr, batch and task, as given
    steps_run: int
    steps_planned: int
    loss_at_steps_run: dict[str, dict[str, float | None]]  # method → seed → loss
    mean_loss_last10: dict[str, float | None]
    trainable_params: dict[str, int]
    pissa_beats_lora: NotRequired[Wins]  # only in a race of both LoRA and PiSSA


class Conversion(TypedDict):
    """`conversion_demo`: a PiSSA fine-tune converted to a LoRA on the original weights, and how its
    outputs compare."""

    model: str
    layers: list[str]
    rank: int
    converted_rank: int  # 2 × rank: the LoRA that replays PiSSA's update on the original weights
    steps: int
    max_abs_diff: float
    rel_diff: float
    output_scale: float
    dtype: str
    tolerance: float  # the largest rel_diff that still reads as the same outputs (conversion_tolerance)
    same_outputs: bool
    roundoff_at_init: float  # the PiSSA model's difference from the base before any step: W_res's round-off
    change_from_base: float
    final_loss: float
    n_inputs: int
