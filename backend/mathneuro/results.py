"""The Math neurons tab's answers (backend.mathneuro.service), declared: plain dicts at run time
(cached, dumped as the API's and the MCP tools' JSON), their keys and types checked by mypy."""

from __future__ import annotations

from typing import TypedDict


class Accuracy(TypedDict):
    """`Bench.baseline`: the unmodified model's accuracy on the math and the non-math set."""

    math: float
    nonmath: float


class Evaluation(Accuracy):
    """`Bench.evaluate`: the accuracies with a setting's parameters scaled by its factor."""

    n_params: int  # parameters the setting selects (those scaled)


class ScalePoint(Evaluation):
    """One point of `Bench.scale_curve`: the evaluation at one scale factor."""

    factor: float


class Sample(TypedDict):
    """One held-out question of `Bench.samples`, answered before and after the intervention."""

    kind: str  # "math" or "non-math"
    prompt: str
    answer: str  # the reference, as the tab shows it ("" for a text without one)
    before: str
    after: str
    ok_before: bool | None  # None for a text without a reference answer
    ok_after: bool | None


class Answer(TypedDict):
    """`Bench.answer`: the greedy answer to a user's own prompt, before and after the intervention."""

    prompt: str
    before: str
    after: str


class Description(TypedDict):
    """`describe`: what is loaded, in words: the model, the math and non-math sets and their rules."""

    model: str
    label: str
    zoo: bool
    math: str
    math_rule: str
    math_own: bool  # the math set is the user's, not the model's default
    template: str | None  # how a hub model's prompts are written; None for the zoo organism
    nonmath: str | None  # None: no non-math set is loaded (`nonmath_error` says why)
    nonmath_rule: str | None
    nonmath_error: str | None
    n_eval: int  # held-out items per set the tab scores
