"""The Math neurons tab's handlers: module-level functions with explicit inputs and outputs, which the
tab's events call (layout.py binds the tab's preset source) and tests call without a running app.
Each takes what the controls hold and answers what the outputs show, in their order; a refused value
raises gr.Error naming the control and its range before any model work. `progress(fraction, desc=…)`
is Gradio's tracker or a no-op. The model is modified only inside the service's `scaled(...)`, under
its lock, and restored bit-exactly before an answer returns."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any, Callable

import gradio as gr

from backend.core import bounds
from backend.mathneuro import service, sets, visitor_sets
from backend.mathneuro.service import Setting
from components.common import fail
from components.links import deep_links as links
from components.math_neurons.figures import (
    LABEL_OF,
    METHOD_LABELS,
    accuracy_html,
    accuracy_plot,
    consistency_plot,
    curve_plot,
    describe_result,
    export_png,
    figure2_plot,
    layers_plot,
    samples_rows,
    setting_title,
)
from components.math_neurons.words import ASK_EXAMPLES, ask_label, data_html, explain_for, samples_label
from components.report import redraw
from components.serving import exports
from components.serving.guard import main_only
from components.serving.visitor import space

Progress = Callable[..., Any]

# The session report keeps these results and pins (components.report.session).
LINKED = ("mn-method", "mn-k", "mn-factor", "mn-n", "mn-prompt")
SCALE_FACTORS = [0.0, 0.5, 0.9, 1.0, 1.1, 1.2, 1.3, 1.5, 2.0]
CONSISTENCY_SIZES = (1, 4, 16, 64)


def _quiet(*_a, **_k) -> None:
    return None


# The numeric controls and their ranges: one rule for all (the sliders' own bounds, the API's too).
# A value outside is refused with the range and nothing is computed; nothing is clamped or rounded.
K_RANGE, FACTOR_RANGE, N_RANGE = ((r.lo, r.hi) for r in (bounds.MATH_K, bounds.MATH_FACTOR, bounds.MATH_SAMPLES))
DEFAULTS = {"method": "MathNeuro", "k": 3, "factor": 0.0, "n": sets.MAX_SAMPLES}


def _setting(method_label, k_pct, factor, n_samples, nonmath=None, math_set=None) -> Setting:
    if method_label not in METHOD_LABELS:
        fail(f"Unknown method {str(method_label)[:40]!r}: choose one of {', '.join(METHOD_LABELS)}.")
    try:
        k, f, n = (
            bounds.check(r, v)
            for r, v in ((bounds.MATH_K, k_pct), (bounds.MATH_FACTOR, factor), (bounds.MATH_SAMPLES, n_samples))
        )
    except ValueError as e:
        fail(str(e))
    return Setting(
        METHOD_LABELS[method_label],
        k / 100.0,
        n,
        f,
        nonmath=nonmath or sets.DEFAULT_NONMATH,
        math=math_set or sets.DEFAULT_MATH,
    )


def _bench(source, model=None, progress=None):
    try:
        return service.bench(source, model or None, progress)
    except ValueError as e:  # a refused pick (architecture, folder, policy) or a failed load: its reason
        fail(str(e))
    except FileNotFoundError as e:
        fail(f"The math model is not available: {e}")
    except Exception as e:  # noqa: BLE001 - shown to the user, not a trace
        fail(f"Could not load the math model: {type(e).__name__}: {e}")


def _baseline(b, s: Setting) -> dict:
    return _run(b.baseline, nonmath=s.nonmath, math=s.math)


def _run(fn, *args, **kwargs):
    """A service call whose data problems (no non-math set, a file no longer loaded) are shown as
    messages."""
    try:
        return fn(*args, **kwargs)
    except (sets.NoNonMath, ValueError) as e:
        fail(str(e))


def computed_figures(b, s) -> dict:
    """The method comparison and the scale sweep of this setting as far as they have been computed
    (cached), else None with a note: the export holds what was computed, and costs no model call."""
    fig2 = {m: b.evaluated(s.but(method=m, factor=0.0)) for m in service.core.METHODS}
    curve = [{"factor": float(f), **r} if (r := b.evaluated(s.but(factor=float(f)))) else None for f in SCALE_FACTORS]
    out = {"figure2": fig2 if all(fig2.values()) else None, "scale_curve": curve if all(curve) else None}
    missing = [
        what
        for key, what in (("figure2", "Compare methods"), ("scale_curve", "Sweep the scale factor"))
        if out[key] is None
    ]
    if missing:
        out["not_computed"] = f"press {' and '.join(repr(m) for m in missing)} first to include them"
    return out


def live(source: str, method_label, k_pct, factor, n_samples, nonmath=None, pinned=None, model=None, math_set=None):
    """The accuracies of one setting: card, figure (beside the pinned result, if any), sample
    answers, per-layer plot, and the setting's descriptor (numbers only, kept in gr.State)."""
    s = _setting(method_label, k_pct, factor, n_samples, nonmath, math_set)
    b = _bench(source, model)
    base = _baseline(b, s)
    mod = _run(b.evaluate, s)
    n_total = sum(m.weight.numel() for m in service.core.linear_layers(b.model).values())
    desc = describe_result(s, base, mod)
    return (
        accuracy_html(base, mod, s, n_total, _run(b.n_ident, s)),
        accuracy_plot(desc, pinned),
        samples_rows(_run(b.samples, s)),
        layers_plot(_run(b.layers, s), s),
        desc,
    )


