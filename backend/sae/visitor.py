"""A visitor's own feature index: built from the visitor's images into the visitor's session folder
(backend.core.sessions), seen by that visitor only, never written over the owner's index file.

The tab's session state keeps a source that names the shared organism and the visitor's index file
(`session_source`); `organism(source)` gives a view of the shared organism (the same weights, from
the model store) whose index, labels and cache keys are the visitor's. Views of a session's files
are dropped when the session ends.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections import OrderedDict
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..core import sessions, store
from . import loading
from .index import INDEX_FILE
from .organism import NO_LABELS, HubParts, Organism, refresh_index

SPACE = "features"  # this method's place in a session's folder (backend.core.sessions.Space)
PREFIX = "session:"
# Views in memory, least recently used first. An index holds n_latents × top_k patch maps whatever
# the number of images (2.4 GB for the paper's 131k-latent SAE), so only a few stay loaded; one that
# is dropped loads again from its file when its visitor comes back.
MAX_VIEWS = 4
_VIEWS: "OrderedDict[str, Organism]" = OrderedDict()
_LOCK = threading.Lock()
_SERIAL = itertools.count(1)  # each view's cache keys its own: no page cached for an earlier one is reused


def session_source(base_source: str, index_file: str | Path, labels_file: str | Path | None = None) -> str:
    """The source a session keeps once it has its own index (its base: the shared organism's), or
    its own labels of the shared index (`index_file` the shared one, `labels_file` the visitor's)."""
    return PREFIX + json.dumps([base_of(base_source), str(index_file), str(labels_file) if labels_file else ""])


def base_of(source: str) -> str:
    """The shared organism's source behind a session source (itself otherwise)."""
    if isinstance(source, str) and source.startswith(PREFIX):
        return json.loads(source[len(PREFIX) :])[0]
    return source


def is_session(source) -> bool:
    return isinstance(source, str) and source.startswith(PREFIX)


def organism(source: str, *, model: bool = False, progress=None) -> Organism:
    """The visitor's view: the shared organism with the visitor's index. A session file that is gone
    (the session ended or was swept) is said so (sessions.SessionGone): never the shared organism in
    its place, whose index the visitor did not ask for and whose labels file a label would write."""
    base_source, index_file, labels_file = json.loads(source[len(PREFIX) :])
    path = Path(index_file)
    if sessions.lost(path):
        raise sessions.SessionGone("the feature index built from your images")
    if labels_file and sessions.lost(labels_file, must_exist=False):
        raise sessions.SessionGone("the labels you asked the model for")
    base = loading.get_organism(base_source, model=model, progress=progress)
    if not path.is_file():  # the owner's index (own labels beside it) was removed: the shared organism
        return base
    sessions.used(labels_file or path)
    with _LOCK:
        view = _VIEWS.get(source)
        if view is None or view.parts_key != base.parts_key:
            tag = sessions.content_name([str(path), labels_file], 12)
            own: dict[str, Any] = {
                "labels_file": Path(labels_file) if labels_file else None,
                "index_out": path,
                "lock": threading.RLock(),
                "model_id": f"{base.model_id}|visitor:{tag}:{next(_SERIAL)}",
            }
            if base.index_path is not None and Path(base.index_path) == path:  # the shared index, own labels
                view = replace(base, **own, summary={**base.summary, "labels_stamp": None})
            else:
                view = replace(
                    base,
                    **own,
                    index=None,
                    index_path=None,
                    labels={},
                    label_source=NO_LABELS,
                    index_note="",
                    version=0,
                    summary={**base.summary, "index_stamp": None, "labels_stamp": None},
                )
            _VIEWS[source] = view
        _VIEWS.move_to_end(source)
        while len(_VIEWS) > MAX_VIEWS:
            _VIEWS.popitem(last=False)
    refresh_index(view)  # the visitor's file: loaded once, again only when it changes
    if base.model is not None and view.model is not base.model:
        assert base.sae is not None  # loaded with the model (HubParts)
        loading.attach(view, HubParts(base.model, base.processor, base.sae))
    return view


def index_file(folder: Path, org: Organism, image_names: list[str], digest: str) -> Path:
    """Content-addressed: the same images through the same model and SAE give the same file."""
    key = sessions.content_name([json.dumps([org.parts_key or org.model_id, org.hookpoint, image_names]), digest])
    return Path(folder) / key / INDEX_FILE


@sessions.on_end
def _drop(session: str, folder: Path) -> None:
    with _LOCK:
        for key, v in list(_VIEWS.items()):
            if any(p is not None and sessions.owns(session, p) for p in (v.index_out, v.labels_file)):
                del _VIEWS[key]


def _on_evict(model_id: str) -> None:
    for view in list(_VIEWS.values()):
        if model_id in (view.weights_key, view.parts_key):
            loading.attach(view, None)


store.on_evict(_on_evict)


loading.register_source(PREFIX, organism)
