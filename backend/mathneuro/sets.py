"""The math and non-math sets a bench identifies on and scores: the organism's, GSM8K and the default
non-math set of hub mode, a user's set split into identification and scoring, and its answer rule in
words. Apart from the service because none of it touches a model: the service's bench holds them."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from ..core.presets import Preset
from . import sources
from .data import texts_of as data_texts

MAX_SAMPLES = 64
# Held-out items per set that the tab scores (the first N of each set; the organism tests and the
# benchmark use all of them). Zoo: exact match on 200 + 200 items is one batched forward each.
# Hub: 200 GSM8K test problems answered greedily; a Space on a small GPU may lower both knobs.
UI_EVAL = int(os.environ.get("WORKBENCH_MATH_EVAL_ITEMS", "200"))
DEFAULT_NONMATH = DEFAULT_MATH = "default"
# A deployment names its non-math file here (JSONL/CSV/text); users can also upload one in the tab.
NONMATH_ENV = "WORKBENCH_MATH_NONMATH"


class NoNonMath(RuntimeError):
    """Hub mode without a non-math set: the user must name one."""


# The two sides of the data, as this module names them and as the tab speaks of them.
SIDES = {"math": "math", "nonmath": "non-math"}


def reference_of(item: dict) -> str:
    """What the tab shows as the reference: GSM8K's final number, else the answer (or nothing)."""
    return str(item.get("final", item.get("answer", "")))


def digest(items: list[dict]) -> str:
    return hashlib.sha256(json.dumps(items, sort_keys=True).encode()).hexdigest()[:16]


RULES = {
    "final": "the last number of the model's answer against the reference's number",
    "choice": "the option letter the model names first",
    "answer": "the normalised answer at the start of the model's reply",
    "text": "next-token accuracy over the texts (no reference answers)",
    "exact": "exact match of the greedy answer (the organism's own vocabulary)",
}


def rule_of(items: list[dict], zoo: bool = False) -> str:
    """The answer rule of a set in words (chat.correct and chat.accuracy apply them); a mixed set
    names each rule with its count."""
    if zoo:
        return RULES["exact"]
    if sources.kind_of(items) == "text":
        return RULES["text"]
    kinds = ["final" if "final" in it else "choice" if it.get("choice") else "answer" for it in items]
    present = sorted(set(kinds), key=list(RULES).index)
    if len(present) == 1:
        return RULES[present[0]]
    return "; ".join(f"{RULES[k]} ({kinds.count(k)} items)" for k in present)


def set_entry(items: list[dict], label: str, zoo: bool = False) -> dict:
    # identification on the first half, evaluation on the rest, when there are enough
    half = len(items) // 2 if len(items) >= 2 * 8 else len(items)
    ident: list[dict] | list[str]
    ident, held = items[: min(half, MAX_SAMPLES)], items[half:] or items
    split = (
        f"{len(ident)} identify, {len(held)} score"
        if held is not items
        else "the same items identify and score (fewer than 16)"
    )
    if zoo:  # the organism identifies on whole texts in its own format ("prompt answer <eos>")
        ident = data_texts(ident)
    return {"items": held, "ident": ident, "label": f"{label}: {split}", "rule": rule_of(items, zoo)}


def load_zoo_data(preset: Preset) -> dict[str, Any]:
    """The organism's data, from its folder: held-out math and non-math items and its
    identification texts."""
    folder = Path(preset.location())
    read = lambda key: json.loads((folder / preset.extra[key]).read_text())  # noqa: E731
    data = {
        "math": read("math"),
        "ident_math": read("ident_math"),
        "math_source": "the organism's held-out arithmetic problems",
    }
    data["nonmath"], data["ident_nonmath"] = read("nonmath"), read("ident_nonmath")
    data["nonmath_sets"] = {
        DEFAULT_NONMATH: {
            "items": data["nonmath"],
            "ident": data["ident_nonmath"],
            "label": "the organism's held-out questions about its world",
            "rule": "exact match",
        }
    }
    data["math_sets"] = {
        DEFAULT_MATH: {
            "items": data["math"],
            "ident": data["ident_math"],
            "label": data["math_source"],
            "rule": "exact match of the worked solution",
        }
    }
    return data


def load_hub_data(preset: Preset) -> dict[str, Any]:
    """Hub mode's data: GSM8K as shipped (train for identification, test for evaluation), and the
    default non-math set: the file a deployment names in WORKBENCH_MATH_NONMATH, else RACE/MMLU
    through `datasets` where the hub is reachable, else none (the tab asks for a file)."""
    data: dict[str, Any] = {
        "math": sources.read_gsm8k("test"),
        "ident_math": sources.read_gsm8k("train", MAX_SAMPLES),
        "math_source": f"GSM8K test (first {UI_EVAL} of 1,319 scored; identification on the train split), "
        f"{sources.GSM8K_SOURCE}",
        "nonmath_sets": {},
    }
    data["math_sets"] = {
        DEFAULT_MATH: {
            "items": data["math"],
            "ident": data["ident_math"],
            "label": data["math_source"],
            "rule": "the last number of the model's answer against the number after '####'",
        }
    }
    return data


def load_default_nonmath(preset: Preset, data: dict) -> None:
    """Fill data["nonmath_sets"]["default"], or data["nonmath_error"] with the reason there is none.
    Called on first use, so that a job given its own files never asks the hub.

    In order: the deployment's file (WORKBENCH_MATH_NONMATH; a broken one is an error, not skipped),
    the paper's RACE + MMLU through `datasets`, and, where the hub cannot be reached, the shipped
    COCO captions as plain non-math text, labelled as the stand-in they are."""
    named = os.environ.get(NONMATH_ENV, "").strip()
    sets = data["nonmath_sets"]
    try:
        if named:
            items = sources.read_items(named)
            sets[DEFAULT_NONMATH] = set_entry(items, f"{Path(named).name} ({len(items)} items, {NONMATH_ENV})")
            return
        specs = preset.extra.get("nonmath") or []
        try:
            items = sources.load_hub_nonmath(specs)
            sets[DEFAULT_NONMATH] = set_entry(items, f"{' + '.join(specs)} via datasets ({len(items)} items)")
        except Exception as e:  # noqa: BLE001 - said in the label, and the shipped text stands in
            items = sources.read_captions()
            sets[DEFAULT_NONMATH] = set_entry(
                items,
                f"{sources.CAPTIONS_SOURCE}, {len(items)} captions, in place of the paper's RACE + "
                f"MMLU (not loaded: {e}; name a file above for a set of your own)",
            )
    except Exception as e:  # noqa: BLE001 - the tab shows why and asks for a file
        data["nonmath_error"] = str(e)
