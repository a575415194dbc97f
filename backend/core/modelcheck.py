"""Checks on a user's own model before any weights load: does its architecture fit the method, how
large is it, and may this server load it at all.

Only metadata is read: `config.json` (or a diffusers pipeline's `model_index.json` and
`unet/config.json`) from a local folder under the allowed roots or from the hub (backend.core.modelmeta),
and the headers of the safetensors files (the hub's safetensors metadata, or the first bytes of local
files) for the parameter count and size. Pickle-only checkpoints and remote code are refused, as everywhere.

Which architectures a method takes is its own package's knowledge: each backend package with a
`rules.py` registers a MethodRule there (`register_rule`), found on first use (`rules()`), so a new
method adds its rule without editing this file.

Policy for custom models (`allowed_custom`): local runs allow them; on a public Space (SPACE_ID set)
they are off unless WORKBENCH_CUSTOM_MODELS=1, or the hub id's owner is listed in
WORKBENCH_CUSTOM_OWNERS (comma-separated). WORKBENCH_CUSTOM_MODELS=0 turns them off anywhere. A size
cap, WORKBENCH_CUSTOM_MAX_GB (default 20 on a Space, none locally), is checked from metadata
before download.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable, Literal

from . import presets as P
from .errors import ModelCheckError
from .budget import parse_bytes
from .modelmeta import ModelMeta, read_meta
from .weightfiles import (
    _HUB_SIZES,  # noqa: F401
    _ask_hub_size,  # noqa: F401
    _header,  # noqa: F401
    _hub_size,  # noqa: F401
    _without_variants,  # noqa: F401
    bytes_words,
    hub_or_cached_size,
    local_size,
    weight_files,  # noqa: F401
)

# Model types whose attention and MLP use transformers' Conv1D (a transposed weight), not nn.Linear:
# found by searching the installed transformers' modeling files for `Conv1D(`.
CONV1D_TYPES = ("gpt2", "openai-gpt", "imagegpt", "decision_transformer")
DEFAULT_SPACE_CAP_GB = 20.0


@dataclass(frozen=True)
class ModelCheck:
    location: str  # a validated local folder or hub id
    local: bool
    method: str
    architecture: str  # e.g. "MambaForCausalLM", or "StableDiffusionPipeline"
    model_type: str  # config's model_type ("" for a pipeline)
    n_params: int | None  # None where the size could not be read (hub not reachable)
    n_bytes: int | None
    config: dict  # config.json, or a pipeline's model_index.json
    pipeline: bool = False
    revision: str | None = None

    @property
    def model_class(self) -> str:
        """The dotted class `presets.load_preset` loads it with."""
        return f"{'diffusers' if self.pipeline else 'transformers'}.{self.architecture}"

    def preset(self, tab: str | None = None, **extra) -> P.Preset:
        """An unregistered preset for this model (presets.custom_preset), for the method's tab."""
        return P.custom_preset(tab or self.method, self.location, self.model_class, revision=self.revision, **extra)

    def summary(self) -> str:
        size = "size unknown" if self.n_bytes is None else bytes_words(self.n_bytes)
        params = "" if self.n_params is None else f"{_count(self.n_params)} parameters · "
        return f"{self.architecture} · {params}{size}"


def gb_words(n: int) -> str:
    """A size in GB with the digits it needs: a 0.05 GB cap is not "0.1 GB" nor "0 GB"."""
    return f"{n / 1e9:.3g} GB"


def _count(n: int) -> str:
    for unit, div in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= div:
            return f"{n / div:.1f}{unit}"
    return str(n)


# ----------------------------------------------------------------------------------- method rules
@dataclass(frozen=True, kw_only=True)
class MethodRule:
    """Which models one method's tab takes, declared by the method's own package in its `rules.py`
    (`register_rule(MethodRule(...))`): the package that knows the method knows its architectures."""

    method: str  # the tab's id, as check_model's callers name it ("relevance")
    problem: Callable[[ModelMeta], str | None]  # why a model does not fit, or None
    order: int  # its place in fitting_methods: the tab's place in the app
    aliases: tuple[str, ...] = ()  # other spellings method_key accepts ("lrp")
    architectures: tuple[str, ...] = ()  # the classes it takes, where it names them (weights.dtype_for)
    # A method that takes a diffusers pipeline judges a single diffusers model itself; any other
    # refuses one here with the same words for every tab.
    pipeline: bool = False


_RULES: dict[str, MethodRule] = {}
_RULES_LOCK = threading.Lock()
_discovered = False


def _spelling(name: str) -> str:
    return str(name).strip().lower().replace("-", "_").replace(" ", "_")


def _names(rule: MethodRule) -> set[str]:
    return {_spelling(rule.method), *map(_spelling, rule.aliases)}


def register_rule(rule: MethodRule) -> MethodRule:
    """Add (or, when its module is imported again, replace) a method's rule. A name another method
    already answers to is refused: method_key could not tell which one a user meant."""
    with _RULES_LOCK:
        for other in _RULES.values():
            clash = _names(rule) & _names(other) if other.method != rule.method else set()
            if clash:
                raise ValueError(
                    f"method rule {rule.method!r}: {', '.join(sorted(clash))} already names {other.method!r}"
                )
        _RULES[rule.method] = rule
    return rule


