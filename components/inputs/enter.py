"""One rule for Enter in every box: Enter in a one-line box runs that box's action; in a multi-line
box Enter starts a new line and Ctrl+Enter (⌘+Enter on a Mac) runs it, and the box says so.

Gradio runs a box's `.submit` only on Enter in a one-line box, and only where a tab wired one: Enter
computed in some boxes, did nothing in others and only broke the line in the multi-line ones.
`runs(button, *boxes)` marks each box with the button it runs; one listener in the page (`install`)
clicks that button, so the key runs exactly what a click runs (its checks, its chained events, its
queue). A box whose own `.submit` is wired already is not given to `runs`.
"""

from __future__ import annotations

import gradio as gr

PREFIX = "wb-enter--"
MULTI_HINT = "Ctrl+Enter (⌘+Enter on a Mac) runs it"

# Capture phase, before Gradio's own handlers; the click comes after the key's own input has been
# taken into the box's value (Gradio binds it on input).
ENTER_JS = """() => {
  if (window.wbEnterRule) return;
  window.wbEnterRule = true;
  document.addEventListener('keydown', (e) => {
    if (e.key !== 'Enter' || e.isComposing || e.shiftKey || e.altKey) return;
    const box = e.target && e.target.closest ? e.target.closest('.wb-enter') : null;
    if (!box) return;
    const multi = box.classList.contains('wb-enter-multi');
    if (multi !== (e.ctrlKey || e.metaKey)) return;
    const mark = [...box.classList].find((c) => c.startsWith('%s'));
    const button = mark && document.getElementById(mark.slice(%d));
    if (!button || button.disabled) return;
    e.preventDefault();
    setTimeout(() => button.click(), 0);
  }, true);
}""" % (PREFIX, len(PREFIX))


def is_multiline(box) -> bool:
    return isinstance(box, gr.Textbox) and int(box.lines or 1) > 1


def runs(button: gr.Button, *boxes) -> None:
    """Enter in each of `boxes` (Ctrl/⌘+Enter in a multi-line one) clicks `button`."""
    if not button.elem_id:
        raise ValueError("a button run by Enter needs an elem_id")
    for box in boxes:
        multi = is_multiline(box)
        box.elem_classes = [
            *(box.elem_classes or []),
            "wb-enter",
            PREFIX + button.elem_id,
            "wb-enter-multi" if multi else "wb-enter-one",
        ]
        if multi and MULTI_HINT not in (box.info or ""):
            box.info = f"{box.info} · {MULTI_HINT}" if box.info else MULTI_HINT


def install(demo: gr.Blocks) -> None:
    """The page's one listener for the rule. Call inside `with demo:`."""
    demo.load(None, js=ENTER_JS, api_visibility="private")
