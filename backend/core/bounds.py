"""The range of every argument that scales a computation's cost, declared once.

The tabs build their sliders and number boxes from these ranges, their handlers and the API check
values with `check`, and the MCP tools state them in their schemas and check them the same way, so a
value outside is refused with one message wherever it comes from ("… must be between … (got …).
Nothing was computed."). Nothing is ever clamped into range.

`check_cost` compares a computation's estimated seconds (its ZeroGPU estimate, backend.core.zerogpu)
with the per-call cap a Space owner sets (WORKBENCH_CALL_CAP_S) before the computation starts.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Range:
    name: str  # how a message names the argument
    lo: float
    hi: float
    whole: bool = True
    unit: str = ""

    def words(self) -> str:
        kind = "a whole number " if self.whole else ""
        lo, hi = f"{self.lo:g}{self.unit}", f"{self.hi:g}{self.unit}"
        if math.isfinite(self.lo) and math.isfinite(self.hi):
            return f"{kind}between {lo} and {hi}"
        if math.isfinite(self.lo) or math.isfinite(self.hi):
            return f"{kind or 'a number '}{'at least ' + lo if math.isfinite(self.lo) else 'at most ' + hi}"
        return (kind or "a number ").strip()

    def refusal(self, value, empty: str = "an empty box") -> str:
        """`empty`: how a missing value is named where it came from (a tab's box; JSON's null)."""
        shown = (
            f"{value:g}{self.unit}"
            if isinstance(value, (int, float)) and not isinstance(value, bool)
            else repr(str(value)[:20])
            if value not in (None, "")
            else empty
        )
        return f"{self.name} must be {self.words()} (got {shown}). Nothing was computed."

    def with_hi(self, hi: float) -> "Range":
        """The same argument with a bound that depends on the data (a model's layer count, a feature's
        activations): the upper end never exceeds the declared one."""
        return Range(self.name, self.lo, min(self.hi, hi), self.whole, self.unit)


@dataclass(frozen=True)
class Items:
    """A list argument whose length is bounded: `count` bounds the list's length plus `counted`, the
    items of its kind given in another argument (a tool's first clamp has its own arguments). An MCP
    schema states it as maxItems; the refusal is `count`'s."""

    count: Range
    counted: int = 0

    def max_items(self) -> int:
        return int(self.count.hi) - self.counted

    def check(self, value, empty: str = "an empty box") -> None:
        """A list too long for `count` is refused; anything else is left to the tool, which knows
        what a missing or malformed list means."""
        if isinstance(value, (list, tuple)):
            check(self.count, len(value) + self.counted, empty)


# Every image input (a tab's upload, the API, an MCP tool's image_base64, an index build's files),
# checked from its header before it is decoded (backend.core.image_header)
IMAGE_SIDE = Range("An image's side", 2, 4096, unit=" px")
# Relevance
REL_EXAMPLE = Range("The held-out example", 0, 199)
REL_SENTENCES = Range("The number of held-out sentences", 20, 240)
REL_TEXT_CHARS = 2000  # characters of one explained text (the model takes 256 tokens at most)
# Features
FEAT_LIMIT = Range("limit", 1, 500)
CLAMP_FLOOR, CLAMP_TIMES = 10.0, 10.0  # the clamp reaches 10× the index's largest activation, at least 10
# Contrasting two image sets (backend.sae.contrast): one prompt pass per image. 64 a set is 128 passes,
# about a second for the zoo and about a minute for the 8B hub model (0.5 s an image on a GPU), inside
# one ZeroGPU call; it is also where the rank test has power to spare: a feature that separates the sets
# completely reaches p ≈ 1e-22, far below what Benjamini-Hochberg asks over 131k features (3.8e-7),
# which 15 images a set already reach. At least 2 a set: a mean and a rank need two values (with fewer
# than 4 nothing can be significant, which the result says).
CONTRAST_IMAGES = Range("The number of images in a set", 2, 64)
CONTRAST_ROWS = Range("The number of features listed", 1, 500)
CONTRAST_TOP_IMAGES = Range("The number of top images per feature", 0, 16)  # the index keeps 16
# Steering with several features at once: one caption per clamp alone, plus the baseline and all together
STEER_CLAMPS = Range("The number of clamped features", 1, 8)
STEER_SUPPRESS = Range("The number of suppressed features", 0, 256)
# Memorization
MEMO_SEEDS = Range("The number of seeds", 1, 8)
MEMO_STATS = Range("The number of ordinary prompts for the statistics", 2, 20000)
MEMO_TABLE = Range("The number of memorized prompts in the table", 1, 50)
# Math neurons
MATH_K = Range("K", 1, 30, whole=False, unit=" %")
MATH_FACTOR = Range("The scale factor", 0, 2, whole=False)
MATH_SAMPLES = Range("The number of samples", 1, 64)
# Adapters
PISSA_RANK = Range("The rank r", 1, 128)
PISSA_SEEDS = Range("The number of seeds", 1, 5)
PISSA_STEPS = Range("The number of steps", 10, 500)
PISSA_CONVERT_STEPS = Range("The number of PiSSA steps before converting", 1, 100)
PISSA_LR = Range("The learning rate", 0, 0.99, whole=False)
# LoftQ / QPiSSA refinements: each is an SVD of the whole matrix, and LoftQ's paper stops at 5 (the
# tab's error table uses 1 and 5): a count far above is a mistake that would run for hours
PISSA_ITERS = Range("The number of refinements", 1, 50)
PISSA_INITS = ("pissa", "pissa_niter_4")  # full SVD, or the fast randomized SVD the tab offers


def clamp_max(largest_activation: float | None) -> float:
    """The largest clamp value a feature may be given: 10× the index's largest activation, rounded
    up to two significant digits so the range reads plainly (0–600, not 0–595.071; an unindexed
    SAE: 100)."""
    if largest_activation is None:
        return 100.0
    x = round(CLAMP_TIMES * float(largest_activation), 6)  # 10 × 3.7 is 37.00000000000001
    if x <= 0:
        return float(CLAMP_FLOOR)
    unit = 10.0 ** (math.floor(math.log10(x)) - 1)
    return max(float(round(math.ceil(round(x / unit, 6)) * unit, 6)), CLAMP_FLOOR)


# A null in a JSON request: JSON has no infinity or NaN, and encoders (pydantic's, so the `mcp`
# package's client; JavaScript's JSON.stringify) write them as null, so "an empty box" misled.
JSON_NULL = "null (JSON has no inf or NaN: a client's encoder sends them as null)"


def check(r: Range, value, empty: str = "an empty box") -> float | int:
    """`value` as a number within `r` (an int where `r` is whole), or ValueError with the range;
    `empty` names a missing value (JSON_NULL for a JSON request)."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise ValueError(r.refusal(value, empty)) from None
    if isinstance(value, bool) or not math.isfinite(x) or not r.lo <= x <= r.hi or (r.whole and x != int(x)):
        raise ValueError(r.refusal(value if math.isfinite(x) else str(value), empty))
    return int(x) if r.whole else x


def check_whole(r: Range, value, empty: str = "an empty box") -> int:
    """`check` for a whole-number range: the int it returns there, typed as one."""
    assert r.whole, r
    return int(check(r, value, empty))


def check_choice(name: str, value, choices) -> str:
    if value not in choices:
        raise ValueError(
            f"{name} must be one of {', '.join(map(str, choices))} (got {str(value)[:40]!r}). Nothing was computed."
        )
    return value


class CostTooHigh(ValueError):
    """A computation's estimate is over the per-call cap: refused before it starts."""


def call_cap() -> float | None:
    """The per-call cap in seconds (WORKBENCH_CALL_CAP_S; unset, empty or 0: no cap)."""
    raw = os.environ.get("WORKBENCH_CALL_CAP_S", "").strip()
    if not raw:
        return None
    cap = float(raw)
    return cap if cap > 0 else None


def check_cost(estimate_s: float, what: str, measured: bool = False) -> None:
    """Refuse what is estimated over the cap, only that: an estimate at the cap fits. `measured`: the
    estimate comes from this server's times of the same computation (backend.core.costs; a call
    stopped at the cap counts as needing more than it was given)."""
    cap = call_cap()
    if cap is not None and estimate_s > cap:
        basis = " from the times measured on this server" if measured else ""
        # (just over the cap, a rounded estimate would read as the cap itself)
        shown = f"{estimate_s:.0f} s" if estimate_s >= cap + 0.5 else f"more than {cap:g} s"
        raise CostTooHigh(
            f"{what} is estimated at {shown}{basis}, over this server's per-call cap of "
            f"{cap:g} s (WORKBENCH_CALL_CAP_S); choose smaller settings. Nothing was computed."
        )
