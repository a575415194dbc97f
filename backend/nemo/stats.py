"""NeMo's neuron statistics (μ, σ of every value neuron over ordinary prompts) as mergeable sums and
as a file the service can load instead of computing them at first use.

The partial result of a set of prompts is, per layer, Σa and Σa² in float64 plus the prompt count;
partials add up (in a fixed order, so the result does not depend on how the prompts were split), and
`finish` turns the sums into μ and the sample σ (n − 1, as torch.std) in float32, σ clamped at 1e-8
as `core.neuron_stats` does.

File (`STATS_FILE`, safetensors): `mean/<layer>`, `std/<layer>` (float32), `sum/<layer>`,
`sumsq/<layer>` (float64), `count` (int64 [1]); metadata `model_id`, `n_prompts`, `prompts_sha256`.
The service uses it when WORKBENCH_NEMO_STATS names such a file for the loaded model (or a preset's
`extra["stats_file"]` does); see `service.MemoModel.stats`.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Mapping, Sequence

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from ..core.precompute import texts_digest
from .core import NeuronStats, layer_sizes, value_layers

STATS_FILE = "nemo-stats.safetensors"
STATS_ENV = "WORKBENCH_NEMO_STATS"


def prompts_digest(prompts: Sequence[str]) -> str:
    return texts_digest(prompts)


def partial_sums(acts: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """{layer: [n, C]} activations → Σa, Σa² (float64) and n."""
    out: dict[str, torch.Tensor] = {}
    n = None
    for layer, a in acts.items():
        a = a.double()
        out[f"sum/{layer}"] = a.sum(0)
        out[f"sumsq/{layer}"] = (a * a).sum(0)
        n = a.shape[0]
    out["count"] = torch.tensor([n or 0], dtype=torch.long)
    return out


def finish(sums: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Summed partials → the same tensors plus `mean/<layer>` and `std/<layer>` (float32)."""
    n = int(sums["count"][0])
    if n < 2:
        raise ValueError("neuron statistics need at least two prompts")
    out = dict(sums)
    for key in [k for k in sums if k.startswith("sum/")]:
        layer = key[4:]
        s, ss = sums[key], sums[f"sumsq/{layer}"]
        mean = s / n
        var = ((ss - s * mean) / (n - 1)).clamp_min(0.0)
        out[f"mean/{layer}"] = mean.float()
        out[f"std/{layer}"] = var.sqrt().float().clamp_min(1e-8)
    return out


def to_stats(tensors: Mapping[str, torch.Tensor]) -> NeuronStats:
    layers = [k[5:] for k in tensors if k.startswith("mean/")]
    return NeuronStats(
        {n: tensors[f"mean/{n}"] for n in layers}, {n: tensors[f"std/{n}"] for n in layers}, int(tensors["count"][0])
    )


def save_stats(
    tensors: Mapping[str, torch.Tensor],
    path: Path,
    *,
    model_id: str = "",
    prompts: Sequence[str] | None = None,
    extra: Mapping[str, str] | None = None,
) -> Path:
    path = Path(path)
    meta = {"model_id": model_id, "n_prompts": str(int(tensors["count"][0])), **(extra or {})}
    if prompts is not None:
        meta["prompts_sha256"] = prompts_digest(prompts)
    tmp = path.with_suffix(".tmp")
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(tmp), metadata=meta)
    tmp.replace(path)
    return path


def file_meta(path: Path) -> dict:
    with safe_open(str(path), "pt") as f:
        return dict(f.metadata() or {})


def load_stats(path: Path, unet=None) -> NeuronStats:
    """A stats file → NeuronStats; with `unet`, checked to hold every value layer at its width."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"no neuron statistics file at {path}")
    try:
        t = load_file(str(path))
    except Exception as e:
        raise ValueError(f"{path.name} is not a readable safetensors file ({e})") from None
    if "count" not in t or not any(k.startswith("mean/") for k in t):
        raise ValueError(f"{path.name} holds no neuron statistics (mean/<layer>, std/<layer>, count)")
    stats = to_stats(t)
    if unet is not None:
        want = layer_sizes(unet)
        got = {n: int(v.numel()) for n, v in stats.mean.items()}
        if got != want:
            raise ValueError(
                f"{path.name} was computed for other value layers "
                f"({len(got)} layers, {sum(got.values())} neurons; this model: "
                f"{len(want)} layers, {sum(want.values())} neurons)"
            )
    return stats


def as_tensors(stats: NeuronStats) -> dict[str, torch.Tensor]:
    """NeuronStats → the file's μ, σ and count tensors (`to_stats` reads them back exactly)."""
    out = {f"mean/{k}": v for k, v in stats.mean.items()}
    out.update({f"std/{k}": v for k, v in stats.std.items()})
    out["count"] = torch.tensor([stats.n_prompts], dtype=torch.long)
    return out


def computed_path(model_id: str, prompts: Sequence[str], pipe) -> Path:
    """Where statistics computed at run time are kept: under $HF_HOME/workbench/nemo-stats (a
    Space's persistent storage when it has one), named by the model, the weights they read (the
    value layers and the text encoder's last norm) and the prompts. Under ZeroGPU they are computed
    in a GPU worker: kept here, they reach the main process and every later worker instead of
    dying with the worker that computed them."""
    h = hashlib.sha256(f"{model_id}\n{prompts_digest(prompts)}".encode())
    modules = dict(pipe.unet.named_modules())
    weights = [modules[n].weight for n in value_layers(pipe.unet)]
    norm = getattr(getattr(pipe.text_encoder, "text_model", None), "final_layer_norm", None)
    weights += list(norm.parameters()) if norm is not None else []
    for w in weights:
        h.update(w.detach().float().cpu().contiguous().numpy().tobytes())
    home = os.environ.get("HF_HOME") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "huggingface"
    return Path(home) / "workbench" / "nemo-stats" / f"{h.hexdigest()[:24]}.safetensors"
