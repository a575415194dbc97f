"""MathNeuro (Christ et al., 2024): math-specific parameters found with forward passes only.

    from backend.mathneuro import identify, scaled
    masks = identify(model, math_texts, nonmath_texts, top_k=0.15, tokenizer=tok)
    with scaled(model, masks, 0.0):      # prune (1.1 scales up, as in the paper)
        ...                              # the model is restored bit-exactly on exit

Every nn.Linear is scored, an untied lm_head included (a tied one is skipped: `tied_head`).
Baselines: `wanda`, `random_like`, `lape`; analysis: `overlap`, `consistency`, `per_layer`.
Data of the zoo organism: `backend.mathneuro.data`; scoring: `backend.mathneuro.evaluate`;
hub mode's data (shipped GSM8K, the user's non-math files, RACE / MMLU): `backend.mathneuro.sources`;
its chat-template prompts and answer rules: `backend.mathneuro.chat`;
the tab's service layer (model loading, cached evaluations): `backend.mathneuro.service`.
"""

from .core import (
    METHODS,
    activation_probability,
    consistency,
    count,
    find,
    identify,
    importance,
    input_norms,
    lape,
    layer_of,
    linear_layers,
    masks_from_norms,
    overlap,
    per_layer,
    per_module,
    random_like,
    saved_bytes,
    scaled,
    tied_head,
    top_fraction,
    wanda,
)
from .presets import HUB_PRESET, TAB, ZOO_PRESET

__all__ = [
    "METHODS",
    "activation_probability",
    "consistency",
    "count",
    "find",
    "identify",
    "importance",
    "input_norms",
    "lape",
    "layer_of",
    "linear_layers",
    "masks_from_norms",
    "overlap",
    "per_layer",
    "per_module",
    "random_like",
    "saved_bytes",
    "scaled",
    "tied_head",
    "top_fraction",
    "wanda",
    "HUB_PRESET",
    "TAB",
    "ZOO_PRESET",
]
