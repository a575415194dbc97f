"""The Features tab's image panels: which features fire where on one image (and whether the picture is
one the model knows, backend.sae.ood), and steering (a feature clamped, the caption with and without
it, a pinned result to compare). A caption that loops is shown collapsed ("square ×16"), and says so."""

from __future__ import annotations

import html
from pathlib import Path

import gradio as gr
import numpy as np
import pandas as pd

from backend.core import bounds, image_header
from backend.sae import analysis, ood, pages
from backend.sae import scenes as S
from backend.sae import steer as ST
from components.common import fail
from components.features.figures import colorbar_html, enlarged, label_shown, overlay, patch_figure
from components.features.pages import _feature_id, _org, firing_columns
from components.inputs.fields import unreadable


POSITION_CHOICES = [
    ("every prompt position (paper)", "prompt"),
    ("prompt + generated tokens", "all"),
    ("image positions of the prompt", "image"),
    ("on the objects (image patches where the features fire)", "active"),
]


def _image_input(org, image, example):
    if image is not None:
        if isinstance(image, (str, Path)):  # a file path (API callers, tests)
            try:
                from PIL import Image

                image_header.check_file(str(image), Path(str(image)).name)
                with Image.open(image) as im:
                    return np.asarray(im.convert("RGB"))
            except image_header.TooLarge as e:
                fail(str(e))
            except Exception:
                fail(unreadable(Path(str(image)).name))
        return np.asarray(image)
    if not org.heldout_specs:
        fail("Upload an image (this model has no scene set to pick from).")
    if example is not None and str(example).strip() != "":
        n = len(org.heldout_specs)
        try:
            i = int(str(example).strip())
        except ValueError:
            i = -1
        if not 0 <= i < n:  # never a negative index from the end: the rule is one range, said once
            fail(f"Pick a held-out scene between 0 and {n - 1} (got {str(example)[:20]!r}). Nothing was computed.")
        return S.render(org.heldout_specs[i])[0]
    fail("Upload an image or pick a held-out scene.")


def upload_label(org) -> str:
    if not org.is_hub:
        return "your image (resized to the model's input)"
    return (
        "your image (any size: LLaVA-NeXT adds high-resolution tiles)"
        if org.vision.get("anyres")
        else "your image (any size: resized to the model's square input)"
    )


def link_note(org) -> str:
    return (
        "<span class='wb-muted'>An uploaded image cannot travel in a link"
        + (": “Link to this view” carries the held-out scene number instead." if org.heldout_specs else ".")
        + "</span>"
    )


def input_label(org) -> str:
    return "input scene" if org.heldout_specs else "input image"


def scene_picker(org) -> dict:
    """The held-out scene dropdown's settings: the zoo's scenes, or hidden for a model without any."""
    n = len(org.heldout_specs)
    return {
        "choices": [str(i) for i in range(n)],
        "value": "0" if n else None,
        "visible": n > 0,
        "label": f"…or a held-out scene, 0–{max(n - 1, 0)} (used when no image is uploaded)",
    }


def resize_note(org, image) -> str:
    """How the model sees an uploaded picture, in words (the zoo's captioner takes one square size)."""
    h, w = np.asarray(image).shape[:2]
    if org.is_hub and org.vision.get("anyres"):
        return (
            f"Your {w}×{h} px picture: the base image is it resized to a square (stretched), the "
            f"high-resolution tiles keep its aspect ratio."
        )
    if org.is_hub:
        return (
            f"Your {w}×{h} px picture: the model's processor resizes and crops it to its "
            f"{int(org.vision['image_size'])} px square input."
        )
    size = int(org.vision["image_size"])
    if (h, w) == (size, size):
        return ""
    pad = " padded to a square with its edge colour (aspect kept), then" if h != w else ""
    return f"Your {w}×{h} px picture was{pad} resized to {size}×{size} px, the captioner's input size."


