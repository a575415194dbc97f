"""One loaded copy of a checkpoint's weights, shared by every tab, and each tab's view of it.

Every tab loads its models here. Several tabs may pick the same model (a paper's Mamba in
Relevance, Math neurons and Adapters; a LLaVA in Features and Adapters; a user's own folder). Its
weights load once, frozen and on the compute device, as one model-store entry under `key(preset)`,
the same whichever tab or spelling picked it (a zoo folder typed as a path is the zoo preset), at
one precision (`dtype_for`). What a tab needs beside the weights (a tokenizer, its task data, an
LRP wrapper, a MathNeuro bench, an SAE and processor, NeMo's settings) is that tab's view,
`view(preset, name, derive)`: derived from the shared model once and kept in its entry, so no tab
ever receives another tab's type, and it leaves with the weights when the store evicts them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import torch

from . import store
from . import presets as P
from .device import pick_device, pick_dtype, place
from .modelcheck import method_rule

# Classes whose weights load through a function of their own (a diffusion pipeline: no safety
# checker, the sampler the methods use), registered by the module that knows them.
_LOADERS: dict[str, Callable[..., Any]] = {}
PIPELINE_PREFIX = "diffusers."


def register_loader(model_class: str, load: Callable[..., Any]) -> None:
    """`load(preset, dtype=..., size_hint=...)` loads every model of `model_class` (dotted), whichever
    tab asks."""
    _LOADERS[model_class] = load


def dtype_for(preset: P.Preset) -> torch.dtype | None:
    """The one precision a checkpoint's weights run at, whichever tab loads them (None: as saved).
    The zoo's tiny models stay as saved (their tests compare numbers exactly). On a GPU, a diffusion
    pipeline runs in float16 and a LLaVA-family VLM in bfloat16 (float16 where the GPU lacks it), as
    the papers ran them; elsewhere a VLM runs in float32 (a float16 checkpoint is slow on a CPU,
    where half precision is supported at all). Other models keep the checkpoint's own dtype, so the
    methods meet the round-off the real checkpoints bring."""
    if preset.source == "zoo":
        return None
    name, cuda = preset.model_class.rpartition(".")[2], pick_device().type == "cuda"
    if preset.model_class.startswith(PIPELINE_PREFIX):
        return torch.float16 if cuda else None
    if name in method_rule("features").architectures:  # the LLaVA family, as backend.sae names it
        return pick_dtype() if cuda else torch.float32
    return None


def key(preset: P.Preset) -> str:
    """The store's key of a preset's weights: checkpoint, revision and the class that loads them."""
    source, where = preset.source, preset.path_or_id
    if source == P.LOCAL:
        folder = Path(where).resolve()
        if P.ZOO_ROOT.resolve() in folder.parents:
            source, where = "zoo", folder.relative_to(P.ZOO_ROOT.resolve()).as_posix()
    return f"{source}:{where}@{preset.revision or 'main'}|{preset.model_class.rpartition('.')[2]}"


def load(preset: P.Preset, size: int | None = None):
    """The one way a tab's model is loaded: `from_pretrained` through presets.load_preset (or the
    class's registered loader), at `dtype_for(preset)`, in evaluation mode, frozen (no tab trains
    the shared copy; the race trains its own copies) and on the compute device. `size`: the
    weights' bytes from metadata, for spreading over GPUs."""
    dtype = dtype_for(preset)
    kwargs = {} if dtype is None else {"dtype": dtype}
    loader = _LOADERS.get(preset.model_class)
    model = loader(preset, size_hint=size, **kwargs) if loader else P.load_preset(preset, size_hint=size, **kwargs)
    for _, module in store.modules_of(model):
        module.eval().requires_grad_(False)
    return place(model)


def model(preset: P.Preset, size: int | None = None, progress: Callable[[float, str], None] | None = None):
    """The shared model of a preset (loaded once; see backend.core.store for the budget)."""
    return store.get_or_load(key(preset), lambda: load(preset, size), size_hint=size, progress=progress)


def view(
    preset: P.Preset,
    name: str,
    derive: Callable[[Any], Any],
    size: int | None = None,
    progress: Callable[[float, str], None] | None = None,
) -> Any:
    """The view `name` (a tab, or "tab.part") of a preset's shared model: `derive(model)`, once per
    loaded model."""
    return store.get_view(key(preset), name, lambda: load(preset, size), derive, size_hint=size, progress=progress)
