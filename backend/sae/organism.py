"""The Features tab's presets and its organism: what the tab knows of a VLM + SAE + feature index
(zoo or hub), and which index and labels it uses (swapped whole, under the organism's lock).

Zoo preset: `llava-scenes` (captioner) + `llava-scenes-sae` (SAE, index, labels). Hub preset:
`llava-hf/llama3-llava-next-8b-hf` + SAE `lmms-lab/llama3-llava-next-8b-hf-sae-131k` at
`model.layers.24`. The hub organism's index is the file named by $WORKBENCH_SAE_INDEX, else the one a
build from the tab wrote (backend.sae.loading.default_index_path), else one beside the SAE
(`refresh_index`). Loading the organisms: backend.sae.loading; what the tab shows: pages (feature
list and pages), analysis (one image: features and steering), hub_index (building an index here).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core import presets as P
from .index import FeatureIndex, find_index
from .sae import SparseAutoencoder

TAB = "features"
ZOO_MODEL = "llava-scenes"
ZOO_SAE = "llava-scenes-sae"
HUB_MODEL = "llava-hf/llama3-llava-next-8b-hf"
HUB_SAE = "lmms-lab/llama3-llava-next-8b-hf-sae-131k"
HUB_HOOKPOINT = "model.layers.24"

ZOO_PRESET = P.register(
    P.Preset(
        TAB,
        "zoo",
        ZOO_MODEL,
        "transformers.LlavaForConditionalGeneration",
        label="tiny LLaVA on synthetic scenes + TopK SAE",
        extra={"sae": ZOO_SAE},
    )
)
HUB_PRESET = P.register(
    P.Preset(
        TAB,
        "hub",
        HUB_MODEL,
        "transformers.LlavaNextForConditionalGeneration",
        label="LLaVA-NeXT-8B + lmms-lab SAE (131k latents, k=256)",
        extra={"sae": HUB_SAE, "hookpoint": HUB_HOOKPOINT},
    )
)


LABEL_MIN_IOU = 0.05  # below this the best concept explains nothing: shown as "no concept"
CONCEPT_LABELS = (
    "concept-iou: the planted concept whose masks best match the feature's activation "
    "regions (IoU over the top-5 images)"
)
NO_LABELS = (
    "none yet: the concept explainer needs planted concept masks, which real images do not have. "
    "“Ask the model” on a feature page runs the paper's model explainer (the VLM names what the "
    "highlighted top images share), with the loaded model as the explainer; its labels are kept in "
    "labels.json beside the index."
)
MODEL_LABELS = (
    "the loaded model, asked on request (the paper's model explainer: it sees the top images with "
    "everything outside the activation region dimmed and names what they share); other features "
    "are unlabelled"
)


PLANTED_MIN_IOU = 0.5  # a feature carries a concept when labelled with it at this IoU or more


def concept_carriers(labels: dict, concept: str, min_iou: float = PLANTED_MIN_IOU) -> list[int]:
    """The features the concept explainer found a concept planted in: those labelled with it at IoU ≥
    `min_iou` (a colour is often split over several, by texture or shape), else the one feature whose
    activation regions match the concept's masks best (explain.localisation_summary's pick)."""
    labelled = sorted(
        int(f) for f, e in labels.items() if e.get("label") == concept and float(e.get("score", 0.0)) >= min_iou
    )
    if labelled:
        return labelled
    scored = [(float(e.get("scores", {}).get(concept, 0.0)), int(f)) for f, e in labels.items()]
    best = max(scored, default=(0.0, -1))
    return [best[1]] if best[0] > 0 else []


def shown_label(lab: dict) -> str:
    if lab.get("explainer") == "model":  # a model's words: no IoU to threshold
        return lab.get("label", "")
    return lab.get("label", "") if float(lab.get("score", 0.0)) >= LABEL_MIN_IOU else ""


@dataclass
class Organism:
    """Everything the tab needs (read-only; interventions are scoped). The tab's organism, zoo or
    hub, starts as its metadata (SAE cfg, model config, index, labels, scene sets): the VLM and SAE
    weights load on the first request that needs them (`need_model`), kept in the model store under
    `parts_key`. One with an empty `parts_key` holds its own weights (`load_zoo`, `load_hub`)."""

    name: str
    folder: Path
    model: Any = None
    tokenizer: Any = None
    processor: Any = None
    sae: SparseAutoencoder | None = None
    hookpoint: str = ""
    index: FeatureIndex | None = None
    labels: dict[str, dict] = field(default_factory=dict)
    summary: dict = field(default_factory=dict)
    index_specs: list[dict] = field(default_factory=list)
    heldout_specs: list[dict] = field(default_factory=list)
    model_id: str = ""
    source: str = "zoo"
    index_path: Path | None = None  # where the loaded index came from
    index_out: Path | None = None  # where a build from the tab writes (hub)
    index_note: str = ""  # why a file found was not used
    label_source: str = CONCEPT_LABELS
    ids: tuple[str, str] = ("", "")  # hub: (model id, SAE id) as the preset names them
    version: int = 0  # bumped when a new index is installed: part of every cache key
    sae_info: dict = field(default_factory=dict)  # format_info.describe: n_latents, k, text (before weights load)
    vision: dict = field(default_factory=dict)  # image_size, patch_size, anyres (from the model's config)
    parts_key: str = ""  # the hub VLM + SAE + hookpoint: the name of their view in the VLM's store entry
    weights_key: str = ""  # the model store's key of the VLM's weights, shared with other tabs
    model_class: str = ""
    lock: Any = field(default_factory=threading.RLock, repr=False)  # index and label swaps
    labels_file: Path | None = None  # where model labels are kept, if not labels.json beside the index

    @property
    def n_features(self) -> int:
        return self.sae.n_latents if self.sae is not None else int(self.sae_info["n_latents"])

    @property
    def sae_text(self) -> str:
        """The SAE's architecture in words ("topk, k = 256", "jumprelu"), never "k = None"."""
        return self.sae.describe() if self.sae is not None else self.sae_info.get("text", "?")

    @property
    def grid(self) -> int:
        return int(self.vision["image_size"]) // int(self.vision["patch_size"])

    @property
    def is_hub(self) -> bool:
        return self.source == "hub"

    @property
    def cache_id(self) -> str:
        return f"{self.model_id}#{self.version}"