def _discover() -> None:
    """Import every backend package's `rules` module (found by its file, so that packages without
    one, such as the zoo, are never imported). On first use, not at import: the method packages
    build on this module. Two threads that race here both import, and Python's import lock makes
    the second wait for the first's modules, so neither sees a rule missing."""
    global _discovered
    if _discovered:
        return
    backend = Path(__file__).resolve().parents[1]
    for info in sorted(pkgutil.iter_modules([str(backend)]), key=lambda i: i.name):
        if info.ispkg and (backend / info.name / "rules.py").is_file():
            importlib.import_module(f"{backend.name}.{info.name}.rules")
    _discovered = True


def rules() -> tuple[MethodRule, ...]:
    """Every registered rule, in the tabs' order."""
    _discover()
    with _RULES_LOCK:
        return tuple(sorted(_RULES.values(), key=lambda r: (r.order, r.method)))


def methods() -> tuple[str, ...]:
    """The methods a model can be checked for, in the tabs' order."""
    return tuple(r.method for r in rules())


def method_rule(method: str) -> MethodRule:
    """The rule of `method` (a tab id or an alias); ModelCheckError naming the known methods."""
    m = _spelling(method)
    known = rules()
    for rule in known:
        if m in _names(rule):
            return rule
    raise ModelCheckError(f"unknown method {method!r}; expected one of {', '.join(r.method for r in known)}")


def method_key(method: str) -> str:
    return method_rule(method).method


# ----------------------------------------------------------------------------------- rules
def _remote_code(meta: ModelMeta) -> str | None:
    if "auto_map" in meta.config or (meta.unet or {}).get("auto_map"):
        return "its config asks for remote code (auto_map), which the workbench never runs"
    if meta.pipeline:
        for name, spec in meta.config.items():
            if (
                isinstance(spec, list)
                and len(spec) == 2
                and spec[0] not in (None, "diffusers", "transformers")
                and not _diffusers_pipeline_module(str(spec[0]))
            ):
                return f"its component {name!r} comes from {spec[0]!r}, remote code the workbench never runs"
    return None


def _diffusers_pipeline_module(name: str) -> bool:
    """A library name diffusers itself resolves inside diffusers.pipelines: SD-1.x's model_index.json
    names its safety checker ["stable_diffusion", "StableDiffusionSafetyChecker"]."""
    import importlib.util

    if not name.replace("_", "").isalnum():
        return False
    try:
        return importlib.util.find_spec(f"diffusers.pipelines.{name}") is not None
    except (ImportError, ValueError):
        return False


def _transformers_class(name: str) -> bool:
    import transformers

    return name in _transformers_names(transformers.__version__)


@lru_cache(maxsize=1)
def _transformers_names(_version: str) -> frozenset:
    import transformers

    return frozenset(dir(transformers))  # the lazy module lists its names without importing them


def architecture_problem(meta: ModelMeta, method: str) -> str | None:
    """Why this architecture does not fit the method (a tab id or an alias), or None; the method's
    own package says which architectures it takes (its registered MethodRule)."""
    rule = method_rule(method)
    if meta.diffusers_component and not rule.pipeline:
        return (
            f"{meta.architecture} is a diffusers model: the {rule.method.replace('_', ' ')} tab takes a "
            "transformers model"
        )
    return rule.problem(meta)


def linear_layers_problem(meta: ModelMeta, method: str, what: str) -> str | None:
    """Why a method that works on nn.Linear weights (`what`: "PiSSA adapts") cannot take this model:
    a diffusers pipeline, a Conv1D model, or a class the installed transformers lacks. Shared by the
    methods' rules because it is a fact about transformers, not about one method."""
    arch, mtype = meta.architecture, str(meta.config.get("model_type", ""))
    if meta.pipeline:
        return f"{arch} is a diffusers pipeline: the {method.replace('_', ' ')} tab takes a transformers model"
    if mtype in CONV1D_TYPES:
        return (
            f"{arch}: {what} nn.Linear weights, and {mtype} models use transformers' Conv1D layers "
            "instead; pick a model with nn.Linear layers (Llama, Qwen2, Gemma, Mistral, …)"
        )
    if not _transformers_class(arch):
        import transformers

        return f"{arch} is not a model class of the installed transformers {transformers.__version__}"
    return None


# ----------------------------------------------------------------------------------- sizes
def _size(meta: ModelMeta) -> tuple[int | None, int | None]:
    if meta.local:
        assert meta.folder is not None  # a local model is its folder
        return local_size(meta.folder)
    return hub_or_cached_size(meta.location, meta.revision, meta.folder)


def model_size(path_or_id: str, revision: str | None = None, roots: list[Path] | None = None):
    """(parameters, bytes) of a local folder or hub model from metadata; None where unknown."""
    location = P.resolve(path_or_id, roots)
    if Path(location).is_dir():
        return local_size(Path(location))
    return _size(read_meta(location, revision, roots))


