"""Loading the Features tab's organisms: metadata first (the SAE's cfg, the VLM's config, the
index), the VLM and SAE weights on the first request that needs them (`need_model`), through the
model store; the zoo organism, the paper's checkpoint, and a user's own VLM + SAE at a hookpoint.
Every handler reaches its organism through `get_organism(source)`.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

from ..core import loadgate, picker, preload, store, weights
from ..core import presets as P
from ..core.device import device_of, place
from . import format_info, formats, vlm
from .formats import load as load_sae
from .index import INDEX_ENV, INDEX_FILE, FeatureIndex
from .organism import (
    HUB_HOOKPOINT,
    HUB_MODEL,
    HUB_SAE,
    NO_LABELS,
    TAB,
    ZOO_MODEL,
    ZOO_SAE,
    HubParts,
    Organism,
    _read_json,
    _vision,
    refresh_index,
)


def _zoo_vision(cap_dir: Path) -> dict:
    """The captioner's vision sizes from its config.json; the config class only when the file leaves
    them to the defaults (importing transformers' configs costs the app's start about a second)."""
    cfg = _read_json(cap_dir / "config.json", {})
    v = cfg.get("vision_config", {})
    if "image_size" in v and "patch_size" in v:
        return {
            "image_size": int(v["image_size"]),
            "patch_size": int(v["patch_size"]),
            "anyres": cfg.get("image_grid_pinpoints") is not None,
        }
    from transformers import AutoConfig

    return _vision(P.load_pretrained(AutoConfig, cap_dir, weights=False, roots=[cap_dir.parent]))


def zoo_shell(sae_name: str = ZOO_SAE, root: Path | None = None, parts_key: str = "") -> Organism:
    """The zoo organism without weights: the SAE's cfg, the captioner's vision sizes, the feature
    index, labels, summary and scene sets, which are all the tab's first view shows. `need_model`
    loads the captioner and the SAE (`load_zoo_parts`) into the model store under `parts_key`."""
    sae_dir = P.zoo_path(sae_name, root)
    info = _read_json(sae_dir / "organism.json", {})
    cap_dir = _captioner_dir(sae_dir)
    sae_info = format_info.describe(P.validate_local_path(sae_dir, [cap_dir.parent]))
    # the hookpoint as `formats.load` names it on the loaded SAE
    hook = formats.model_hookpoint(sae_info["hookpoint"]) if sae_info.get("hookpoint") else info.get("hookpoint", "")
    index = FeatureIndex.load(sae_dir / INDEX_FILE) if (sae_dir / INDEX_FILE).exists() else None
    return Organism(
        sae_name,
        sae_dir,
        hookpoint=hook,
        index=index,
        labels=_read_json(sae_dir / "labels.json", {}),
        summary=_read_json(sae_dir / "summary.json", {}),
        index_specs=(
            vlm.load_scene_set(sae_dir, "index_scenes.json") if (sae_dir / "index_scenes.json").exists() else []
        ),
        heldout_specs=vlm.load_scene_set(cap_dir),
        model_id=f"zoo:{sae_name}",
        sae_info=sae_info,
        vision=_zoo_vision(cap_dir),
        parts_key=parts_key,
    )


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
        raise ValueError(
            f"the SAE's weights ({sae.n_latents} latents at {sae.cfg.hookpoint!r}) do not match its "
            f"cfg ({org.n_features} latents at {org.hookpoint!r})"
        )
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
    hf_home = (
        os.environ.get("HF_HOME") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "huggingface"
    )
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

    sub = format_info.hub_folder(files, hookpoint, read_cfg)
    wanted = ["*"] if weights else ["cfg.json", "config.json"]
    root = Path(snapshot_download(repo, allow_patterns=[_under(sub, w) for w in wanted] + [INDEX_FILE]))
    return root, sub, format_info.listed_entry(root, sub, files)


def hub_shell(
    model_id: str = HUB_MODEL,
    sae_id: str = HUB_SAE,
    hookpoint: str = HUB_HOOKPOINT,
    *,
    model_class: str = "transformers.LlavaNextForConditionalGeneration",
) -> Organism:
    """A hub organism without weights: the model's config, the SAE's cfg (size, k, architecture) and
    the feature index if one exists ($WORKBENCH_SAE_INDEX, else the file an earlier build from the
    tab wrote, else one beside the SAE; see `refresh_index`). Seconds, not a 16 GB download."""
    from transformers import AutoConfig

    config = P.load_pretrained(AutoConfig, model_id, weights=False)
    root, sub, entry = sae_location(sae_id, hookpoint, weights=False)
    info = format_info.describe_entry(entry)
    format_info.check_width(info, getattr(getattr(config, "text_config", config), "hidden_size", None), str(model_id))
    org = Organism(
        f"hub:{sae_id}",
        root,
        hookpoint=formats.model_hookpoint(hookpoint),
        model_id=f"hub:{model_id}|{sae_id}",
        source="hub",
        label_source=NO_LABELS,
        ids=(str(model_id), str(sae_id)),
        sae_info=info,
        vision=_vision(config),
        parts_key=f"{TAB}:hub:{model_id}|{sae_id}|{formats.canonical_hookpoint(hookpoint)}",
        model_class=model_class,
    )
    org.weights_key = weights.key(vlm_preset(org))
    org.summary = {"hub_hookpoint": hookpoint, "sae_folder": sub}
    org.index_out = index_target() or default_index_path(str(model_id), str(sae_id), hookpoint)
    refresh_index(org)
    return org


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
        org.model, org.processor, org.tokenizer, org.sae = (
            parts.model,
            parts.processor,
            parts.processor.tokenizer,
            parts.sae,
        )
        if org.is_hub:  # the zoo's hookpoint is its SAE's own, known before the weights
            org.hookpoint = vlm.resolve_hookpoint(parts.model, formats.model_hookpoint(org.summary["hub_hookpoint"]))


def load_hub(
    model_id: str = HUB_MODEL,
    sae_id: str = HUB_SAE,
    hookpoint: str = HUB_HOOKPOINT,
    *,
    model_class: str = "transformers.LlavaNextForConditionalGeneration",
    weights: bool = True,
) -> Organism:
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
        vlm_id, sae_id, hookpoint = json.loads(source[len(OWN) :])
        org = own_organism(vlm_id, sae_id, hookpoint)
        refresh_index(org)
        return need_model(org, progress) if model else org
    preset = P.active(TAB, source)
    if preset.source == "hub":
        with _SHELLS_LOCK:
            if preset.model_id not in _SHELLS:
                _SHELLS[preset.model_id] = hub_shell(
                    preset.path_or_id, preset.extra["sae"], preset.extra["hookpoint"], model_class=preset.model_class
                )
            org = _SHELLS[preset.model_id]
        refresh_index(org)
        return need_model(org, progress) if model else org
    with _SHELLS_LOCK:
        if preset.model_id not in _SHELLS:  # its weights go in the store under the preset's id, as every tab's
            _SHELLS[preset.model_id] = zoo_shell(parts_key=preset.model_id)  # model does
        org = _SHELLS[preset.model_id]
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
    return picker.resolve(
        org.ids[0], P.presets(TAB), "features", tab=TAB, sae=org.ids[1], hookpoint=org.summary.get("hub_hookpoint", "")
    )


def _preload(preset: P.Preset, *own) -> Organism:
    """A registered preset's organism, or (`own`: its size, from the pick) a user's own VLM + SAE."""
    if not own:
        return get_organism(preset.source, model=True)
    source = _own_source_of(preset)
    assert source is not None  # preload loads only an own organism that `_own_loaded` names
    return get_organism(source, model=True)


def _own_loaded(preset: P.Preset) -> bool:
    # the VLM may be in the store already (another tab's pick) while the SAE, a view of it, is not
    source = _own_source_of(preset)
    return source is None or get_organism(source).model is not None


preload.register(TAB, _preload, source_pick, _own_loaded)


def load_organism(name: str = ZOO_SAE) -> Organism:
    return load_zoo(name)
