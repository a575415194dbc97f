"""An SAE described from its files' metadata, before any weights load (the safetensors header's
shapes, the config), its width checked against a model's, and the folder of a hub repository's file
list that holds the SAE for a hookpoint (backend.sae.formats reads the files themselves)."""

from __future__ import annotations

import os
from pathlib import Path

from safetensors import safe_open

from .formats import (
    GEMMASCOPE_WEIGHTS,
    REFUSED_SAELENS,
    Entry,
    _read_cfg,
    _recorded_hookpoint,
    canonical_hookpoint,
    resolve,
    saelens_architecture,
)
from .sae import SAELENS_WEIGHTS, SPARSIFY_WEIGHTS, SAEFormatError


def _header_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """Tensor shapes from a safetensors header (no weight is read)."""
    try:
        with safe_open(str(path), framework="pt", device="cpu") as f:
            return {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
    except Exception as e:
        raise SAEFormatError(f"{path.name} is not a readable safetensors file ({e})") from e


def describe_entry(e: Entry) -> dict:
    """What a tab shows about an SAE before loading it: d_in, n_latents, k, architecture and
    `text` (as SparseAutoencoder.describe words it), from cfg.json, else the weights' header.
    Architectures the loaders refuse are refused here too, so a page says why at once."""
    if e.error:
        raise SAEFormatError(e.error)
    cfg = e.cfg
    if e.layout == "sparsify":
        if cfg.get("transcode") or cfg.get("skip_connection"):
            raise SAEFormatError("sparsify transcoder or SAE with a skip connection: not supported")
        arch, k = cfg.get("activation", "topk"), cfg.get("k")
        d = cfg.get("d_in")
        n = cfg.get("num_latents") or (
            int(cfg["expansion_factor"]) * int(d) if cfg.get("expansion_factor") and d else None
        )
        weights = SPARSIFY_WEIGHTS
    elif e.layout == "saelens":
        arch, k = saelens_architecture(cfg)
        if arch in REFUSED_SAELENS:
            raise SAEFormatError(f"SAELens architecture {arch!r}: {REFUSED_SAELENS[arch]} is not supported")
        arch = {"standard": "relu"}.get(arch, arch)  # the class names SAELens's "standard" by its activation
        d, n, weights = cfg.get("d_in"), cfg.get("d_sae"), SAELENS_WEIGHTS
    else:
        arch, k, d, n, weights = "jumprelu", None, None, None, GEMMASCOPE_WEIGHTS
    if not (d and n) and (e.folder / weights).exists():  # the header holds W_dec's [n, d]
        shapes = {key.lower(): s for key, s in _header_shapes(e.folder / weights).items()}
        n, d = shapes.get("w_dec", (n, d))
    if not (d and n):
        raise SAEFormatError(f"{e.folder}: cfg.json does not give the SAE's size (d_in, latents)")
    k = int(k) if k else None
    return {
        "d_in": int(d),
        "n_latents": int(n),
        "k": k,
        "architecture": arch,
        "hookpoint": e.hookpoint,
        "layout": e.layout,
        "text": f"{arch}, k = {k}" if k else arch,
    }


def check_width(info: dict, d_model: int | None, model: str = "the model") -> None:
    """Refuse an SAE whose input width is not the model's residual width (an SAE of another model),
    before any weights load: every action would fail later with a shape error."""
    if d_model and int(info["d_in"]) != int(d_model):
        raise SAEFormatError(
            f"the SAE reads {info['d_in']}-wide activations but {model}'s language model is "
            f"{d_model} wide: it was trained on another model; pick the SAE of this one"
        )


def describe(path: str | os.PathLike, hookpoint: str | None = None) -> dict:
    """`describe_entry` for the SAE `load` would pick (weights need not be there yet)."""
    return describe_entry(resolve(Path(path), hookpoint))


# ---------------------------------------------------------------------------------- hub repositories
SAE_FILES = ("cfg.json", "config.json", SPARSIFY_WEIGHTS, SAELENS_WEIGHTS, GEMMASCOPE_WEIGHTS)


def _layout_of(names: set[str]) -> str:
    for weights, layout in (
        (SPARSIFY_WEIGHTS, "sparsify"),
        (SAELENS_WEIGHTS, "saelens"),
        (GEMMASCOPE_WEIGHTS, "gemmascope"),
    ):
        if weights in names:
            return layout
    return "saelens" if "cfg.json" in names else "gemmascope"


def hub_folder(files: list[str], hookpoint: str | None, read_cfg=None) -> str:
    """The folder of a hub repo ("" for its root) that holds the SAE for `hookpoint`, from the repo's
    file list, so a download fetches that folder only. A folder is matched by its path, by its name
    in any spelling `canonical_hookpoint` equates (lmms-lab's `model.layers.24`, sparsify's
    `layers.24`), then by the hook name its cfg records (`read_cfg(folder) → dict`, e.g. SAELens
    folders named otherwise)."""
    import posixpath

    by_dir: dict[str, set[str]] = {}
    for f in files:
        d, base = posixpath.split(f)
        if base in SAE_FILES and not any(p.startswith(".") for p in d.split("/") if p):
            by_dir.setdefault(d, set()).add(base)
    folders = sorted(by_dir)
    if not folders:
        raise SAEFormatError(
            "the repository holds no SAE (no cfg.json with sae.safetensors or "
            "sae_weights.safetensors, nor params.safetensors)"
        )
    if not hookpoint:
        if len(folders) == 1:
            return folders[0]
        raise SAEFormatError(f"the repository holds SAEs in several folders {folders}: name one")
    hp = hookpoint.strip().strip("/")
    if hp in by_dir:
        return hp
    want = canonical_hookpoint(hp)
    named = [d for d in folders if d and canonical_hookpoint(posixpath.basename(d)) == want]
    if len(named) == 1:
        return named[0]
    recorded = {}
    if read_cfg is not None and not named:
        for d in folders:
            try:
                cfg = read_cfg(d) or {}
            except Exception:  # an unreadable cfg names no hookpoint; others may still match
                cfg = {}
            recorded[d] = _recorded_hookpoint(Path(d or "."), _layout_of(by_dir[d]), cfg, nested=bool(d))
        named = [d for d, h in recorded.items() if h and canonical_hookpoint(h) == want]
        if len(named) == 1:
            return named[0]
        if not named and len(folders) == 1 and not recorded[folders[0]]:
            return folders[0]  # one SAE that records no hookpoint: nothing to check the name against
    if named:
        raise SAEFormatError(f"several folders hold an SAE for hookpoint {hookpoint!r}: {named}; name the folder")
    have = sorted({h for h in recorded.values() if h}) or folders
    raise SAEFormatError(f"no SAE for hookpoint {hookpoint!r} in the repository; it holds {have}")


def listed_entry(root: Path, sub: str, files: list[str]) -> Entry:
    """The Entry of hub folder `sub` (as `hub_folder` chose it) when only its cfg has been fetched:
    the layout comes from the repo's file list, not from weights on disk."""
    import posixpath

    names = {posixpath.basename(f) for f in files if posixpath.dirname(f) == sub}
    layout = _layout_of(names)
    folder = Path(root) / sub if sub else Path(root)
    cfg = _read_cfg(folder, layout)
    return Entry(folder, layout, cfg, _recorded_hookpoint(folder, layout, cfg, nested=bool(sub)))
