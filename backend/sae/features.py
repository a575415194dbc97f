"""The Features instrument's backend: presets, loading the VLM + SAE + index once, and the feature
pages, image analysis and steering the tab shows. No gradio here.

Zoo preset: `llava-scenes` (captioner) + `llava-scenes-sae` (SAE, index, labels).
Hub preset: `llava-hf/llama3-llava-next-8b-hf` + SAE `lmms-lab/llama3-llava-next-8b-hf-sae-131k`
at `model.layers.24`, loaded through the same `load_pretrained` / `load_sae` code. Its feature index
is built over an image folder (or `datasets` split): here for small sets (`build_hub_index`, with
progress and cancel), or by `backend.precompute.sae_index` (sharded, resumable) for large ones; the
tab loads the file named by $WORKBENCH_SAE_INDEX, else the one a build wrote to
`default_index_path`, else one beside the SAE.

Image positions on LLaVA-NeXT (anyres; see `vlm.ImageLayout`): the base image (the whole picture
resized to the vision tower's square, g × g patches) comes first in the prompt, then the
high-resolution tiles stitched over the picture, each row ended by a newline token. The index and
the feature list use the base image's g × g patches (a fixed grid for every image, and under causal
attention their residuals do not depend on the tiles); the image analysis also draws the tiles' finer
map over the picture. Newline tokens are never part of a patch map.
"""
from __future__ import annotations

import json
import os
import shlex
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..core import bounds
from ..core import presets as P
from ..core import loadgate, preload, store, weights
from ..core.cache import ByteLRUCache, make_key
from ..core.device import device_of, place
from ..core.interventions import locked
from ..core.zerogpu import capped, gpu
from . import explain as E
from . import scenes as S
from . import steer as ST
from . import vlm
from .index import (IMAGE_SUFFIXES, INDEX_ENV, INDEX_FILE, Cancelled, FeatureIndex, ImageSource,  # noqa: F401
                    build_streaming, find_index)
from . import formats
from ..core import picker
from .formats import load as load_sae
from .sae import SparseAutoencoder

TAB = "features"
ZOO_MODEL = "llava-scenes"
ZOO_SAE = "llava-scenes-sae"
HUB_MODEL = "llava-hf/llama3-llava-next-8b-hf"
HUB_SAE = "lmms-lab/llama3-llava-next-8b-hf-sae-131k"
HUB_HOOKPOINT = "model.layers.24"

ZOO_PRESET = P.register(P.Preset(TAB, "zoo", ZOO_MODEL, "transformers.LlavaForConditionalGeneration",
                                 label="tiny LLaVA on synthetic scenes + TopK SAE",
                                 extra={"sae": ZOO_SAE}))
HUB_PRESET = P.register(P.Preset(TAB, "hub", HUB_MODEL, "transformers.LlavaNextForConditionalGeneration",
                                 label="LLaVA-NeXT-8B + lmms-lab SAE (131k latents, k=256)",
                                 extra={"sae": HUB_SAE, "hookpoint": HUB_HOOKPOINT}))

PAGE_CACHE = ByteLRUCache(32 * 2**20, name="features-pages")
_RESULT_CACHE = ByteLRUCache(16 * 2**20, name="features-results")
LABEL_MIN_IOU = 0.05  # below this the best concept explains nothing: shown as "no concept"
THUMB = 160  # px, the longer side of a hub image on a feature page
MAX_SIDE = 4096  # px, the largest uploaded image side accepted in hub mode
CONCEPT_LABELS = ("concept-iou: the planted concept whose masks best match the feature's activation "
                  "regions (IoU over the top-5 images)")
NO_LABELS = ("none yet: the concept explainer needs planted concept masks, which real images do not have. "
             "“Ask the model” on a feature page runs the paper's model explainer (the VLM names what the "
             "highlighted top images share), with the loaded model as the explainer; its labels are kept in "
             "labels.json beside the index.")


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
    sae_info: dict = field(default_factory=dict)  # formats.describe: n_latents, k, text (before weights load)
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
    return {"image_size": int(v.image_size), "patch_size": int(v.patch_size),
            "anyres": getattr(config, "image_grid_pinpoints", None) is not None}


def _read_json(path: Path, default):
    return json.loads(path.read_text()) if path.exists() else default


def _zoo_vision(cap_dir: Path) -> dict:
    """The captioner's vision sizes from its config.json; the config class only when the file leaves
    them to the defaults (importing transformers' configs costs the app's start about a second)."""
    cfg = _read_json(cap_dir / "config.json", {})
    v = cfg.get("vision_config", {})
    if "image_size" in v and "patch_size" in v:
        return {"image_size": int(v["image_size"]), "patch_size": int(v["patch_size"]),
                "anyres": cfg.get("image_grid_pinpoints") is not None}
    from transformers import AutoConfig

    return _vision(P.load_pretrained(AutoConfig, cap_dir, weights=False, roots=[cap_dir.parent]))


