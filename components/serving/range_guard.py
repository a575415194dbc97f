"""A number typed into a slider's box past its range is refused in the browser, as the API refuses it.

Gradio's slider clamps a typed number into range when the box is left, silently, and the clamped
value is what the next event computes with (held-out example 500 loaded example 199). Instead, one
script for every slider of the app (RANGE_JS): while the typed number is out of range it never
reaches the slider's value (so no event sees it), leaving the box or pressing Enter refuses it (a
toast from the server with the message of backend.core.bounds, the one the API and the MCP tools
give), the box shows the value in use again, and the click whose press left the box is swallowed,
so nothing is computed; the user's next click goes through. Enter in any number box behaves as Tab:
an accepted number is committed by leaving the box, so a slider computes on Enter too.
"""

from __future__ import annotations

import json

import gradio as gr

from backend.core import bounds

BOX_ID = "wb-range-refusal"
# elem_id → the declared range of a slider (name, whole, unit); its ends come from the page, which
# follows a slider whose range the data changed (a model's memorized prompts)
DECLARED: dict[str, bounds.Range] = {}

RANGE_JS = """() => {
  if (window.wbRangeGuard) { return; }
  window.wbRangeGuard = true;
  const sliderBox = (el) => {
    if (!(el instanceof HTMLInputElement) || el.type !== 'number') { return null; }
    const block = el.closest('.block');
    const range = block && block.querySelector('input[type=range]');
    return range ? {block, range} : null;
  };
  const outside = (el, s) => {
    const v = el.value.trim() === '' ? NaN : Number(el.value);
    return !(Number.isFinite(v) && v >= Number(s.range.min) && v <= Number(s.range.max));
  };
  const refuse = (el, s) => {
    const raw = el.value.trim();
    const v = raw === '' ? null : (Number.isFinite(Number(raw)) ? Number(raw) : raw);
    const label = (s.block.querySelector('label, [data-testid=block-info]') || {}).textContent || '';
    el.value = el.dataset.wbLast ?? s.range.value;
    el.dispatchEvent(new Event('input', {bubbles: true}));
    // a refusal by a pointer press elsewhere (the blur comes while the press is down): that press's
    // click computes nothing. Not a time window since the last press: a Tab soon after a click once
    // swallowed the user's next click, which then computed nothing
    window.wbSwallowClick = !!window.wbPressing;
    const box = document.querySelector('#%(box)s textarea, #%(box)s input');
    if (!box) { return; }
    box.value = JSON.stringify({id: s.block.id || '', label: label.trim(), value: v, min: Number(s.range.min),
                                max: Number(s.range.max), step: Number(s.range.step) || 1, n: Date.now()});
    box.dispatchEvent(new Event('input', {bubbles: true}));
  };
  document.addEventListener('focusin', (e) => {
    const s = sliderBox(e.target);
    if (s) { e.target.dataset.wbLast = e.target.value; }
  }, true);
  // out of range while typing: the slider's value keeps the last number in range
  document.addEventListener('input', (e) => {
    const s = sliderBox(e.target);
    if (s && outside(e.target, s)) { e.stopImmediatePropagation(); }
  }, true);
  const commit = (e) => {
    const s = sliderBox(e.target);
    if (!s) { return; }
    if (outside(e.target, s)) {
      e.stopImmediatePropagation();
      e.preventDefault();
      refuse(e.target, s);
    } else { e.target.dataset.wbLast = e.target.value; }
  };
  document.addEventListener('blur', commit, true);
  document.addEventListener('change', (e) => {
    const s = sliderBox(e.target);
    if (s && outside(e.target, s)) { e.stopImmediatePropagation(); }
  }, true);
  // Enter in any number box does what Tab does: a refused number is refused, an accepted one is
  // committed by leaving the box (a slider then computes on its release, as after Tab or a click
  // elsewhere; Gradio's slider ignored Enter, so "0.5 + Enter" computed nothing)
  document.addEventListener('keydown', (e) => {
    if (e.key !== 'Enter' || !(e.target instanceof HTMLInputElement) || e.target.type !== 'number') { return; }
    commit(e);
    if (!e.defaultPrevented) { e.target.blur(); }
  }, true);
  // the click that took the focus from a refused box computes nothing; a later click (or one after
  // a refusal by Tab or Enter) is the user's next action and goes through
  document.addEventListener('pointerdown', () => { window.wbPressing = true; }, true);
  for (const end of ['pointerup', 'pointercancel']) {
    document.addEventListener(end, () => { window.wbPressing = false; }, true);
  }
  document.addEventListener('click', (e) => {
    const swallow = window.wbSwallowClick;
    window.wbSwallowClick = false;
    if (swallow && e.target.closest && e.target.closest('button')) {
      e.stopImmediatePropagation();
      e.preventDefault();
    }
  }, true);
}""" % {"box": BOX_ID}


def declare(elem_id: str | None, r: bounds.Range) -> None:
    if elem_id:
        DECLARED[elem_id] = r


def refusal(payload: str) -> None:
    """The server's half: the refusal of what the page reports, as the slider's own check words it."""
    try:
        d = json.loads(payload or "")
        lo, hi, step = float(d["min"]), float(d["max"]), float(d.get("step") or 1)
    except (ValueError, KeyError, TypeError):
        return None
    known = DECLARED.get(str(d.get("id") or ""))
    label = str(d.get("label") or "value").split(" (")[0][:60]
    r = bounds.Range(
        known.name if known else f"The {label}",
        lo,
        hi,
        known.whole if known else step.is_integer() and lo.is_integer(),
        known.unit if known else "",
    )
    value = d.get("value")
    raise gr.Error(r.refusal(value if isinstance(value, (int, float, str)) else None), print_exception=False)


def install(demo: gr.Blocks) -> None:
    """The page's script and its hidden message box (outside the tabs, so it is always mounted).
    Call inside `with demo:`, after the tabs."""
    box = gr.Textbox(elem_id=BOX_ID, elem_classes=["wb-hidden"], show_label=False, container=False)
    box.change(refusal, box, None, concurrency_limit=None, show_progress="hidden", api_visibility="private")
    demo.load(None, js=RANGE_JS, api_visibility="private")
