"""Sparse autoencoders: TopK (and sparsify's GroupMax), ReLU, JumpReLU, gated and matching pursuit,
one interface.

    x' = x − b_dec  (unless the SAE was trained without it: apply_b_dec_to_input=False)
    TopK      z = TopK_k( ReLU( W_enc x' + b_enc ) )
    GroupMax  z = the largest ReLU( W_enc x' + b_enc ) of each of k equal contiguous latent groups
    ReLU      z = ReLU( W_enc x' + b_enc )                               (SAELens "standard")
    JumpReLU  z = ReLU(p) · [p > θ],  p = W_enc x' + b_enc               (Gemma Scope, BatchTopK)
    gated     z = [W_enc x' + b_gate > 0] · ReLU( (W_enc ⊙ e^{r_mag}) x' + b_mag )
    matching pursuit: greedy steps over the decoder rows (no encoder), see MatchingPursuitSAE
    x̂ = z W_dec + b_dec

Every class offers `encode` (dense codes [..., n_latents]), `encode_sparse` ((values, indices) of
the non-zero codes, padded with zeros to one width per batch: k for TopK/GroupMax, the batch's
largest L0 otherwise), `decode`, `decode_sparse` and `forward` (the reconstruction), so the Features
tab's index, analysis and steering take any of them. Reading files in the sparsify, SAELens and
Gemma Scope layouts lives in `formats.py` (`formats.load`), which builds on this module.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from torch import nn

from .sparse_ops import grouped_topk, weighted_rows

SPARSIFY_WEIGHTS = "sae.safetensors"
SAELENS_WEIGHTS = "sae_weights.safetensors"


class SAEFormatError(ValueError):
    """A folder that is not an SAE the workbench can load, or one of an architecture it refuses."""


@dataclass
class SAEConfig:
    d_in: int
    n_latents: int
    k: int | None
    hookpoint: str = ""
    normalize_decoder: bool = True
    architecture: str = "topk"
    apply_b_dec_to_input: bool = True
    extra: dict[str, Any] = field(default_factory=dict)


class SparseAutoencoder(nn.Module):
    """What every architecture shares: the decoder, the input centring, sparse codes from dense ones."""

    architecture = "?"

    def __init__(
        self,
        d_in: int,
        n_latents: int,
        *,
        k: int | None = None,
        hookpoint: str = "",
        apply_b_dec_to_input: bool = True,
        dtype=torch.float32,
    ):
        super().__init__()
        if int(d_in) <= 0 or int(n_latents) <= 0:
            raise ValueError(f"d_in and n_latents must be positive, got d_in={d_in}, n_latents={n_latents}")
        self.cfg = SAEConfig(
            d_in=d_in,
            n_latents=n_latents,
            k=k,
            hookpoint=hookpoint,
            architecture=self.architecture,
            apply_b_dec_to_input=apply_b_dec_to_input,
        )
        self.W_enc = nn.Parameter(torch.empty(n_latents, d_in, dtype=dtype))  # [n, d], sparsify's encoder.weight
        self.W_dec = nn.Parameter(torch.empty(n_latents, d_in, dtype=dtype))
        self.b_dec = nn.Parameter(torch.zeros(d_in, dtype=dtype))
        nn.init.kaiming_uniform_(self.W_enc, a=5**0.5)
        with torch.no_grad():
            self.W_dec.copy_(self.W_enc)
            self.set_decoder_norm_to_unit_norm()

    @property
    def d_in(self) -> int:
        return self.cfg.d_in

    @property
    def n_latents(self) -> int:
        return self.cfg.n_latents

    @property
    def k(self) -> int | None:
        """Latents per token for TopK/GroupMax; None where sparsity is learned (ReLU, JumpReLU, gated)."""
        return self.cfg.k

    def describe(self) -> str:
        return f"{self.architecture}, k = {self.k}" if self.k else self.architecture

    def sae_in(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.d_in:
            raise ValueError(f"this SAE reads vectors of size {self.d_in}, not {x.shape[-1]}")
        x = x.to(self.W_enc.dtype)
        return x - self.b_dec if self.cfg.apply_b_dec_to_input else x

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Dense codes [..., n_latents]."""
        raise NotImplementedError

    def encode_sparse(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(values, indices) [..., w] holding every non-zero code, w = the batch's largest L0 (≥ 1);
        the padding has value 0, which the index and steering treat as not firing."""
        z = self.encode(x)
        w = max(1, int((z != 0).sum(-1).max())) if z.numel() else 1
        return z.topk(min(w, self.n_latents), dim=-1, sorted=False)

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        return z.to(self.W_dec.dtype) @ self.W_dec + self.b_dec

    def decode_sparse(self, vals: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        # x̂ = Σ_j v_j W_dec[i_j] + b_dec, without materialising the dense code
        return weighted_rows(self.W_dec, vals, idx) + self.b_dec

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        vals, idx = self.encode_sparse(x)
        return self.decode_sparse(vals, idx)

    @torch.no_grad()
    def set_decoder_norm_to_unit_norm(self) -> None:
        self.W_dec.div_(self.W_dec.norm(dim=1, keepdim=True).clamp_min(torch.finfo(self.W_dec.dtype).eps))

    # ------------------------------------------------------------------ saving
    def _saelens_tensors(self) -> dict[str, torch.Tensor]:
        """The SAELens state dict of this architecture, besides W_dec and b_dec."""
        raise NotImplementedError

    def _saelens_cfg(self) -> dict:
        return {}

    def save(self, path: str | os.PathLike, layout: str = "saelens", **cfg_extra) -> Path:
        """SAELens layout (cfg.json + sae_weights.safetensors, SAELens 6 keys; what its
        `SAE.load_from_disk` reads). TopK SAEs also write the sparsify layout."""
        if layout != "saelens":
            raise ValueError(f"a {self.architecture} SAE is saved in the 'saelens' layout, not {layout!r}")
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        tensors = {**self._saelens_tensors(), "W_dec": self.W_dec, "b_dec": self.b_dec}
        save_file({n: t.detach().contiguous().cpu() for n, t in tensors.items()}, str(path / SAELENS_WEIGHTS))
        cfg = {
            "d_in": self.d_in,
            "d_sae": self.n_latents,
            "architecture": SAELENS_NAMES[self.architecture],
            "apply_b_dec_to_input": self.cfg.apply_b_dec_to_input,
            "normalize_activations": "none",
            "reshape_activations": "none",
            "dtype": str(self.W_dec.dtype).removeprefix("torch."),
            "hook_name": self.cfg.hookpoint,
            "metadata": {"hook_name": self.cfg.hookpoint},
            **self._saelens_cfg(),
            **cfg_extra,
        }
        (path / "cfg.json").write_text(json.dumps(cfg, indent=2) + "\n")
        return path


class TopKSAE(SparseAutoencoder):
    """TopK (Gao et al.; sparsify's default) or, with activation="groupmax", sparsify's GroupMax."""

    steps_since_fired: torch.Tensor  # a buffer (register_buffer), which torch's types cannot see

    def __init__(
        self,
        d_in: int,
        n_latents: int,
        k: int,
        *,
        hookpoint: str = "",
        dtype=torch.float32,
        activation: str = "topk",
        apply_b_dec_to_input: bool = True,
    ):
        if not (0 < k <= n_latents):
            raise ValueError(f"k must lie in 1..n_latents, got k={k}, n_latents={n_latents}")
        if activation not in ("topk", "groupmax"):
            raise ValueError(f"activation must be 'topk' or 'groupmax', not {activation!r}")
        if activation == "groupmax" and n_latents % k:
            raise ValueError(f"GroupMax needs n_latents divisible by k (its group count), got {n_latents} and {k}")
        self.architecture = activation
        super().__init__(
            d_in, n_latents, k=k, hookpoint=hookpoint, apply_b_dec_to_input=apply_b_dec_to_input, dtype=dtype
        )
        self.b_enc = nn.Parameter(torch.zeros(n_latents, dtype=dtype))
        # Tokens since each latent last fired (training bookkeeping; not saved).
        self.register_buffer("steps_since_fired", torch.zeros(n_latents, dtype=torch.long), persistent=False)

    @property
    def k(self) -> int:
        k = self.cfg.k
        assert k is not None  # given to __init__, which checks it
        return k

    @property
    def activation(self) -> str:
        return self.architecture

    def encoder_out(self, x: torch.Tensor) -> torch.Tensor:
        """The encoder's affine map, before any activation (the bias added in place: at the paper's
        SAE the output is 576 × 131k floats an image, and a second buffer of it costs a pass)."""
        pre = self.sae_in(x) @ self.W_enc.T
        pre += self.b_enc
        return pre

    def pre_acts(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.encoder_out(x))

    def select_topk(self, pre: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.architecture == "groupmax":
            vals, idx = pre.unflatten(-1, (self.k, -1)).max(dim=-1)
            # max gives the position inside each group; offset it to the latent's own index
            return vals, idx + torch.arange(self.k, device=idx.device) * (self.n_latents // self.k)
        return pre.topk(self.k, dim=-1, sorted=False)

    def encode_sparse(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(values, indices), each [..., k]."""
        if self.architecture == "groupmax":
            return self.select_topk(self.pre_acts(x))
        # The ReLU after the top-k: it keeps the order, so the values are those of ReLU-then-top-k
        # and the indices differ only where a value is 0 (fewer than k positive). It then passes
        # over k values instead of n_latents (a pass over 576 × 131k floats per image at the
        # paper's SAE).
        vals, idx = grouped_topk(self.encoder_out(x), self.k)
        return vals.relu_(), idx

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Dense codes [..., n_latents] with at most k non-zeros per row."""
        vals, idx = self.encode_sparse(x)
        return torch.zeros(*x.shape[:-1], self.n_latents, dtype=vals.dtype, device=vals.device).scatter_(-1, idx, vals)

    @torch.no_grad()
    def remove_gradient_parallel_to_decoder_directions(self) -> None:
        if self.W_dec.grad is None:
            return
        parallel = (self.W_dec.grad * self.W_dec).sum(-1, keepdim=True)
        self.W_dec.grad.sub_(parallel * self.W_dec)

    # ------------------------------------------------------------------ training step
    def losses(
        self, x: torch.Tensor, *, dead_after: int | None = None, auxk_alpha: float = 1 / 32, k_aux: int | None = None
    ) -> dict[str, torch.Tensor]:
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

    # ------------------------------------------------------------------ saving
    def _saelens_tensors(self) -> dict[str, torch.Tensor]:
        if self.architecture != "topk":
            raise SAEFormatError("SAELens has no GroupMax SAE: save it in the sparsify layout")
        return {"W_enc": self.W_enc.T, "b_enc": self.b_enc}

    def _saelens_cfg(self) -> dict:
        return {"k": self.k, "activation_fn_kwargs": {"k": self.k}}

    def save(self, path: str | os.PathLike, layout: str = "sparsify", **cfg_extra) -> Path:
        if layout != "sparsify":
            return super().save(path, layout, **cfg_extra)
        if not self.cfg.apply_b_dec_to_input:
            raise SAEFormatError("the sparsify layout always subtracts b_dec: save this SAE in the SAELens layout")
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        cfg = {
            "d_in": self.d_in,
            "num_latents": self.n_latents,
            "k": self.k,
            "activation": self.architecture,
            "expansion_factor": max(1, self.n_latents // self.d_in),
            "normalize_decoder": True,
            "multi_topk": False,
            "skip_connection": False,
            "hookpoint": self.cfg.hookpoint,
            **cfg_extra,
        }
        save_file(
            {
                n: t.detach().contiguous().cpu()
                for n, t in (
                    ("encoder.weight", self.W_enc),
                    ("encoder.bias", self.b_enc),
                    ("W_dec", self.W_dec),
                    ("b_dec", self.b_dec),
                )
            },
            str(path / SPARSIFY_WEIGHTS),
        )
        (path / "cfg.json").write_text(json.dumps(cfg, indent=2) + "\n")
        return path


class ReLUSAE(SparseAutoencoder):
    """A ReLU SAE trained with an L1 penalty (SAELens "standard")."""

    architecture = "relu"

    def __init__(
        self, d_in: int, n_latents: int, *, hookpoint: str = "", apply_b_dec_to_input: bool = True, dtype=torch.float32
    ):
        super().__init__(d_in, n_latents, hookpoint=hookpoint, apply_b_dec_to_input=apply_b_dec_to_input, dtype=dtype)
        self.b_enc = nn.Parameter(torch.zeros(n_latents, dtype=dtype))

    def hidden_pre(self, x: torch.Tensor) -> torch.Tensor:
        return self.sae_in(x) @ self.W_enc.T + self.b_enc

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.hidden_pre(x))

    def _saelens_tensors(self) -> dict[str, torch.Tensor]:
        return {"W_enc": self.W_enc.T, "b_enc": self.b_enc}


class JumpReLUSAE(ReLUSAE):
    """JumpReLU: a latent fires only above its own threshold (Gemma Scope; SAELens saves BatchTopK
    SAEs this way, with one shared threshold)."""

    architecture = "jumprelu"

    def __init__(
        self, d_in: int, n_latents: int, *, hookpoint: str = "", apply_b_dec_to_input: bool = True, dtype=torch.float32
    ):
        super().__init__(d_in, n_latents, hookpoint=hookpoint, apply_b_dec_to_input=apply_b_dec_to_input, dtype=dtype)
        self.threshold = nn.Parameter(torch.zeros(n_latents, dtype=dtype))

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        pre = self.hidden_pre(x)
        return torch.relu(pre) * (pre > self.threshold).to(pre.dtype)

    def _saelens_tensors(self) -> dict[str, torch.Tensor]:
        return {"W_enc": self.W_enc.T, "b_enc": self.b_enc, "threshold": self.threshold}


class GatedSAE(SparseAutoencoder):
    """Gated SAE (Rajamanoharan et al.): a gate path decides which latents fire, a magnitude path
    sharing W_enc (rescaled per latent by e^{r_mag}) says how much."""

    architecture = "gated"

    def __init__(
        self, d_in: int, n_latents: int, *, hookpoint: str = "", apply_b_dec_to_input: bool = True, dtype=torch.float32
    ):
        super().__init__(d_in, n_latents, hookpoint=hookpoint, apply_b_dec_to_input=apply_b_dec_to_input, dtype=dtype)
        self.b_gate = nn.Parameter(torch.zeros(n_latents, dtype=dtype))
        self.r_mag = nn.Parameter(torch.zeros(n_latents, dtype=dtype))
        self.b_mag = nn.Parameter(torch.zeros(n_latents, dtype=dtype))

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        h = self.sae_in(x)
        gate = (h @ self.W_enc.T + self.b_gate) > 0
        mag = torch.relu(h @ (self.W_enc * self.r_mag.exp()[:, None]).T + self.b_mag)
        return mag * gate.to(mag.dtype)

    def _saelens_tensors(self) -> dict[str, torch.Tensor]:
        return {"W_enc": self.W_enc.T, "b_gate": self.b_gate, "r_mag": self.r_mag, "b_mag": self.b_mag}


class MatchingPursuitSAE(SparseAutoencoder):
    """Matching pursuit (SAELens "matching_pursuit"): no encoder; each step picks the decoder row
    best aligned with the residual, codes it by the (positive) projection and subtracts it, until the
    support stops changing, the residual is small or `max_iterations` (default d_in) steps are done.
    W_enc holds a copy of W_dec for the code that reads its device or shape."""

    architecture = "matching_pursuit"

    def __init__(
        self,
        d_in: int,
        n_latents: int,
        *,
        hookpoint: str = "",
        apply_b_dec_to_input: bool = True,
        residual_threshold: float = 1e-2,
        max_iterations: int | None = None,
        stop_on_duplicate_support: bool = True,
        dtype=torch.float32,
    ):
        super().__init__(d_in, n_latents, hookpoint=hookpoint, apply_b_dec_to_input=apply_b_dec_to_input, dtype=dtype)
        self.residual_threshold = float(residual_threshold)
        self.max_iterations = d_in if max_iterations is None else int(max_iterations)
        self.stop_on_duplicate_support = bool(stop_on_duplicate_support)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        r = self.sae_in(x).reshape(-1, self.d_in)
        rows = torch.arange(r.shape[0], device=r.device)
        z = torch.zeros(r.shape[0], self.n_latents, dtype=r.dtype, device=r.device)
        support = torch.zeros_like(z, dtype=torch.bool)
        done = torch.zeros(r.shape[0], dtype=torch.bool, device=r.device)
        for _ in range(self.max_iterations):
            best = (r @ self.W_dec.T).relu().max(dim=-1).indices
            atom = self.W_dec[best]
            step = (r * atom).sum(-1).relu() * (~done).to(r.dtype)  # finished rows stay as they are
            z[rows, best] += step
            r = r - step[:, None] * atom
            if self.stop_on_duplicate_support:
                now = z != 0
                done |= (now == support).all(-1)
                support = now
            if self.residual_threshold > 0:
                done |= r.norm(dim=-1) < self.residual_threshold
            if done.all():
                break
        return z.reshape(*x.shape[:-1], self.n_latents)

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        # SAELens adds b_dec back only where it was taken from the input
        out = z.to(self.W_dec.dtype) @ self.W_dec
        return out + self.b_dec if self.cfg.apply_b_dec_to_input else out

    def decode_sparse(self, vals: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        out = weighted_rows(self.W_dec, vals, idx)
        return out + self.b_dec if self.cfg.apply_b_dec_to_input else out

    def _saelens_tensors(self) -> dict[str, torch.Tensor]:
        return {}

    def _saelens_cfg(self) -> dict:
        return {
            "residual_threshold": self.residual_threshold,
            "max_iterations": self.max_iterations,
            "stop_on_duplicate_support": self.stop_on_duplicate_support,
        }


# SAELens's name of each architecture, for saving
SAELENS_NAMES = {
    "topk": "topk",
    "relu": "standard",
    "jumprelu": "jumprelu",
    "gated": "gated",
    "matching_pursuit": "matching_pursuit",
}