def figure2(source: str, k_pct, n_samples, nonmath=None, model=None, math_set=None, progress: Progress = _quiet):
    s = _setting("MathNeuro", k_pct, 0.0, n_samples, nonmath, math_set)
    b = _bench(source, model)
    base = _baseline(b, s)
    results = {}
    for i, m in enumerate(service.core.METHODS):
        progress((i, len(service.core.METHODS)), desc=f"pruning the {LABEL_OF[m]} set")
        results[m] = _run(b.evaluate, s.but(method=m))
    return figure2_plot(base, results, s.top_k)


def curve(
    source: str, method_label, k_pct, n_samples, nonmath=None, model=None, math_set=None, progress: Progress = _quiet
):
    s = _setting(method_label, k_pct, 1.0, n_samples, nonmath, math_set)
    b = _bench(source, model)
    out = []
    for i, f in enumerate(SCALE_FACTORS):
        progress((i, len(SCALE_FACTORS)), desc=f"factor {f:g}")
        out.append({"factor": f, **_run(b.evaluate, s.but(factor=f))})
    return curve_plot(out, _baseline(b, s), s)


def consistency(source: str, k_pct, n_samples, nonmath=None, model=None, math_set=None, progress: Progress = _quiet):
    s = _setting("MathNeuro", k_pct, 0.0, n_samples, nonmath, math_set)
    progress(0.1, desc="identifying on random subsets")
    cons = _run(_bench(source, model).consistency, s, sizes=CONSISTENCY_SIZES)
    return consistency_plot(cons, s)


def ask(source: str, prompt, method_label, k_pct, factor, n_samples, nonmath=None, model=None, math_set=None):
    prompt = (prompt or "").strip()
    if not prompt:
        fail(f"Type a question first, e.g. '{ASK_EXAMPLES[source][0]}'")
    if len(prompt) > 400:
        fail("The question is too long (400 characters at most).")
    s = _setting(method_label, k_pct, factor, n_samples, nonmath, math_set)
    r = _run(_bench(source, model).answer, prompt, s)
    return (
        f"<div class='wb-card' style='min-height:0'><b>unmodified:</b> {html.escape(r['before'] or '∅')}"
        f" &nbsp;·&nbsp; <b>modified:</b> {html.escape(r['after'] or '∅')}</div>"
    )


def export(
    source: str,
    method_label,
    k_pct,
    factor,
    n_samples,
    nonmath=None,
    model=None,
    math_set=None,
    progress: Progress = _quiet,
):
    s = _setting(method_label, k_pct, factor, n_samples, nonmath, math_set)
    b = _bench(source, model)
    progress(0.2, desc="collecting results")
    state = {
        "title": setting_title(
            {"method": s.method, "top_k": s.top_k, "factor": s.factor, "n_samples": s.n_samples}, b.model_id
        ),
        "model": b.model_id,
        "data": service.describe(b, s.nonmath, s.math),
        "setting": {"method": s.method, "top_k": s.top_k, "factor": s.factor, "n_samples": s.n_samples},
        "baseline": _baseline(b, s),
        "modified": _run(b.evaluate, s),
        # what "Compare methods" and "Sweep the scale factor" have computed, never computed here:
        # both would cost 4 + 5 evaluations (20 s on a 2-core CPU) an export did not ask for
        **computed_figures(b, s),
        "layers": _run(b.layers, s),
        "modules": service.core.per_module(_run(b.masks, s)),
        "samples": _run(b.samples, s),
    }

    def write(out: Path) -> list[str]:
        (out / "mathneuro.json").write_text(json.dumps(state, indent=1))
        export_png(state, out / "mathneuro.png")
        return [str(out / "mathneuro.json"), str(out / "mathneuro.png")]

    return exports.hand_out(write)


