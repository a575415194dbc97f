"""Memorization: NeMo on Stable Diffusion — is a prompt memorized, which value neurons hold it,
and what the model draws with them switched off.

UI only: every number comes from backend.nemo.service (cached per prompt and setting); neurons are
switched off only inside `backend.nemo.deactivate`, under the UNet's lock, for one request.
"""
from __future__ import annotations

import html
import json
import tempfile
from pathlib import Path

import gradio as gr

from backend.nemo import data as ndata
from backend.nemo import images as nimages
from backend.nemo import service
from backend.nemo.metrics import auroc
from components import links
from components.model_picker import model_picker
from components.visitor import own_folder, room_of, stats_dir
from components.common import fail, model_event, on_first_open
from backend.core import bounds
from components.inputs import bounded_slider, checked_image, clear_unreadable, keep_on_failure
from components.memorization_figures import (NO_NEURONS_OFF, NO_TYPE, TABLE_HEADERS, TABLE_WIDTHS, batch_rows,
                                             export_png, gallery_items, hist_plot, pin_html, result_html, score_html,
                                             relaxed_words, stats_html, summary_html, table_rows, type_shown, z_plot)

TAB_ID = "memorization"
TITLE = "Memorization"
ORDER = 3
SUMMARY = "NeMo: detect memorized prompts in Stable Diffusion, localize the neurons, switch them off."
# A deep link reruns these (components.links): the score of its prompt, then the generations with its
# ticked neurons off. The ticked neurons travel in the link even before "Find neurons" ran.
LINK_RUNS = ("memo_check", "memo_generate")
# The session report keeps these results and pins (components.report).
REPORT_RESULTS = {"memo-score": "Memorization check", "memo-z": "Neurons found (NeMo)", "memo-gallery": "Generations with the neurons off", "memo-batch-table": "Batch detection", "memo-table": "Memorized prompts"}
REPORT_PINS = {"memo-pin": "memo-gallery"}

TYPES = ndata.TYPES
MAX_SEEDS = int(bounds.MEMO_SEEDS.hi)
TABLE_MAX = int(bounds.MEMO_TABLE.hi)  # memorized prompts one table request may take
BATCH_HEADERS = ["prompt", "score", "verdict", "largest z", "in the memorized list"]

EXPLAIN = (
    "<div class='wb-explain'><b>What you see.</b> A diffusion model that <i>memorized</i> a training "
    "image pulls every starting noise towards that image: its first noise predictions agree across "
    "seeds. The <b>memorization score</b> is the largest SSIM between the (normalised) noise "
    "differences ε̂(x<sub>T</sub>, t<sub>1</sub>) − x<sub>T</sub> of different seeds: the first noise "
    "prediction from the starting noise; above <b>θ<sub>mem</sub></b> "
    "(mean + 1 std over non-memorized prompts) the prompt counts as memorized. <b>Neurons</b> are the "
    "output channels of the cross-attention value layers <code>attn2.to_v</code> in the UNet's down "
    "and mid blocks; their <b>z-scores</b> compare this prompt's mean |activation| with non-memorized "
    "prompts. <b>Find neurons</b> runs NeMo: an initial set (z &gt; θ plus the top-k activations, θ "
    "falling to 1 and k growing until switching them off breaks the agreement; if it never does, "
    "the last agreement reached becomes the bar) refined greedily to the few that are needed. As in the "
    "official code the search keeps only the seeds that agree with another above θ<sub>mem</sub> and "
    "runs at its own guidance scale (0: the prompt's prediction alone, unless the model says otherwise). Ticked neurons are switched off (×0 at every step, both guidance halves) in "
    "the right-hand generations; the training image and each generation's SSIM to it are shown."
    "</div>")
# Presenter view shows this one line instead (components.common: .wb-presenter-only).
PRESENTER_CAPTION = (
    "<div class='wb-explain'>A model that memorized a picture redraws it from any random start. "
    "Switching off a handful of neurons that NeMo finds lets it draw something new.</div>")


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
        c = service.compare(pin["prompt"], service.parse_neurons(m, pin["neurons"]), pin["seeds"],
                            source=source, reference=reference, model=model)
        return pin_html(c)

    return prompt_ok, generate_ok, batch_ok, pinned


