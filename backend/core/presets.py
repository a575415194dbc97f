"""One registry of model presets, and the one loading path both sources go through.

Each tab names a zoo model (the default: tiny, trained here, committed under assets/zoo) and hub
checkpoints (the papers' real models, for a GPU Space). The source is chosen by the environment
variable WORKBENCH_PRESET (`zoo` | `hub`) or app.py's `--preset` flag. Whatever the source, loading
is `cls.from_pretrained(path_or_id, use_safetensors=True)`: the code path the Space uses is the one
the tests use. Remote code is never trusted and pickle checkpoints are refused.
"""

from __future__ import annotations

import importlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import PresetError
from .weightfiles import PICKLE_SUFFIXES, refuse_pickles  # noqa: F401  (part of this module's API)

REPO_ROOT = Path(__file__).resolve().parents[2]
ZOO_ROOT = REPO_ROOT / "assets" / "zoo"
SOURCES = ("zoo", "hub")
LOCAL = "local"  # the source of a user's own folder (custom_preset); never registered

# owner/name as the hub spells it: no leading dot or dash, no "..", at most 96 characters a part.
HUB_ID_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9_-]|\.(?!\.)){0,95}/[A-Za-z0-9](?:[A-Za-z0-9_-]|\.(?!\.)){0,95}$")
# Modules a preset or manifest may name a class from; anything else is refused.
ALLOWED_CLASS_PREFIXES = ("transformers.", "diffusers.", "backend.")


@dataclass(frozen=True)
class Preset:
    tab: str
    source: str  # "zoo" | "hub"
    path_or_id: str  # zoo: a folder name under assets/zoo; hub: owner/name
    model_class: str  # dotted path, e.g. "transformers.MambaForCausalLM"
    label: str = ""
    revision: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def model_id(self) -> str:
        return f"{self.source}:{self.path_or_id}@{self.revision or 'main'}"

    def location(self) -> str:
        """A validated local path (zoo) or hub id (hub)."""
        if self.source == "zoo":
            return str(validate_local_path(ZOO_ROOT / self.path_or_id))
        if self.source == LOCAL:
            return str(validate_local_path(self.path_or_id))
        return validate_hub_id(self.path_or_id)


def zoo_path(name: str, root: Path | None = None) -> Path:
    """The folder of a built zoo organism (under assets/zoo, or `root`): the methods read their zoo
    organisms from it without importing the zoo, which builds on them."""
    path = Path(root or ZOO_ROOT) / name
    if not (path / "manifest.json").exists():
        raise FileNotFoundError(f"organism {name!r} is not built; run `python -m backend.zoo build {name}`")
    return path


_REGISTRY: dict[str, list[Preset]] = {}


def register(preset: Preset) -> Preset:
    if preset.source not in SOURCES:
        raise PresetError(f"unknown source {preset.source!r}; expected one of {SOURCES}")
    import_class(preset.model_class, check_only=True)
    if preset.source == "hub":
        validate_hub_id(preset.path_or_id)
    presets = _REGISTRY.setdefault(preset.tab, [])
    if preset not in presets:
        presets.append(preset)
    return preset


def presets(tab: str | None = None) -> list[Preset]:
    if tab is None:
        return [p for ps in _REGISTRY.values() for p in ps]
    return list(_REGISTRY.get(tab, []))


def active_source(argv: list[str] | None = None) -> str:
    """`--preset X` on the command line wins over WORKBENCH_PRESET; the default is the zoo."""
    source = os.environ.get("WORKBENCH_PRESET", "zoo")
    argv = list(argv or [])
    for i, arg in enumerate(argv):
        if arg == "--preset" and i + 1 < len(argv):
            source = argv[i + 1]
        elif arg.startswith("--preset="):
            source = arg.split("=", 1)[1]
    source = source.strip().lower()
    if source not in SOURCES:
        raise PresetError(f"unknown preset source {source!r}; expected one of {SOURCES}")
    return source


def active(tab: str, source: str | None = None) -> Preset:
    """The preset a tab uses: the first of the chosen source, falling back to the zoo."""
    source = source or active_source()
    candidates = presets(tab)
    for p in candidates:
        if p.source == source:
            return p
    for p in candidates:
        if p.source == "zoo":
            return p
    raise PresetError(f"no preset registered for tab {tab!r}")


def validate_hub_id(repo_id: str) -> str:
    if not isinstance(repo_id, str) or not HUB_ID_RE.fullmatch(repo_id):
        raise PresetError(f"not a valid hub id (expected owner/name): {repo_id!r}")
    return repo_id


def allowed_roots() -> list[Path]:
    """assets/zoo plus any folders listed in WORKBENCH_MODEL_ROOTS (os.pathsep-separated)."""
    roots = [ZOO_ROOT]
    extra = os.environ.get("WORKBENCH_MODEL_ROOTS", "")
    roots += [Path(p) for p in extra.split(os.pathsep) if p.strip()]
    return [r.resolve() for r in roots]


