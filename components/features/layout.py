"""Features: an SAE feature browser for a LLaVA-style model (Zhang et al., 2024, multimodal SAEs).

UI only: the feature list, feature pages, image analysis and steering come from backend.sae
(loading, pages, analysis, hub_index).
"""

from __future__ import annotations

import html

import gradio as gr

from backend.core import presets as P
from backend.sae import analysis, loading, organism, pages
from components.inputs import enter
from components.common import model_event, on_first_open
from components.features import contrast
from components.features import handlers as H
from components.features.index_build import _build_note, _summary_md, build_index, cancel_index, load_own
from components.features.pages import (
    _explain,
    ask_model,
    clamp_limit,
    firing_columns,
    list_features,
    open_feature,
    reopen_feature,
    sorts_of,
)
from components.features.steering import (
    POSITION_CHOICES,
    _steering_explain,
    analyse,
    input_label,
    link_note,
    pin,
    scene_picker,
    steer,
    steer_many,
    upload_label,
)
from components.inputs.fields import CheckedImage, CheckedNumber, clear_unreadable, keep_on_failure
from components.inputs.model_picker import model_picker


# A deep link opens its feature page when the tab opens (`feature=ID` or the linked `features-id`), then reruns
# these (components.links.deep_links): the model and SAE it names (a user's own too), the filtered list, the
# held-out scene's analysis and the steering.
# The session report keeps these results and pins (components.report.session).


PRESENTER_CSS = """<style>
body.wb-presenter #features-overlay {height: auto !important;}
body.wb-presenter #features-overlay .grid-wrap, body.wb-presenter #features-firing .grid-wrap {
  height: auto !important; max-height: none !important;}
</style>"""


