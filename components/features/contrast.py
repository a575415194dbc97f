"""The Features tab's contrast panel: which SAE features tell two image sets apart.

Set A and set B are the visitor's uploads, or on the zoo two scene recipes (a concept filter over
the held-out scenes: "red" against "blue", "striped circle" against "square"). Every feature is
tested on the two sets' per-image activations (backend.sae.contrast: Mann–Whitney U, rank-biserial
effect, Benjamini–Hochberg), shown as a volcano plot and a table whose rows open the feature's page.
The images and their activations are the visitor's own: uploads stay in the visitor's session, and
the count of images per set is one bound (backend.core.bounds.CONTRAST_IMAGES) for the tab, the API
and the MCP tool alike, checked before any image is read.
"""

from __future__ import annotations

import html
from pathlib import Path

import gradio as gr
import numpy as np
import pandas as pd
import plotly.graph_objects as go

from backend.core import bounds, image_header
from backend.core.colors import NEUTRAL, qualitative, themed
from backend.sae import contrast as C
from backend.sae import contrast_scenes as CS
from backend.sae import scenes as S
from components.common import fail
from components.features.pages import _org
from components.inputs.fields import unreadable
from components.serving import exports

THUMB_SIDE = 256  # px, the longest side of an image in the top images' gallery
SHOWN_ROWS = 20  # rows in the table; the CSV holds every tested feature up to bounds.CONTRAST_ROWS
COLUMNS = ["feature", "label", "mean A", "mean B", "fires in A", "fires in B", "effect r", "p", "q", "significant"]
DEFAULT_A, DEFAULT_B = "red", "blue"


def _files(files, name: str) -> list[np.ndarray]:
    """A set's uploaded images, counted against the bound before any is read, each checked from its
    header (a small PNG may decode to gigabytes)."""
    from PIL import Image

    paths = [str(getattr(f, "name", f)) for f in (files or [])]
    if len(paths) > bounds.CONTRAST_IMAGES.hi:
        fail(
            f"Set {name} has {len(paths)} images; at most {bounds.CONTRAST_IMAGES.hi:g} per set. Nothing was computed."
        )
    if 0 < len(paths) < bounds.CONTRAST_IMAGES.lo:
        fail(
            f"Set {name} has {len(paths)} image; at least {bounds.CONTRAST_IMAGES.lo:g} per set. Nothing was computed."
        )
    images = []
    for p in paths:
        try:
            image_header.check_file(p, Path(p).name)
            with Image.open(p) as im:
                images.append(np.asarray(im.convert("RGB")))
        except image_header.TooLarge as e:
            fail(str(e))
        except Exception:
            fail(unreadable(Path(p).name))
    return images


def recipes(org) -> bool:
    """Whether a set can be a concept filter over scenes: the zoo's held-out scenes only (a hub
    model, or a visitor's own, takes the visitor's images)."""
    return not org.is_hub and bool(org.heldout_specs)


NO_RECIPES = (
    f"Upload {bounds.CONTRAST_IMAGES.lo:g} to {bounds.CONTRAST_IMAGES.hi:g} images for each set: this "
    "model has no scene recipes (concept filters work on the zoo organism's scenes only). "
    "Nothing was computed."
)


def _sets(org, concept_a: str, concept_b: str, files_a, files_b, n) -> tuple[str, list, list, list, list]:
    """(how the sets were made, images A, images B, captions A, captions B): uploads where a set has
    them, else the zoo's scene recipe of its concept filter."""
    n = bounds.check_whole(bounds.CONTRAST_IMAGES, n)
    up_a, up_b = _files(files_a, "A"), _files(files_b, "B")
    if up_a and up_b:
        return (
            "your images",
            up_a,
            up_b,
            [f"your image {i + 1}" for i in range(len(up_a))],
            [f"your image {i + 1}" for i in range(len(up_b))],
        )
    if not recipes(org):
        fail(NO_RECIPES)
    if up_a or up_b:
        fail("Upload images for both sets, or none to use the two concept filters.")
    sets = CS.scene_sets(org, concept_a or "", concept_b or "", n=n)
    render = lambda specs: [S.render(s)[0] for s in specs]  # noqa: E731
    how = (
        f"held-out scenes: A “{sets['concept_a']}” ({len(sets['ids_a'])} of {sets['available_a']}), "
        f"B “{sets['concept_b']}” ({len(sets['ids_b'])} of {sets['available_b']}); a scene matching both is in neither"
    )
    return how, render(sets["specs_a"]), render(sets["specs_b"]), sets["captions_a"], sets["captions_b"]


