"""A deep link's values: JSON in the URL, each checked against the component it restores (type,
range, choices, length) before it is restored; a value that does not fit is a LinkValueError with
the reason (components.links.deep_links skips it with a notice)."""

from __future__ import annotations

import json
import math
from typing import Any, Iterator

import gradio as gr

MAX_TEXT = 10_000


class LinkValueError(ValueError):
    """A URL value that does not fit its component."""


def accept_link(comp, validate):
    """Let `comp` (a CheckboxGroup or multiselect Dropdown) take linked values outside its current
    choices, checked by `validate(values) -> values` (ValueError = refused). Returns `comp`."""
    comp._wb_link_validate = validate
    return comp


def walk(block) -> Iterator[Any]:
    """Every block below `block`, depth first."""
    for child in getattr(block, "children", None) or []:
        yield child
        yield from walk(child)


def _choice_values(comp) -> list:
    return [c[1] if isinstance(c, (tuple, list)) else c for c in (getattr(comp, "choices", None) or [])]


def _number(raw, what: str) -> float:
    if isinstance(raw, bool) or not isinstance(raw, (int, float)):
        raise LinkValueError(f"{what} needs a number")
    if not math.isfinite(raw):
        raise LinkValueError(f"{what} needs a finite number")
    return raw


def coerce(comp, raw: Any) -> Any:
    """The value `raw` (decoded from the URL) as `comp` accepts it, or LinkValueError."""
    what = comp.elem_id or type(comp).__name__
    if isinstance(comp, gr.Checkbox):
        if isinstance(raw, bool):
            return raw
        raise LinkValueError(f"{what} needs true or false")
    if isinstance(comp, gr.Slider):
        v = _number(raw, what)
        if not comp.minimum <= v <= comp.maximum:
            raise LinkValueError(f"{what} must lie between {comp.minimum} and {comp.maximum}")
        step = float(comp.step or 0)
        if step >= 1 and not float((v - comp.minimum) / step).is_integer():  # 3.5 on a whole-number slider
            raise LinkValueError(f"{what} must be a whole number of steps of {step:g} from {comp.minimum:g}")
        return v
    if isinstance(comp, gr.Number):
        v = _number(raw, what)
        if comp.minimum is not None and v < comp.minimum or comp.maximum is not None and v > comp.maximum:
            lo = "" if comp.minimum is None else f" from {comp.minimum:g}"
            hi = "" if comp.maximum is None else f" up to {comp.maximum:g}"
            raise LinkValueError(f"{what} must be a number{lo}{hi}")
        if comp.precision == 0 and not float(v).is_integer():  # refused as the box refuses it, not rounded
            raise LinkValueError(f"{what} must be a whole number")
        return int(v) if comp.precision == 0 else v
    if isinstance(comp, gr.CheckboxGroup) or (isinstance(comp, gr.Dropdown) and comp.multiselect):
        if not isinstance(raw, list) or not all(isinstance(x, (str, int, float)) for x in raw):
            raise LinkValueError(f"{what} needs a list of choices")
        validate = getattr(comp, "_wb_link_validate", None)
        if validate is not None:
            if len(raw) > 1000 or any(len(str(x)) > 200 for x in raw):
                raise LinkValueError(f"{what}: too many or too long values")
            try:
                return list(validate(list(raw)))
            except (ValueError, KeyError, IndexError) as e:
                raise LinkValueError(f"{what}: {str(e)[:120]}") from None
        allowed = _choice_values(comp)
        custom = isinstance(comp, gr.Dropdown) and comp.allow_custom_value
        bad = [x for x in raw if x not in allowed]
        if bad and not custom:
            raise LinkValueError(f"{what}: {bad[:3]} not among the choices")
        return list(raw)
    if isinstance(comp, (gr.Dropdown, gr.Radio)):
        allowed = _choice_values(comp)
        if raw in allowed or (
            isinstance(comp, gr.Dropdown) and comp.allow_custom_value and isinstance(raw, str) and len(raw) <= MAX_TEXT
        ):
            return raw
        raise LinkValueError(f"{what}: {str(raw)[:40]!r} is not among the choices")
    if isinstance(comp, gr.Textbox):
        if not isinstance(raw, str):
            raw = json.dumps(raw)  # a number typed into a text field is still text
        limit = min(MAX_TEXT, comp.max_length or MAX_TEXT)
        if len(raw) > limit:
            raise LinkValueError(f"{what} is longer than {limit} characters")
        return raw
    raise LinkValueError(f"{what} cannot be set from a link")


def decode(text: str) -> Any:
    """A URL value: JSON when it parses, else the bare text."""
    try:
        return json.loads(text)
    except (ValueError, TypeError):
        return text


def encode(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
