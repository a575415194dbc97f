"""Which model each part of the Relevance tab explains, in words that follow the picker: the line
under the title names the picked text model (not the zoo default once a visitor picks their own),
and the long-range section runs on the pick unless it is a zoo organism."""

from __future__ import annotations

import html

from backend.lrp import service as svc

ZOO_NOTE = (
    " — the zoo organism: 1–3 polar words among distractors decide the label by majority; the truth is where they are."
)
HUB_NOTE = (
    " — pick the checkpoint below. Tokens are shown as the text they stand for; a faint · marks "
    "a token that begins with a space."
)


def model_line(source: str, key: str | None, hub: bool) -> str:
    """'Text model: <the pick>' with the zoo organism's note only for the zoo organism."""
    from backend.lrp.models import text_preset

    try:
        picked = svc.pick_text(source, key or None)
    except svc.InputError:  # the picker's own line says why; this one keeps to what will run
        return "<span class='wb-muted'>Text model: the pick above is refused (see why under it).</span>"
    p = picked.preset
    which = (
        "Your own text model" if picked.custom else "Default text model" if p == text_preset(source) else "Text model"
    )
    name = html.escape(p.label or p.path_or_id)
    note = ZOO_NOTE if p.source == "zoo" and p.path_or_id == "mamba-sentiment" else ""
    return f"<span class='wb-muted'>{which}: <b>{name}</b>{note}{HUB_NOTE if hub else ''}</span>"


def long_on_pick(source: str, key: str | None) -> bool:
    """Whether the long-range run explains the picked model: yes for a checkpoint or the visitor's
    own model; the zoo's text organisms hand it to the zoo long-range organism."""
    try:
        return svc.pick_text(source, key or None).preset.source != "zoo"
    except svc.InputError:
        return True  # the run then refuses the pick in the picker's words


def long_note(source: str, key: str | None, hub: bool) -> str:
    if not long_on_pick(source, key):
        return "<span class='wb-muted'>Runs on the <b>zoo long-range organism</b>, not on the text model above.</span>"
    try:
        name = html.escape(svc.pick_text(source, key or None).preset.label or str(key))
    except svc.InputError:
        name = html.escape(str(key or ""))
    return (
        f"<span class='wb-muted'>Runs on <b>{name}</b>, the model picked above: type a text whose next "
        f"token depends on something far back.</span>"
    )