def estimate(source: str, files_a, files_b, n) -> str:
    """What the contrast will cost, said before it starts."""
    org = _org(source)
    try:
        n = bounds.check_whole(bounds.CONTRAST_IMAGES, n)
    except ValueError as e:
        return f"<span class='wb-muted'>{html.escape(str(e))}</span>"
    if not recipes(org) and not (files_a and files_b):  # nothing to run yet: say what it needs
        return f"<span class='wb-muted'>{html.escape(NO_RECIPES.removesuffix(' Nothing was computed.'))}</span>"
    n_a, n_b = len(files_a or []) or n, len(files_b or []) or n
    if max(n_a, n_b) > bounds.CONTRAST_IMAGES.hi:
        return f"<span class='wb-muted'>At most {bounds.CONTRAST_IMAGES.hi:g} images per set.</span>"
    if min(n_a, n_b) < bounds.CONTRAST_IMAGES.lo:
        return f"<span class='wb-muted'>At least {bounds.CONTRAST_IMAGES.lo:g} images per set.</span>"
    cost = C.contrast_cost(org, n_a, n_b)
    stats_s = cost["statistics_seconds"]
    stats = "milliseconds" if stats_s < 0.5 else f"up to about {stats_s:.0f} s of it ({org.n_features:,} features)"
    return (
        f"<span class='wb-muted'>{cost['images']} images, {cost['batches']} batches of the model: about "
        f"{cost['seconds']:.0f} s{' (the model’s share measured on this server)' if cost.get('measured') else ''}; "
        f"the statistics take {stats}.</span>"
    )


def volcano(result: dict) -> go.Figure:
    """Effect against −log10 q, one point per tested feature; the significant ones in the set's colour."""
    rows = [r for r in result["rows"] if r["tested"]]
    fig = go.Figure()
    for name, keep, color in (
        ("higher in A", lambda r: r["significant"] and r["effect"] > 0, qualitative(0)),
        ("higher in B", lambda r: r["significant"] and r["effect"] < 0, qualitative(1)),
        ("not significant", lambda r: not r["significant"], NEUTRAL),
    ):
        sel = [r for r in rows if keep(r)]
        fig.add_trace(
            go.Scatter(
                x=[r["effect"] for r in sel],
                y=[-np.log10(max(r["q"], 1e-300)) for r in sel],
                mode="markers",
                name=name,
                marker={"size": 8, "color": color, "opacity": 0.45 if name == "not significant" else 0.9},
                customdata=[
                    [r["feature"], r["label"] or "—", r["mean_a"], r["mean_b"], r["rate_a"], r["rate_b"], r["p"]]
                    for r in sel
                ],
                hovertemplate=(
                    "feature %{customdata[0]} (%{customdata[1]})<br>effect r %{x:.2f}, q %{text}<br>"
                    "mean A %{customdata[2]:.3g}, B %{customdata[3]:.3g}<br>fires in A %{customdata[4]:.0%}, "
                    "B %{customdata[5]:.0%}<br>p %{customdata[6]:.2g}<extra></extra>"
                ),
                text=[f"{r['q']:.2g}" for r in sel],
            )
        )
    top = [r for r in result["rows"][:6] if r["significant"]]
    for r in top:
        fig.add_annotation(
            x=r["effect"],
            y=-np.log10(max(r["q"], 1e-300)),
            text=str(r["feature"]),
            showarrow=False,
            yshift=10,
            font={"size": 11},
        )
    fig.add_hline(
        y=-np.log10(result["alpha"]),
        line_dash="dot",
        annotation_text=f"q = {result['alpha']:g}",
        annotation_position="bottom right",
    )
    fig.update_layout(
        xaxis_title="effect (rank-biserial r: +1 every A image above every B image)",
        yaxis_title="−log10 q (Benjamini–Hochberg)",
        height=340,
        margin={"l": 60, "r": 20, "t": 30, "b": 50},
        legend={"orientation": "h", "y": 1.12},
    )
    fig.update_xaxes(range=[-1.05, 1.05])
    return themed(fig)