def analyse(source: str, image, example, progress=gr.Progress()):
    org = _org(source, progress)
    img = _image_input(org, image, example)
    progress(0.2, desc="encoding the image at the SAE hookpoint")
    try:
        out = analysis.analyse_image(org, img, top_n=6)
    except ValueError as e:
        fail(str(e))
    shown = pages.thumbnail(out["image"], 320) if org.is_hub else out["image"]
    gallery = []
    vmax = max([float(m.max()) for m in out["maps"].values()] or [1.0])
    from backend.sae.explain import upsample

    for row in out["features"]:
        f = row["feature"]
        m = upsample(out["maps"][f], shown.shape[:2])[0].numpy()
        name = label_shown(org, f, "unlabelled" if org.is_hub else "no concept")
        gallery.append(
            (
                enlarged(overlay(shown, m, vmax)),
                f"feature {f} · {name} · mean {row['mean_act']:.2f}" + (" · base image" if org.is_hub else ""),
            )
        )
        if f in out.get("tile_maps", {}):  # the finer map of LLaVA-NeXT's high-resolution tiles
            t = out["tile_maps"][f]
            tm = upsample(t, shown.shape[:2])[0].numpy()
            gallery.append(
                (
                    enlarged(overlay(shown, tm, max(float(t.max()), 1e-9))),
                    f"feature {f} · tiles ({t.shape[0]}×{t.shape[1]} patches)",
                )
            )
    table = pd.DataFrame(
        [[r["feature"], label_shown(org, r["feature"], ""), r["mean_act"]] for r in out["features"]],
        columns=firing_columns(org),
    )
    where = f"<br><span class='wb-muted'>Image positions: {html.escape(out['positions'])}.</span>" if org.is_hub else ""
    note = resize_note(org, img)
    note = f"\n\n<span class='wb-muted'>{html.escape(note)}</span>" if note else ""
    top = out["features"][:4]
    hover = (
        patch_figure(
            [shown] * len(top),
            [out["maps"][r["feature"]] for r in top],
            [f"feature {r['feature']} · {label_shown(org, r['feature'], 'no label')}" for r in top],
            vmax,
        )
        if top
        else None
    )
    said = caption_html(out["caption"], "answer" if org.is_hub else "caption")
    return (
        enlarged(shown),
        f"{said}{ood_html(out.get('ood'), org.hookpoint)}{note}",
        gallery,
        table,
        colorbar_html(vmax, "activation per patch") + where,
        hover,
    )


def collapse_repeats(text: str, min_run: int = 3, max_unit: int = 4) -> tuple[str, list[tuple[str, int]]]:
    """`text` with every run of `min_run` or more immediate repeats of one word, or of a phrase of up
    to `max_unit` words, written once with its count ("square ×16"), and the runs collapsed. Two in a
    row are left alone: language has them ("very very"); three and more are a model looping."""
    words = text.split()
    out, runs, i = [], [], 0
    while i < len(words):
        best = (1, 1)  # (repeats, words per unit)
        for n in range(1, max_unit + 1):
            unit, k = words[i : i + n], 1
            while len(unit) == n and words[i + k * n : i + (k + 1) * n] == unit:
                k += 1
            if k >= min_run and k * n > best[0] * best[1]:
                best = (k, n)
        k, n = best
        phrase = " ".join(words[i : i + n])
        if k > 1:
            runs.append((phrase, k))
            phrase += f" ×{k}"
        out.append(phrase)
        i += k * n
    return (" ".join(out) if runs else text), runs


def caption_html(caption: str, what: str = "caption") -> str:
    """The model's caption as it said it, a looping one collapsed (and said so): sixteen "square"s in a
    row read as one word with its count, not as a wall."""
    shown, runs = collapse_repeats(caption or "")
    head = f"**Model {what}:** <span id='features-caption'>{html.escape(shown) or '—'}"
    if not runs:
        return head + "</span>"
    reps = "; ".join(f"“{html.escape(p)}” {k} times" for p, k in runs)
    return (
        f"{head} <span class='wb-muted'>(the model repeated itself: {reps} in a row, a degenerate "
        f"{what}; each run is shown once with its count, ×N)</span></span>"
    )