def validate_local_path(path: str | os.PathLike, roots: list[Path] | None = None) -> Path:
    """Resolve symlinks and `..` first, then require the result to lie inside an allowed root."""
    if isinstance(path, str) and ("\x00" in path or not path.strip()):
        raise PresetError("empty or malformed path")
    resolved = Path(path).expanduser().resolve()
    roots = [Path(r).resolve() for r in (roots or allowed_roots())]
    if not any(resolved == r or r in resolved.parents for r in roots):
        raise PresetError(f"path {str(path)!r} is outside the allowed model folders")
    if not exists(resolved):
        raise PresetError(f"no model at {str(path)!r}")
    return resolved


def exists(path: str | os.PathLike) -> bool:
    """Whether a file or folder is there; a name the file system cannot hold (too long, say) is not
    (Path.exists raises OSError for it, and a visitor may type anything)."""
    try:
        return Path(path).exists()
    except (OSError, ValueError):
        return False


def looks_local(path_or_id: str) -> bool:
    """Paths start with . / ~ or have more than one slash; `owner/name` is a hub id unless it exists."""
    return path_or_id.startswith((".", "/", "~", "\\")) or path_or_id.count("/") >= 2 or exists(path_or_id)


def resolve(path_or_id: str | os.PathLike, roots: list[Path] | None = None) -> str:
    s = os.fspath(path_or_id)
    if looks_local(s):
        return str(validate_local_path(s, roots))
    return validate_hub_id(s)


def import_class(dotted: str, check_only: bool = False):
    if not isinstance(dotted, str) or not dotted.startswith(ALLOWED_CLASS_PREFIXES):
        raise PresetError(f"class {dotted!r} is not from transformers, diffusers or backend")
    if check_only:
        return None
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def load_pretrained(
    cls, path_or_id: str | os.PathLike, *, weights: bool = True, roots: list[Path] | None = None, **kwargs
):
    """`cls.from_pretrained` with the workbench's rules: validated location, safetensors only
    (for classes that hold weights), no remote code."""
    if kwargs.get("trust_remote_code"):
        raise PresetError("trust_remote_code is never enabled in the workbench")
    kwargs.pop("trust_remote_code", None)
    if isinstance(cls, str):
        cls = import_class(cls)
    location = resolve(path_or_id, roots)
    if exists(location):
        refuse_pickles(Path(location))
    if weights:
        kwargs["use_safetensors"] = True
        from . import store

        if store.reporting():  # a request waits on this load: read the shards where it can see them
            from .prefetch import read_shards

            read_shards(location, revision=kwargs.get("revision"), skip=[k for k, v in kwargs.items() if v is None])
    return cls.from_pretrained(location, **kwargs)


def load_preset(preset: Preset, *, size_hint: int | None = None, **kwargs):
    """Load a preset's model. On a machine with several GPUs, a model too large for one (its size
    from `size_hint`, or from its weight headers) is spread over all of them (device.spread_kwargs)."""
    roots = None
    if preset.source == "zoo":
        roots = [ZOO_ROOT]
    if preset.revision:
        kwargs.setdefault("revision", preset.revision)
    if "device_map" not in kwargs and _several_gpus():
        from .device import spread_kwargs

        if size_hint is None and preset.source != "zoo":
            try:
                size_hint = _weights_bytes(preset.location(), preset.revision)
            except PresetError:
                size_hint = None
        kwargs.update(spread_kwargs(size_hint, pipeline=preset.model_class.startswith("diffusers.")))
    return load_pretrained(preset.model_class, preset.location(), roots=roots, **kwargs)


def _weights_bytes(location: str, revision: str | None) -> int | None:
    """The bytes of a checkpoint's weights from their headers or the hub's metadata (None where
    unknown), for spreading it over GPUs."""
    from .prefetch import local_folder
    from .weightfiles import hub_or_cached_size, local_size

    if Path(location).is_dir():
        return local_size(Path(location))[1]
    return hub_or_cached_size(location, revision, local_folder(location, revision))[1]


def _several_gpus() -> bool:
    import torch

    return torch.cuda.is_available() and torch.cuda.device_count() > 1


def custom_preset(
    tab: str, path_or_id: str | os.PathLike, model_class: str, *, revision: str | None = None, label: str = "", **extra
) -> Preset:
    """An unregistered preset for a user's own model: a hub id (source "hub") or a folder under the
    allowed roots (source "local"), loaded by `load_preset` like any other. Check it first with
    backend.core.modelcheck (architecture, size, the server's policy)."""
    import_class(model_class, check_only=True)
    location = resolve(path_or_id)
    source = LOCAL if exists(location) else "hub"
    return Preset(tab, source, location, model_class, label or Path(location).name, revision, dict(extra))
