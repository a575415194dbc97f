"""Memorization: NeMo on Stable Diffusion — is a prompt memorized, which value neurons hold it,
and what the model draws with them switched off.

UI only: every number comes from backend.nemo.service (cached per prompt and setting); neurons are
switched off only inside `backend.nemo.deactivate`, under the UNet's lock, for one request.
"""

from __future__ import annotations

import html

import gradio as gr

from backend.core import bounds
from backend.nemo import data as ndata
from backend.nemo import service
from components.links import deep_links as links
from components.inputs import enter
from components.common import fail, model_event, on_first_open
from components.inputs.fields import bounded_slider, checked_image, clear_unreadable, keep_on_failure
from components.memorization.figures import NO_TYPE, stats_html, type_shown
from components.memorization.handlers import make_checks, make_handlers
from components.memorization.table import TABLE_HEADERS, TABLE_WIDTHS
from components.inputs.model_picker import model_picker

# A deep link reruns these (components.links.deep_links): the score of its prompt, then the generations with its
# ticked neurons off. The ticked neurons travel in the link even before "Find neurons" ran.
# The session report keeps these results and pins (components.report.session).

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
    "</div>"
)
# Presenter view shows this one line instead (components.common: .wb-presenter-only).
PRESENTER_CAPTION = (
    "<div class='wb-explain'>A model that memorized a picture redraws it from any random start. "
    "Switching off a handful of neurons that NeMo finds lets it draw something new.</div>"
)


def model_note(d: dict) -> str:
    layers = ", ".join(f"{n} ({s})" for n, s in d["layers"]) if d["layers"] else "discovered when the model loads"
    return (
        f"<span class='wb-muted'>{html.escape(d['label'])} · value layers (neurons): "
        f"{html.escape(layers)} · detection and generations at guidance "
        f"{d['guidance_scale']:g}, the neuron search at guidance {d['search_guidance']:g} "
        f"(the official search's default).</span>"
    )


def example_sets(d: dict) -> tuple[list, list, str, str]:
    """The memorized (with VM/TM type) and ordinary examples of a model, with their labels: the
    organism's own captions, or the paper's LAION lists for SD-1.x/2.x pipelines."""
    zoo = d["source"] == "zoo"
    return (
        list(zip(d["memorized"], d["memorized_types"])),
        d["ordinary"][:3],
        "Memorized training captions" if zoo else "Memorized LAION captions (the NeMo paper's list)",
        "Ordinary captions (held out)" if zoo else "Unmemorized LAION captions (the paper's list)",
    )