def ood_html(shift: dict | None, hookpoint: str) -> str:
    """Whether the picture is one the model knows (backend.sae.ood): a warning when it is not, since
    features and caption on such a picture say little about the model on its own scenes."""
    if not shift:
        return ""
    head, details = ood.words(shift, hookpoint)
    if shift["out"]:
        return (
            f"\n\n<div id='features-ood' data-ood='out' style='border-left:3px solid var(--error-border-color,"
            f" #dc2626);padding:4px 10px'>⚠ <b>{html.escape(head)}</b>: {html.escape(details)} Its features "
            f"and caption say little about what the model does on the scenes it knows.</div>"
        )
    return (
        f"\n\n<div id='features-ood' data-ood='within' class='wb-muted'>{html.escape(head)}: "
        f"{html.escape(details)}</div>"
    )


def concept_words(out: dict) -> str:
    """The steering verdict in words: whether the clamp made the caption name the feature's concept."""
    names, concept = out.get("names_concept"), html.escape(out.get("concept") or "")
    if names is None:
        return (
            "<span id='features-steer-verdict'>No label for this feature, so no verdict on whether the "
            "caption names its concept: compare the two captions.</span>"
        )
    if names["steered"] and not names["baseline"]:
        text = f"✓ <b>Steered: the caption now names “{concept}”</b> (it did not without the clamp)."
    elif names["steered"]:
        text = f"The caption names “{concept}” with the clamp, but it already did without it: no evidence of steering."
    else:
        text = f"✗ <b>Not steered: the caption does not name “{concept}”</b> with the clamp."
    if out.get("edited_positions") == 0:
        text += (
            " <b>Nothing was edited:</b> the clamp goes on the patches where the clamped or zeroed features fire, "
            "and none of them fires on this picture. Zero a feature that fires on the object (its feature list "
            "shows which), or choose “image positions”."
        )
    return f"<span id='features-steer-verdict'>{text}</span>"


def steer(source: str, image, example, feature, value, positions, add_error, suppress, progress=gr.Progress()):
    org = _org(source)  # the inputs are checked before the weights load (a hub model's take a while)
    img = _image_input(org, image, example)
    f = _feature_id(org, feature)
    v = bounds.check(analysis.clamp_range(org), value)
    if positions not in ST.POSITION_MODES:
        fail(f"Positions must be one of {ST.POSITION_MODES}.")
    org = _org(source, progress)
    progress(0.3, desc="generating with and without the clamp")
    try:
        out = analysis.steer_caption(
            org, img, f, v, positions=positions, add_error=bool(add_error), suppress_family=bool(suppress)
        )
    except ValueError as e:
        fail(str(e))
    ok = {True: " · steered output is well-formed", False: " · steered output is not a well-formed caption", None: ""}[
        out["well_formed"]
    ]
    verdict = concept_words(out)
    zeroed = f" · {len(out['suppressed'])} rival features zeroed" if out["suppressed"] else ""

    def cell(text: str) -> str:  # a model's free text: escaped, wrapped even inside long words, loops collapsed
        return (
            f"<td style='word-break:break-word;font-family:var(--font-mono)'>"
            f"{html.escape(collapse_repeats(text)[0]) or '—'}</td>"
        )

    row = "<td style='width:32%'>{}</td>"
    looped = (
        " · a word or phrase repeated three or more times in a row is shown once with its count (×N)"
        if any(collapse_repeats(t)[1] for t in (out["baseline"], out["steered"]))
        else ""
    )
    name = label_shown(org, f, "unlabelled" if org.is_hub else "no concept")
    md = (
        f"<table style='table-layout:fixed;width:100%'><tr><th style='width:32%'></th><th>"
        f"{'answer' if org.is_hub else 'caption'}</th></tr>"
        f"<tr>{row.format('without')}{cell(out['baseline'])}</tr>"
        f"<tr>{row.format(f'feature {f} ({html.escape(name)}) = {v:g}')}{cell(out['steered'])}</tr>"
        f"</table>\n\n{verdict}\n\n<span class='wb-muted'>clamped at `{out['hookpoint']}`, positions: {positions}, "
        f"error term {'added back' if add_error else 'dropped'}{zeroed}{ok}{looped}</span>"
    )
    return enlarged(pages.thumbnail(analysis.model_image(org, img), 320) if org.is_hub else img), md, out