def zoo_shell(sae_name: str = ZOO_SAE, root: Path | None = None, parts_key: str = "") -> Organism:
    """The zoo organism without weights: the SAE's cfg, the captioner's vision sizes, the feature
    index, labels, summary and scene sets, which are all the tab's first view shows. `need_model`
    loads the captioner and the SAE (`load_zoo_parts`) into the model store under `parts_key`."""
    sae_dir = P.zoo_path(sae_name, root)
    info = _read_json(sae_dir / "organism.json", {})
    cap_dir = _captioner_dir(sae_dir)
    sae_info = formats.describe(P.validate_local_path(sae_dir, [cap_dir.parent]))
    # the hookpoint as `formats.load` names it on the loaded SAE
    hook = formats.model_hookpoint(sae_info["hookpoint"]) if sae_info.get("hookpoint") else info.get("hookpoint", "")
    index = FeatureIndex.load(sae_dir / INDEX_FILE) if (sae_dir / INDEX_FILE).exists() else None
    return Organism(sae_name, sae_dir, hookpoint=hook, index=index, labels=_read_json(sae_dir / "labels.json", {}),
                    summary=_read_json(sae_dir / "summary.json", {}),
                    index_specs=(vlm.load_scene_set(sae_dir, "index_scenes.json")
                                 if (sae_dir / "index_scenes.json").exists() else []),
                    heldout_specs=vlm.load_scene_set(cap_dir), model_id=f"zoo:{sae_name}", sae_info=sae_info,
                    vision=_zoo_vision(cap_dir), parts_key=parts_key)


def _captioner_dir(sae_dir: Path) -> Path:
    return P.zoo_path(_read_json(sae_dir / "organism.json", {}).get("captioner", ZOO_MODEL), sae_dir.parent)


def load_zoo_parts(org: Organism) -> "HubParts":
    """The zoo captioner (with its processor) and SAE of a zoo shell."""
    from transformers import AutoProcessor, LlavaForConditionalGeneration

    sae_dir = Path(org.folder)
    cap_dir = _captioner_dir(sae_dir)
    roots = [cap_dir.parent]
    model = place(P.load_pretrained(LlavaForConditionalGeneration, cap_dir, roots=roots).eval())
    processor = P.load_pretrained(AutoProcessor, cap_dir, weights=False, roots=roots)
    sae = load_sae(P.validate_local_path(sae_dir, roots), device=device_of(model))
    if sae.n_latents != org.n_features or (sae.cfg.hookpoint or org.hookpoint) != org.hookpoint:
        raise ValueError(f"the SAE's weights ({sae.n_latents} latents at {sae.cfg.hookpoint!r}) do not match its "
                         f"cfg ({org.n_features} latents at {org.hookpoint!r})")
    return HubParts(model, processor, sae)


def load_zoo(sae_name: str = ZOO_SAE, root: Path | None = None) -> Organism:
    """The zoo organism with its weights loaded here (the command-line jobs, the organism tests);
    the tab uses `get_organism`, which loads them on first need."""
    org = zoo_shell(sae_name, root)
    attach(org, load_zoo_parts(org))
    return org


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "--" for c in text)


def default_index_path(model_id: str, sae_id: str, hookpoint: str) -> Path:
    """Where a build writes the index of a hub model + SAE when $WORKBENCH_SAE_INDEX names nothing:
    beside the Hugging Face cache, under $HF_HOME (a Space's persistent storage when it has one; a
    hub snapshot itself is not a place to write into). Keyed by the hookpoint in its one spelling
    (formats.canonical_hookpoint), so `layers.3` finds what `blocks.3.hook_resid_post` built."""
    hookpoint = formats.canonical_hookpoint(hookpoint)
    hf_home = os.environ.get("HF_HOME") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "huggingface"
    base = Path(hf_home) / "workbench" / "sae-index"
    return base / f"{_slug(model_id)}__{_slug(sae_id)}__{_slug(hookpoint)}" / INDEX_FILE


def index_target() -> Path | None:
    """$WORKBENCH_SAE_INDEX as a file path (a folder names the index file inside it)."""
    name = os.environ.get(INDEX_ENV, "").strip()
    if not name:
        return None
    p = Path(name).expanduser()
    return p / INDEX_FILE if p.is_dir() or not p.suffix else p


def _repo_files(repo_id: str) -> list[str]:
    """A hub repo's file list; offline (or unreachable), the files of its cached snapshot."""
    from huggingface_hub import list_repo_files, snapshot_download

    try:
        return list(list_repo_files(repo_id))
    except Exception:  # offline mode or no network: what the cache holds is what can be loaded
        snap = Path(snapshot_download(repo_id, local_files_only=True))
        return [p.relative_to(snap).as_posix() for p in snap.rglob("*") if p.is_file()]


def _under(folder: str, name: str) -> str:
    return f"{folder}/{name}" if folder else name


def sae_location(sae_id: str, hookpoint: str, *, weights: bool) -> tuple[Path, str, formats.Entry]:
    """(root, folder inside it, Entry) of the SAE for `hookpoint`. A local folder is read in place. A
    hub repo's file list says which folder holds that hookpoint (any spelling, or a folder named
    otherwise whose cfg records it), and only that folder is fetched: its cfg (`weights=False`, for
    the tab's metadata) or all of it, with a feature index published beside it."""
    if P.looks_local(sae_id):
        root = Path(P.resolve(sae_id))
        e = formats.resolve(root, hookpoint)
        sub = e.folder.relative_to(root).as_posix()
        return root, "" if sub == "." else sub, e
    from huggingface_hub import snapshot_download

    repo = P.validate_hub_id(sae_id)
    files = _repo_files(repo)

    def read_cfg(folder: str) -> dict:  # a folder whose name is no hookpoint: its cfg records one
        snap = Path(snapshot_download(repo, allow_patterns=[_under(folder, "cfg.json")]))
        p = snap / folder / "cfg.json"
        return json.loads(p.read_text()) if p.exists() else {}

    sub = formats.hub_folder(files, hookpoint, read_cfg)
    wanted = ["*"] if weights else ["cfg.json", "config.json"]
    root = Path(snapshot_download(repo, allow_patterns=[_under(sub, w) for w in wanted] + [INDEX_FILE]))
    return root, sub, formats.listed_entry(root, sub, files)


