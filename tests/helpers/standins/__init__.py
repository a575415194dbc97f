"""Tiny stand-ins of the papers' hub checkpoints, placed in an offline Hugging Face cache under the
real hub ids, so hub mode runs through the very code a GPU Space runs.

Each module here (one per tab) exposes ``REPOS: dict[str, Callable[[Path], None]]``: a hub id and a
function that writes that repository's files (config, safetensors weights, real tokenizer files,
processor, chat template, ...) into the folder it is given. ``build_cache`` lays them out as the
hub's cache does (``models--owner--name/snapshots/<rev>/`` + ``refs/main``), so that with
``HF_HUB_CACHE=<cache>`` and ``HF_HUB_OFFLINE=1``, ``from_pretrained("owner/name")`` and
``hf_hub_download`` find them exactly as they would find a downloaded checkpoint.

Stand-ins keep the defects a real checkpoint would hit: real classes, byte-level BPE where the real
model has one, English words in the vocabulary, the real chat-template format, the real folder
layout (e.g. the SAE's one folder per hookpoint).
"""

from __future__ import annotations

import hashlib
import importlib
import os
import pkgutil
import shutil
from pathlib import Path
from typing import Callable

Builder = Callable[[Path], None]
REVISION = "0" * 40  # every stand-in snapshot is pinned to one fake commit


def all_repos() -> dict[str, Builder]:
    """Every stand-in of every tab module in this package."""
    repos: dict[str, Builder] = {}
    for info in pkgutil.iter_modules(__path__):
        mod = importlib.import_module(f"{__name__}.{info.name}")
        repos.update(getattr(mod, "REPOS", {}))
    return repos


def all_local() -> dict[str, Builder]:
    """Every tab module's ``LOCAL`` stand-ins: a folder name and the function that writes a model of
    an architecture the papers did not use (FalconMamba, LLaVA-1.5, SD-2.x, Qwen2, ...) into it, for
    the "your own model" pickers. They are saved as a user saves a model (``save_pretrained``), and
    picked by their path under an allowed root (WORKBENCH_MODEL_ROOTS)."""
    local: dict[str, Builder] = {}
    for info in pkgutil.iter_modules(__path__):
        mod = importlib.import_module(f"{__name__}.{info.name}")
        local.update(getattr(mod, "LOCAL", {}))
    return local


def build_local(root: Path, local: dict[str, Builder] | None = None) -> Path:
    """Write the local stand-ins (all, or the ones given) as folders under ``root``; returns ``root``.
    Point WORKBENCH_MODEL_ROOTS at ``root`` to let the app load them."""
    root = Path(root)
    for name, build in (local if local is not None else all_local()).items():
        folder = root / name
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        build(folder)
    return root


def repo_folder(cache: Path, repo_id: str, kind: str = "models") -> Path:
    return Path(cache) / f"{kind}--{repo_id.replace('/', '--')}"


def put(cache: Path, repo_id: str, build: Builder, kind: str = "models") -> Path:
    """Build one repository into the cache layout; returns its snapshot folder."""
    base = repo_folder(cache, repo_id, kind)
    snap = base / "snapshots" / REVISION
    if snap.exists():
        shutil.rmtree(snap)
    snap.mkdir(parents=True)
    build(snap)
    (base / "refs").mkdir(exist_ok=True)
    (base / "refs" / "main").write_text(REVISION)
    return snap


def build_cache(cache: Path, repos: dict[str, Builder] | None = None) -> Path:
    """Write every stand-in (or the ones given) into ``cache``; returns ``cache``."""
    cache = Path(cache)
    cache.mkdir(parents=True, exist_ok=True)
    for repo_id, build in (repos if repos is not None else all_repos()).items():
        put(cache, repo_id, build)
    return cache


def cache_env(cache: Path) -> dict[str, str]:
    """The environment under which the app and loaders read only this cache."""
    return {
        "HF_HUB_CACHE": str(cache),
        "HF_HOME": str(Path(cache).parent / "hf-home"),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "WORKBENCH_PRESET": "hub",
        "WORKBENCH_DEVICE": os.environ.get("WORKBENCH_DEVICE", "cpu"),
    }


def digest(folder: Path) -> str:
    """sha256 over a snapshot's files, to check that stand-ins are deterministic."""
    h = hashlib.sha256()
    for p in sorted(Path(folder).rglob("*")):
        if p.is_file():
            h.update(p.relative_to(folder).as_posix().encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def use_cache(mp, cache: Path) -> None:
    """Point this process at the stand-in cache, offline, with an empty model store, through a pytest
    MonkeyPatch `mp` (everything is restored when its context ends). huggingface_hub reads its cache
    folder and offline switch at import, and transformers asks it at each call: both are patched."""
    import huggingface_hub.constants as hc

    from backend.core import store

    for k, v in cache_env(cache).items():
        mp.setenv(k, v)
    mp.setattr(hc, "HF_HUB_CACHE", str(cache))
    mp.setattr(hc, "HF_HUB_OFFLINE", True)
    mp.setattr(store, "_MODELS", type(store._MODELS)())  # hub models leave the store with the context