def table(result: dict) -> pd.DataFrame:
    rows = [r for r in result["rows"] if r["tested"]]
    return pd.DataFrame(
        [
            [
                r["feature"],
                r["label"] or "—",
                round(r["mean_a"], 4),
                round(r["mean_b"], 4),
                f"{r['rate_a']:.0%}",
                f"{r['rate_b']:.0%}",
                round(r["effect"], 3),
                f"{r['p']:.2g}",
                f"{r['q']:.2g}",
                "yes" if r["significant"] else "no",
            ]
            for r in rows[:SHOWN_ROWS]
        ],
        columns=COLUMNS,
    )


def summary(result: dict, how: str) -> str:
    tested, sig = result["n_tested"], result["n_significant"]
    note = (
        ""
        if result["can_be_significant"]
        else f" With {result['n_a']} and {result['n_b']} images no feature can reach q < {result['alpha']:g}: add images."
    )
    return (
        f"<div class='wb-explain'><b>{sig} of {tested} tested features</b> fire differently on A than on B "
        f"(q &lt; {result['alpha']:g}).{html.escape(note)}<br><span class='wb-muted'>Sets: {html.escape(how)}. "
        f"Test: {html.escape(result['test'])}. Effect: {html.escape(result['effect_size'])}. "
        f"Correction: {html.escape(result['correction'])}. Click a row to open its feature page.</span></div>"
    )


def shown(image: np.ndarray, side: int = THUMB_SIDE) -> np.ndarray:
    """An image as the gallery shows it: a large upload (a hub model takes up to 4096 px a side) as a
    thumbnail, aspect kept; a small one as it is."""
    if max(image.shape[:2]) <= side:
        return image
    from backend.sae.pages import thumbnail

    return thumbnail(image, side)


def tops(result: dict, images_a: list, images_b: list, captions_a: list, captions_b: list) -> list:
    """The top row's strongest images of each set, captioned with their set."""
    if not result["rows"]:
        return []
    r = result["rows"][0]
    return [(shown(images_a[i]), f"A · feature {r['feature']} · {captions_a[i]}") for i in r["top_a"]] + [
        (shown(images_b[i]), f"B · feature {r['feature']} · {captions_b[i]}") for i in r["top_b"]
    ]


def run(source: str, concept_a: str, concept_b: str, files_a, files_b, n, request=None, progress=gr.Progress()):
    """The contrast of the two sets: (summary, volcano, table, top images, CSV). The sets are checked
    (counts, files) before the model's weights load: a refusal never waits for a hub model."""
    how, images_a, images_b, cap_a, cap_b = _sets(_org(source), concept_a, concept_b, files_a, files_b, n)
    org = _org(source, progress)
    result = C.contrast_images(org, images_a, images_b, rows=bounds.CONTRAST_ROWS.hi)
    frame = pd.DataFrame(
        [
            {
                k: r[k]
                for k in ("feature", "label", "mean_a", "mean_b", "rate_a", "rate_b", "effect", "p", "q", "significant")
            }
            for r in result["rows"]
            if r["tested"]
        ]
    )

    def write(folder: Path) -> Path:
        path = folder / "features-contrast.csv"
        frame.to_csv(path, index=False)
        return path

    csv = exports.hand_out(write, request)
    return summary(result, how), volcano(result), table(result), tops(result, images_a, images_b, cap_a, cap_b), csv