def make_handlers(source: str):
    def check(prompt, model=None, request: gr.Request = None):
        r = service.check(prompt, source=source, model=model, own_dir=stats_dir(request))
        return score_html(r), z_plot(r), stats_html(r["stats"])

    def find(prompt, model=None, request: gr.Request = None, progress=gr.Progress()):
        progress(0.02, desc="statistics of non-memorized prompts")
        own = stats_dir(request)
        loc = service.find(prompt, progress=lambda f, msg: progress(f, desc=msg), source=source, model=model,
                           own_dir=own)
        r = service.check(prompt, source=source, model=model, own_dir=own)
        labels = loc["labels"]
        m = service.get(source, model)
        setting = (f"Search at guidance {loc['guidance_scale']:g} (detection and generations: "
                   f"{m.guidance_scale:g}); seeds kept {len(loc['seeds_kept'])} of {len(loc['seeds'])}.")
        if loc["skipped"]:
            msg = ("<b>Skipped</b>: at the search's guidance no seed's noise difference agrees with "
                   f"another's above θ<sub>mem</sub> {m.theta_mem:.3f}, so (as the official seed filter "
                   "decides) the prompt does not look memorized and nothing was searched. ")
        else:
            # presenter view keeps the first line; the search's details are marked wb-advanced
            msg = (f"<b>{len(labels)} neuron(s)</b> found in {loc['seconds']:.1f} s"
                   f"<span class='wb-advanced'> ({loc['evaluations']} noise evaluations; initial set "
                   f"{loc['n_initial']} at θ = {loc['theta']:g}, k = {loc['k']})</span>: "
                   f"{html.escape(', '.join(labels))}. <span class='wb-advanced'>Ticked = switched off below. ")
            if loc["relaxed"]:
                msg += (relaxed_words(m.theta_mem, loc["threshold"]) + " ")
            msg += "</span>"
        msg += f"<span class='wb-muted wb-advanced'>{setting}</span>"
        if not r["memorized"] and not loc["skipped"]:
            msg += (" <span class='wb-muted'>(This prompt scores below θ<sub>mem</sub>: it is not "
                    "memorized, so what NeMo finds here is only whatever changes its noise most.)</span>")
        return (f"<div class='wb-card' style='min-height:0' id='memo-found-card'>{msg}</div>",
                gr.update(choices=labels, value=labels), z_plot(r, labels))

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
        rows = service.check_batch(prompts, progress=lambda f, msg: progress(f, desc=msg), source=source,
                                   model=model, own_dir=stats_dir(request))
        n_mem = sum(r["memorized"] for r in rows)
        listed = [r["score"] for r in rows if r["listed_type"]]
        other = [r["score"] for r in rows if not r["listed_type"]]
        auc = (f" Detection AUROC {auroc(listed, other):.2f} ({len(listed)} prompts of the memorized list "
               f"vs {len(other)} others; θ<sub>mem</sub> is mean + 1 σ of ordinary prompts' scores, so about "
               "one ordinary prompt in six scores above it)." if listed and other else "")
        note = (f"<div class='wb-muted' id='memo-batch-note'>{len(rows)} prompts, {n_mem} above "
                f"θ<sub>mem</sub>.{auc} Click a column header to sort.</div>")
        return batch_rows(rows), note

    def sample(model=None):
        d = service.describe(source, model)  # a user's own pipeline: the paper's LAION lists
        return "\n".join(d["memorized"][:5] + d["ordinary"][:5])

    def stats(n, model=None, own_text="", request: gr.Request = None):
        """This visitor's statistics (every visitor's when the owner shares builds: components.visitor)."""
        n = bounds.check(bounds.MEMO_STATS, n)
        own = [line for line in str(own_text or "").splitlines() if line.strip()]
        return stats_html(service.compute_stats(n, source=source, model=model, prompts=own or None,
                                                own_dir=own_folder(request, "nemo"), room=room_of(request)))

    def table(n_prompts, model=None, request: gr.Request = None, progress=gr.Progress()):
        n = bounds.check(bounds.MEMO_TABLE, n_prompts)
        t = service.results_table(progress=lambda f, msg: progress(f, desc=msg), source=source,
                                  n_prompts=n, model=model, own_dir=stats_dir(request))
        return table_rows(t["rows"]), hist_plot(t["rows"]), summary_html(t["summary"])

    def export(prompt, selected, free, n_seeds, reference=None, model=None, request: gr.Request = None,
               progress=gr.Progress()):
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
            "model": m.model_id, "prompt": r["prompt"], "theta_mem": m.theta_mem,
            "settings": {"guidance_scale": m.guidance_scale, "num_seeds": m.num_seeds,
                         "num_inference_steps": m.num_inference_steps,
                         "search_guidance_scale": m.search_guidance},
            "statistics": r["stats"],
            "score": r["score"], "memorized": r["memorized"], "listed_type": r["listed_type"], "z": r["z"],
            "localization": loc,
            "switched_off": c["neurons"], "reference": c.get("reference_kind"),
            # with nothing switched off there is no "off" condition to report
            "comparison": {k: c[k] for k in ("seeds", "ssim_on", "ssim_off", "diversity_on",
                                               "diversity_off", "alignment_on", "alignment_off",
                                               "score_on", "score_off")
                           if c["n_neurons"] or not k.endswith("_off")},
        }
        if not c["n_neurons"]:
            state["note"] = NO_NEURONS_OFF
        out = Path(tempfile.mkdtemp(prefix="nemo-"))
        jpath = out / "nemo.json"
        jpath.write_text(json.dumps(state, indent=1))
        ppath = out / "nemo.png"
        export_png(ppath, c, r, None)
        return [str(jpath), str(ppath)]

    def on_model(model, request: gr.Request = None, progress=gr.Progress()):
        """A newly picked pipeline: load it (with progress) and say which neuron statistics it will
        use; found neurons belong to the previous model, so their boxes are cleared."""
        progress(0.05, desc="loading the pipeline")
        st = service.stats_status(source, model, lambda f, d: progress(f, desc=d), own_dir=stats_dir(request))
        return stats_html(st), gr.update(choices=[], value=[]), ""

    return check, find, generate, batch, sample, stats, table, export, on_model


