"""The Features tab's small handlers that were closures of its layout: module-level functions with
explicit inputs and outputs, which the tab's events call and tests call without a running app. The
panels' own handlers sit beside their panels (pages.py, steering.py, contrast.py, index_build.py);
`source` is the tab's State, which a loaded model and SAE replace."""

from __future__ import annotations

import gradio as gr
import pandas as pd

from backend.sae import analysis, loading
from components.common import fail
from components.features.pages import _empty_page, _explain, _org, firing_columns, open_feature, sorts_of
from components.features.steering import input_label, link_note, scene_picker, upload_label
from components.links import deep_links as links

AGAIN = "<span class='wb-muted'>A new model and SAE are loaded: run this again to see theirs.</span>"


def clamp_for(source: str, fid):
    """A newly typed feature gets its own default clamp value, not the previous feature's."""
    org = _org(source)
    if fid is None or not 0 <= int(fid) < org.n_features:
        return gr.skip()
    return analysis.default_clamp_value(org, int(fid))


def pick_row(source: str, rows, evt: gr.SelectData):
    """A clicked row of the feature list opens its page."""
    r = evt.index[0] if isinstance(evt.index, (list, tuple)) else evt.index
    try:
        fid = int(rows.iloc[r, 0]) if hasattr(rows, "iloc") else int(rows[r][0])
    except Exception:
        fail("Pick a row of the feature list.")
    return open_feature(source, fid)


def unpin():
    return None, ""


def planted_views(source: str):
    """Planted concepts (their IoU plot, the search by concept, zeroing rival features of a family)
    exist for the zoo organism only: a loaded model and SAE show them or hide them. Outputs: the
    explanation, the concepts plot, the suppress box, the sort, the search box, the scene picker, the
    upload, the link note, the analysed image and the steered image's labels."""
    org = loading.get_organism(source)
    planted = not org.is_hub
    suppress = planted and analysis.steering_defaults(org)["suppress"]
    return (
        _explain(org),
        gr.update(visible=planted),
        gr.update(visible=planted, value=suppress),
        gr.update(choices=sorts_of(org), value="IoU" if planted else "density"),
        gr.update(
            label="search concept" if planted else "search label or id",
            placeholder="e.g. red, circle, striped" if planted else "a feature id",
        ),
        gr.update(**scene_picker(org)),
        gr.update(label=upload_label(org)),
        link_note(org),
        gr.update(label=input_label(org)),
        gr.update(label="image given to the model" if org.is_hub else "scene given to the captioner"),
    )


def cleared(source: str):
    """The last analysis and steering were another model's: blank them (a pinned result stays, for
    comparison), with the firing table's columns for the model now loaded."""
    columns = firing_columns(loading.get_organism(source))
    return None, AGAIN, [], pd.DataFrame(columns=columns), "", None, None, AGAIN, None


def first_view(source: str, first_id: int):
    """The tab's first page: the feature a link names (`feature=ID`, or the tab's own `features-id`),
    else `first_id` (the layout's pick: the feature the steering was calibrated for, else the top of
    the list). A link's ids and clamp value stand as restored; without an index, the instructions to
    build one, never an error toast on first opening."""
    org = _org(source)
    params = links.current_query()
    wanted = params.get("feature", params.get("features-id"))
    fid = first_id
    if wanted is not None:
        raw = links.decode(wanted)
        fid = raw if isinstance(raw, int) and not isinstance(raw, bool) else first_id
        if not 0 <= fid < org.n_features:
            fid = first_id
    out = _empty_page(org, fid) if org.index is None else open_feature(source, fid)
    if links.carries("features-"):  # feat, steer_feat, steer_val: the link's restored values
        out = (*out[:-3], gr.skip(), gr.skip(), gr.skip())
    return out