def hub_shell(model_id: str = HUB_MODEL, sae_id: str = HUB_SAE, hookpoint: str = HUB_HOOKPOINT,
              *, model_class: str = "transformers.LlavaNextForConditionalGeneration") -> Organism:
    """A hub organism without weights: the model's config, the SAE's cfg (size, k, architecture) and
    the feature index if one exists ($WORKBENCH_SAE_INDEX, else the file an earlier build from the
    tab wrote, else one beside the SAE; see `refresh_index`). Seconds, not a 16 GB download."""
    from transformers import AutoConfig

    config = P.load_pretrained(AutoConfig, model_id, weights=False)
    root, sub, entry = sae_location(sae_id, hookpoint, weights=False)
    info = formats.describe_entry(entry)
    formats.check_width(info, getattr(getattr(config, "text_config", config), "hidden_size", None), str(model_id))
    org = Organism(f"hub:{sae_id}", root, hookpoint=formats.model_hookpoint(hookpoint),
                   model_id=f"hub:{model_id}|{sae_id}", source="hub", label_source=NO_LABELS,
                   ids=(str(model_id), str(sae_id)), sae_info=info, vision=_vision(config),
                   parts_key=f"{TAB}:hub:{model_id}|{sae_id}|{formats.canonical_hookpoint(hookpoint)}",
                   model_class=model_class)
    org.weights_key = weights.key(vlm_preset(org))
    org.summary = {"hub_hookpoint": hookpoint, "sae_folder": sub}
    org.index_out = index_target() or default_index_path(str(model_id), str(sae_id), hookpoint)
    refresh_index(org)
    return org


@dataclass
class HubParts:
    """The weights of an organism: a zoo organism's own store entry, or a hub organism's view of its
    VLM's shared weights (backend.core.weights), the SAE's bytes counted in that entry."""
    model: Any
    processor: Any
    sae: SparseAutoencoder


def vlm_preset(org: Organism) -> P.Preset:
    """The VLM of a hub organism as a preset: the paper's checkpoint or a user's own (a hub id or a
    folder), so that Features and any other tab that picks it share one store entry."""
    return P.custom_preset(TAB, org.ids[0], org.model_class)


def _parts(org: Organism, model) -> HubParts:
    from transformers import AutoProcessor

    model_id, sae_id = org.ids
    with loadgate.loading():  # the processor's and SAE's files, as the VLM's: never beside a computation
        processor = P.load_pretrained(AutoProcessor, model_id, weights=False)
        root, sub, _ = sae_location(sae_id, org.summary["hub_hookpoint"], weights=True)
        sae = load_sae(root, hookpoint=sub or org.summary["hub_hookpoint"], device=device_of(model))
    if sae.n_latents != org.n_features:
        raise ValueError(f"the SAE's weights have {sae.n_latents} latents but its cfg says {org.n_features}")
    return HubParts(model, processor, sae)


def load_hub_parts(org: Organism) -> HubParts:
    """A hub organism's VLM (at the shared weights' precision, weights.dtype_for), processor and
    SAE, loaded here, outside the store."""
    return _parts(org, weights.load(vlm_preset(org)))


def attach(org: Organism, parts: HubParts | None) -> None:
    """Give a hub organism its weights (None: drop them, e.g. after the store evicted them)."""
    with org.lock:
        if parts is None:
            org.model = org.processor = org.tokenizer = org.sae = None
            return
        if org.model is parts.model:
            return
        org.model, org.processor, org.tokenizer, org.sae = parts.model, parts.processor, parts.processor.tokenizer, parts.sae
        if org.is_hub:  # the zoo's hookpoint is its SAE's own, known before the weights
            org.hookpoint = vlm.resolve_hookpoint(parts.model, formats.model_hookpoint(org.summary["hub_hookpoint"]))


def load_hub(model_id: str = HUB_MODEL, sae_id: str = HUB_SAE, hookpoint: str = HUB_HOOKPOINT,
             *, model_class: str = "transformers.LlavaNextForConditionalGeneration", weights: bool = True) -> Organism:
    """The paper's checkpoint and SAE (local folders under the allowed roots, or hub ids; from the
    hub only the SAE's hookpoint folder is fetched, as safetensors), with the weights loaded here
    (the command-line jobs); the tab uses `get_organism`, which loads them on first need."""
    org = hub_shell(model_id, sae_id, hookpoint, model_class=model_class)
    if weights:
        attach(org, load_hub_parts(org))
        org.parts_key = ""  # its own weights, not the model store's: need_model leaves them be
    return org


def need_model(org: Organism, progress=None) -> Organism:
    """Make sure the organism has its weights (through the model store, which may have evicted them
    since); `progress(fraction, message)` hears about a load. One that holds its own (no
    `parts_key`) has them already."""
    if not org.parts_key:
        return org
    if not org.is_hub:
        attach(org, store.get_or_load(org.parts_key, lambda: load_zoo_parts(org), progress=progress))
        return org
    with picker.loading(org.ids[0]):
        parts = weights.view(vlm_preset(org), org.parts_key, lambda model: _parts(org, model), progress=progress)
    attach(org, parts)
    return org


_SHELLS: dict[str, Organism] = {}
_SHELLS_LOCK = threading.Lock()


def _on_evict(model_id: str) -> None:
    for org in list(_SHELLS.values()):
        if model_id in (org.weights_key, org.parts_key):  # a hub VLM's shared weights; a zoo organism's own
            attach(org, None)


