"""The Features tab's model panels: loading a model and SAE (the zoo's, the paper's or a visitor's
own), the summary line, and building a feature index from images."""

from __future__ import annotations

import html

import gradio as gr

from backend.core import presets as P
from backend.core import sessions
from backend.core.stopflag import StopFlag
from backend.sae import analysis, hub_index, loading, organism, pages
from backend.sae.index import Cancelled
from components.links import deep_links as links
from components.common import fail
from components.features.images import MAX_TAB_IMAGES, collect_images, own_build, shown_place
from components.features.pages import _org, list_features
from components.features.steering import POSITION_WORDS, _site_words, _steering_explain
from components.serving.guard import main_only
from components.inputs.fields import unreadable


def _hub_summary_md(org) -> str:
    parts = [
        f"`{html.escape(org.ids[0])}` + SAE `{html.escape(org.ids[1])}` at `{org.hookpoint}` · "
        f"{org.n_features} latents ({html.escape(org.sae_text)})"
    ]
    if org.index is not None:
        src = org.index.source
        where = html.escape(shown_place(src.root) if src is not None else "?")
        whose = "your own index" if sessions.within(org.index_path) else "the server's index"
        parts.append(f"feature index: {org.index.meta.get('n_images', '?')} images from `{where}` ({whose})")
    else:
        parts.append("no feature index yet (see below)")
    parts.append(f"labels: {html.escape(org.label_source)}")
    return " · ".join(parts)


def _summary_md(org) -> str:
    if org.is_hub:
        return _hub_summary_md(org)
    s = org.summary or {}
    ev = s.get("sae_eval", {})
    rb = s.get("random_baseline", {})
    st = s.get("steering", {})
    parts = [f"SAE at `{org.hookpoint}` · {org.n_features} latents ({html.escape(org.sae_text)})"]
    if ev:
        parts.append(f"held-out FVU **{ev['fvu']:.3f}** · dead latents **{ev['dead_fraction']:.1%}**")
    if rb:
        parts.append(
            f"top-50 features by density: mean IoU of the label concept on the top-5 images "
            f"**{rb['top5_iou']:.3f}** vs random images **{rb['random_iou']:.3f}** "
            f"(**{rb['ratio']}×**; paper 0.20 vs 0.005)"
        )
    cal = st.get("calibrated", {})
    if cal.get("per_colour"):
        per = " · ".join(f"{c} **{r['success']:.0%}**" for c, r in cal["per_colour"].items())
        zeroed = ", other colours' features zeroed" if cal.get("suppress_other_colours") else ""
        parts.append(
            f"steering (at {POSITION_WORDS.get(cal['positions'], cal['positions'] + ' positions').split(' (')[0]}, clamp value "
            f"calibrated per colour on scenes "
            f"apart from the held-out ones{zeroed}): colour named in held-out captions: {per}"
        )
    elif st.get("best") in st.get("sweep", {}):
        b = st["sweep"][st["best"]]
        parts.append(
            f"steering ({_site_words(b)}): colour named in ≥ **{b['min_success']:.0%}** of held-out scenes per colour"
        )
    return " · ".join(parts)


def _build_note(org) -> str:
    return (
        f"<span class='wb-muted'>Image positions: {html.escape(analysis.positions_text(org))}. "
        f"Up to {MAX_TAB_IMAGES} images here (a fraction of a second each on a GPU); "
        f"a large set with the sharded, resumable job: "
        f"<code>{html.escape(hub_index.index_command(org))}</code></span>"
    )