def pin(result):
    """Keep the current steering result to compare the next ones against (a small dict of text)."""
    if not isinstance(result, dict) or "steered" not in result:
        fail("Generate a steering result first, then pin it.")
    keep = {
        k: result.get(k)
        for k in ("feature", "value", "positions", "add_error", "suppressed", "baseline", "steered", "hookpoint")
    }
    return keep, pinned_html(keep)


def pinned_html(p: dict | None) -> str:
    if not p:
        return ""
    words = (
        f"feature {int(p['feature'])} = {float(p['value']):g} · {html.escape(str(p['positions']))} positions · "
        f"error term {'added back' if p.get('add_error') else 'dropped'}"
        + (f" · {len(p['suppressed'])} rivals zeroed" if p.get("suppressed") else "")
    )
    cell = "<div style='word-break:break-word;font-family:var(--font-mono);margin:4px 0'>{}</div>"

    def said(text):  # a looping caption collapsed, as in the result it was pinned from
        return html.escape(collapse_repeats(text or "—")[0])

    return (
        f"<div class='wb-pinned' style='border-left:3px solid var(--color-accent);padding-left:8px'>"
        f"<b>Pinned</b> <span class='wb-muted'>({words})</span>"
        f"<div class='wb-muted'>without</div>{cell.format(said(p['baseline']))}"
        f"<div class='wb-muted'>with the clamp</div>{cell.format(said(p['steered']))}</div>"
    )


POSITION_WORDS = {
    "prompt": "every prompt position",
    "all": "every position",
    "image": "image positions",
    "text": "text positions of the prompt",
    "active": "the objects' patches only (where the features fire)",
}


def _site_words(cfg: dict) -> str:
    pos = POSITION_WORDS.get(cfg["positions"], cfg["positions"])
    return f"{pos}, {cfg['multiple']:g}× max activation" + (
        ", other colours' features zeroed" if cfg.get("suppress_other_colours") else ""
    )


def _hub_steering_explain(org) -> str:
    return (
        "<div class='wb-explain'>During the prompt pass the residual stream at the SAE hookpoint "
        f"<code>{html.escape(org.hookpoint)}</code> is replaced by the SAE reconstruction with the chosen feature "
        "clamped to the chosen value (the paper clamps at every position); the answer is then generated "
        "greedily, with and without the clamp. “Image positions” are all of the prompt's image tokens"
        + (": the base image, the high-resolution tiles and their row newlines" if org.vision.get("anyres") else "")
        + ". The default is 2× the feature's largest activation in the index.</div>"
    )


def _steering_explain(org) -> str:
    if org.is_hub:
        return _hub_steering_explain(org)
    st = org.summary.get("steering", {})
    sweep, norms = st.get("sweep", {}), st.get("residual_norms", {}).get(org.hookpoint, {})

    def per_colour(v):
        return " · ".join(f"{c} {r['success']:.0%}" for c, r in v["per_colour"].items())

    rows = "".join(
        f"<tr><td>{html.escape(_site_words(v))}</td><td>{v['min_success']:.0%}</td><td>{per_colour(v)}</td></tr>"
        for v in sweep.values()
    )
    comp = st.get("comparison", {})
    crow = "".join(
        f"<tr><td>LM input (<code>{html.escape(comp.get('hookpoint', ''))}</code>): "
        f"{html.escape(_site_words(v))}</td><td>{v['min_success']:.0%}</td><td></td></tr>"
        for v in comp.get("sweep", {}).values()
    )
    why = ""
    measured = st.get("placement", {}).get("why")
    if measured:  # the recipe's own account of its placement measurements
        why = f" <b>Why the placement matters:</b> {html.escape(measured)}"
    elif norms:
        why = (
            f" <b>Why the site matters:</b> at this site image-token residuals have norm ≈ {norms['image']:.0f} but the text positions "
            f"only ≈ {norms['bos']:.1f} (&lt;s&gt;) and {norms['prompt_word']:.1f} (prompt word); a clamp on the "
            f"image-feature scale swamps the text positions when applied everywhere, and the caption degenerates."
        )
    return (
        "<div class='wb-explain'>During the prompt pass the residual stream at the SAE hookpoint "
        f"<code>{html.escape(org.hookpoint)}</code> is replaced by the SAE reconstruction with the chosen "
        "feature clamped to the chosen value (the paper clamps at every position). The table below measures "
        f"it on held-out scenes without the colour (success: a well-formed caption that names the colour).{why}</div>"
        "<details><summary class='wb-muted'>where the intervention must sit (measured)</summary>"
        "<table style='font-size:0.8rem'><tr><th>intervention</th><th>min over colours</th><th>per colour</th></tr>"
        f"{rows}{crow}</table></details>"
    )