store.on_evict(_on_evict)


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
        if stamp is not None and stamp != org.summary.get("labels_stamp"):  # labelled in another process
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
    labels = _read_json(own or beside, {}) if (own or beside) is not None else {}
    with org.lock:  # readers take the pieces together, never a half-swapped pair
        org.index, org.index_path = index, path
        if org.is_hub:
            org.labels = labels
            org.label_source = (MODEL_LABELS if any(e.get("explainer") == "model" for e in labels.values())
                                else "labels.json beside the index") if labels else NO_LABELS
        org.index_note = ""
        org.summary["index_stamp"] = _stamp(path)
        org.summary["labels_stamp"] = _stamp(own or beside)
        org.version += 1


def index_meta(org: Organism, source: ImageSource, top_k: int, **extra) -> dict:
    """The metadata of a hub index (the same from the tab and from the sharded job)."""
    model_id, sae_id = org.ids
    return {"grid": org.grid, "top_k": top_k, "hookpoint": org.hookpoint,
            "model": model_id, "sae": sae_id, "prompt": vlm.HUB_PROMPT,
            "ranking": "mean activation over the base image's patch tokens",
            "density": "fraction of base-image patch tokens where the feature is non-zero",
            "positions": positions_text(org), "source": source.describe(), **extra}


def build_hub_index(org: Organism, source: ImageSource, *, top_k: int = 16, batch_size: int = 4,
                    progress=None, should_stop=None, out: Path | None = None) -> FeatureIndex:
    """Index a (small) image set and use it from now on (see `index_images`)."""
    path = Path(out or org.index_out)
    index = index_images(org, source, top_k=top_k, batch_size=batch_size, progress=progress,
                         should_stop=should_stop, out=path)
    install_index(org, index, path)
    return index


def _index_seconds(org, source, *args, **kwargs) -> float:
    # the 8B model on the prompt prefix to layer 24, five crops through the vision tower and the
    # processor's resizing: well under half a second per image on a GPU
    return capped(10 + 0.5 * len(source))


@gpu(duration=_index_seconds)
def index_images(org: Organism, source: ImageSource, *, top_k: int = 16, batch_size: int = 4,
                 progress=None, should_stop=None, out: Path | None = None) -> FeatureIndex:
    """Index a (small) image set in this process, batch by batch, written atomically to `out`
    (default `org.index_out`) in the format the sharded job writes. Under ZeroGPU this runs in a
    GPU worker: the server process picks the file up (`refresh_index`), so nothing here needs to
    reach it. `progress(done, total)`; `should_stop()` → `Cancelled`, nothing written."""
    import time

    if not org.is_hub:
        raise ValueError("the zoo organism's index is built by its recipe (python -m backend.sae.cli build)")
    if len(source) == 0:
        raise ValueError("no images to index")
    need_model(org)
    g = org.grid
    t0 = time.perf_counter()
    builder = build_streaming(lambda a, b: encode_images(org, [source.load(i) for i in range(a, b)]),
                              len(source), org.n_features, g * g, top_k=top_k, batch_size=batch_size,
                              device=org.sae.W_enc.device, progress=progress, should_stop=should_stop)
    index = FeatureIndex(builder.tensors(), index_meta(org, source, top_k, n_images=builder.n_images,
                                                       n_tokens=builder.n_tokens,
                                                       build_s=round(time.perf_counter() - t0, 2)))
    path = Path(out or org.index_out)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    index.save(tmp)
    tmp.replace(path)
    return index


def index_command(org: Organism, images: str = "IMAGE_FOLDER") -> str:
    """The command that builds this organism's index (sharded with accelerate; resumable). It is
    shown to visitors, so it names no server folder: OUT is wherever the owner keeps the file."""
    if not org.is_hub:
        return f"python -m backend.sae.cli build --organism {org.name.removeprefix('zoo:')}"
    model_id, sae_id = org.ids
    out = "OUT"
    return (f"accelerate launch -m backend.precompute.sae_index --source hub --model {shlex.quote(model_id)} "
            f"--sae {shlex.quote(sae_id)} --hookpoint {shlex.quote(org.summary.get('hub_hookpoint', HUB_HOOKPOINT))} "
            f"--image-folder {images} --out {shlex.quote(str(out))}")


OWN = "own:"  # a source naming a user's own VLM + SAE + hookpoint (own_source)


def own_source(vlm: str, sae: str, hookpoint: str) -> str:
    """What the tab keeps in a session's state for a user's own VLM + SAE at a hookpoint, after
    checking them from metadata (`own_organism`); every handler takes it where it takes a source."""
    org = own_organism(vlm, sae, hookpoint)
    return OWN + json.dumps([org.ids[0], org.ids[1], org.summary["hub_hookpoint"]])