def model_note(d: dict) -> str:
    layers = (", ".join(f"{n} ({s})" for n, s in d["layers"]) if d["layers"] else "discovered when the model loads")
    return (f"<span class='wb-muted'>{html.escape(d['label'])} · value layers (neurons): "
            f"{html.escape(layers)} · detection and generations at guidance "
            f"{d['guidance_scale']:g}, the neuron search at guidance {d['search_guidance']:g} "
            f"(the official search's default).</span>")


def example_sets(d: dict) -> tuple[list, list, str, str]:
    """The memorized (with VM/TM type) and ordinary examples of a model, with their labels: the
    organism's own captions, or the paper's LAION lists for SD-1.x/2.x pipelines."""
    zoo = d["source"] == "zoo"
    return (list(zip(d["memorized"], d["memorized_types"])), d["ordinary"][:3],
            "Memorized training captions" if zoo else "Memorized LAION captions (the NeMo paper's list)",
            "Ordinary captions (held out)" if zoo else "Unmemorized LAION captions (the paper's list)")


def stats_slider(plan: dict) -> dict:
    """The statistics slider's range and words for a model's statistics set."""
    total = max(2, int(plan.get("total") or 2))
    return {"minimum": 2, "maximum": max(3, total), "value": min(total, 1000),
            "label": f"First N of the {total:,} {plan['set']}"}


