"""The Relevance tab's answers (backend.lrp.service), declared: plain dicts at run time (cached,
copied with dict(), dumped as the API's and the MCP tools' JSON), their keys and types checked by mypy."""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

import numpy as np


class TextExplanation(TypedDict):
    """`explain_text`: each method's relevance of every input token for one explained next token."""

    tokens: list[str]
    ids: list[int]
    target: str
    target_id: int
    target_note: str  # how a typed target word was read (it split into tokens); "" for the prediction
    logit: float
    top_next: dict[str, float]  # the five likeliest next tokens: text → logit
    methods: list[str]
    labels: dict[str, str]  # method → its name in the tab
    rules: list[str]
    relevance: dict[str, list[float]]
    word_positions: list[int]  # the positions a faithfulness test may remove (not the prompt's template)
    conv_bias: bool  # a conv1d bias takes a share of the logit: Σ relevance then falls short of it
    sum_relevance: dict[str, float]
    unknown_words: list[str]  # typed words a zoo vocabulary lacks (read as its unk token)
    model: str
    template_positions: list[int]


class TopToken(TypedDict):
    """One of a method's most relevant tokens and how far back from the prediction it sits."""

    position: int
    token: str
    distance: int
    relevance: float


class LongRange(TextExplanation):
    """`longrange`: `explain_text`'s answer and, per method, its most relevant tokens."""

    top_tokens: dict[str, list[TopToken]]


class SentenceRecord(TypedDict):
    """One held-out sentence of an evaluation: its explained target and each method's numbers."""

    i: int  # its 1-based place in the input
    text: str
    label: str | None
    tokens: list[str]
    target: str | None  # None only when no method ran
    relevance: dict[str, list[float]]
    delta_af: dict[str, float]
    sum_r: dict[str, float]
    logit: dict[str, float]
    precision: NotRequired[dict[str, float]]  # only where the sentences carry planted evidence (the zoo's)


class HeldoutEvaluation(TypedDict):
    """`heldout_sentiment`: faithfulness (ΔA^F), precision@k and conservation on the zoo's held-out set."""

    n: int
    methods: list[str]  # the chosen methods and the "random" baseline
    labels: dict[str, str]
    # per method: backend.lrp.evaluate.summary less its per-sentence lists (those are in `sentences`)
    results: dict[str, dict[str, Any]]
    sentences: list[SentenceRecord]


class SentenceEvaluation(HeldoutEvaluation):
    """`heldout_sentences`: the same evaluation on the user's sentences, and how they were read."""

    source: str
    target: str  # "label" or "predicted"
    label_tokens: dict[str, str]  # label → the token its label word starts with
    targets_used: dict[str, int]  # target token → sentences, most used first
    neutral: str  # the token that replaces removed words
    suffix: str
    skipped: dict[str, int]  # reason → sentences skipped for it (reasons with none left out)
    notes: list[str]
    model: str


class ImageExplanation(TypedDict):
    """`explain_image`: each method's pixel relevance for the predicted class of one image."""

    image: np.ndarray  # the model's input: size × size grayscale in [0, 1]
    pred: str
    pred_index: int
    logits: dict[str, float]
    maps: dict[str, np.ndarray]
    sum_relevance: dict[str, float]
    methods: list[str]
    labels: dict[str, str]
    rules: list[str]
    example: int | None  # the held-out image this one is, when it is one
    mask: np.ndarray | None  # that example's ground-truth region, when it has one
    share_in_region: dict[str, float] | None  # share of positive relevance inside the mask
    model: str