def _over_cap(name: str, params: int | None, nbytes: int | None, cap: int | None) -> None:
    if cap is None:
        return
    if nbytes is None:
        raise ModelCheckError(
            f"cannot check the size of {name!r} before download (its metadata is not "
            f"reachable); this server loads custom models up to {gb_words(cap)}"
        )
    if nbytes > cap:
        what = bytes_words(nbytes) + (f", {_count(params)} parameters" if params else "")
        raise ModelCheckError(
            f"{name!r} is too large for this server ({what}; the cap is {gb_words(cap)}, WORKBENCH_CUSTOM_MAX_GB)"
        )


# ----------------------------------------------------------------------------------- public
def check_model(
    path_or_id: str,
    method: str,
    *,
    revision: str | None = None,
    max_bytes: int | None | Literal["policy"] = "policy",
    roots: list[Path] | None = None,
) -> ModelCheck:
    """Read a model's config and weight headers (no weights) and check it fits `method`.

    Raises ModelCheckError with the reason: a path outside the allowed roots or missing, a
    pickle-only checkpoint, remote code, an architecture the method does not take, or a size over
    `max_bytes` (by default this server's custom-model cap, `custom_max_bytes()`)."""
    method = method_key(method)
    meta = read_meta(str(path_or_id), revision, roots)
    problem = _remote_code(meta) or architecture_problem(meta, method)
    if problem:
        raise ModelCheckError(problem)
    params, nbytes = _size(meta)
    _over_cap(str(path_or_id), params, nbytes, custom_max_bytes() if max_bytes == "policy" else max_bytes)
    return ModelCheck(
        meta.location,
        meta.local,
        method,
        meta.architecture,
        str(meta.config.get("model_type", "")),
        params,
        nbytes,
        meta.config,
        meta.pipeline,
        revision,
    )


def fitting_methods(
    path_or_id: str, *, revision: str | None = None, roots: list[Path] | None = None
) -> dict[str, str | None]:
    """method → None where the model fits, else the reason (from one reading of its config)."""
    meta = read_meta(str(path_or_id), revision, roots)
    remote = _remote_code(meta)
    return {r.method: remote or architecture_problem(meta, r.method) for r in rules()}


def on_public_space() -> bool:
    return bool(os.environ.get("SPACE_ID"))


def _flag(name: str) -> bool | None:
    v = os.environ.get(name, "").strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off"):
        return False
    return None


def custom_models_setting() -> bool | None:
    """WORKBENCH_CUSTOM_MODELS as the owner set it: True (allowed), False (off) or None (unset: allowed
    locally, off on a public Space unless the owner is listed in WORKBENCH_CUSTOM_OWNERS)."""
    return _flag("WORKBENCH_CUSTOM_MODELS")


def custom_max_bytes() -> int | None:
    """WORKBENCH_CUSTOM_MAX_GB (a number of GB, or a size such as 500MB); on a Space 20 GB by
    default, no cap locally."""
    raw = os.environ.get("WORKBENCH_CUSTOM_MAX_GB", "").strip()
    if not raw:
        return int(DEFAULT_SPACE_CAP_GB * 1e9) if on_public_space() else None
    try:
        return int(float(raw) * 1e9)
    except ValueError:
        pass
    try:
        return parse_bytes(raw)
    except ValueError as e:
        raise ModelCheckError(f"WORKBENCH_CUSTOM_MAX_GB: {e}") from None


def _is_preset(location: str) -> bool:
    return any(p.path_or_id == location or (p.source == "zoo" and _same(p, location)) for p in P.presets())


def _same(p: P.Preset, location: str) -> bool:
    try:
        return Path(p.location()) == Path(location)
    except P.PresetError:
        return False


def allowed_custom(path_or_id: str, *, revision: str | None = None, roots: list[Path] | None = None) -> None:
    """Raise ModelCheckError unless this server lets users load `path_or_id` (the registered presets
    always pass). Checks the owner's settings first, then the size cap from metadata."""
    s = str(path_or_id).strip()
    location = P.resolve(s, roots)
    if _is_preset(location):
        return
    local = Path(location).exists()
    setting = custom_models_setting()
    if setting is False:
        raise ModelCheckError(
            "custom models are turned off on this server (WORKBENCH_CUSTOM_MODELS=0); pick one of the listed models"
        )
    if on_public_space() and setting is None and not local:
        owners = {o.strip().lower() for o in os.environ.get("WORKBENCH_CUSTOM_OWNERS", "").split(",") if o.strip()}
        if location.split("/", 1)[0].lower() not in owners:
            hint = f" (allowed owners: {', '.join(sorted(owners))})" if owners else ""
            raise ModelCheckError(
                f"custom models are off on this Space{hint}; its owner can allow them with "
                "WORKBENCH_CUSTOM_MODELS=1 or WORKBENCH_CUSTOM_OWNERS, or run the workbench locally"
            )
    cap = custom_max_bytes()
    if cap is not None:
        params, nbytes = local_size(Path(location)) if local else _size(read_meta(location, revision, roots))
        _over_cap(s, params, nbytes, cap)