def name_data(source: str, side: str, via: str):
    """A user's math or non-math set, from an uploaded file or a dataset id: loaded, checked,
    and named in this session's state (`other` is the other side's id, for the data card)."""
    what = sets.SIDES[side]

    def handler(given, model=None, other=None, request: gr.Request = None):
        owner = space(request, visitor_sets.SPACE, write=True).session  # kept while this session lasts
        if via == "file":
            if given is None:
                fail(f"Choose a {what} file first (JSONL, JSON, CSV or plain text).")
            path = given if isinstance(given, str) else getattr(given, "name", None) or given.get("path")
            kw = {"path": path, "name": Path(str(path)).name}
        else:
            if not (given or "").strip():
                fail("Type a dataset id first, e.g. openai/gsm8k:main@test.")
            kw = {"dataset": given.strip()}
        b = _bench(source, model)
        try:
            key = service.register_data(source, side, model=model or None, owner=owner, **kw)
        except (ValueError, RuntimeError, UnicodeDecodeError) as e:
            fail(f"Could not read that {what} {'file' if via == 'file' else 'dataset'}: {e}")
        keys = (key, other) if side == "math" else (other, key)
        return key, data_html(service.describe(b, keys[1] or sets.DEFAULT_NONMATH, keys[0] or sets.DEFAULT_MATH))

    # under ZeroGPU the set must be registered in the main process, or it would die with a worker
    return main_only(handler)


def on_model(source: str, model, progress: Progress = _quiet):
    """A newly picked model: load it (with progress), say what data and rules it is measured
    with, and go back to its default sets (a file named for another model is not loaded for
    this one, so its box is emptied too)."""
    progress(0.1, desc="loading the model")
    b = _bench(source, model, lambda f, d: progress(f, desc=d))
    return sets.DEFAULT_NONMATH, sets.DEFAULT_MATH, data_html(service.describe(b)), None, None


def check(method_label, k, f, n) -> None:
    """The fast first step of every event: a refused value stops the chain before any model work,
    and as this step has no outputs no result block is marked as failed."""
    _setting(method_label, k, f, n)


def restore(last):
    """After a refusal the boxes show the setting on screen again (the browser would otherwise keep
    the typed value beside a slider it clamped, and the next click would compute with that)."""
    last = last or DEFAULTS
    return tuple(gr.update(value=last[key]) for key in ("k", "factor", "n"))


@redraw
def pin(current):
    """Compare: the pin is the shown result's numbers (describe_result); no model work."""
    if not current:
        fail("Nothing to pin yet: wait for the accuracies to appear.")
    return current, accuracy_plot(current, current)


@redraw
def unpin(current):
    return None, (accuracy_plot(current) if current else gr.skip())


def words_for(source: str, model, asked):
    """The explanation, the question box and its examples follow the picked model (the organism's
    language and exact match, or a chat model's template and GSM8K's rules); a question the user
    typed stays."""
    preset = service.pick(source, model or None).preset
    kind = "zoo" if preset.source == "zoo" else "hub"
    ours = any(asked == q for qs in ASK_EXAMPLES.values() for q in qs)
    template = None if kind == "zoo" else service.describe(_bench(source, model))["template"]
    return (
        explain_for(preset, template),
        gr.update(label=ask_label(preset), **({"value": ASK_EXAMPLES[kind][0]} if ours else {})),
        gr.Dataset(samples=[[q] for q in ASK_EXAMPLES[kind][1:]]),
        gr.update(label=samples_label(kind == "zoo")),
    )


def first_view(source: str, *args):
    """The default setting's accuracies and the data card (`args`: the live controls). In hub mode
    without a non-math set (or with a model that cannot load) the data card says what is missing
    instead of an error toast; a deep link computes its own setting once its values are restored."""
    skips = (gr.skip(),) * 5  # live's five outputs: card, figure, samples, layers, the shown numbers
    if source == "hub":
        try:
            info = service.describe(_bench(source), args[4], args[7])
        except gr.Error as e:
            why = html.escape(getattr(e, "message", None) or str(e))
            return (*skips, f"<div class='wb-card' style='min-height:0'>{why}</div>")
        if not info["nonmath"] or links.linked(LINKED):
            return (*skips, data_html(info))
        return (*live(source, *args), data_html(info))
    if links.linked(LINKED):
        return (*skips, gr.skip())
    return (*live(source, *args), gr.skip())