def own_organism(vlm: str, sae: str, hookpoint: str) -> Organism:
    """A user's own LLaVA-family VLM (hub id or allowed folder, checked by backend.core.picker) with
    their sparsify or SAELens SAE (hub id or folder) at `hookpoint`: the hub organism's code path,
    metadata first (the SAE's cfg, the model's config, an index if one exists), weights on first need."""
    vlm, sae, hookpoint = (str(x or "").strip() for x in (vlm, sae, hookpoint))
    if not vlm:
        raise ValueError("Pick a vision-language model first.")
    # the pick's preset carries the SAE and hookpoint: what a ZeroGPU worker names to the main process
    # is the VLM's weights, and the main process loads the organism from that preset (`_preload`)
    picked = picker.resolve(vlm, P.presets(TAB), "features", tab=TAB, sae=sae, hookpoint=hookpoint)
    if picked.preset.source == "zoo":
        raise ValueError("the zoo organism comes with its own SAE and index: pick it with the SAE box empty")
    if not sae:
        raise ValueError("Name the SAE: a hub id (owner/name) or a folder of a sparsify or SAELens SAE.")
    if not hookpoint:
        raise ValueError("Name the hookpoint the SAE was trained on, e.g. model.layers.24 (or layers.24).")
    if not (P.looks_local(sae) or P.HUB_ID_RE.fullmatch(sae)):
        raise ValueError(f"{sae[:80]!r} is neither a hub id (owner/name) nor a folder")
    model_id = picked.preset.path_or_id if picked.preset.source == "hub" else picked.preset.location()
    key = f"own|{model_id}|{sae}|{formats.canonical_hookpoint(hookpoint)}"
    with _SHELLS_LOCK:
        org = _SHELLS.get(key)
        if org is None:
            with picker.loading(picked.preset):
                org = hub_shell(model_id, sae, hookpoint, model_class=picked.preset.model_class)
            _SHELLS[key] = org
    return org


# Kinds of source defined by modules that build on this one (backend.sae.visitor registers a
# visitor's own index, "session:…"): they register here, so this module never imports them.
_SOURCE_KINDS: dict[str, Any] = {}


def register_source(prefix: str, organism) -> None:
    """`organism(source, model=, progress=)` answers every source that starts with `prefix`."""
    _SOURCE_KINDS[prefix] = organism


def get_organism(source: str = "zoo", *, model: bool = False, progress=None) -> Organism:
    """The tab's organism, zoo or hub: its metadata and index until `model=True` (or `need_model`)
    asks for the weights: building the tab and browsing feature pages never wait for the VLM.
    `source` may name a user's own VLM + SAE (`own_source`), or a visitor's own index (backend.sae.visitor)."""
    kind = next((fn for prefix, fn in _SOURCE_KINDS.items() if str(source).startswith(prefix)), None)
    if kind is not None:
        return kind(source, model=model, progress=progress)
    if isinstance(source, str) and source.startswith(OWN):
        vlm_id, sae_id, hookpoint = json.loads(source[len(OWN):])
        org = own_organism(vlm_id, sae_id, hookpoint)
        refresh_index(org)
        return need_model(org, progress) if model else org
    preset = P.active(TAB, source)
    if preset.source == "hub":
        with _SHELLS_LOCK:
            org = _SHELLS.get(preset.model_id)
            if org is None:
                org = _SHELLS[preset.model_id] = hub_shell(preset.path_or_id, preset.extra["sae"],
                                                           preset.extra["hookpoint"], model_class=preset.model_class)
        refresh_index(org)
        return need_model(org, progress) if model else org
    with _SHELLS_LOCK:
        org = _SHELLS.get(preset.model_id)
        if org is None:  # its weights go in the store under the preset's id, as every tab's model does
            org = _SHELLS[preset.model_id] = zoo_shell(parts_key=preset.model_id)
    return need_model(org, progress) if model else org


def _own_source_of(preset: P.Preset) -> str | None:
    """The source of a user's own VLM + SAE from the preset `own_organism`'s check made (None: a
    check of the VLM alone, the picker's line, names no organism)."""
    sae, hookpoint = preset.extra.get("sae"), preset.extra.get("hookpoint")
    return OWN + json.dumps([preset.path_or_id, sae, hookpoint]) if sae and hookpoint else None


def source_pick(source: str) -> picker.Picked:
    """The check of the VLM a session's source names, with its SAE and hookpoint (the same cached
    check `own_organism` made): under ZeroGPU the main process loads a user's own before a worker
    forks (backend.core.preload.own). The zoo and the listed checkpoint are picked as such."""
    org = get_organism(source)
    return picker.resolve(org.ids[0], P.presets(TAB), "features", tab=TAB, sae=org.ids[1],
                          hookpoint=org.summary.get("hub_hookpoint", ""))


def _preload(preset: P.Preset, *own) -> Organism:
    """A registered preset's organism, or (`own`: its size, from the pick) a user's own VLM + SAE."""
    return get_organism(_own_source_of(preset) if own else preset.source, model=True)


def _own_loaded(preset: P.Preset) -> bool:
    # the VLM may be in the store already (another tab's pick) while the SAE, a view of it, is not
    source = _own_source_of(preset)
    return source is None or get_organism(source).model is not None


preload.register(TAB, _preload, source_pick, _own_loaded)


def load_organism(name: str = ZOO_SAE) -> Organism:
    return load_zoo(name)


# ---------------------------------------------------------------------------------- feature list
def feature_table(org: Organism, query: str = "", sort: str = "density", limit: int = 500) -> list[dict]:
    """Rows: id, concept label, family, IoU score, density, max activation (alive features only)."""
    if org.index is None:
        return []
    t = org.index.tensors
    rows = []
    q = (query or "").strip().lower()
    for f in range(org.index.n_features):
        lab = org.labels.get(str(f), {})
        if float(t["density"][f]) <= 0:
            continue
        row = {"feature": f, "label": shown_label(lab), "family": lab.get("family", "") if shown_label(lab) else "",
               "iou": float(lab.get("score", 0.0)), "density": float(t["density"][f]),
               "max_act": float(t["max_act"][f])}
        if q and q not in row["label"].lower() and q not in row["family"].lower() and q != str(f):
            continue
        rows.append(row)
    keys = {"density": "density", "max activation": "max_act", "max_act": "max_act", "iou": "iou"}
    if sort not in keys:
        raise ValueError(f"sort by one of {sorted(set(keys))}, not {sort!r}")
    rows.sort(key=lambda r: (-r[keys[sort]], r["feature"]))
    return rows[:limit]


