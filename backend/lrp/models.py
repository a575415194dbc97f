"""The Relevance tab's presets (zoo organisms + the paper's hub checkpoints) and their loading.

Every model loads through backend.core.presets (`from_pretrained` on a validated path or hub id,
safetensors only); zoo folders also carry the task description and held-out set.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from backend.core import presets as P
from backend.core import weights

TAB = "relevance"

TEXT_ZOO = P.Preset(
    TAB,
    "zoo",
    "mamba-sentiment",
    "transformers.MambaForCausalLM",
    label="zoo · Mamba sentiment LM (tiny, trained here)",
)
LONG_ZOO = P.Preset(
    TAB, "zoo", "mamba-longrange", "transformers.MambaForCausalLM", label="zoo · Mamba long-range recall LM"
)
IMAGE_ZOO = P.Preset(
    TAB, "zoo", "vim-regions", "backend.lrp.vision.VisionMamba", label="zoo · Vision-Mamba-style classifier"
)
HUB_130M = P.Preset(
    TAB, "hub", "state-spaces/mamba-130m-hf", "transformers.MambaForCausalLM", label="hub · Mamba-130M (paper)"
)
HUB_1_4B = P.Preset(
    TAB, "hub", "state-spaces/mamba-1.4b-hf", "transformers.MambaForCausalLM", label="hub · Mamba-1.4B (paper)"
)

for _p in (TEXT_ZOO, LONG_ZOO, IMAGE_ZOO, HUB_130M, HUB_1_4B):
    P.register(_p)


@dataclass
class Loaded:
    """A loaded preset: the model, its tokenizer (text) and what the zoo folder plants."""

    preset: P.Preset
    model: Any
    tokenizer: Any = None
    task: dict = field(default_factory=dict)
    heldout: Any = None

    @property
    def model_id(self) -> str:
        return self.preset.model_id


def load_mamba_lm(path_or_id: str, *, roots=None, **kwargs):
    """A transformers Mamba causal LM and its tokenizer through the workbench's one loader."""
    from transformers import AutoTokenizer, MambaForCausalLM

    model = P.load_pretrained(MambaForCausalLM, path_or_id, roots=roots, **kwargs).eval()
    tok = P.load_pretrained(AutoTokenizer, path_or_id, weights=False, roots=roots)
    return model, tok


def _read_task(folder: Path) -> tuple[dict, Any]:
    task = json.loads((folder / "task.json").read_text()) if (folder / "task.json").exists() else {}
    held = None
    if (folder / "heldout.json").exists():
        held = json.loads((folder / "heldout.json").read_text())
    elif (folder / "heldout.npz").exists():
        with np.load(folder / "heldout.npz", allow_pickle=False) as z:
            held = {k: z[k] for k in z.files}
    return task, held


def load(preset: P.Preset, size: int | None = None, progress=None) -> Loaded:
    """The tab's view of a preset's shared model (backend.core.weights: loaded once per process for
    every tab, read-only; requests take the model's lock) with its tokenizer and what a zoo folder
    plants. `size`: the weights' bytes from metadata, for the store's budget and spreading over GPUs."""

    def derive(model) -> Loaded:
        tok = None
        if not preset.model_class.endswith("VisionMamba"):
            from transformers import AutoTokenizer

            roots = [P.ZOO_ROOT] if preset.source == "zoo" else None
            tok = P.load_pretrained(AutoTokenizer, preset.location(), weights=False, roots=roots)
        folder = None if preset.source == "hub" else Path(preset.location())
        task, held = _read_task(folder) if folder is not None and folder.is_dir() else ({}, None)
        return Loaded(preset, model, tok, task, held)

    return weights.view(preset, TAB, derive, size=size, progress=progress)


def text_preset(source: str | None = None) -> P.Preset:
    return P.active(TAB, source)


def text_presets(source: str | None = None) -> list[P.Preset]:
    """The text models the picker lists: the source's default first, then the zoo's sentiment
    organism and the paper's checkpoints (listed in every mode; without the hub they fail to load
    with a clear message). The user may type their own (backend.core.picker)."""
    first = text_preset(source)
    text = [p for p in P.presets(TAB) if p.model_class.endswith("MambaForCausalLM") and p not in (LONG_ZOO, first)]
    return [first] + sorted(text, key=lambda p: p.source != first.source)  # the same source's first


def available(preset: P.Preset) -> bool:
    if preset.source == "hub":
        return True
    return (P.ZOO_ROOT / preset.path_or_id / "manifest.json").exists()
