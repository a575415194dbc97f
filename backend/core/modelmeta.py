"""What is read of a user's own model before its weights (`ModelMeta`, `read_meta`): its config.json,
or a diffusers pipeline's model_index.json and unet/config.json, from a validated local folder or the
hub. Kept apart from modelcheck, which judges what is read here (the methods' rules, remote code,
sizes, the server's policy)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from . import presets as P
from .errors import ModelCheckError


@dataclass
class ModelMeta:
    """What is read of a model before its weights: what each method's rule judges."""

    location: str
    local: bool
    folder: Path | None  # the local folder, or the hub snapshot folder the config was cached in
    config: dict  # config.json, or model_index.json for a pipeline
    unet: dict | None  # a pipeline's unet/config.json
    revision: str | None
    index: bool = False  # config is a pipeline's model_index.json

    @property
    def pipeline(self) -> bool:
        return self.index

    @property
    def diffusers_component(self) -> bool:
        """A config.json that diffusers wrote for one model (a UNet, a VAE), not a pipeline."""
        return not self.index and "_class_name" in self.config and "_diffusers_version" in self.config

    @property
    def architecture(self) -> str:
        if self.pipeline or self.diffusers_component:
            return str(self.config["_class_name"])
        archs = self.config.get("architectures") or []
        if archs:
            return str(archs[0])
        return _class_for_type(str(self.config.get("model_type", ""))) or "an unnamed architecture"


def _class_for_type(model_type: str) -> str | None:
    from transformers.models.auto import modeling_auto as auto

    for names in (
        auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        auto.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES,
        auto.MODEL_MAPPING_NAMES,
    ):
        if model_type in names:
            name = names[model_type]
            return name if isinstance(name, str) else name[0]  # funnel: (FunnelModel, FunnelBaseModel)
    return None


def _read_json(path: Path, what: str) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModelCheckError(f"cannot read {what}: {type(e).__name__}") from e
    if not isinstance(data, dict):
        raise ModelCheckError(f"{what} is not a JSON object")
    return data


class _Unreachable(Exception):
    pass


def _hub_file(repo: str, name: str, revision: str | None) -> Path | None:
    """A file of a hub repo (downloaded, or from the local cache offline); None if the repo has no
    such file; _Unreachable if the hub cannot be asked and the cache does not have it."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import RemoteEntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError

    try:
        return Path(hf_hub_download(repo, name, revision=revision))
    except RemoteEntryNotFoundError:
        return None
    except (RepositoryNotFoundError, RevisionNotFoundError) as e:
        raise ModelCheckError(f"no model {repo!r} on the hub (or it is private or gated)") from e
    except Exception as e:  # offline and not cached, or the hub unreachable
        raise _Unreachable(type(e).__name__) from e


def _hub_meta(repo: str, revision: str | None) -> ModelMeta:
    unreachable: _Unreachable | None
    try:
        config = _hub_file(repo, "config.json", revision)
        if config is not None:
            return ModelMeta(repo, False, config.parent, _read_json(config, "config.json"), None, revision)
    except _Unreachable as e:  # perhaps a pipeline whose model_index.json is cached
        unreachable = e
    else:
        unreachable = None
    try:
        index = _hub_file(repo, "model_index.json", revision)
    except _Unreachable as e:
        raise ModelCheckError(
            f"cannot read the config of {repo!r}: the hub is not reachable and it is "
            f"not in the local cache ({unreachable or e})"
        ) from e
    if index is None:
        raise ModelCheckError(f"{repo!r} has neither config.json nor model_index.json")
    meta = ModelMeta(repo, False, index.parent, _read_json(index, "model_index.json"), None, revision, index=True)
    try:
        unet = _hub_file(repo, "unet/config.json", revision)
    except _Unreachable:
        unet = None
    meta.unet = _read_json(unet, "unet/config.json") if unet is not None else None
    return meta


def read_meta(path_or_id: str, revision: str | None, roots: list[Path] | None) -> ModelMeta:
    """The config of a local folder under the allowed roots (refused if pickle-only) or of a hub
    model; ModelCheckError with the reason where it cannot be read."""
    location = P.resolve(path_or_id, roots)  # validated: under the allowed roots, or owner/name
    if Path(location).exists():
        folder = Path(location)
        if not folder.is_dir():
            raise ModelCheckError(f"{path_or_id!r} is a file; pick the model's folder")
        P.refuse_pickles(folder)
        if not any(folder.rglob("*.safetensors")):
            raise ModelCheckError(f"no safetensors weights in {path_or_id!r}")
        index, config = folder / "model_index.json", folder / "config.json"
        if index.is_file():
            meta = ModelMeta(location, True, folder, _read_json(index, "model_index.json"), None, revision, index=True)
            unet = folder / "unet" / "config.json"
            meta.unet = _read_json(unet, "unet/config.json") if unet.is_file() else None
            return meta
        if not config.is_file():
            raise ModelCheckError(f"no config.json in {path_or_id!r}: not a transformers or diffusers model folder")
        return ModelMeta(location, True, folder, _read_json(config, "config.json"), None, revision)
    return _hub_meta(location, revision)