def build(ctx) -> None:
    source = gr.State(ctx.source)
    # the tab's model pick (its VLM + SAE): under ZeroGPU the main process loads a user's own before
    # a worker forks, so every worker inherits it (components.serving.guard, loading.source_pick)
    source.wb_pick_tab = organism.TAB
    try:
        org = loading.get_organism(ctx.source)
        n_features = org.n_features
        first = pages.feature_table(org, "", "density" if org.is_hub else "iou")
        # the feature the organism's steering was calibrated for (the zoo's red), so that the first
        # "Generate" below, on the first scene, shows a clamp at work; else the top of the list
        defaults = analysis.steering_defaults(org)
        first_id = defaults["feature"]
        if first_id is None:
            first_id = first[0]["feature"] if first else 0
    except Exception as e:  # the organism is not built: say so instead of failing the whole app
        gr.Markdown(f"**The Features model could not be loaded:** {html.escape(str(e))}")
        return
    # Presenter view (body.wb-presenter, components/common.py): one plain line per section in place of
    # the expert text (`wb-advanced` hides it), the top images with their activation regions large.
    # The <style> applies from a hidden block too; a shown one took a 20 px row and a gap under the link row.
    gr.HTML(PRESENTER_CSS, padding=False, elem_classes=["wb-hidden"])
    gr.Markdown(
        "**Each feature is one thing the model has learned to notice. The coloured pictures show "
        "where in its favourite images it fires.**",
        elem_classes=["wb-presenter-only", "wb-lead"],
    )
    explain = gr.HTML(_explain(org), elem_classes=["wb-advanced"], elem_id="features-explain")
    # the model and SAE: the zoo organism, the paper's LLaVA-NeXT + SAE, or your own LLaVA-family VLM
    # with your own sparsify / SAELens SAE at a hookpoint you name (a session's choice: its `source`)
    listed = sorted(P.presets(organism.TAB), key=lambda p: p != P.active(organism.TAB, ctx.source))
    first_p = listed[0]
    with gr.Accordion(
        "Model and SAE: the zoo's, the paper's, or your own",
        open=False,
        elem_id="features-own",
        elem_classes=["wb-advanced"],
    ):
        with gr.Row():
            own_vlm, _ = model_picker(
                listed,
                "features",
                elem_id="feat-model",
                value=first_p.path_or_id,
                takes="LLaVA or LLaVA-NeXT model",
                scale=2,
            )
            own_sae = gr.Textbox(
                label="SAE: hub id or folder (sparsify or SAELens); empty for the zoo's",
                value=first_p.extra.get("sae", "") if first_p.source == "hub" else "",
                elem_id="feat-sae",
                scale=2,
            )
            own_hook = gr.Textbox(
                label="hookpoint, e.g. model.layers.24",
                elem_id="feat-hookpoint",
                value=first_p.extra.get("hookpoint", ""),
                scale=1,
            )
        with gr.Row():
            own_btn = gr.Button(
                "Load this model and SAE", variant="primary", elem_id="feat-load", scale=0, min_width=220
            )
            enter.runs(own_btn, own_sae, own_hook)
            own_md = gr.Markdown(elem_id="feat-own-status")
    summary = gr.Markdown(_summary_md(org), elem_classes=["wb-muted", "wb-advanced"], elem_id="features-summary")
    with gr.Accordion(
        "Build the feature index from images", open=org.index is None, elem_id="features-build", visible=org.is_hub
    ) as build_acc:
        build_note = gr.Markdown(_build_note(org) if org.is_hub else "")
        with gr.Row():
            build_files = gr.File(
                label="images to index (or one .zip of them)",
                file_count="multiple",
                file_types=["image", ".zip"],
                elem_id="features-build-files",
                scale=2,
            )
            build_folder = gr.Textbox(
                label="…or a folder on the server (under WORKBENCH_MODEL_ROOTS)",
                elem_id="features-build-folder",
                scale=2,
            )
        with gr.Row():
            build_btn = gr.Button("Build index", variant="primary", elem_id="features-build-run")
            enter.runs(build_btn, build_folder)
            cancel_btn = gr.Button("Cancel", variant="stop", elem_id="features-build-cancel")
        build_status = gr.Markdown(elem_id="features-build-status")

    with gr.Row():
        with gr.Column(scale=2, min_width=320):
            with gr.Row(elem_classes=["wb-advanced"]):  # presenter: the id box below picks the feature
                query = gr.Textbox(
                    label="search label or id" if org.is_hub else "search concept",
                    placeholder="a feature id" if org.is_hub else "e.g. red, circle, striped",
                    elem_id="features-query",
                    scale=2,
                )
                sort = gr.Dropdown(
                    sorts_of(org),
                    value="density" if org.is_hub else "IoU",
                    label="sort by",
                    elem_id="features-sort",
                    scale=1,
                )
            table = gr.Dataframe(
                value=list_features(ctx.source, "", "density" if org.is_hub else "IoU"),
                interactive=False,
                elem_classes=["wb-advanced"],
                elem_id="features-table",
                max_height=420,
            )
            with gr.Row():
                feat = CheckedNumber(
                    value=first_id,
                    precision=0,
                    label=f"feature id (0–{n_features - 1})",
                    elem_id="features-id",
                    minimum=0,
                    maximum=n_features - 1,
                )
                open_btn = gr.Button("Open feature", variant="primary", elem_id="features-open")
                enter.runs(open_btn, feat)
            ask_btn = gr.Button("Ask the model to name this feature", elem_id="features-ask", visible=org.is_hub)
            gr.Markdown(
                "<span class='wb-muted'>Click a row or type an id. Deep link: "
                "<code>?tab=features&amp;feature=ID</code>, or “Link to this view” below.</span>"
            )
        with gr.Column(scale=3):
            header = gr.HTML(elem_id="features-header", elem_classes=["wb-keyfirst"])
            with gr.Row():
                gal_overlay = gr.Gallery(
                    label="top images · activation overlay",
                    columns=5,
                    height=210,
                    format="png",
                    elem_id="features-overlay",
                    object_fit="contain",
                    elem_classes=["wb-keyfirst"],
                )
            patch_plot = gr.Plot(
                label="activation per patch over the top images (hover a patch for its value)",
                elem_id="features-patches",
                elem_classes=["wb-advanced"],
            )
            with gr.Row(elem_classes=["wb-advanced"]):
                gal_dim = gr.Gallery(
                    label="top images · outside the activation region dimmed",
                    columns=5,
                    height=210,
                    format="png",
                    elem_id="features-dimmed",
                    object_fit="contain",
                )
            with gr.Row(elem_classes=["wb-advanced"]):
                hist = gr.Plot(label="activation histogram", elem_id="features-hist")
                concepts = gr.Plot(
                    label="concept IoU", elem_id="features-concepts", visible=not org.is_hub
                )  # no planted concepts in real images
            with gr.Row():
                json_file = gr.File(label="export JSON", elem_id="features-json")
                png_file = gr.File(label="export PNG", elem_id="features-png")
            with gr.Accordion("feature page data (JSON)", open=False):
                page_data = gr.JSON(label="feature page (data)")

    gr.Markdown("### Which features fire where")
    gr.Markdown(
        "Upload a picture: the model's strongest features on it, and where each one fires.",
        elem_classes=["wb-presenter-only"],
    )
    with gr.Row():
        with gr.Column(scale=1):
            upload = CheckedImage(
                label=upload_label(org),
                type="numpy",
                format="png",
                height=220,
                elem_id="features-upload",
                sources=["upload", "clipboard"],
            )
            clear_unreadable(upload)
            link_md = gr.Markdown(link_note(org))
            # a preset without a scene set (hub) has no scene picker: the upload is the input
            example = gr.Dropdown(**scene_picker(org), elem_id="features-example", allow_custom_value=True)
            analyse_btn = gr.Button("Analyse image", variant="primary", elem_id="features-analyse")
        with gr.Column(scale=3):
            with gr.Row():
                shown = gr.Image(
                    label=input_label(org), format="png", height=200, interactive=False, elem_id="features-shown"
                )
                with gr.Column():
                    cap = gr.Markdown()
                    firing = gr.Dataframe(
                        headers=firing_columns(org), interactive=False, elem_id="features-firing-table"
                    )
            fire_gallery = gr.Gallery(
                label="strongest features on this image",
                columns=6,
                height=200,
                object_fit="contain",
                format="png",
                elem_id="features-firing",
            )
            fire_bar = gr.HTML()
            fire_plot = gr.Plot(
                label="activation per patch of the strongest features (hover a patch for its value)",
                elem_id="features-fire-patches",
                elem_classes=["wb-advanced"],
            )

    gr.Markdown("### Steering: clamp a feature and watch the caption")
    gr.Markdown(
        "Switch one feature on hard and compare what the model says with and without it.",
        elem_classes=["wb-presenter-only"],
    )
    steer_explain = gr.HTML(_steering_explain(org), elem_classes=["wb-advanced"], elem_id="features-steer-explain")
    slider_max = clamp_limit(org)
    with gr.Row():
        with gr.Column(scale=2):
            steer_feat = CheckedNumber(
                value=first_id,
                precision=0,
                label=f"feature to clamp (0–{n_features - 1})",
                elem_id="features-steer-id",
                minimum=0,
                maximum=n_features - 1,
            )
            # a number box, not a slider: a slider's box shows a typed 5000 while the slider sends its max
            steer_val = CheckedNumber(
                value=analysis.default_clamp_value(org, first_id),
                minimum=0,
                maximum=slider_max,
                label=f"clamp value (0–{slider_max:g})",
                elem_id="features-clamp",
            )
            positions = gr.Radio(
                POSITION_CHOICES,
                value=defaults["positions"],
                label="positions",
                elem_id="features-positions",
                elem_classes=["wb-advanced"],
            )
            with gr.Row(elem_classes=["wb-advanced"]):
                add_err = gr.Checkbox(False, label="add the SAE error term back", elem_id="features-adderr")
                suppress = gr.Checkbox(
                    defaults["suppress"],
                    visible=not org.is_hub,  # families need concept labels
                    label="zero rival features of the same family (e.g. the other colours)",
                    elem_id="features-suppress",
                )
            steer_btn = gr.Button("Generate with and without", variant="primary", elem_id="features-steer")
            enter.runs(steer_btn, steer_feat, steer_val)
        with gr.Column(scale=3):
            with gr.Row():
                with gr.Column(scale=1, min_width=140):
                    steer_img = gr.Image(
                        label="image given to the model" if org.is_hub else "scene given to the captioner",
                        format="png",
                        height=180,
                        interactive=False,
                        elem_id="features-steer-img",
                    )
                with gr.Column(scale=2, min_width=240):
                    steer_md = gr.Markdown(elem_id="features-steer-out")
                with gr.Column(scale=2, min_width=200):
                    pinned_md = gr.HTML(elem_id="features-pinned")  # beside the current result
            with gr.Row():
                pin_btn = gr.Button("Pin this result to compare", size="sm", elem_id="features-pin")
                unpin_btn = gr.Button("Clear the pin", size="sm", elem_id="features-unpin")
            with gr.Accordion("steering result (JSON)", open=False):
                steer_json = gr.JSON(label="steering result")
    with gr.Row():
        with gr.Column(scale=2):
            more = gr.Textbox(
                label="more clamps, with the one above: feature=value, …",
                max_lines=1,
                placeholder="e.g. 12=4, 30=2.5",
                elem_id="features-more-clamps",
            )
            zeroed = gr.Textbox(
                label="features to suppress (clamped to 0)",
                max_lines=1,
                placeholder="e.g. 7, 9",
                elem_id="features-suppress-ids",
            )
            many_btn = gr.Button("Each clamp alone and all together", elem_id="features-steer-many")
            enter.runs(many_btn, more, zeroed)
        with gr.Column(scale=3):
            many_table = gr.Dataframe(
                headers=["clamps", "answer" if org.is_hub else "caption", "concepts named", "changed from no clamp"],
                interactive=False,
                wrap=True,
                elem_id="features-steer-many-out",
                column_widths=["28%", "32%", "22%", "18%"],
                label="several features at once: what each setting makes the model say",
            )
            with gr.Accordion("several clamps (JSON)", open=False):
                many_json = gr.JSON(label="several clamps")
    pinned = gr.State(None)  # the pinned steering result: a small dict of text, never tensors

    steer_feat.input(
        H.clamp_for, [source, steer_feat], steer_val, queue=False, show_progress="hidden", api_visibility="private"
    )

    page_outputs = [
        header,
        gal_overlay,
        gal_dim,
        hist,
        concepts,
        json_file,
        png_file,
        page_data,
        patch_plot,
        feat,
        steer_feat,
        steer_val,
    ]
    contrast.panel(org, source, page_outputs)
    # every event: a failure leaves the last good view as it was (no Error badges), message in the toast
    keep_on_failure(open_btn.click(open_feature, [source, feat], page_outputs, api_name="feature_page"), page_outputs)
    keep_on_failure(query.submit(list_features, [source, query, sort], table, api_name="features_list"), [table])
    keep_on_failure(sort.change(list_features, [source, query, sort], table, api_visibility="private"), [table])

    keep_on_failure(table.select(H.pick_row, [source, table], page_outputs, api_visibility="private"), page_outputs)
    built = build_btn.click(
        build_index,
        [source, build_files, build_folder],
        [build_status, table, feat, summary, source],
        **model_event(api_name="build_index"),
    )
    keep_on_failure(built, [build_status, table, feat, summary, source])
    keep_on_failure(built.success(reopen_feature, [source, feat], page_outputs, api_visibility="private"), page_outputs)
    cancel_btn.click(cancel_index, None, build_status, api_name="cancel_index")
    asked = ask_btn.click(ask_model, [source, feat], page_outputs + [source], **model_event(api_name="ask_model"))
    keep_on_failure(asked, page_outputs + [source])
    asked.success(list_features, [source, query, sort], table, api_visibility="private")  # the new label
    analysis_out = [shown, cap, fire_gallery, firing, fire_bar, fire_plot]
    keep_on_failure(
        analyse_btn.click(analyse, [source, upload, example], analysis_out, **model_event(api_name="analyse_image")),
        analysis_out,
    )
    steer_out = [steer_img, steer_md, steer_json]
    keep_on_failure(
        steer_btn.click(
            steer,
            [source, upload, example, steer_feat, steer_val, positions, add_err, suppress],
            steer_out,
            **model_event(api_name="steer"),
        ),
        steer_out,
    )

    many_out = [many_table, many_json]
    keep_on_failure(
        many_btn.click(
            steer_many,
            [source, upload, example, steer_feat, steer_val, more, zeroed, positions, add_err, suppress],
            many_out,
            **model_event(api_name="steer_many"),
        ),
        many_out,
    )
    keep_on_failure(pin_btn.click(pin, [steer_json], [pinned, pinned_md], api_name="pin_steering"), [pinned, pinned_md])
    unpin_btn.click(H.unpin, None, [pinned, pinned_md], api_visibility="private")
    default_source = gr.State(ctx.source)
    load_out = [source, own_md, summary, build_acc, build_note, ask_btn, table, feat, steer_feat, steer_explain]
    loaded = own_btn.click(
        load_own, [default_source, own_vlm, own_sae, own_hook], load_out, **model_event(api_name="features_load")
    )
    keep_on_failure(loaded, load_out)  # every output: a failed load leaves no Error badge on any

    loaded.success(
        H.planted_views,
        source,
        [explain, concepts, suppress, sort, query, example, upload, link_md, shown, steer_img],
        queue=False,
        show_progress="hidden",
        api_visibility="private",
    )

    loaded.success(
        H.cleared, source, analysis_out + steer_out, queue=False, show_progress="hidden", api_visibility="private"
    )
    keep_on_failure(
        loaded.success(reopen_feature, [source, feat], page_outputs, api_visibility="private"), page_outputs
    )

    def first_view(source_):
        return H.first_view(source_, first_id)

    # Drawn when the tab is first opened, as every tab's first view is (it was computed, export files
    # and all, at every page load, for visitors who never opened the tab). A feature page reads the
    # index, not the model: it waits in no model queue, as the "open feature" button does not.
    on_first_open(ctx, first_view, [source], page_outputs, concurrency_id=None, concurrency_limit="default")