def panel(org, source, page_outputs: list) -> None:
    """The panel's controls and events; a row of its table opens that feature's page (`page_outputs`)."""
    from components.common import model_event
    from components.inputs import enter
    from components.inputs.fields import CheckedNumber, keep_on_failure

    scenes = recipes(org)
    span = f"{bounds.CONTRAST_IMAGES.lo:g}–{bounds.CONTRAST_IMAGES.hi:g}"
    gr.Markdown("### Contrast: which features tell two image sets apart")
    gr.HTML(
        "<div class='wb-explain'>Give two sets of images: every feature is tested for firing more on "
        "one set than on the other (Mann–Whitney U per feature, Benjamini–Hochberg over the features "
        "tested). "
        + (
            "On the zoo a set can be a concept filter over the held-out scenes (e.g. "
            "<code>red</code> against <code>blue</code>, <code>striped circle</code> against "
            "<code>square</code>); uploads replace the filters. "
            if scenes
            else f"Upload {span} images for each set: this model has no scene recipes. "
        )
        + "Your images stay in your session.</div>",
        elem_classes=["wb-advanced"],
    )
    with gr.Row():
        with gr.Column(scale=2):
            with gr.Row():
                concept_a = gr.Textbox(
                    DEFAULT_A, label="set A: concept filter", elem_id="features-contrast-a", visible=scenes, max_lines=1
                )
                concept_b = gr.Textbox(
                    DEFAULT_B, label="set B: concept filter", elem_id="features-contrast-b", visible=scenes, max_lines=1
                )
            with gr.Row():
                lead = "…or " if scenes else ""
                files_a = gr.File(
                    file_count="multiple",
                    file_types=["image"],
                    elem_id="features-contrast-files-a",
                    label=f"{lead}set A: your images ({span})",
                    height=110,
                )
                files_b = gr.File(
                    file_count="multiple",
                    file_types=["image"],
                    elem_id="features-contrast-files-b",
                    label=f"{lead}set B: your images ({span})",
                    height=110,
                )
            n = CheckedNumber(
                value=bounds.CONTRAST_IMAGES.hi,
                precision=0,
                minimum=bounds.CONTRAST_IMAGES.lo,
                maximum=bounds.CONTRAST_IMAGES.hi,
                elem_id="features-contrast-n",
                label=f"scenes per set ({bounds.CONTRAST_IMAGES.lo:g}–{bounds.CONTRAST_IMAGES.hi:g})",
                visible=scenes,
            )
            cost = gr.HTML(estimate(source.value, None, None, bounds.CONTRAST_IMAGES.hi))
            go_btn = gr.Button("Contrast the two sets", variant="primary", elem_id="features-contrast-run")
            enter.runs(go_btn, concept_a, concept_b)
        with gr.Column(scale=3):
            head = gr.HTML(elem_id="features-contrast-summary")
            plot = gr.Plot(
                label="features by effect and significance (hover a point)", elem_id="features-contrast-plot"
            )
    with gr.Row():
        rows = gr.Dataframe(headers=COLUMNS, interactive=False, elem_id="features-contrast-table", max_height=360)
    with gr.Row():
        top = gr.Gallery(
            label="the top feature's strongest images of each set (A, then B)",
            columns=10,
            height=150,
            format="png",
            object_fit="contain",
            elem_id="features-contrast-images",
            scale=3,
        )
        csv = gr.File(label="export CSV (every tested feature)", elem_id="features-contrast-csv", scale=1)
    for box in (files_a, files_b, n):
        box.change(
            estimate, [source, files_a, files_b, n], cost, queue=False, show_progress="hidden", api_visibility="private"
        )
    outs = [head, plot, rows, top, csv]
    keep_on_failure(
        go_btn.click(
            run, [source, concept_a, concept_b, files_a, files_b, n], outs, **model_event(api_name="features_contrast")
        ),
        outs,
    )
    keep_on_failure(rows.select(open_row, [source, rows], page_outputs, api_visibility="private"), page_outputs)


def open_row(source: str, frame, evt: gr.SelectData):
    """A row of the contrast table opens its feature's page (the feature list's rows do the same)."""
    from components.features.pages import open_feature

    r = evt.index[0] if isinstance(evt.index, (list, tuple)) else evt.index
    try:
        fid = int(frame.iloc[r, 0]) if hasattr(frame, "iloc") else int(frame[r][0])
    except (IndexError, KeyError, TypeError, ValueError):
        fail("Pick a row of the contrast table.")
    return open_feature(source, fid)
