"""The Relevance tab's input checks, made before any model loads: a refused request costs no load.
Every refusal is an InputError whose message is meant for the user."""

from __future__ import annotations

import numpy as np

from backend.core import bounds

from .forward import RULES
from .methods import METHODS


def n_methods(methods) -> int:
    return len(methods) if isinstance(methods, (list, tuple)) else 1


class InputError(ValueError):
    """Bad user input, with a message meant for the user."""


def check_text(text) -> str:
    """The checks any model's text must pass, made before a model loads: a refused text costs no load."""
    if not isinstance(text, str) or not text.strip():
        raise InputError("Type a sentence first.")
    if len(text) > bounds.REL_TEXT_CHARS:  # before tokenizing: one 100k-character word is one token
        raise InputError(
            f"The text is {len(text):,} characters long; at most {bounds.REL_TEXT_CHARS:,} are "
            "taken. Nothing was computed."
        )
    return text


def check_text_request(text, methods, rules) -> None:
    """An explanation's text, methods and rules, checked before its model loads (explain_text checks
    them again, for callers that pass a loaded model)."""
    check_text(text)
    check_methods(methods)
    check_rules(rules)


def check_methods(methods) -> list[str]:
    methods = [m for m in (methods or []) if m]
    if not methods:
        raise InputError("Pick at least one method.")
    bad = [m for m in methods if m not in METHODS]
    if bad:
        raise InputError(f"Unknown method(s) {bad}; choose from {list(METHODS)}.")
    return methods


def check_rules(rules) -> list[str]:
    rules = sorted(set(rules or []))
    bad = [r for r in rules if r not in RULES]
    if bad:
        raise InputError(f"Unknown rule(s) {bad}; choose from {list(RULES)}.")
    return rules


def whole_in_range(value, lo: int, hi: int, what: str) -> int:
    """A whole number in [lo, hi], or a refusal that names the range: never clamped into it."""
    ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
    if not (ok and np.isfinite(value) and float(value).is_integer() and lo <= value <= hi):
        raise InputError(f"{what} must be a whole number from {lo} to {hi} (got {str(value)[:20]}).")
    return int(value)