def stats_slider(plan: dict) -> dict:
    """The statistics slider's range and words for a model's statistics set."""
    total = max(2, int(plan.get("total") or 2))
    return {
        "minimum": 2,
        "maximum": max(3, total),
        "value": min(total, 1000),
        "label": f"First N of the {total:,} {plan['set']}",
    }


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
        memo_model, _ = model_picker(
            service.listed(ctx.source), "memorization", elem_id="memo-model", takes="Stable Diffusion pipeline"
        )
    with gr.Row():
        with gr.Column(scale=1, min_width=300):
            prompt = gr.Textbox(label="Prompt", value=default, lines=2, elem_id="memo-prompt")
            mem_type = gr.Textbox(
                label="Type (VM/TM)",
                interactive=False,
                info="VM: verbatim copy of a training image; TM: template (layout copied, details vary)",
                value=mem_examples[0][1] if mem_examples else "",
                max_lines=1,
                elem_id="memo-type",
            )
            mem_ex = gr.Examples(
                [[p, t] for p, t in mem_examples],
                inputs=[prompt, mem_type],
                label=mem_label,
                examples_per_page=6 if hub else 4,
                elem_id="memo-ex-mem",
            )
            ord_ex = gr.Examples([[p] for p in ord_examples], inputs=[prompt], label=ord_label, elem_id="memo-ex-ord")
            check_btn = gr.Button("Check memorization", variant="primary", elem_id="memo-check")
            enter.runs(check_btn, prompt)
            find_btn = gr.Button("Find neurons (NeMo)", elem_id="memo-find")
            note = gr.HTML(model_note(d), elem_classes=["wb-advanced"], elem_id="memo-model-note")
        with gr.Column(scale=2):
            score = gr.HTML(elem_id="memo-score")
            zplot = gr.Plot(label="Per-layer z-scores", elem_id="memo-z")
            stats_card = gr.HTML(stats_html(d["stats_plan"]), elem_id="memo-stats", elem_classes=["wb-advanced"])
            with gr.Accordion("Neuron statistics from the tab (a small set)", open=False, elem_id="memo-stats-acc"):
                plan = stats_slider(d["stats_plan"])
                n_stats = bounded_slider(
                    bounds.MEMO_STATS,
                    plan["maximum"],
                    value=plan["value"],
                    step=1,
                    label=plan["label"],
                    elem_id="memo-stats-n",
                )
                own_stats = gr.Textbox(
                    label=f"…or your own ordinary (non-memorized) prompts, one per line "
                    f"(2–{service.OWN_STATS_MAX:,}; the command-line job for more)",
                    value="",
                    lines=3,
                    elem_id="memo-stats-own",
                )
                stats_btn = gr.Button("Compute statistics in this process", elem_id="memo-stats-btn")
                enter.runs(stats_btn, own_stats)
    with gr.Row():
        with gr.Column(scale=1, min_width=300):
            found = gr.HTML(elem_id="memo-found")
            neurons = gr.CheckboxGroup(
                choices=[],
                value=[],
                label="Found neurons (ticked = switched off)",
                elem_id="memo-neurons",
                elem_classes=["wb-advanced"],
            )

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
                        raise ValueError(
                            f"{v[:40]!r} is not a value neuron of this model "
                            f"(layers: {', '.join(f'{k} 0–{n - 1}' for k, n in sizes.items())})"
                        )
                return values

            links.accept_link(neurons, valid_neurons)
            free = gr.Textbox(
                label="Also switch off (layer:channel, comma-separated)",
                placeholder="e.g. mid.attn0:5, down1.attn0:17",
                elem_id="memo-free",
                elem_classes=["wb-advanced"],
            )
            n_seeds = bounded_slider(
                bounds.MEMO_SEEDS, value=4, step=1, label="Seeds", elem_id="memo-seeds", elem_classes=["wb-advanced"]
            )
            reference = checked_image(
                label=(
                    "Reference image (optional): the training image, if you have it"
                    if not d["has_train_images"]
                    else "Reference image (optional; default: the training image)"
                ),
                type="numpy",
                image_mode="RGB",
                format="png",
                height=190,
                what="the reference image",
                sources=["upload", "clipboard"],
                elem_id="memo-ref",
            )
            clear_unreadable(reference)
            gen_btn = gr.Button(
                "Generate: neurons on vs off", variant="primary", elem_id="memo-generate", elem_classes=["wb-keyfirst"]
            )
            enter.runs(gen_btn, free)
            with gr.Row():
                pin_btn = gr.Button("Pin this result", size="sm", elem_id="memo-pin")
                unpin_btn = gr.Button("Clear pin", size="sm", elem_id="memo-unpin")
            gr.Markdown(
                "<span class='wb-muted'>Pin keeps this generation set (prompt, neurons off, seeds) "
                "and draws it below the next one, e.g. to compare two neuron sets.</span>",
                elem_classes=["wb-advanced"],
            )
        with gr.Column(scale=2):
            cmp_out = gr.HTML(elem_id="memo-compare", elem_classes=["wb-keyfirst"])
            pin_out = gr.HTML(elem_id="memo-pin-box")
            with gr.Accordion(
                "The images as files (full size, download)",
                open=False,
                elem_id="memo-gallery-acc",
                elem_classes=["wb-advanced"],
            ):
                gallery = gr.Gallery(
                    label="Reference image · seeds with neurons on, then off",
                    columns=4,
                    height="auto",
                    format="png",
                    elem_id="memo-gallery",
                )
    last = gr.State(None)  # the shown result's descriptor (prompt, neurons off, seeds)
    pin = gr.State(None)  # the pinned one
    with gr.Accordion("Check a list of prompts", open=hub, elem_id="memo-batch-acc"):
        with gr.Row():
            with gr.Column(scale=1, min_width=300):
                batch_text = gr.Textbox(
                    label=f"Prompts, one per line (at most {ndata.MAX_PROMPTS})", lines=6, elem_id="memo-batch-text"
                )
                batch_file = gr.File(
                    label="…or a file (.txt one per line, .csv with a Caption column, .json list)",
                    file_types=[".txt", ".csv", ".json"],
                    type="filepath",
                    elem_id="memo-batch-file",
                )
                with gr.Row():
                    sample_btn = gr.Button("5 memorized + 5 unmemorized from the list", elem_id="memo-batch-sample")
                    batch_btn = gr.Button("Check all", variant="primary", elem_id="memo-batch-btn")
                enter.runs(batch_btn, batch_text)
            with gr.Column(scale=2):
                batch_note = gr.HTML(elem_id="memo-batch-note-box")
                batch_tbl = gr.Dataframe(
                    headers=BATCH_HEADERS,
                    interactive=False,
                    wrap=True,
                    datatype=["str", "number", "str", "number", "str"],
                    column_widths=["52%", "11%", "15%", "10%", "12%"],
                    elem_id="memo-batch-table",
                    label="Memorization score per prompt",
                )
    n_mem = len(d["memorized"])
    with gr.Column(visible=n_mem > 0):
        with gr.Row(equal_height=True):
            top = max(2, min(n_mem, TABLE_MAX))  # a slider needs min < max, even for one prompt
            n_table = bounded_slider(
                bounds.MEMO_TABLE,
                top,
                value=min(n_mem, 3 if hub else TABLE_MAX) or 1,
                step=1,
                label="Memorized prompts in the table",
                elem_id="memo-table-n",
                scale=2,
            )
            table_btn = gr.Button(
                "Results for the memorized prompts (paper's table)", elem_id="memo-table-btn", scale=1
            )
            export_btn = gr.Button("Export (JSON + PNG)", elem_id="memo-export", scale=1)
        summary = gr.HTML(elem_id="memo-summary")
        # the table takes the page's width: 12 columns, the prompt wide, each header on at most 2 lines
        tbl = gr.Dataframe(
            headers=TABLE_HEADERS,
            interactive=False,
            wrap=True,
            elem_id="memo-table",
            column_widths=TABLE_WIDTHS,
            elem_classes=["wb-table-words"],
            label=(
                "Similarity to the training image, diversity, alignment and score"
                if d["has_train_images"]
                else "Diversity and score (no training images ship with this model)"
            ),
        )
        with gr.Row():
            hist = gr.Plot(label="Neurons per prompt", elem_id="memo-hist")
            files = gr.File(label="Exports", file_count="multiple", elem_id="memo-files")

    gen_inputs = [prompt, neurons, free, n_seeds, reference, memo_model]

    def listed_type(card, model, asked):
        return type_shown(card, dict(example_sets(service.describe(ctx.source, model or None))[0]).get(asked))

    check_btn.click(prompt_ok, [prompt], None).success(
        check,
        [prompt, memo_model],
        [score, zplot, stats_card],
        show_progress_on=[score],
        **model_event(api_name="memo_check"),
    ).success(
        listed_type,
        [score, memo_model, prompt],
        mem_type,
        queue=False,
        show_progress="hidden",
        api_visibility="private",
    )
    find_btn.click(prompt_ok, [prompt], None).success(
        find,
        [prompt, memo_model],
        [found, neurons, zplot],
        show_progress_on=[found],
        **model_event(api_name="memo_find"),
    )
    gen_btn.click(generate_ok, gen_inputs, None).success(
        generate,
        gen_inputs,
        [gallery, cmp_out, last],
        show_progress_on=[cmp_out],
        **model_event(api_name="memo_generate"),
    ).success(
        # one progress bar per request: the pinned set redraws from the cache, quietly
        pinned,
        [pin, reference, memo_model],
        pin_out,
        show_progress="hidden",
        **model_event(api_visibility="private"),
    )
    pin_btn.click(
        lambda shown: shown if shown else fail("Generate first, then pin the result."),
        last,
        pin,
        api_visibility="private",
    ).success(pinned, [pin, reference, memo_model], pin_out, **model_event(api_visibility="private"))
    unpin_btn.click(lambda: (None, ""), None, [pin, pin_out], api_visibility="private")
    batch_btn.click(batch_ok, [batch_text, batch_file], None).success(
        batch,
        [batch_text, batch_file, memo_model],
        [batch_tbl, batch_note],
        show_progress_on=[batch_tbl],
        **model_event(api_name="memo_batch"),
    )
    sample_btn.click(sample, memo_model, batch_text, api_name="memo_batch_sample")
    stats_btn.click(lambda n: None, [n_stats], None).success(
        stats, [n_stats, memo_model, own_stats], stats_card, **model_event(api_name="memo_stats")
    )
    table_btn.click(lambda n: None, [n_table], None).success(
        table,
        [n_table, memo_model],
        [tbl, hist, summary],
        show_progress_on=[summary],
        **model_event(api_name="memo_table"),
    )

    # Found neurons belong to the prompt they were found for: a new prompt (typed or an example)
    # clears them, so neither a generation nor a link pairs them with another prompt.
    def prompt_changed():
        return gr.update(choices=[], value=[]), (
            "<div class='wb-muted' id='memo-found-card'>The prompt changed: "
            "“Find neurons” finds the ones for this prompt.</div>"
        )

    for trigger in (prompt.input, mem_ex.dataset.click, ord_ex.dataset.click):
        trigger(prompt_changed, None, [neurons, found], queue=False, show_progress="hidden", api_visibility="private")
    for trigger in (prompt.input, ord_ex.dataset.click):  # a type belongs to a listed memorized caption
        trigger(lambda: NO_TYPE, None, mem_type, queue=False, show_progress="hidden", api_visibility="private")
    picked = memo_model.change(on_model, memo_model, [stats_card, neurons, found], **model_event(api_name="memo_model"))
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
        return (
            model_note(info),
            gr.Dataset(samples=[[p, t] for p, t in mem], label=mlabel),
            gr.Dataset(samples=[[p] for p in ordinary], label=olabel),
            gr.update(**stats_slider(info["stats_plan"])),
            dict(mem).get(asked, NO_TYPE),
            asked,
        )

    picked.success(
        words_for,
        [memo_model, prompt],
        [note, mem_ex.dataset, ord_ex.dataset, n_stats, mem_type, prompt],
        queue=False,
        show_progress="hidden",
        api_visibility="private",
    )
    export_btn.click(generate_ok, gen_inputs, None).success(
        export, gen_inputs, files, **model_event(api_name="memo_export")
    )

    first_out = [score, zplot, stats_card, found, neurons, gallery, cmp_out, last]

    def first_view(prompt_, model_, n):
        """Opened, the tab shows the example's whole story: its score and z-scores, then the neurons NeMo
        finds and the generations with them on and off (cached, so the next visitor's is at once)."""
        yield (*check(prompt_, model_), *(gr.skip() for _ in first_out[3:]))
        card, ticks, zfig = find(prompt_, model_)
        yield (gr.skip(), zfig, gr.skip(), card, ticks, *generate(prompt_, ticks["value"], "", n, None, model_))

    on_first_open(ctx, first_view, [prompt, memo_model, n_seeds], first_out, link_prefix="memo-")
