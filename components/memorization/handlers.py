"""The Memorization tab's handlers: the fast checks of a request's input, run before it queues, and
the computations (check, find, generate, batch check, statistics, the memorized-prompt table,
exports) the layout wires to its buttons (components.memorization.layout)."""

from __future__ import annotations

import html
import json
from pathlib import Path

import gradio as gr

from backend.core import bounds
from backend.nemo import data as ndata
from backend.nemo import images as nimages
from backend.nemo import service
from backend.nemo import visitor as nvisitor
from backend.nemo.metrics import auroc
from components.serving import exports
from components.common import fail
from components.memorization.figures import (
    NO_NEURONS_OFF,
    batch_rows,
    export_png,
    gallery_items,
    pin_html,
    relaxed_words,
    result_html,
    score_html,
    stats_html,
    z_plot,
)
from components.memorization.table import hist_plot, summary_html, table_rows
from components.serving.visitor import own_folder, space


def stats_dir(request) -> Path | None:
    """Where this visitor's own statistics would be (read only), or None: the shared ones."""
    return space(request, nvisitor.SPACE).path()


def _seeds(n) -> list[int]:
    return list(range(bounds.check(bounds.MEMO_SEEDS, n)))


def _free(text) -> str:
    if text is not None and not isinstance(text, str):
        fail("Extra neurons must be text like 'mid.attn0:5, down1.attn0:17'.")
    if text and len(text) > 5000:
        fail("Too many extra neurons (5000 characters at most).")
    return text or ""


def _checked_strings(items) -> list[str]:
    if items is None:
        return []
    if isinstance(items, str):
        return [items]
    if not isinstance(items, (list, tuple)) or not all(isinstance(x, str) for x in items):
        fail("Neurons must be a list of labels like 'down1.attn0:17'.")
    return list(items)


# ------------------------------------------------------------------------------------ handlers
def _spec(m, selected, free):
    items = _checked_strings(selected) + [_free(free)]
    return service.parse_neurons(m, [s for it in items for s in it.replace(";", ",").split(",")])


def _prompt_list(text, upload) -> list[str]:
    if text is not None and not isinstance(text, str):
        fail("The prompt list must be text, one prompt per line.")
    try:
        if upload:
            path = upload if isinstance(upload, str) else getattr(upload, "name", None) or upload.get("path")
            return ndata.read_prompt_file(path)
        return ndata.parse_prompts(text or "")
    except (ValueError, OSError) as e:
        fail(str(e))


def make_checks(source: str):
    """Fast checks of a request's input, run as their own first step with no outputs: a refused
    request then shows its message in the toast and leaves the last result as it was (Gradio marks
    every output of a failed step with an "Error" badge). The computing steps check again, for the API."""

    def prompt_ok(prompt):
        try:
            ndata.clean_prompt(prompt)  # a pure check (no model): runs before the request queues
        except ValueError as e:
            fail(str(e))

    def generate_ok(prompt, selected, free, n_seeds, reference=None, model=None):
        prompt_ok(prompt)
        _seeds(n_seeds)
        try:
            _spec(service.get(source, model), selected, free)
            if reference is not None:
                nimages.as_reference(reference)
        except ValueError as e:
            fail(str(e))

    def batch_ok(text, upload):
        prompts = _prompt_list(text, upload)
        try:
            [ndata.clean_prompt(p) for p in prompts]
        except ValueError as e:
            fail(f"{e} (in the list)")
        if not prompts:
            fail("No prompts to check.")

    def pinned(pin, reference=None, model=None):
        """The pinned set drawn below the current one ("" when nothing is pinned)."""
        if not pin:
            return ""
        model = pin.get("model", model)  # drawn with the model it was made with
        m = service.get(source, model)
        c = service.compare(
            pin["prompt"],
            service.parse_neurons(m, pin["neurons"]),
            pin["seeds"],
            source=source,
            reference=reference,
            model=model,
        )
        return pin_html(c)

    return prompt_ok, generate_ok, batch_ok, pinned


