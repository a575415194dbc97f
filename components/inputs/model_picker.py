"""The model picker every tab shows: its listed models (zoo organisms, the papers' checkpoints) and
"your own", a hub id or a folder typed into the same box.

The box is a Dropdown that takes typed values, so the pick is URL state like any other input (a
deep link carries it: components.links.deep_links). Under it one line says what the pick is, read from
metadata only (class, parameters, size) or why it is refused, as soon as it changes; the tab's own
handlers resolve the same key with `backend.core.picker.resolve` before loading anything.
"""

from __future__ import annotations

import html
import os

import gradio as gr

from backend.core import modelcheck as M
from backend.core import picker
from backend.core import presets as P


def custom_hint(takes: str = "") -> str:
    """How to pick your own model here, or why this server does not let you: the same policy as
    `modelcheck.allowed_custom` (folders under the owner's roots load even where hub ids do not)."""
    if M.custom_models_setting() is False:
        return "Custom models are turned off on this server."
    roots = [str(r) for r in P.allowed_roots()[1:]]
    folders = f"a folder under {', '.join(roots)}" if roots else ""
    where = f"a hub id (owner/name) or {folders}" if folders else "a hub id (owner/name)"
    if M.on_public_space() and M.custom_models_setting() is None:
        owners = os.environ.get("WORKBENCH_CUSTOM_OWNERS", "").strip()
        if owners:
            where = f"a hub id of {owners}" + (f" or {folders}" if folders else "")
        elif folders:
            where = folders
        else:
            return "Custom models are off on this Space (its owner can allow them)."
    cap = M.custom_max_bytes()
    size = f", up to {M.gb_words(cap)}" if cap else ""
    own = f"your own {takes}" if takes else "your own"
    return f"Or type {own}: {where}{size}; safetensors only."


def _line(text: str) -> str:
    bad = text.startswith("✗")
    cls = "wb-picker-line wb-picker-bad" if bad else "wb-picker-line wb-muted"
    return f"<div class='{cls}'>{html.escape(text)}</div>"


LABEL = "Model"  # one name in every tab; what a tab takes is said in the hint under it


def model_picker(
    listed: list[P.Preset], method: str, *, elem_id: str, value: str | None = None, takes: str = "", scale: int = 1
):
    """(dropdown, status line). The dropdown's value is a key for `picker.resolve(key, listed, method)`;
    `takes` names the kind of model the tab takes, for the hint ("Mamba language model")."""
    listed = list(listed)
    value = value or (listed[0].path_or_id if listed else None)
    allow = M.custom_models_setting() is not False
    with gr.Column(scale=scale, min_width=260, elem_classes=["wb-picker"]):
        box = gr.Dropdown(
            picker.choices(listed),
            value=value,
            label=LABEL,
            allow_custom_value=allow,
            filterable=True,
            info=custom_hint(takes),
            elem_id=elem_id,
        )
        line = gr.HTML(
            _line(first := picker.check_line(value, listed, method)), elem_id=f"{elem_id}-check", padding=False
        )
    # a tab's method is named as the tab: under ZeroGPU the main process resolves this box's value
    # with the tab's pick check and loads a user's own model before a worker forks (components.serving.guard)
    box.wb_pick_tab = method
    # the session's last pick the check accepted: "Link to this view" writes it instead of a refused
    # one (components.links.deep_links), so a link never carries a model the tab would not run
    box.wb_link_fallback = accepted = gr.State(None if first.startswith("✗") else value)

    def check(k, last):
        text = picker.check_line(k, listed, method)
        return _line(text), (last if text.startswith("✗") else k)

    box.change(check, [box, accepted], [line, accepted], queue=False, show_progress="hidden", api_visibility="private")
    return box, line