def build(ctx) -> None:
    check, find, generate, batch, sample, stats, table, export, on_model = make_handlers(ctx.source)
    try:
        d = service.describe(ctx.source)
        hub = d["source"] == "hub"
        mem_examples, ord_examples, mem_label, ord_label = example_sets(d)
        default = mem_examples[0][0] if mem_examples else ord_examples[0]
    except Exception as e:  # a missing organism must not take the whole app down
        gr.Markdown(f"The memorization model could not be loaded: {html.escape(str(e))}")
        return
    prompt_ok, generate_ok, batch_ok, pinned = make_checks(ctx.source)
    gr.HTML(EXPLAIN, elem_classes=["wb-advanced"])
    gr.HTML(PRESENTER_CAPTION, elem_classes=["wb-presenter-only", "wb-lead"], elem_id="memo-presenter-caption")
    with gr.Row():
        # the zoo organism, the paper's SD-1.4, or your own SD-1.x / 2.x pipeline typed in
        memo_model, _ = model_picker(service.listed(ctx.source), "memorization", elem_id="memo-model",
                                     takes="Stable Diffusion pipeline")
    with gr.Row():
        with gr.Column(scale=1, min_width=300):
            prompt = gr.Textbox(label="Prompt", value=default, lines=2, elem_id="memo-prompt")
            mem_type = gr.Textbox(label="Type (VM/TM)", interactive=False,
                                  info="VM: verbatim copy of a training image; TM: template (layout copied, details vary)",
                                  value=mem_examples[0][1] if mem_examples else "", max_lines=1,
                                  elem_id="memo-type")
            mem_ex = gr.Examples([[p, t] for p, t in mem_examples], inputs=[prompt, mem_type], label=mem_label,
                                 examples_per_page=6 if hub else 4, elem_id="memo-ex-mem")
            ord_ex = gr.Examples([[p] for p in ord_examples], inputs=[prompt], label=ord_label,
                                 elem_id="memo-ex-ord")
            check_btn = gr.Button("Check memorization", variant="primary", elem_id="memo-check")
            find_btn = gr.Button("Find neurons (NeMo)", elem_id="memo-find")
            note = gr.HTML(model_note(d), elem_classes=["wb-advanced"], elem_id="memo-model-note")
        with gr.Column(scale=2):
            score = gr.HTML(elem_id="memo-score")
            zplot = gr.Plot(label="Per-layer z-scores", elem_id="memo-z")
            stats_card = gr.HTML(stats_html(d["stats_plan"]), elem_id="memo-stats", elem_classes=["wb-advanced"])
            with gr.Accordion("Neuron statistics from the tab (a small set)", open=False, elem_id="memo-stats-acc"):
                plan = stats_slider(d["stats_plan"])
                n_stats = bounded_slider(bounds.MEMO_STATS, plan["maximum"], value=plan["value"], step=1,
                                         label=plan["label"], elem_id="memo-stats-n")
                own_stats = gr.Textbox(label=f"…or your own ordinary (non-memorized) prompts, one per line "
                                            f"(2–{service.OWN_STATS_MAX:,}; the command-line job for more)",
                                       value="", lines=3, elem_id="memo-stats-own")
                stats_btn = gr.Button("Compute statistics in this process", elem_id="memo-stats-btn")
    with gr.Row():
        with gr.Column(scale=1, min_width=300):
            found = gr.HTML(elem_id="memo-found")
            neurons = gr.CheckboxGroup(choices=[], value=[], label="Found neurons (ticked = switched off)",
                                       elem_id="memo-neurons", elem_classes=["wb-advanced"])

            sizes = dict(d["layers"])

            def valid_neurons(values):
                """Linked tick boxes: labels of this model's value neurons. Checked against the UNet's
                config (no weights load while a page restores its link), else against the model."""
                if not all(isinstance(v, str) for v in values):
                    raise ValueError("neurons are labels like 'down1.attn0:17'")
                if not sizes:
                    service.parse_neurons(service.get(ctx.source), values)
                    return values
                for v in values:
                    layer, _, ch = v.rpartition(":")
                    if layer not in sizes or not ch.isdigit() or int(ch) >= sizes[layer]:
                        raise ValueError(f"{v[:40]!r} is not a value neuron of this model "
                                         f"(layers: {', '.join(f'{k} 0–{n - 1}' for k, n in sizes.items())})")
                return values

            links.accept_link(neurons, valid_neurons)
            free = gr.Textbox(label="Also switch off (layer:channel, comma-separated)",
                              placeholder="e.g. mid.attn0:5, down1.attn0:17", elem_id="memo-free",
                              elem_classes=["wb-advanced"])
            n_seeds = bounded_slider(bounds.MEMO_SEEDS, value=4, step=1, label="Seeds",
                                     elem_id="memo-seeds", elem_classes=["wb-advanced"])
            reference = checked_image(label=("Reference image (optional): the training image, if you have it"
                                            if not d["has_train_images"] else
                                            "Reference image (optional; default: the training image)"),
                                     type="numpy", image_mode="RGB", format="png", height=190, what="the reference image",
                                     sources=["upload", "clipboard"], elem_id="memo-ref")
            clear_unreadable(reference)
            gen_btn = gr.Button("Generate: neurons on vs off", variant="primary", elem_id="memo-generate",
                                elem_classes=["wb-keyfirst"])
            with gr.Row():
                pin_btn = gr.Button("Pin this result", size="sm", elem_id="memo-pin")
                unpin_btn = gr.Button("Clear pin", size="sm", elem_id="memo-unpin")
            gr.Markdown("<span class='wb-muted'>Pin keeps this generation set (prompt, neurons off, seeds) "
                        "and draws it below the next one, e.g. to compare two neuron sets.</span>",
                        elem_classes=["wb-advanced"])
        with gr.Column(scale=2):
            cmp_out = gr.HTML(elem_id="memo-compare", elem_classes=["wb-keyfirst"])
            pin_out = gr.HTML(elem_id="memo-pin-box")
            with gr.Accordion("The images as files (full size, download)", open=False,
                              elem_id="memo-gallery-acc", elem_classes=["wb-advanced"]):
                gallery = gr.Gallery(label="Reference image · seeds with neurons on, then off",
                                     columns=4, height="auto", format="png", elem_id="memo-gallery")
    last = gr.State(None)  # the shown result's descriptor (prompt, neurons off, seeds)
    pin = gr.State(None)  # the pinned one
    with gr.Accordion("Check a list of prompts", open=hub, elem_id="memo-batch-acc"):
        with gr.Row():
            with gr.Column(scale=1, min_width=300):
                batch_text = gr.Textbox(label=f"Prompts, one per line (at most {ndata.MAX_PROMPTS})", lines=6,
                                        elem_id="memo-batch-text")
                batch_file = gr.File(label="…or a file (.txt one per line, .csv with a Caption column, .json list)",
                                     file_types=[".txt", ".csv", ".json"], type="filepath",
                                     elem_id="memo-batch-file")
                with gr.Row():
                    sample_btn = gr.Button("5 memorized + 5 unmemorized from the list", elem_id="memo-batch-sample")
                    batch_btn = gr.Button("Check all", variant="primary", elem_id="memo-batch-btn")
            with gr.Column(scale=2):
                batch_note = gr.HTML(elem_id="memo-batch-note-box")
                batch_tbl = gr.Dataframe(headers=BATCH_HEADERS, interactive=False, wrap=True,
                                         datatype=["str", "number", "str", "number", "str"],
                                         column_widths=["52%", "11%", "15%", "10%", "12%"],
                                         elem_id="memo-batch-table", label="Memorization score per prompt")
    n_mem = len(d["memorized"])
    with gr.Column(visible=n_mem > 0):
        with gr.Row(equal_height=True):
            top = max(2, min(n_mem, TABLE_MAX))  # a slider needs min < max, even for one prompt
            n_table = bounded_slider(bounds.MEMO_TABLE, top,
                                     value=min(n_mem, 3 if hub else TABLE_MAX) or 1, step=1,
                                     label="Memorized prompts in the table", elem_id="memo-table-n", scale=2)
            table_btn = gr.Button("Results for the memorized prompts (paper's table)",
                                  elem_id="memo-table-btn", scale=1)
            export_btn = gr.Button("Export (JSON + PNG)", elem_id="memo-export", scale=1)
        summary = gr.HTML(elem_id="memo-summary")
        # the table takes the page's width: 12 columns, the prompt wide, each header on at most 2 lines
        tbl = gr.Dataframe(headers=TABLE_HEADERS, interactive=False, wrap=True, elem_id="memo-table",
                           column_widths=TABLE_WIDTHS, elem_classes=["wb-table-words"],
                           label=("Similarity to the training image, diversity, alignment and score"
                                  if d["has_train_images"] else
                                  "Diversity and score (no training images ship with this model)"))
        with gr.Row():
            hist = gr.Plot(label="Neurons per prompt", elem_id="memo-hist")
            files = gr.File(label="Exports", file_count="multiple", elem_id="memo-files")

    gen_inputs = [prompt, neurons, free, n_seeds, reference, memo_model]

    def listed_type(card, model, asked):
        return type_shown(card, dict(example_sets(service.describe(ctx.source, model or None))[0]).get(asked))

    check_btn.click(prompt_ok, [prompt], None).success(
        check, [prompt, memo_model], [score, zplot, stats_card], show_progress_on=[score],
        **model_event(api_name="memo_check")).success(
        listed_type, [score, memo_model, prompt], mem_type, queue=False, show_progress="hidden",
        api_visibility="private")
    find_btn.click(prompt_ok, [prompt], None).success(
        find, [prompt, memo_model], [found, neurons, zplot], show_progress_on=[found],
        **model_event(api_name="memo_find"))
    gen_btn.click(generate_ok, gen_inputs, None).success(
        generate, gen_inputs, [gallery, cmp_out, last], show_progress_on=[cmp_out],
        **model_event(api_name="memo_generate")).success(
        # one progress bar per request: the pinned set redraws from the cache, quietly
        pinned, [pin, reference, memo_model], pin_out, show_progress="hidden", **model_event(api_visibility="private"))
    pin_btn.click(lambda shown: shown if shown else fail("Generate first, then pin the result."),
                  last, pin, api_visibility="private").success(
        pinned, [pin, reference, memo_model], pin_out, **model_event(api_visibility="private"))
    unpin_btn.click(lambda: (None, ""), None, [pin, pin_out], api_visibility="private")
    batch_btn.click(batch_ok, [batch_text, batch_file], None).success(
        batch, [batch_text, batch_file, memo_model], [batch_tbl, batch_note], show_progress_on=[batch_tbl],
        **model_event(api_name="memo_batch"))
    sample_btn.click(sample, memo_model, batch_text, api_name="memo_batch_sample")
    stats_btn.click(lambda n: None, [n_stats], None).success(
        stats, [n_stats, memo_model, own_stats], stats_card, **model_event(api_name="memo_stats"))
    table_btn.click(lambda n: None, [n_table], None).success(
        table, [n_table, memo_model], [tbl, hist, summary], show_progress_on=[summary],
        **model_event(api_name="memo_table"))
    # Found neurons belong to the prompt they were found for: a new prompt (typed or an example)
    # clears them, so neither a generation nor a link pairs them with another prompt.
    def prompt_changed():
        return gr.update(choices=[], value=[]), ("<div class='wb-muted' id='memo-found-card'>The prompt changed: "
                                                 "“Find neurons” finds the ones for this prompt.</div>")

    for trigger in (prompt.input, mem_ex.dataset.click, ord_ex.dataset.click):
        trigger(prompt_changed, None, [neurons, found], queue=False, show_progress="hidden", api_visibility="private")
    for trigger in (prompt.input, ord_ex.dataset.click):  # a type belongs to a listed memorized caption
        trigger(lambda: NO_TYPE, None, mem_type, queue=False, show_progress="hidden", api_visibility="private")
    picked = memo_model.change(on_model, memo_model, [stats_card, neurons, found],
                               **model_event(api_name="memo_model"))
    keep_on_failure(picked, [stats_card, neurons, found])

    offered = {p for p, _ in mem_examples} | set(ord_examples)  # every example caption a pick has shown

    def words_for(model, asked):
        """The model line, the example captions, the statistics slider, the prompt and its listed type
        follow the picked pipeline: an example caption of another model gives way to this model's
        first example (a prompt the visitor typed stays)."""
        info = service.describe(ctx.source, model or None)
        mem, ordinary, mlabel, olabel = example_sets(info)
        mine = [p for p, _ in mem] + list(ordinary)
        if asked in offered and asked not in mine and mine:
            asked = mine[0]
        offered.update(mine)
        return (model_note(info), gr.Dataset(samples=[[p, t] for p, t in mem], label=mlabel),
                gr.Dataset(samples=[[p] for p in ordinary], label=olabel),
                gr.update(**stats_slider(info["stats_plan"])), dict(mem).get(asked, NO_TYPE), asked)

    picked.success(words_for, [memo_model, prompt], [note, mem_ex.dataset, ord_ex.dataset, n_stats, mem_type,
                                                     prompt],
                   queue=False,
                   show_progress="hidden", api_visibility="private")
    export_btn.click(generate_ok, gen_inputs, None).success(
        export, gen_inputs, files, **model_event(api_name="memo_export"))

    first_out = [score, zplot, stats_card, found, neurons, gallery, cmp_out, last]

    def first_view(prompt_, model_, n):
        """Opened, the tab shows the example's whole story: its score and z-scores, then the neurons NeMo
        finds and the generations with them on and off (cached, so the next visitor's is at once)."""
        yield (*check(prompt_, model_), *(gr.skip() for _ in first_out[3:]))
        card, ticks, zfig = find(prompt_, model_)
        yield (gr.skip(), zfig, gr.skip(), card, ticks, *generate(prompt_, ticks["value"], "", n, None, model_))

    on_first_open(ctx, first_view, [prompt, memo_model, n_seeds], first_out, link_prefix="memo-")