def make_handlers(source: str):
    def check(prompt, model=None, request: gr.Request = None):
        r = service.check(prompt, source=source, model=model, own_dir=stats_dir(request))
        return score_html(r), z_plot(r), stats_html(r["stats"])

    def find(prompt, model=None, request: gr.Request = None, progress=gr.Progress()):
        progress(0.02, desc="statistics of non-memorized prompts")
        own = stats_dir(request)
        loc = service.find(
            prompt, progress=lambda f, msg: progress(f, desc=msg), source=source, model=model, own_dir=own
        )
        r = service.check(prompt, source=source, model=model, own_dir=own)
        labels = loc["labels"]
        m = service.get(source, model)
        setting = (
            f"Search at guidance {loc['guidance_scale']:g} (detection and generations: "
            f"{m.guidance_scale:g}); seeds kept {len(loc['seeds_kept'])} of {len(loc['seeds'])}."
        )
        if loc["skipped"]:
            msg = (
                "<b>Skipped</b>: at the search's guidance no seed's noise difference agrees with "
                f"another's above θ<sub>mem</sub> {m.theta_mem:.3f}, so (as the official seed filter "
                "decides) the prompt does not look memorized and nothing was searched. "
            )
        else:
            # presenter view keeps the first line; the search's details are marked wb-advanced
            msg = (
                f"<b>{len(labels)} neuron(s)</b> found in {loc['seconds']:.1f} s"
                f"<span class='wb-advanced'> ({loc['evaluations']} noise evaluations; initial set "
                f"{loc['n_initial']} at θ = {loc['theta']:g}, k = {loc['k']})</span>: "
                f"{html.escape(', '.join(labels))}. <span class='wb-advanced'>Ticked = switched off below. "
            )
            if loc["relaxed"]:
                msg += relaxed_words(m.theta_mem, loc["threshold"]) + " "
            msg += "</span>"
        msg += f"<span class='wb-muted wb-advanced'>{setting}</span>"
        if not r["memorized"] and not loc["skipped"]:
            msg += (
                " <span class='wb-muted'>(This prompt scores below θ<sub>mem</sub>: it is not "
                "memorized, so what NeMo finds here is only whatever changes its noise most.)</span>"
            )
        return (
            f"<div class='wb-card' style='min-height:0' id='memo-found-card'>{msg}</div>",
            gr.update(choices=labels, value=labels),
            z_plot(r, labels),
        )

    def generate(prompt, selected, free, n_seeds, reference=None, model=None):
        m = service.get(source, model)
        seeds = _seeds(n_seeds)
        # the service checks the image (a bad one is a clear message)
        spec = _spec(m, selected, free)
        c = service.compare(prompt, spec, seeds, source=source, reference=reference, model=model)
        # what "Pin this result" keeps: a small descriptor, recomputed (from the cache) when drawn
        pin = {"prompt": c["prompt"], "neurons": c["neurons"], "seeds": seeds, "model": model}
        return gallery_items(c), result_html(c), pin

    def batch(text, upload, model=None, request: gr.Request = None, progress=gr.Progress()):
        prompts = _prompt_list(text, upload)
        rows = service.check_batch(
            prompts,
            progress=lambda f, msg: progress(f, desc=msg),
            source=source,
            model=model,
            own_dir=stats_dir(request),
        )
        n_mem = sum(r["memorized"] for r in rows)
        listed = [r["score"] for r in rows if r["listed_type"]]
        other = [r["score"] for r in rows if not r["listed_type"]]
        auc = (
            f" Detection AUROC {auroc(listed, other):.2f} ({len(listed)} prompts of the memorized list "
            f"vs {len(other)} others; θ<sub>mem</sub> is mean + 1 σ of ordinary prompts' scores, so about "
            "one ordinary prompt in six scores above it)."
            if listed and other
            else ""
        )
        note = (
            f"<div class='wb-muted' id='memo-batch-note'>{len(rows)} prompts, {n_mem} above "
            f"θ<sub>mem</sub>.{auc} Click a column header to sort.</div>"
        )
        return batch_rows(rows), note

    def sample(model=None):
        d = service.describe(source, model)  # a user's own pipeline: the paper's LAION lists
        return "\n".join(d["memorized"][:5] + d["ordinary"][:5])

    def stats(n, model=None, own_text="", request: gr.Request = None):
        """This visitor's statistics (every visitor's when the owner shares builds: components.serving.visitor)."""
        n = bounds.check(bounds.MEMO_STATS, n)
        own = [line for line in str(own_text or "").splitlines() if line.strip()]
        return stats_html(
            service.compute_stats(
                n,
                source=source,
                model=model,
                prompts=own or None,
                own_dir=own_folder(request, nvisitor.SPACE),
                room=space(request, nvisitor.SPACE, write=True).room,
            )
        )

    def table(n_prompts, model=None, request: gr.Request = None, progress=gr.Progress()):
        n = bounds.check(bounds.MEMO_TABLE, n_prompts)
        t = service.results_table(
            progress=lambda f, msg: progress(f, desc=msg),
            source=source,
            n_prompts=n,
            model=model,
            own_dir=stats_dir(request),
        )
        return table_rows(t["rows"]), hist_plot(t["rows"]), summary_html(t["summary"])

    def export(
        prompt, selected, free, n_seeds, reference=None, model=None, request: gr.Request = None, progress=gr.Progress()
    ):
        m = service.get(source, model)
        seeds = _seeds(n_seeds)
        spec = _spec(m, selected, free)
        own = stats_dir(request)
        progress(0.1, desc="score and z-scores")
        r = service.check(prompt, source=source, model=model, own_dir=own)
        progress(0.3, desc="localising")
        loc = service.find(prompt, source=source, model=model, own_dir=own)
        progress(0.6, desc="generating")
        c = service.compare(prompt, spec, seeds, source=source, reference=reference, model=model)
        state = {
            "model": m.model_id,
            "prompt": r["prompt"],
            "theta_mem": m.theta_mem,
            "settings": {
                "guidance_scale": m.guidance_scale,
                "num_seeds": m.num_seeds,
                "num_inference_steps": m.num_inference_steps,
                "search_guidance_scale": m.search_guidance,
            },
            "statistics": r["stats"],
            "score": r["score"],
            "memorized": r["memorized"],
            "listed_type": r["listed_type"],
            "z": r["z"],
            "localization": loc,
            "switched_off": c["neurons"],
            "reference": c.get("reference_kind"),
            # with nothing switched off there is no "off" condition to report
            "comparison": {
                k: c[k]
                for k in (
                    "seeds",
                    "ssim_on",
                    "ssim_off",
                    "diversity_on",
                    "diversity_off",
                    "alignment_on",
                    "alignment_off",
                    "score_on",
                    "score_off",
                )
                if c["n_neurons"] or not k.endswith("_off")
            },
        }
        if not c["n_neurons"]:
            state["note"] = NO_NEURONS_OFF

        def write(out: Path) -> list[str]:
            (out / "nemo.json").write_text(json.dumps(state, indent=1))
            export_png(out / "nemo.png", c, r, None)
            return [str(out / "nemo.json"), str(out / "nemo.png")]

        return exports.hand_out(write, request)

    def on_model(model, request: gr.Request = None, progress=gr.Progress()):
        """A newly picked pipeline: load it (with progress) and say which neuron statistics it will
        use; found neurons belong to the previous model, so their boxes are cleared."""
        progress(0.05, desc="loading the pipeline")
        st = service.stats_status(source, model, lambda f, d: progress(f, desc=d), own_dir=stats_dir(request))
        return stats_html(st), gr.update(choices=[], value=[]), ""

    return check, find, generate, batch, sample, stats, table, export, on_model