# ---------------------------------------------------------------------------------- feature page
def image_of(org: Organism, image_id: int) -> np.ndarray:
    """Image `image_id` of the index's set: a re-rendered scene (zoo) or a file / dataset row (hub)."""
    if org.index is not None and org.index.source is not None:
        return org.index.source.load(int(image_id))
    return S.render(org.index_specs[int(image_id)])[0]


def thumbnail(image: np.ndarray, side: int = THUMB) -> np.ndarray:
    """A hub image with its longer side at `side` px, aspect kept."""
    from PIL import Image

    h, w = image.shape[:2]
    scale = side / max(h, w)
    size = (max(1, round(w * scale)), max(1, round(h * scale)))
    return np.asarray(Image.fromarray(image).resize(size, Image.BILINEAR))


def feature_page(org: Organism, feature: int, n_top: int = 5) -> dict:
    """A feature's page from the index only (no model call): top images with their maps and
    regions, histogram, density, label. Cached per (organism, index version, feature)."""
    if org.index is None:
        raise ValueError(f"this preset has no feature index yet; build one: {index_command(org)}")
    if not 0 <= int(feature) < org.index.n_features:
        raise IndexError(f"feature must be in 0..{org.index.n_features - 1}")
    key = make_key(org.cache_id, ("page", int(feature), n_top))
    hit = PAGE_CACHE.get(key)
    if hit is not None:
        return hit
    f = int(feature)
    ids, maps, scores = org.index.top(f, n_top)
    lab = org.labels.get(str(f), {})
    if org.index.source is not None:  # hub images: any size; the base-image map covers the whole picture
        imgs = [thumbnail(image_of(org, i)) for i in ids]
        up = [E.upsample(m, im.shape[:2])[0].numpy() for m, im in zip(maps, imgs)]
        reg = [E.regions(m, im.shape[:2])[0].numpy() for m, im in zip(maps, imgs)]
        top = [{"image_id": int(i), "score": round(float(sc), 4), "caption": org.index.source.name(int(i)),
                "iou_label": None} for i, sc in zip(ids, scores)]
    else:
        specs = [org.index_specs[i] for i in ids]
        imgs = [S.render(sp)[0] for sp in specs]
        size = imgs[0].shape[0] if imgs else S.IMAGE_SIZE
        up = E.upsample(maps, size).numpy() if len(ids) else np.zeros((0, size, size), np.float32)
        reg = E.regions(maps, size).numpy() if len(ids) else np.zeros((0, size, size), bool)
        top = [{"image_id": int(i), "score": round(float(sc), 4), "caption": S.caption(sp),
                "iou_label": round(E.iou(r, S.render(sp)[1][lab["label"]]), 4) if lab.get("label") in S.CONCEPTS else None}
               for i, sc, sp, r in zip(ids, scores, specs, reg)]
    t = org.index.tensors
    page = {
        "feature": f,
        "label": shown_label(lab), "family": lab.get("family", "") if shown_label(lab) else "",
        "iou": float(lab.get("score", 0.0)),
        "concept_scores": lab.get("scores", {}),
        "labelled_by": org.label_source,
        "density": float(t["density"][f]), "max_act": float(t["max_act"][f]), "mean_act": float(t["mean_act"][f]),
        "hist_counts": t["hist"][f].tolist(), "hist_edges": t["hist_edges"].tolist(),
        "top": top, "images": imgs, "maps": up, "regions": reg,
        "patch_maps": [m.numpy() for m in maps],  # the index's own per-patch values, for exact hover
    }
    PAGE_CACHE.put(key, page)
    return page


MODEL_LABELS = ("the loaded model, asked on request (the paper's model explainer: it sees the top images with "
                "everything outside the activation region dimmed and names what they share); other features "
                "are unlabelled")


@gpu(duration=60)  # one multi-image prompt
@torch.no_grad()
def model_label(org: Organism, feature: int, n_images: int = 4) -> dict:
    """Label a hub feature with the loaded VLM as its own explainer (explain.ModelExplainer's prompt
    and view); the label is kept in memory and in labels.json beside the index."""
    if not org.is_hub:
        raise ValueError("the zoo's features are labelled by the concept explainer")
    page = feature_page(org, feature)
    if not page["top"]:
        raise ValueError(f"feature {feature} fired on no indexed image: nothing to show the model")
    views = [E.dim_outside(im, r) for im, r in list(zip(page["images"], page["regions"]))[:n_images]]
    need_model(org)
    with locked(org.model):
        text = vlm.hub_describe(org.model, org.processor, views, E.ModelExplainer.PROMPT)
    label = " ".join(text.split())[:60] or "(no answer)"
    entry = {"label": label, "family": "", "score": 0.0, "explainer": "model", "images": len(views)}
    return {"feature": int(feature), **entry}


def save_label(org: Organism, entry: dict) -> None:
    """Keep a model label (in the server process: under ZeroGPU `model_label` runs in a worker)."""
    with org.lock:
        org.labels = {**org.labels, str(entry["feature"]): {k: v for k, v in entry.items() if k != "feature"}}
        org.label_source = MODEL_LABELS
        org.version += 1  # pages cached with the old label
        path = labels_path(org)
        if path is not None:
            try:
                tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
                tmp.write_text(json.dumps(org.labels, indent=1))
                tmp.replace(path)
                org.summary["labels_stamp"] = _stamp(path)
            except OSError:  # a read-only folder: the label lives until the server stops
                pass