def _vision(config) -> dict:
    v = config.vision_config
    return {
        "image_size": int(v.image_size),
        "patch_size": int(v.patch_size),
        "anyres": getattr(config, "image_grid_pinpoints", None) is not None,
    }


def _read_json(path: Path, default):
    return json.loads(path.read_text()) if path.exists() else default


@dataclass
class HubParts:
    """The weights of an organism: a zoo organism's own store entry, or a hub organism's view of its
    VLM's shared weights (backend.core.weights), the SAE's bytes counted in that entry."""

    model: Any
    processor: Any
    sae: SparseAutoencoder


def _stamp(path: Path | None):
    try:
        return (str(path), path.stat().st_mtime_ns) if path is not None else None
    except OSError:
        return None


def labels_path(org: Organism) -> Path | None:
    """The labels file of the index in use (a visitor's own, backend.sae.visitor, or beside the index)."""
    if org.labels_file is not None:
        return Path(org.labels_file)
    return Path(org.index_path).parent / "labels.json" if org.index_path is not None else None


def refresh_index(org: Organism) -> None:
    """A hub organism picks up an index written since it was loaded (by the tab's build, which may
    run in another process, or by the precompute job): a stat per call, a load only on change."""
    if not org.is_hub:
        return
    # the setting's file or the tab's own build first (index_out is the one or the other), then one
    # published beside the SAE
    found = find_index(org.index_out, org.folder / org.summary.get("sae_folder", ""), org.folder)
    if found is None or _stamp(found) == org.summary.get("index_stamp"):
        labels = labels_path(org)
        stamp = _stamp(labels)
        if labels is not None and stamp is not None and stamp != org.summary.get("labels_stamp"):  # labelled elsewhere
            with org.lock:
                org.labels = _read_json(labels, {})
                org.label_source = MODEL_LABELS if org.labels else NO_LABELS
                org.summary["labels_stamp"] = stamp
                org.version += 1
        return
    try:
        install_index(org, FeatureIndex.load(found), found)
    except Exception as e:  # a torn or foreign file: keep what is loaded, and say why
        org.index_note = f"{Path(found).name}: {e}"  # shown to visitors: no server folder
        org.summary["index_stamp"] = _stamp(found)


def install_index(org: Organism, index: FeatureIndex, path: Path | None = None) -> None:
    """Use `index` from now on (checked against the SAE and, for a hub index, its image source);
    labels come from a labels.json beside the file when there is one."""
    if index.n_features != org.n_features:
        raise ValueError(f"the index has {index.n_features} features but the SAE has {org.n_features}")
    if org.is_hub and index.source is None:
        raise ValueError("the index records no image folder or dataset")
    beside = Path(path).parent / "labels.json" if path is not None else None
    # a visitor's own labels file, until it exists, starts from the labels beside the index
    own = Path(org.labels_file) if org.labels_file is not None and Path(org.labels_file).exists() else None
    labels_from = own or beside
    labels = _read_json(labels_from, {}) if labels_from is not None else {}
    with org.lock:  # readers take the pieces together, never a half-swapped pair
        org.index, org.index_path = index, path
        if org.is_hub:
            org.labels = labels
            org.label_source = (
                (
                    MODEL_LABELS
                    if any(e.get("explainer") == "model" for e in labels.values())
                    else "labels.json beside the index"
                )
                if labels
                else NO_LABELS
            )
        org.index_note = ""
        org.summary["index_stamp"] = _stamp(path)
        org.summary["labels_stamp"] = _stamp(own or beside)
        org.version += 1
