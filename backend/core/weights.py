"""One loaded copy of a checkpoint's weights, shared by every tab, and each tab's view of it.

Relevance, Math neurons and Adapters may all pick the same model (a paper's Mamba, a user's own
folder). Its weights load once, frozen and on the compute device, as one model-store entry under
`key(preset)`, the same whichever tab or spelling picked it (a zoo folder typed as a path is the
zoo preset). What a tab needs beside the weights (a tokenizer, its task data, an LRP wrapper, a
MathNeuro bench) is that tab's view, `view(preset, name, derive)`: derived from the shared model
once and kept in its entry, so no tab ever receives another tab's type, and it leaves with the
weights when the store evicts them.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from . import store
from . import presets as P
from .device import place


def key(preset: P.Preset) -> str:
    """The store's key of a preset's weights: checkpoint, revision and the class that loads them."""
    source, where = preset.source, preset.path_or_id
    if source == P.LOCAL:
        folder = Path(where).resolve()
        if P.ZOO_ROOT.resolve() in folder.parents:
            source, where = "zoo", folder.relative_to(P.ZOO_ROOT.resolve()).as_posix()
    return f"{source}:{where}@{preset.revision or 'main'}|{preset.model_class.rpartition('.')[2]}"


def load(preset: P.Preset, size: int | None = None):
    """The one way a tab's model is loaded: `from_pretrained` through presets.load_preset, in
    evaluation mode, frozen (no tab trains the shared copy; the race trains its own copies) and
    on the compute device. `size`: the weights' bytes from metadata, for spreading over GPUs."""
    model = P.load_preset(preset, size_hint=size)
    model.eval().requires_grad_(False)
    return place(model)


def model(preset: P.Preset, size: int | None = None, progress: Callable[[float, str], None] | None = None):
    """The shared model of a preset (loaded once; see backend.core.store for the budget)."""
    return store.get_or_load(key(preset), lambda: load(preset, size), size_hint=size, progress=progress)


def view(preset: P.Preset, name: str, derive: Callable[[Any], Any], size: int | None = None,
         progress: Callable[[float, str], None] | None = None) -> Any:
    """The view `name` (a tab, or "tab.part") of a preset's shared model: `derive(model)`, once per
    loaded model."""
    return store.get_view(key(preset), name, lambda: load(preset, size), derive, size_hint=size,
                          progress=progress)
