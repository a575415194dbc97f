"""The Memorization tab's answers (backend.nemo.service, a search's from backend.nemo.search),
declared: plain dicts at run time (cached, dumped as the API's and the MCP tools' JSON), their keys
and types checked by mypy."""

from __future__ import annotations

from typing import Any, TypedDict

import numpy as np

# {value layer name: [channel, ...]}, as backend.nemo.core.Spec (not imported: this module stays light)
Spec = dict[str, list[int]]


class MemorizationCheck(TypedDict):
    """`check`: one prompt's memorization score against θ_mem and its value neurons' z-scores."""

    prompt: str
    score: float
    theta_mem: float
    memorized: bool
    layers: list[str]  # short names, the keys of `z` and `activation`
    z: dict[str, list[float]]  # against the statistics `stats` names
    activation: dict[str, list[float]]
    max_z: float
    is_training_prompt: bool
    listed_type: str | None  # the model's memorization type for a prompt on its list (VM, TM)
    detection: dict[str, Any] | None  # backend.nemo.model.detection; None without recorded scores
    stats: dict[str, Any]  # which statistics the z-scores are against (backend.nemo.visitor)


class CheckRow(TypedDict):
    """One prompt's row of `check_batch`."""

    prompt: str
    score: float
    memorized: bool
    max_z: float
    listed_type: str | None


class LocalizationJSON(TypedDict):
    """backend.nemo.search.Localization.to_json: one prompt's search, its neurons and its history."""

    prompt: str
    neurons: Spec
    n_neurons: int
    initial: Spec  # the initial selection, before the refinement dropped neurons
    n_initial: int
    theta: float
    k: int
    seconds: float
    evaluations: int
    found: bool
    relaxed: bool  # the refinement ran against the last SSIM reached, not θ_mem
    skipped: bool  # not memorized: nothing was searched
    threshold: float
    guidance_scale: float
    seeds: list[int]
    seeds_kept: list[int]
    history: list[dict[str, Any]]
    unet_batches: int


class Localized(LocalizationJSON):
    """`find`: the search's answer with its neurons as labels (e.g. 'down1.attn0:17')."""

    labels: list[str]
    initial_labels: list[str]


class Comparison(TypedDict):
    """`compare`: generations with the neurons on and off and what they measure in each condition.
    With no neurons named, the off values are the on values."""

    prompt: str
    seeds: list[int]
    neurons: list[str]
    n_neurons: int
    theta_mem: float
    images_on: np.ndarray  # [seed, H, W, 3] in [0, 1]
    ssim_on: list[float] | None  # per seed, to the reference; None without one
    diversity_on: float | None  # None for a single seed
    alignment_on: float | None  # None where the prompt names nothing the proxy checks
    score_on: float
    images_off: np.ndarray
    ssim_off: list[float] | None
    diversity_off: float | None
    alignment_off: float | None
    score_off: float
    train_image: np.ndarray | None  # the reference, at the generations' size
    reference_kind: str | None  # "training image", "your image" or None


class TableRow(TypedDict):
    """One memorized prompt of `results_table`: its neurons and the medians over seeds with them on,
    off, and with as many random neurons off."""

    prompt: str
    n_neurons: int
    neurons: list[str]
    skipped: bool
    relaxed: bool
    ssim_on: float | None  # None where the model ships no training image
    ssim_off: float | None
    ssim_random_off: float | None
    type: str
    diversity_random_off: float | None
    diversity_on: float | None
    diversity_off: float | None
    alignment_on: float | None
    alignment_off: float | None
    score_on: float
    score_off: float
    score_random_off: float


class TableSummary(TypedDict):
    """The paper's table's summary over the prompts."""

    n_prompts: int
    theta_mem: float
    median_neurons: float
    n_skipped: int
    n_relaxed: int
    search_guidance: float
    n_localized: int
    n_above_on: int
    share_below_theta_off: float | None  # over the localised prompts; None without any
    share_below_theta_random: float | None
    median_ssim_on: float | None
    median_ssim_off: float | None
    median_ssim_random_off: float | None
    median_diversity_on: float | None
    median_diversity_off: float | None
    median_localisation_s: float


class ResultsTable(TypedDict):
    """`results_table`: the paper's table for every memorized prompt of the organism."""

    rows: list[TableRow]
    summary: TableSummary
