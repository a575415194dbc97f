"""A TopK sparse autoencoder, and reading/writing it in the two published on-disk layouts.

    z = TopK_k( ReLU( W_enc (x − b_dec) + b_enc ) )        encode: [..., d_in] → [..., n_latents]
    x̂ = z W_dec + b_dec     (rows of W_dec unit-norm)     decode: [..., n_latents] → [..., d_in]
    loss = FVU = ‖x − x̂‖² / ‖x − mean(x)‖²   (+ AuxK on dead latents while training)

Layouts (both `cfg.json` beside a safetensors file):
- EleutherAI sparsify (the paper's lmms-lab checkpoints): `sae.safetensors` with `encoder.weight`
  [n, d], `encoder.bias` [n], `W_dec` [n, d], `b_dec` [d]; cfg has `d_in`, `num_latents` (or
  `expansion_factor`), `k`. A hub repo holds one folder per hookpoint (`model.layers.24/`).
- SAELens: `sae_weights.safetensors` with `W_enc` [d, n], `b_enc` [n], `W_dec` [n, d], `b_dec` [d];
  cfg has `d_in`, `d_sae`, `architecture` and `k` (or `activation_fn_kwargs.k`).
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn

SPARSIFY_WEIGHTS = "sae.safetensors"
SAELENS_WEIGHTS = "sae_weights.safetensors"


@dataclass
class SAEConfig:
    d_in: int
    n_latents: int
    k: int
    hookpoint: str = ""
    normalize_decoder: bool = True
    extra: dict[str, Any] = field(default_factory=dict)


class TopKSAE(nn.Module):
    def __init__(self, d_in: int, n_latents: int, k: int, *, hookpoint: str = "", dtype=torch.float32):
        super().__init__()
        if int(d_in) <= 0:
            raise ValueError(f"d_in must be positive, got {d_in}")
        if not (0 < k <= n_latents):
            raise ValueError(f"k must lie in 1..n_latents, got k={k}, n_latents={n_latents}")
        self.cfg = SAEConfig(d_in=d_in, n_latents=n_latents, k=k, hookpoint=hookpoint)
        self.W_enc = nn.Parameter(torch.empty(n_latents, d_in, dtype=dtype))  # sparsify's encoder.weight
        self.b_enc = nn.Parameter(torch.zeros(n_latents, dtype=dtype))
        self.W_dec = nn.Parameter(torch.empty(n_latents, d_in, dtype=dtype))
        self.b_dec = nn.Parameter(torch.zeros(d_in, dtype=dtype))
        nn.init.kaiming_uniform_(self.W_enc, a=5 ** 0.5)
        with torch.no_grad():
            self.W_dec.copy_(self.W_enc)
            self.set_decoder_norm_to_unit_norm()
        # Tokens since each latent last fired (training bookkeeping; not saved).
        self.register_buffer("steps_since_fired", torch.zeros(n_latents, dtype=torch.long), persistent=False)

    # ------------------------------------------------------------------ math
    @property
    def d_in(self) -> int:
        return self.cfg.d_in

    @property
    def n_latents(self) -> int:
        return self.cfg.n_latents

    @property
    def k(self) -> int:
        return self.cfg.k

    def pre_acts(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.d_in:
            raise ValueError(f"this SAE reads vectors of size {self.d_in}, not {x.shape[-1]}")
        x = x.to(self.W_enc.dtype)
        return torch.relu((x - self.b_dec) @ self.W_enc.T + self.b_enc)

    def select_topk(self, pre: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return pre.topk(self.k, dim=-1, sorted=False)

    def encode_sparse(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(values, indices), each [..., k]."""
        return self.select_topk(self.pre_acts(x))

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Dense codes [..., n_latents] with at most k non-zeros per row."""
        vals, idx = self.encode_sparse(x)
        return torch.zeros(*x.shape[:-1], self.n_latents, dtype=vals.dtype, device=vals.device).scatter_(-1, idx, vals)

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        return z.to(self.W_dec.dtype) @ self.W_dec + self.b_dec

    def decode_sparse(self, vals: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        # x̂ = Σ_j v_j W_dec[i_j] + b_dec, without materialising the dense code
        return (vals.unsqueeze(-1) * self.W_dec[idx]).sum(-2) + self.b_dec

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        vals, idx = self.encode_sparse(x)
        return self.decode_sparse(vals, idx)

    @torch.no_grad()
    def set_decoder_norm_to_unit_norm(self) -> None:
        self.W_dec.div_(self.W_dec.norm(dim=1, keepdim=True).clamp_min(torch.finfo(self.W_dec.dtype).eps))

    @torch.no_grad()
    def remove_gradient_parallel_to_decoder_directions(self) -> None:
        if self.W_dec.grad is None:
            return
        parallel = (self.W_dec.grad * self.W_dec).sum(-1, keepdim=True)
        self.W_dec.grad.sub_(parallel * self.W_dec)

    # ------------------------------------------------------------------ training step
    def losses(self, x: torch.Tensor, *, dead_after: int | None = None, auxk_alpha: float = 1 / 32,
               k_aux: int | None = None) -> dict[str, torch.Tensor]:
        """FVU of the reconstruction, and AuxK: the residual reconstructed from the top latents among
        the dead ones (those that have not fired for `dead_after` tokens), as in Gao et al."""
        x = x.reshape(-1, self.d_in).to(self.W_enc.dtype)
        pre = self.pre_acts(x)
        vals, idx = self.select_topk(pre)
        recon = self.decode_sparse(vals, idx)
        err = x - recon
        total_var = (x - x.mean(0)).pow(2).sum().clamp_min(1e-12)
        fvu = err.pow(2).sum() / total_var
        out = {"fvu": fvu, "loss": fvu}
        with torch.no_grad():
            fired = torch.zeros(self.n_latents, dtype=torch.bool, device=x.device)
            fired[idx[vals > 0].flatten()] = True
            self.steps_since_fired += x.shape[0]
            self.steps_since_fired[fired] = 0
        if dead_after is not None:
            dead = self.steps_since_fired >= dead_after
            n_dead = int(dead.sum())
            out["dead_fraction"] = torch.tensor(n_dead / self.n_latents)
            if n_dead and auxk_alpha > 0:
                ka = min(k_aux or max(1, self.d_in // 2), n_dead)
                dead_pre = pre.masked_fill(~dead, -torch.inf)
                avals, aidx = dead_pre.topk(ka, dim=-1, sorted=False)
                avals = torch.relu(avals).nan_to_num(0.0, posinf=0.0, neginf=0.0)
                e_hat = (avals.unsqueeze(-1) * self.W_dec[aidx]).sum(-2)
                e = err.detach()
                auxk = (e_hat - e).pow(2).sum() / (e - e.mean(0)).pow(2).sum().clamp_min(1e-12)
                out["auxk"] = auxk
                out["loss"] = fvu + auxk_alpha * auxk
        return out

    @classmethod
    def from_pretrained(cls, path, **kwargs) -> "TopKSAE":
        """`load_sae` under the name the zoo's loader calls (safetensors only in any case)."""
        kwargs.pop("use_safetensors", None)
        return load_sae(path, **{k: v for k, v in kwargs.items() if k in ("hookpoint", "device", "dtype")})

    # ------------------------------------------------------------------ saving
    def save(self, path: str | os.PathLike, layout: str = "sparsify", **cfg_extra) -> Path:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        W_enc, b_enc, W_dec, b_dec = (t.detach().contiguous().cpu() for t in
                                      (self.W_enc, self.b_enc, self.W_dec, self.b_dec))
        if layout == "sparsify":
            cfg = {"d_in": self.d_in, "num_latents": self.n_latents, "k": self.k,
                   "expansion_factor": max(1, self.n_latents // self.d_in), "normalize_decoder": True,
                   "multi_topk": False, "skip_connection": False, "hookpoint": self.cfg.hookpoint, **cfg_extra}
            save_file({"encoder.weight": W_enc, "encoder.bias": b_enc, "W_dec": W_dec, "b_dec": b_dec},
                      str(path / SPARSIFY_WEIGHTS))
        elif layout == "saelens":
            cfg = {"d_in": self.d_in, "d_sae": self.n_latents, "architecture": "topk", "k": self.k,
                   "activation_fn_kwargs": {"k": self.k}, "apply_b_dec_to_input": True,
                   "normalize_activations": "none", "hook_name": self.cfg.hookpoint, "dtype": "float32",
                   **cfg_extra}
            save_file({"W_enc": W_enc.T.contiguous(), "b_enc": b_enc, "W_dec": W_dec, "b_dec": b_dec},
                      str(path / SAELENS_WEIGHTS))
        else:
            raise ValueError(f"layout must be 'sparsify' or 'saelens', not {layout!r}")
        (path / "cfg.json").write_text(json.dumps(cfg, indent=2) + "\n")
        return path


class SAEFormatError(ValueError):
    """A folder that is not an SAE in either supported layout."""


def detect_layout(path: Path) -> str:
    if (path / SPARSIFY_WEIGHTS).exists():
        return "sparsify"
    if (path / SAELENS_WEIGHTS).exists():
        return "saelens"
    raise SAEFormatError(f"{path}: no {SPARSIFY_WEIGHTS} (sparsify) or {SAELENS_WEIGHTS} (SAELens) found")


def _resolve_folder(path: Path, hookpoint: str | None) -> Path:
    if hookpoint and (path / hookpoint).is_dir():
        return path / hookpoint
    if (path / "cfg.json").exists():
        return path
    subs = [p for p in sorted(path.iterdir()) if p.is_dir() and (p / "cfg.json").exists()] if path.is_dir() else []
    if len(subs) == 1:
        return subs[0]
    if subs:
        raise SAEFormatError(f"{path} holds SAEs for several hookpoints {[p.name for p in subs]}: name one")
    raise SAEFormatError(f"{path}: no cfg.json")


def _read_weights(path: Path) -> dict[str, torch.Tensor]:
    try:
        return load_file(str(path))
    except Exception as e:  # safetensors raises its own error type for a corrupt header
        raise SAEFormatError(f"{path.name} is not a readable safetensors file ({e})") from e


def load_sae(path: str | os.PathLike, *, hookpoint: str | None = None, device: str | torch.device = "cpu",
             dtype: torch.dtype | None = None) -> TopKSAE:
    """An SAE from a local folder in the sparsify or SAELens layout (a multi-hookpoint repo folder
    is resolved by `hookpoint`). Weights are read from safetensors only."""
    folder = _resolve_folder(Path(path), hookpoint)
    try:
        cfg = json.loads((folder / "cfg.json").read_text())
    except json.JSONDecodeError as e:
        raise SAEFormatError(f"cfg.json is not valid JSON: {e}") from e
    layout = detect_layout(folder)
    if layout == "sparsify":
        w = _read_weights(folder / SPARSIFY_WEIGHTS)
        W_enc, b_enc, W_dec, b_dec = w["encoder.weight"], w["encoder.bias"], w["W_dec"], w["b_dec"]
        if cfg.get("skip_connection") or cfg.get("transcode"):
            raise SAEFormatError("sparsify SAEs with a skip connection / transcoders are not supported")
        k = int(cfg["k"])
        hp = cfg.get("hookpoint") or (folder.name if folder.name.startswith("model.") else "")
    else:
        w = _read_weights(folder / SAELENS_WEIGHTS)
        W_enc, b_enc, W_dec, b_dec = w["W_enc"].T, w["b_enc"], w["W_dec"], w["b_dec"]
        arch = cfg.get("architecture", "topk")
        if arch != "topk":
            raise SAEFormatError(f"SAELens architecture {arch!r} is not a TopK SAE")
        if cfg.get("normalize_activations", "none") not in ("none", None):
            raise SAEFormatError("SAELens activation normalisation is not supported")
        if cfg.get("apply_b_dec_to_input") is False:
            raise SAEFormatError("SAELens apply_b_dec_to_input=False is not supported")
        k = int(cfg.get("k") or (cfg.get("activation_fn_kwargs") or {}).get("k"))
        hp = cfg.get("hook_name", "")
    n, d = W_dec.shape
    if W_enc.shape != (n, d) or b_enc.shape != (n,) or b_dec.shape != (d,):
        raise SAEFormatError(f"inconsistent SAE shapes: W_enc {tuple(W_enc.shape)}, W_dec {tuple(W_dec.shape)}")
    if int(cfg.get("d_in", d)) != d:
        raise SAEFormatError(f"cfg d_in={cfg.get('d_in')} but weights have {d}")
    sae = TopKSAE(d, n, k, hookpoint=hp, dtype=dtype or W_dec.dtype)
    with torch.no_grad():
        for p, t in ((sae.W_enc, W_enc), (sae.b_enc, b_enc), (sae.W_dec, W_dec), (sae.b_dec, b_dec)):
            p.copy_(t.to(p.dtype))
    sae.cfg.extra = {"layout": layout, "path": str(folder), **{k_: v for k_, v in cfg.items()
                                                               if isinstance(v, (str, int, float, bool))}}
    return sae.to(device).eval()


def config_dict(sae: TopKSAE) -> dict:
    return asdict(sae.cfg)