@main_only  # under ZeroGPU: loaded in the main process, every later worker inherits the weights
def load_own(default_source: str, vlm, sae, hookpoint, progress=gr.Progress()):
    """Check a model + SAE from metadata and make them this session's organism; its weights load
    now (with progress), so the first index build or analysis does not wait for them."""
    first = P.active(organism.TAB, default_source)
    vlm, sae, hookpoint = (str(x or "").strip() for x in (vlm, sae, hookpoint))
    same = (
        vlm in ("", first.path_or_id)
        and sae in ("", first.extra.get("sae", ""))
        and hookpoint in ("", first.extra.get("hookpoint", ""))
    )
    try:
        source = default_source if same else loading.own_source(vlm, sae, hookpoint)
        progress(0.1, desc="loading the model and SAE")
        # the default organism keeps loading its weights on first need (a deep link runs this too)
        org = loading.get_organism(source, model=not same, progress=lambda f, d: progress(0.1 + 0.8 * f, desc=d))
    except (ValueError, KeyError, FileNotFoundError) as e:
        fail(str(e).strip("'\""))
    n = org.n_features
    first_id = (pages.feature_table(org, "", "density")[:1] or [{"feature": 0}])[0]["feature"]
    status = (
        f"Loaded **{html.escape(org.ids[0] or org.name)}** with the SAE **{html.escape(org.ids[1] or org.name)}** "
        f"at `{html.escape(org.hookpoint)}` ({n:,} latents, {html.escape(org.sae_text)})."
        + (
            ""
            if org.index is not None or not org.is_hub
            else " No feature index yet: build one from your images below."
        )
    )
    box = dict(minimum=0, maximum=n - 1)
    # a deep link's own feature ids stay (this runs first when a link is opened: the tab's link_runs)
    ids = {} if links.linked(["features-id", "feature"]) else {"value": first_id}
    clamp = {} if links.linked(["features-steer-id"]) else {"value": first_id}
    return (
        source,
        status,
        _summary_md(org),
        gr.update(visible=org.is_hub, open=org.index is None),
        _build_note(org) if org.is_hub else "",
        gr.update(visible=org.is_hub),
        list_features(source, "", "density" if org.is_hub else "IoU"),
        gr.update(label=f"feature id (0–{n - 1})", **box, **ids),
        gr.update(label=f"feature to clamp (0–{n - 1})", **box, **clamp),
        _steering_explain(org),
    )  # the loaded model's hookpoint, not the default one's


def _stop_flag(request) -> StopFlag:
    return StopFlag(f"features-index:{getattr(request, 'session_hash', None) or 'anonymous'}")


def build_index(source: str, files, folder: str, request: gr.Request = None, progress=gr.Progress()):
    """Index a small image set here, with a progress bar; Cancel stops it between batches. The index
    and the uploaded images are this visitor's (components.features.images.own_build): the source
    returned names them, and no other visitor's view or the owner's index file changes. A refused or
    cancelled build leaves nothing of its own on disk."""
    org = _org(source)
    if not org.is_hub:
        fail("The zoo organism's index comes with it; rebuild it with: python -m backend.sae.cli build")
    target = own_build(org, request)
    try:
        src = collect_images(org, files, folder, target)
        for i in range(len(src)):  # every file must open before the model spends time on any
            try:
                src.load(i)
            except Exception:
                fail(unreadable(src.name(i)).replace("nothing was computed", "nothing was indexed"))
        org = _org(source, progress)
        flag = _stop_flag(request).start()
        progress(0, desc=f"indexing {len(src)} images")
        out = target.index_file(src)
        try:
            # written to a file; reading it back installs it (for this visitor, or for all when shared)
            hub_index.index_images(
                org,
                src,
                progress=lambda d, n: progress(d / n, desc=f"{d}/{n} images indexed"),
                should_stop=flag.is_set,
                out=out,
            )
        except Cancelled as e:
            target.discard()
            return (f"**Cancelled** ({e}); nothing was written.", gr.update(), gr.update(), gr.update(), source)
        finally:
            flag.finish()
        source = target.installed(source, out, src)
    except BaseException:
        target.discard()
        raise
    org = _org(source)
    rows = list_features(source, "", "density")
    first_id = int(rows.iloc[0, 0]) if len(rows) else 0
    return (
        f"**Indexed {len(src)} images**{target.note}. The feature list now shows the features that "
        f"fired; the densest one is open.",
        rows,
        first_id,
        _hub_summary_md(org),
        source,
    )


def cancel_index(request: gr.Request = None):
    if _stop_flag(request).request():
        return "Stopping after the current batch…"
    return "No index build is running."