def page_json(page: dict) -> dict:
    """The JSON-exportable part of a page (no arrays)."""
    return {k: v for k, v in page.items() if k not in ("images", "maps", "regions", "patch_maps")}


# ---------------------------------------------------------------------------------- analysis
@torch.no_grad()
def processor_codes(org: Organism, image: np.ndarray, text: str = vlm.HUB_PROMPT) -> tuple[torch.Tensor, vlm.ImageLayout]:
    """SAE codes [T, F] at the hookpoint for one image through the model's own processor and chat
    template (the path the hub checkpoint uses), and where the image sits in the prompt."""
    need_model(org)
    with locked(org.model):
        h, _, layouts = vlm.hub_residuals(org.model, org.processor, [image], org.hookpoint, text)
    return org.sae.encode(h[0].float().to(org.sae.W_enc.device)), layouts[0]


@torch.no_grad()
def encode_images(org: Organism, images) -> tuple[torch.Tensor, torch.Tensor]:
    """Sparse codes (vals, idx) [B, g*g, k] at the base image's patches of a hub VLM: what the index
    holds for each image. The language model runs only up to the base image's last patch and stops
    at the hookpoint (`vlm.hub_base_residuals`)."""
    need_model(org)
    with locked(org.model):
        rows, _ = vlm.hub_base_residuals(org.model, org.processor, list(images), org.hookpoint)
    return org.sae.encode_sparse(rows.float().to(org.sae.W_enc.device))


def model_image(org: Organism, image: np.ndarray) -> np.ndarray:
    """Any uploaded picture as uint8 RGB (grayscale repeated over the channels, alpha dropped). The
    zoo model sees it at its vision tower's size; a hub (anyres) model takes any size, up to
    MAX_SIDE px a side."""
    image = np.asarray(image)
    if image.ndim == 2:
        image = np.stack([image] * 3, -1)
    if image.ndim != 3 or image.shape[-1] not in (3, 4) or min(image.shape[:2]) < 1:
        raise ValueError("expected an RGB image")
    if image.dtype != np.uint8:
        if not np.isfinite(image).all():
            raise ValueError("the image holds NaN or infinite values")
        image = image.clip(0, 255)
    image = image[..., :3].astype(np.uint8)
    if org.is_hub:
        if max(image.shape[:2]) > MAX_SIDE:
            raise ValueError(f"the image is {image.shape[1]}×{image.shape[0]} px; at most {MAX_SIDE} px a side")
        if min(image.shape[:2]) < 2:
            raise ValueError("the image must be at least 2 px on each side")
        return np.ascontiguousarray(image)
    size = int(org.vision["image_size"])
    if image.shape[:2] != (size, size):
        from PIL import Image

        image = np.asarray(Image.fromarray(pad_square(image)).convert("RGB").resize((size, size), Image.BILINEAR))
    return image


def pad_square(image: np.ndarray) -> np.ndarray:
    """A non-square picture centred on a square of its border's median colour: the square model
    input then keeps the objects' shapes (a 2000×50 strip is not squashed into a smear)."""
    h, w = image.shape[:2]
    if h == w:
        return image
    border = np.concatenate([image[0], image[-1], image[:, 0], image[:, -1]])
    side = max(h, w)
    out = np.empty((side, side, 3), np.uint8)
    out[:] = np.median(border, axis=0).astype(np.uint8)
    y, x = (side - h) // 2, (side - w) // 2
    out[y:y + h, x:x + w] = image
    return out


def positions_text(org: Organism, layout: vlm.ImageLayout | None = None) -> str:
    """Which tokens are the 'image positions' of this model, in words."""
    g, size = org.grid, org.vision["image_size"]
    if not org.vision.get("anyres"):
        return f"the {g}×{g} image-patch tokens of the single {size}px crop"
    tiles = (f"; this image: {layout.tile_shape[0]}×{layout.tile_shape[1]} tile patches and "
             f"{len(layout.newlines)} newline tokens" if layout is not None and len(layout.tiles) else "")
    return (f"LLaVA-NeXT anyres: first the base image (the whole picture resized to {size}px, "
            f"{g}×{g} patches), then the high-resolution tiles stitched over the picture and cropped to its "
            f"aspect ratio, each row ended by a newline token{tiles}. Feature maps, ranking and the index use "
            f"the base image's {g}×{g} patches; the tile map is the tiles' patches in their stitched grid; "
            f"newline tokens are left out of every map")


