"""Reading SAEs as eai-sparsify, SAELens and Gemma Scope write them, and finding the one for a hookpoint.

The math of each architecture is a few lines (sae.py) and is checked here by forward equivalence
against files the libraries themselves wrote (tests/fixtures/sae, made by scripts/make_sae_fixtures.py),
so the workbench reads the files directly rather than through SAELens: sae-lens pulls ~50 packages
(transformer-lens, wandb, datasets, …) into a Space that needs none of them, and its loader would still
need this module's hookpoint resolution and refusals around it. What the files declare before any
weights load (shapes, width, a hub repository's folder for a hookpoint) is backend.sae.format_info's.

Layouts:
- sparsify: `cfg.json` (`d_in`, `num_latents` or `expansion_factor`, `k`, `activation` topk|groupmax,
  `skip_connection`, `transcode`) + `sae.safetensors` (`encoder.weight` [n, d], `encoder.bias`, `W_dec`
  [n, d], `b_dec`). Its trainer writes one folder per hookpoint, named for it (`layers.6`), with no
  hookpoint in cfg.json; lmms-lab repos name them `model.layers.24`.
- SAELens: `cfg.json` (`architecture`, `d_in`, `d_sae`, `apply_b_dec_to_input`, `normalize_activations`;
  SAELens 6 keeps the hook name under `metadata.hook_name`, 5.x at the top as `hook_name`/`hook_point`)
  + `sae_weights.safetensors` (`W_enc` [d, n], `b_enc`, `W_dec`, `b_dec`, and `threshold` | `b_gate`,
  `r_mag`, `b_mag` by architecture). SAELens 5.x wrote TopK SAEs as `standard` with
  `activation_fn_str: topk`; its training checkpoints may hold unfolded decoder norms
  (`rescale_acts_by_decoder_norm`) or `log_threshold`.
- Gemma Scope 2: `params.safetensors` (`w_enc` [d, n], `w_dec`, `b_enc`, `b_dec`, `threshold`) beside
  an optional `config.json`; JumpReLU without b_dec subtracted from the input (as SAELens loads it).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from .sae import (
    SAELENS_WEIGHTS,
    SPARSIFY_WEIGHTS,
    GatedSAE,
    JumpReLUSAE,
    MatchingPursuitSAE,
    ReLUSAE,
    SAEFormatError,
    SparseAutoencoder,
    TopKSAE,
)

GEMMASCOPE_WEIGHTS = "params.safetensors"
SEARCH_DEPTH = 3  # Gemma Scope nests SAEs two folders down (resid_post/layer_12_width_16k_l0_small/)

# Architectures the files may name that the workbench does not compute, and why.
REFUSED_SAELENS = {
    "abstopk": "AbsTopK SAE (signed codes, chosen by magnitude)",
    "temporal": "temporal SAE (codes depend on the preceding tokens)",
    "batchtopk": "BatchTopK training checkpoint (its codes depend on the whole batch; SAELens's "
    "save_inference_model writes it as a JumpReLU SAE, which loads)",
    "matryoshka_batchtopk": "Matryoshka BatchTopK training checkpoint (codes depend on the whole batch; "
    "SAELens's save_inference_model writes it as a JumpReLU SAE, which loads)",
    "transcoder": "transcoder (predicts another hookpoint's activations)",
    "skip_transcoder": "skip transcoder (predicts another hookpoint's activations)",
    "jumprelu_transcoder": "JumpReLU transcoder (predicts another hookpoint's activations)",
    "jumprelu_skip_transcoder": "JumpReLU skip transcoder (predicts another hookpoint's activations)",
}


@dataclass
class Entry:
    """One SAE found on disk, before its weights are read."""

    folder: Path
    layout: str
    cfg: dict
    hookpoint: str  # as the files record it, "" when they do not
    error: str = ""  # why a folder found beside others cannot be read (raised only if it is the one chosen)


# ---------------------------------------------------------------------------------- hookpoints
def canonical_hookpoint(name: str) -> str:
    """One spelling for the names of a decoder layer's output: `layers.N`, `model.layers.N`,
    `model.language_model.layers.N`, `language_model.model.layers.N` and TransformerLens's
    `blocks.N.hook_resid_post` are all `layers.N` (`blocks.N.hook_resid_pre` is `layers.N:input`)."""
    name = name.strip()
    m = re.fullmatch(r"blocks\.(\d+)\.hook_resid_(post|pre)", name)
    if m:
        return f"layers.{m.group(1)}" + (":input" if m.group(2) == "pre" else "")
    for prefix in ("model.language_model.", "language_model.model.", "language_model.", "model."):
        if name.startswith(prefix):
            return name[len(prefix) :]
    return name


def model_hookpoint(name: str) -> str:
    """A recorded hook name in the Hugging Face spelling the workbench hooks: TransformerLens's
    residual names and a bare `layers.N` become `model.layers.N` (`:input` for a layer's input); full
    module names and other sites are kept as written."""
    if re.fullmatch(r"blocks\.\d+\.hook_resid_(post|pre)|layers\.\d+", name.strip()):
        return "model." + canonical_hookpoint(name)
    return name


def _recorded_hookpoint(folder: Path, layout: str, cfg: dict, nested: bool) -> str:
    if layout == "sparsify":
        # the trainer and lmms-lab name each hookpoint's folder for it; a lone folder's name is not one
        hp = cfg.get("hookpoint") or ""
        if not hp and (nested or re.search(r"(^|\.)layers\.\d+$", folder.name)):
            hp = folder.name
        return hp
    if layout == "saelens":
        meta = cfg.get("metadata")
        if not isinstance(meta, dict):
            meta = {}
        hp = meta.get("hook_name") or cfg.get("hook_name") or cfg.get("hook_point") or ""
        return model_hookpoint(hp) if hp else ""
    hp = (cfg.get("hf_hook_point_in") or "").removesuffix(".output")  # Gemma Scope 2
    if hp:
        return hp
    m = re.search(r"layer_(\d+)", folder.name)
    return f"model.layers.{m.group(1)}" if m and "resid_post" in str(folder) else ""


# ---------------------------------------------------------------------------------- finding SAEs
def detect_layout(folder: Path) -> str:
    for name, layout in (
        (SPARSIFY_WEIGHTS, "sparsify"),
        (SAELENS_WEIGHTS, "saelens"),
        (GEMMASCOPE_WEIGHTS, "gemmascope"),
    ):
        if (folder / name).exists():
            return layout
    if (folder / "params.npz").exists():
        raise SAEFormatError(
            f"{folder}: params.npz (Gemma Scope 1) is a NumPy archive; the workbench reads "
            f"weights from safetensors only: convert it to {GEMMASCOPE_WEIGHTS}"
        )
    raise SAEFormatError(
        f"{folder}: no {SPARSIFY_WEIGHTS} (sparsify), {SAELENS_WEIGHTS} (SAELens) or "
        f"{GEMMASCOPE_WEIGHTS} (Gemma Scope) found"
    )


def _read_cfg(folder: Path, layout: str) -> dict:
    path = folder / ("config.json" if layout == "gemmascope" else "cfg.json")
    if not path.exists():
        if layout == "gemmascope":
            return {}
        raise SAEFormatError(f"{folder}: no cfg.json")
    try:
        cfg = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise SAEFormatError(f"{path.name} is not valid JSON: {e}") from e
    if not isinstance(cfg, dict):
        raise SAEFormatError(f"{path.name} holds no settings object")
    return cfg


def _is_sae_folder(folder: Path) -> bool:
    return (
        any((folder / n).exists() for n in (SPARSIFY_WEIGHTS, SAELENS_WEIGHTS, GEMMASCOPE_WEIGHTS, "params.npz"))
        or (folder / "cfg.json").exists()
    )


def find_saes(path: Path) -> list[Entry]:
    """The SAE in `path` itself, or those in its sub-folders (up to SEARCH_DEPTH levels)."""
    if not path.is_dir():
        raise SAEFormatError(f"{path} is not a folder")
    if _is_sae_folder(path):
        layout = detect_layout(path)
        cfg = _read_cfg(path, layout)
        return [Entry(path, layout, cfg, _recorded_hookpoint(path, layout, cfg, nested=False))]
    found, frontier = [], [path]
    for _ in range(SEARCH_DEPTH):
        nxt = []
        for d in frontier:
            for sub in sorted(p for p in d.iterdir() if p.is_dir() and not p.name.startswith(".")):
                if _is_sae_folder(sub):
                    try:
                        layout = detect_layout(sub)
                        cfg = _read_cfg(sub, layout)
                    except SAEFormatError as err:  # one unreadable folder does not hide its neighbours
                        found.append(Entry(sub, "", {}, sub.name, error=str(err)))
                        continue
                    found.append(Entry(sub, layout, cfg, _recorded_hookpoint(sub, layout, cfg, nested=True)))
                else:
                    nxt.append(sub)
        frontier = nxt
    if not found:
        raise SAEFormatError(
            f"{path}: no SAE found (no cfg.json with {SPARSIFY_WEIGHTS} or {SAELENS_WEIGHTS}, nor {GEMMASCOPE_WEIGHTS})"
        )
    return found


def _names(entries: list[Entry], root: Path) -> list[str]:
    return [e.hookpoint or str(e.folder.relative_to(root)) for e in entries]


def resolve(path: Path, hookpoint: str | None) -> Entry:
    """The SAE for `hookpoint` (any spelling `canonical_hookpoint` equates, or a sub-folder's path).
    A named hookpoint that none of the SAEs records is refused, listing those that are there."""
    sub = path / hookpoint if hookpoint else None
    # a sub-folder named by the hookpoint (sparsify's and lmms-lab's layout), never one outside `path`
    if sub is not None and sub.resolve().is_relative_to(path.resolve()) and sub.is_dir() and _is_sae_folder(sub):
        e = find_saes(sub)[0]
        if not e.hookpoint:
            assert hookpoint  # it names `sub`
            e.hookpoint = hookpoint
        return e
    entries = find_saes(path)
    if not hookpoint:
        if len(entries) == 1:
            return entries[0]
        raise SAEFormatError(f"{path} holds SAEs for several hookpoints {_names(entries, path)}: name one")
    want = canonical_hookpoint(hookpoint)
    hits = [e for e in entries if e.hookpoint and canonical_hookpoint(e.hookpoint) == want]
    if not hits and len(entries) == 1 and not entries[0].hookpoint:
        return entries[0]  # the files record no hookpoint: nothing to check the name against
    if len(hits) == 1:
        return hits[0]
    if hits:
        raise SAEFormatError(
            f"{path} holds several SAEs for hookpoint {hookpoint!r} "
            f"{[str(e.folder.relative_to(path)) for e in hits]}: name the folder"
        )
    have = sorted({e.hookpoint for e in entries if e.hookpoint})
    raise SAEFormatError(
        f"no SAE for hookpoint {hookpoint!r} in {path}; it holds SAEs for {have or _names(entries, path)}"
    )


# ---------------------------------------------------------------------------------- reading weights
def _read_weights(path: Path) -> dict[str, torch.Tensor]:
    try:
        with safe_open(str(path), framework="pt", device="cpu") as f:
            return {k: f.get_tensor(k) for k in f.keys()}
    except Exception as e:  # safetensors raises its own error type for a corrupt header
        raise SAEFormatError(f"{path.name} is not a readable safetensors file ({e})") from e


def _need(w: dict, names: tuple[str, ...], what: str) -> None:
    missing = [n for n in names if n not in w]
    if missing:
        raise SAEFormatError(f"{what} file lacks {missing} (it holds {sorted(w)})")


def _shapes(sae: SparseAutoencoder, w: dict[str, torch.Tensor]) -> None:
    for name, t in w.items():
        want = tuple(getattr(sae, name).shape)
        if tuple(t.shape) != want:
            raise SAEFormatError(
                f"inconsistent SAE shapes: {name} {tuple(t.shape)}, expected {want} "
                f"for d_in={sae.d_in}, {sae.n_latents} latents"
            )


def _fill(sae: SparseAutoencoder, w: dict[str, torch.Tensor]) -> SparseAutoencoder:
    _shapes(sae, w)
    with torch.no_grad():
        for name, t in w.items():
            getattr(sae, name).copy_(t.to(getattr(sae, name).dtype))
    return sae


def _dims(cfg: dict, W_dec: torch.Tensor, n_key: str) -> tuple[int, int]:
    if W_dec.ndim != 2:
        raise SAEFormatError(f"W_dec must be a matrix, got shape {tuple(W_dec.shape)}")
    n, d = W_dec.shape
    if int(cfg.get("d_in", d)) != d:
        raise SAEFormatError(f"cfg d_in={cfg.get('d_in')} but weights have {d}")
    if cfg.get(n_key) and int(cfg[n_key]) != n:
        raise SAEFormatError(f"cfg {n_key}={cfg[n_key]} but weights have {n} latents")
    return n, d


def read_sparsify(e: Entry, dtype) -> SparseAutoencoder:
    cfg = e.cfg
    if cfg.get("transcode"):
        raise SAEFormatError(
            "sparsify transcoder (transcode=true): it predicts another hookpoint's "
            "activations; the workbench loads autoencoders only"
        )
    if cfg.get("skip_connection"):
        raise SAEFormatError("sparsify SAE with a skip connection (W_skip): not supported")
    activation = cfg.get("activation", "topk")
    if activation not in ("topk", "groupmax"):
        raise SAEFormatError(f"sparsify activation {activation!r} is not supported (topk, groupmax)")
    w = _read_weights(e.folder / SPARSIFY_WEIGHTS)
    _need(w, ("encoder.weight", "encoder.bias", "W_dec", "b_dec"), "sparsify")
    if "W_skip" in w:
        raise SAEFormatError("sparsify SAE with a skip connection (W_skip): not supported")
    n, d = _dims(cfg, w["W_dec"], "num_latents")
    if "k" not in cfg:
        raise SAEFormatError("sparsify cfg.json has no k")
    k = int(cfg["k"])
    try:
        sae = TopKSAE(d, n, k, hookpoint=e.hookpoint, activation=activation, dtype=dtype or w["W_dec"].dtype)
    except ValueError as err:
        raise SAEFormatError(str(err)) from err
    return _fill(
        sae, {"W_enc": w["encoder.weight"], "b_enc": w["encoder.bias"], "W_dec": w["W_dec"], "b_dec": w["b_dec"]}
    )


def _saelens_version(cfg: dict) -> tuple[int, ...]:
    v = cfg.get("sae_lens_version") or (cfg.get("metadata") or {}).get("sae_lens_version") or "0"
    return tuple(int(p) for p in re.findall(r"\d+", str(v))[:1]) or (0,)


def saelens_architecture(cfg: dict) -> tuple[str, int | None]:
    """(architecture, k) as SAELens 6 reads the cfg: before 6.0 the architecture defaulted to
    "standard" and a TopK SAE was a standard one with `activation_fn_str: topk`."""
    arch = cfg.get("architecture")
    k = cfg.get("k") or (cfg.get("activation_fn_kwargs") or {}).get("k")
    if _saelens_version(cfg) < (6,):
        arch = arch or "standard"
        fn = cfg.get("activation_fn_str", cfg.get("activation_fn"))
        if fn == "topk" and (cfg.get("activation_fn_kwargs") or {}).get("k") is not None:
            return "topk", int(cfg["activation_fn_kwargs"]["k"])
        if arch == "standard" and fn not in (None, "relu"):
            raise SAEFormatError(f"SAELens standard SAE with activation {fn!r}: not supported (relu, topk)")
    return arch or "standard", (int(k) if k is not None else None)


def read_saelens(e: Entry, dtype) -> SparseAutoencoder:
    cfg = e.cfg
    arch, k = saelens_architecture(cfg)
    # the architecture is checked before any weight is looked up: gated and matching-pursuit files
    # have no b_enc / W_enc, and a KeyError would not say what they are
    if arch in REFUSED_SAELENS:
        raise SAEFormatError(f"SAELens architecture {arch!r}: {REFUSED_SAELENS[arch]} is not supported")
    if arch not in ("topk", "standard", "jumprelu", "gated", "matching_pursuit"):
        raise SAEFormatError(
            f"unknown SAELens architecture {arch!r} (supported: topk, standard, jumprelu, gated, matching_pursuit)"
        )
    norm = cfg.get("normalize_activations", "none")
    if norm is True:
        norm = "expected_average_only_in"
    if norm not in ("none", None, False):
        raise SAEFormatError(
            f"SAELens {arch} SAE with normalize_activations={norm!r}: not supported (its inputs "
            "are rescaled by statistics the reconstruction depends on; fold them into the weights first)"
        )
    if cfg.get("reshape_activations", "none") not in ("none", None) or str(e.hookpoint).endswith("hook_z"):
        raise SAEFormatError(f"SAELens {arch} SAE on attention heads (hook_z reshaping): not supported")
    w = _read_weights(e.folder / SAELENS_WEIGHTS)
    if "scaling_factor" in w:
        if not torch.allclose(w["scaling_factor"], torch.ones_like(w["scaling_factor"])):
            raise SAEFormatError("SAELens SAE with a fine-tuning scaling factor: not supported")
        del w["scaling_factor"]
    if arch == "matching_pursuit":
        _need(w, ("W_dec", "b_dec"), "SAELens matching_pursuit")
        n, d = _dims(cfg, w["W_dec"], "d_sae")
        mp = MatchingPursuitSAE(
            d,
            n,
            hookpoint=e.hookpoint,
            apply_b_dec_to_input=bool(cfg.get("apply_b_dec_to_input", True)),
            residual_threshold=cfg.get("residual_threshold", 1e-2),
            max_iterations=cfg.get("max_iterations"),
            stop_on_duplicate_support=cfg.get("stop_on_duplicate_support", True),
            dtype=dtype or w["W_dec"].dtype,
        )
        return _fill(mp, {"W_enc": w["W_dec"], "W_dec": w["W_dec"], "b_dec": w["b_dec"]})
    if arch == "gated":
        _need(w, ("W_enc", "b_gate", "r_mag", "b_mag", "W_dec", "b_dec"), "SAELens gated")
    else:
        _need(w, ("W_enc", "b_enc", "W_dec", "b_dec"), f"SAELens {arch}")
    n, d = _dims(cfg, w["W_dec"], "d_sae")
    W_enc = w["W_enc"]
    if W_enc.ndim != 2 or tuple(W_enc.shape) != (d, n):
        raise SAEFormatError(f"inconsistent SAE shapes: W_enc {tuple(W_enc.shape)}, W_dec {tuple(w['W_dec'].shape)}")
    common: dict[str, Any] = dict(
        hookpoint=e.hookpoint,
        apply_b_dec_to_input=bool(cfg.get("apply_b_dec_to_input", True)),
        dtype=dtype or w["W_dec"].dtype,
    )
    W_enc, W_dec = W_enc.T, w["W_dec"]
    if arch == "topk":
        if k is None:
            raise SAEFormatError("SAELens topk cfg.json has no k")
        b_enc = w["b_enc"]
        if cfg.get("rescale_acts_by_decoder_norm"):
            # SAELens scales the pre-activations by each latent's decoder norm before TopK and divides
            # the codes by it before decoding; folded as SAELens folds it, the decoder is unit-norm
            # and the codes are SAELens's own
            norms = W_dec.norm(dim=-1).clamp(min=1e-8)
            W_enc, b_enc, W_dec = W_enc * norms[:, None], b_enc * norms, W_dec / norms[:, None]
        try:
            sae = TopKSAE(d, n, k, **common)
        except ValueError as err:
            raise SAEFormatError(str(err)) from err
        return _fill(sae, {"W_enc": W_enc, "b_enc": b_enc, "W_dec": W_dec, "b_dec": w["b_dec"]})
    if arch == "standard":
        return _fill(
            ReLUSAE(d, n, **common), {"W_enc": W_enc, "b_enc": w["b_enc"], "W_dec": W_dec, "b_dec": w["b_dec"]}
        )
    if arch == "jumprelu":
        if "threshold" in w:
            threshold = w["threshold"]
        elif "log_threshold" in w:  # checkpoints of SAELens before the threshold was stored directly
            threshold = w["log_threshold"].exp()
        else:
            raise SAEFormatError(f"SAELens jumprelu file lacks ['threshold'] (it holds {sorted(w)})")
        return _fill(
            JumpReLUSAE(d, n, **common),
            {"W_enc": W_enc, "b_enc": w["b_enc"], "threshold": threshold, "W_dec": W_dec, "b_dec": w["b_dec"]},
        )
    return _fill(
        GatedSAE(d, n, **common),
        {
            "W_enc": W_enc,
            "b_gate": w["b_gate"],
            "r_mag": w["r_mag"],
            "b_mag": w["b_mag"],
            "W_dec": W_dec,
            "b_dec": w["b_dec"],
        },
    )


def read_gemmascope(e: Entry, dtype) -> SparseAutoencoder:
    cfg = e.cfg
    if cfg.get("architecture", "jump_relu") != "jump_relu":
        raise SAEFormatError(f"Gemma Scope architecture {cfg['architecture']!r} is not supported (jump_relu)")
    out = cfg.get("hf_hook_point_out")
    if cfg.get("affine_connection") or (out and out != cfg.get("hf_hook_point_in", out)):
        raise SAEFormatError("Gemma Scope transcoder (reads one hookpoint, predicts another): not supported")
    raw = _read_weights(e.folder / GEMMASCOPE_WEIGHTS)
    w = {k.lower(): v for k, v in raw.items()}
    _need(w, ("w_enc", "w_dec", "b_enc", "b_dec", "threshold"), "Gemma Scope")
    if "affine_skip_connection" in w:
        raise SAEFormatError("Gemma Scope transcoder with a skip connection: not supported")
    n, d = _dims({}, w["w_dec"], "")
    if tuple(w["w_enc"].shape) != (d, n):
        raise SAEFormatError(
            f"inconsistent SAE shapes: w_enc {tuple(w['w_enc'].shape)}, w_dec {tuple(w['w_dec'].shape)}"
        )
    sae = JumpReLUSAE(d, n, hookpoint=e.hookpoint, apply_b_dec_to_input=False, dtype=dtype or w["w_dec"].dtype)
    return _fill(
        sae,
        {
            "W_enc": w["w_enc"].T,
            "b_enc": w["b_enc"],
            "threshold": w["threshold"],
            "W_dec": w["w_dec"],
            "b_dec": w["b_dec"],
        },
    )


READERS = {"sparsify": read_sparsify, "saelens": read_saelens, "gemmascope": read_gemmascope}


class SAEFolder:
    """The model class the zoo records for its SAE organism: `backend.zoo.load` reads a folder with
    `model_class.from_pretrained(folder)`, and an SAE folder of any layout here reads with `load`."""

    @staticmethod
    def from_pretrained(path, **kwargs) -> SparseAutoencoder:
        return load(path, **{k: v for k, v in kwargs.items() if k in ("hookpoint", "device", "dtype")})


def load(
    path: str | os.PathLike,
    *,
    hookpoint: str | None = None,
    device: str | torch.device = "cpu",
    dtype: torch.dtype | None = None,
) -> SparseAutoencoder:
    """The SAE in a local folder (or, for a folder of several, the one for `hookpoint`), in eval mode
    on `device`. Its `cfg.hookpoint` is the name the caller gave when it names the recorded one (or
    nothing is recorded), else the recorded one spelled as the model names it (`model.layers.N` for
    sparsify's `layers.N` and TransformerLens's `blocks.N.hook_resid_post`)."""
    entry = resolve(Path(path), hookpoint)
    if entry.error:
        raise SAEFormatError(entry.error)
    sae = READERS[entry.layout](entry, dtype)
    recorded = sae.cfg.hookpoint
    # the caller's spelling is the one its model knows; a sub-folder path named instead is not a hookpoint
    if hookpoint and (not recorded or canonical_hookpoint(recorded) == canonical_hookpoint(hookpoint)):
        sae.cfg.hookpoint = hookpoint
    elif recorded:
        sae.cfg.hookpoint = model_hookpoint(recorded)  # sparsify's trainer names a Llama's layer `layers.N`
    sae.cfg.extra = {
        "layout": entry.layout,
        "path": str(entry.folder),
        "sae_hookpoint": recorded,
        **{k: v for k, v in entry.cfg.items() if isinstance(v, (str, int, float, bool))},
    }
    return sae.to(device).eval()