def parse_clamps(text: str, first: tuple[int, float] | None = None) -> list[tuple[int, float]]:
    """ "12=4, 30=2.5" as [(12, 4.0), (30, 2.5)], after the panel's own clamp (`first`)."""
    clamps = [first] if first is not None else []
    for part in [p.strip() for p in str(text or "").replace(";", ",").split(",") if p.strip()]:
        fid, sep, val = part.partition("=")
        try:
            clamps.append((int(fid.strip()), float(val.strip())))
        except ValueError:
            fail(f"Write each clamp as feature=value, e.g. 12=4 (got {part[:30]!r}). Nothing was computed.")
        if not sep:
            fail(f"Write each clamp as feature=value, e.g. 12=4 (got {part[:30]!r}). Nothing was computed.")
    return clamps


def parse_ids(text: str) -> list[int]:
    try:
        return [int(p) for p in str(text or "").replace(";", ",").replace(" ", ",").split(",") if p.strip()]
    except ValueError:
        fail(f"Suppressed features are ids separated by commas, e.g. 7, 9 (got {str(text)[:40]!r}).")
        return []


def steer_many(
    source: str,
    image,
    example,
    feature,
    value,
    more,
    suppress_ids,
    positions,
    add_error,
    suppress,
    progress=gr.Progress(),
):
    """Several clamps at once, with features suppressed, in one intervention: the caption with no clamp,
    with each clamp alone and with all together; a table of what each says (`steer_combination`)."""
    org = _org(source)  # every input is checked before the weights load (a hub model's take a while)
    img = _image_input(org, image, example)
    first = (_feature_id(org, feature), bounds.check(analysis.clamp_range(org), value))
    clamps, sup = parse_clamps(more, first), parse_ids(suppress_ids)
    if positions not in ST.POSITION_MODES:
        fail(f"Positions must be one of {ST.POSITION_MODES}.")
    try:  # the counts (bounds.STEER_CLAMPS, STEER_SUPPRESS), ids, values and duplicates, as the service checks them
        analysis.check_steering(org, clamps, sup, bool(suppress))
    except ValueError as e:
        fail(str(e))
    org = _org(source, progress)
    progress(0.3, desc=f"{len(clamps) + 2 if len(clamps) > 1 else 2} captions: none, each clamp, all together")
    try:
        out = analysis.steer_combination(
            org,
            img,
            clamps,
            suppress=sup,
            positions=positions,
            add_error=bool(add_error),
            suppress_family=bool(suppress),
        )
    except ValueError as e:
        fail(str(e))

    def row(setting: str, v: dict) -> list:
        named = ", ".join(v.get("concepts") or []) or "—"
        changed = v.get("changed")
        return [
            setting,
            collapse_repeats(v["caption"])[0] or "—",
            named,
            "—" if changed is None else (", ".join(changed) or "nothing"),
        ]

    def what(c) -> str:  # short: the table has four columns to show at 1000 px
        concept = str(c.get("concept") or "").split(" (")[0]
        return f"{c['feature']}{f' ({concept})' if concept else ''} = {c['value']:.3g}"

    rows = [row("no clamp", out["baseline"])]
    if len(out["clamps"]) > 1:
        rows += [row(what(c) + " alone", v) for c, v in zip(out["clamps"], out["alone"])]
    rows.append(
        row(
            " + ".join(what(c) for c in out["clamps"]) + (" (all together)" if len(out["clamps"]) > 1 else ""),
            out["together"],
        )
    )
    frame = pd.DataFrame(
        rows, columns=["clamps", "answer" if org.is_hub else "caption", "concepts named", "changed from no clamp"]
    )
    return frame, out