@gpu(duration=20)  # one VLM prompt pass + SAE encode
@torch.no_grad()
def analyse_image(org: Organism, image: np.ndarray, top_n: int = 8) -> dict:
    """Which features fire where on one image: per-patch codes at the SAE hookpoint."""
    image = model_image(org, image)
    key = make_key(org.cache_id, image, ("analyse", top_n))
    hit = _RESULT_CACHE.get(key)
    if hit is not None:
        return hit
    tile_codes, tile_shape, layout = None, (0, 0), None
    need_model(org)  # the tab loads it first, with a progress bar; a notebook or agent call lands here
    with locked(org.model):
        if not org.is_hub:
            h = next(vlm.residuals(org.model, org.tokenizer, image[None], org.hookpoint))[1]
            codes = org.sae.encode(h[0, vlm.image_slice(org.model)])  # [P, F]
            caption = vlm.generate_captions(org.model, org.tokenizer, image[None])[0]
        else:
            all_codes, layout = processor_codes(org, image)
            codes = all_codes[layout.base.to(all_codes.device)]
            if len(layout.tiles):
                tile_codes, tile_shape = all_codes[layout.tiles.to(all_codes.device)].float().cpu(), layout.tile_shape
            caption = vlm.hub_generate(org.model, org.processor, image)
    codes = codes.float().cpu()  # the maps leave as numpy (and, under ZeroGPU, pickled)
    g = int(round(codes.shape[0] ** 0.5))
    mean = codes.mean(0)
    order = [int(f) for f in torch.argsort(mean, descending=True)[:top_n] if mean[f] > 0]
    out = {"image": image, "caption": caption,
           "features": [{"feature": f, "mean_act": round(float(mean[f]), 4),
                         "label": (shown_label(org.labels.get(str(f), {})) if org.is_hub
                                   else org.labels.get(str(f), {}).get("label", ""))} for f in order],
           "maps": {f: codes[:, f].reshape(g, g).numpy() for f in order},
           "tile_maps": ({f: tile_codes[:, f].reshape(tile_shape).numpy() for f in order}
                         if tile_codes is not None else {}),
           "positions": positions_text(org, layout)}
    _RESULT_CACHE.put(key, out)
    return out


def family_rivals(org: Organism, feature: int) -> list[int]:
    """Features labelled with another concept of the same family (e.g. the other colours)."""
    lab = org.labels.get(str(int(feature)), {})
    fam, own = lab.get("family"), lab.get("label")
    if not fam:
        return []
    return [int(f) for f, e in org.labels.items() if e.get("family") == fam and e.get("label") != own]


def steering_defaults(org: Organism) -> dict:
    st = org.summary.get("steering", {})
    return {"positions": st.get("default_positions", "prompt"), "multiple": float(st.get("value_multiple", 2.0)),
            "suppress": bool(st.get("suppress_other_colours", False)), "hookpoint": org.hookpoint}


def clamp_range(org: Organism) -> bounds.Range:
    """The clamp values steering takes: 0 to 10× the index's largest activation (backend.core.bounds)."""
    top = None if org.index is None else float(org.index.tensors["max_act"].max())
    return bounds.Range("The clamp value", 0, bounds.clamp_max(top), whole=False)


def default_clamp_value(org: Organism, feature: int, multiple: float | None = None) -> float:
    """`multiple` × the feature's max activation; without `multiple`, a colour feature gets the multiple
    calibrated for its colour (summary "steering.calibrated"), any other feature the sweep's best one."""
    st = org.summary.get("steering", {})
    mult = multiple
    if mult is None:
        colour = {int(f): c for c, f in st.get("colour_features", {}).items()}.get(int(feature))
        mult = float(st.get("calibrated", {}).get("multiples", {}).get(colour, st.get("value_multiple", 2.0)))
    if org.index is None:
        return 10.0
    return round(mult * float(org.index.tensors["max_act"][int(feature)]), 3)


@gpu(duration=40)  # two greedy captions (with and without the clamp)
@torch.no_grad()
def steer_caption(org: Organism, image: np.ndarray, feature: int, value: float, *, positions: str = "prompt",
                  add_error: bool = False, suppress_family: bool = False) -> dict:
    """Caption with and without the clamp, side by side."""
    if not np.isfinite(value):
        raise ValueError("clamp value must be a finite number")
    image = model_image(org, image)
    suppress = tuple(family_rivals(org, feature)) if suppress_family else ()
    if not 0 <= int(feature) < org.n_features:
        raise ValueError(f"feature must be in 0..{org.n_features - 1}")
    key = make_key(org.cache_id, image, ("steer", int(feature), float(value), positions, bool(add_error), suppress))
    hit = _RESULT_CACHE.get(key)
    if hit is not None:
        return concept_verdict(org, hit)
    need_model(org)
    with locked(org.model):
        if org.is_hub:
            base = vlm.hub_generate(org.model, org.processor, image)
            steered = ST.hub_steered_caption(org.model, org.processor, org.sae, org.hookpoint, image, int(feature),
                                             float(value), positions=positions, add_error=add_error,
                                             suppress=suppress)
        else:
            base = vlm.generate_captions(org.model, org.tokenizer, image[None])[0]
            steered = ST.steered_captions(org.model, org.tokenizer, org.sae, org.hookpoint, image[None], int(feature),
                                          float(value), positions=positions, add_error=add_error,
                                          suppress=suppress)[0]
    out = {"feature": int(feature), "value": float(value), "positions": positions, "add_error": bool(add_error),
           "suppressed": list(suppress),
           "hookpoint": org.hookpoint, "baseline": base, "steered": steered,
           # the zoo's captions follow a template that can be checked; free text cannot
           "well_formed": None if org.is_hub else S.parse_caption(steered) is not None}
    _RESULT_CACHE.put(key, out)
    return concept_verdict(org, out)


def concept_verdict(org: Organism, out: dict) -> dict:
    """A steering result with the verdict that matters: does the steered caption name the feature's
    concept (its label now, which a hub model may have been asked for since), and did the one
    without the clamp already? `names_concept` is None for a feature without a label."""
    concept = shown_label(org.labels.get(str(out["feature"]), {}))
    names = ({"baseline": ST.names_concept(out["baseline"], concept), "steered": ST.names_concept(out["steered"], concept)}
             if concept else None)
    return {**out, "concept": concept, "names_concept": names}
