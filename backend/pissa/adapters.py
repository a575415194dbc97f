"""Model-level adapters through peft: LoRA, PiSSA (full SVD or fast `pissa_niter_N`), and the
quantized variants QLoRA / LoftQ / QPiSSA with the project's CPU NF4 (fake-quantized base weights).

Every function works on a deep copy of the model it is given (taken under the model's lock): the
shared model is never modified.
"""

from __future__ import annotations

import copy
import tempfile
from pathlib import Path

import torch
from torch import nn

from ..core.rng import seeded
from backend.core.interventions import locked

from .decompose import loftq_cpu, low_rank
from .nf4 import BLOCK_SIZE, nf4_roundtrip

LLAMA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
ADAPTER_METHODS = ("lora", "pissa", "qlora", "loftq", "qpissa")
_SKIP = ("lm_head", "embed", "lora_", "base_layer")


def linear_layers(model: nn.Module) -> dict[str, nn.Linear]:
    """The adaptable nn.Linear layers of a model (output heads and embeddings excluded)."""
    out = {}
    for name, mod in model.named_modules():
        if isinstance(mod, nn.Linear) and name and not any(s in name for s in _SKIP):
            out[name] = mod
    return out


def default_targets(model: nn.Module) -> list[str]:
    names = {n.rsplit(".", 1)[-1] for n in linear_layers(model)}
    llama = [t for t in LLAMA_TARGETS if t in names]
    return llama or sorted(names)


def clone_model(model: nn.Module) -> nn.Module:
    with locked(model):
        return copy.deepcopy(model)


def _config(method: str, rank: int, alpha: float, targets: list[str], init):
    from peft import LoraConfig

    # peft annotates lora_alpha as an int, yet takes any number (its scaling is alpha / r)
    return LoraConfig(
        r=rank,
        lora_alpha=alpha,  # type: ignore[arg-type]
        lora_dropout=0.0,
        target_modules=targets,
        init_lora_weights=init,
    )


def _lora_layers(peft_model):
    from peft.tuners.lora import Linear as LoraLinear

    return {n: m for n, m in peft_model.named_modules() if isinstance(m, LoraLinear)}


@torch.no_grad()
def adapt(
    model: nn.Module,
    method: str = "pissa",
    rank: int = 8,
    alpha: float | None = None,
    targets: list[str] | None = None,
    seed: int = 0,
    iters: int = 1,
    niter: int | None = None,
    block_size: int = BLOCK_SIZE,
):
    """A PeftModel over a copy of `model`.

    method: "lora" (peft default: A Kaiming, B = 0), "pissa" (peft; `niter` → "pissa_niter_N"),
    "qlora" (LoRA over nf4(W)), "loftq" (peft LoRA layers filled by CPU LoftQ with `iters`),
    "qpissa" (peft PiSSA, then W_res → nf4(W_res), `iters` alternating refinements).
    """
    from peft import get_peft_model

    if method not in ADAPTER_METHODS:
        raise ValueError(f"unknown adapter method {method!r}; expected one of {ADAPTER_METHODS}")
    if rank < 1:
        raise ValueError("rank must be positive")
    alpha = float(rank if alpha is None else alpha)
    targets = targets or default_targets(model)
    base = clone_model(model)
    init: str | bool
    if method in ("pissa", "qpissa"):
        init = "pissa" if not niter else f"pissa_niter_{int(niter)}"
    else:
        init = True
    # LoRA's random A and the fast SVD's random probes depend on the seed only (backend.core.rng)
    with seeded(seed):
        pm = get_peft_model(base, _config(method, rank, alpha, targets, init))
    if method in ("qlora", "loftq", "qpissa"):
        for layer in _lora_layers(pm).values():
            base_w = layer.get_base_layer().weight
            w = base_w.detach().float()
            a_p, b_p = layer.lora_A["default"].weight, layer.lora_B["default"].weight
            scaling = layer.scaling["default"]
            if method == "qlora":
                base_w.data.copy_(nf4_roundtrip(w, block_size).to(base_w.dtype))
            elif method == "loftq":
                q, a, b = loftq_cpu(w, rank, iters, block_size)
                base_w.data.copy_(q.to(base_w.dtype))
                a_p.data.copy_(a)
                b_p.data.copy_(b / scaling)
            else:  # qpissa: w holds W_res after peft's PiSSA init
                full = w + scaling * (b_p.float() @ a_p.float())
                q = nf4_roundtrip(w, block_size)
                for _ in range(iters - 1):
                    a, b = low_rank(full - q, rank)
                    a_p.data.copy_(a)
                    b_p.data.copy_(b / scaling)
                    q = nf4_roundtrip(full - scaling * (b_p.float() @ a_p.float()), block_size)
                base_w.data.copy_(q.to(base_w.dtype))
    return pm


@torch.no_grad()
def reconstruction_error(peft_model, original: nn.Module) -> float:
    """max over adapted layers of ‖W_res + scaling·BA − W‖_F / ‖W‖_F against the original model."""
    worst = 0.0
    orig = dict(original.named_modules())
    for name, layer in _lora_layers(peft_model).items():
        key = name.removeprefix("base_model.model.")
        ref = orig[key].weight.detach().float()
        w = layer.get_base_layer().weight.detach().float() + layer.get_delta_weight("default").float()
        worst = max(worst, float((w - ref).norm() / ref.norm()))
    return worst


def convert_pissa_to_lora(trained, initial_state: dict, base_model: nn.Module):
    """PiSSA → LoRA with peft: save the initial adapter and the trained one with
    `path_initial_model_for_weight_conversion`, then load the converted (rank 2r) LoRA on a copy of
    the ORIGINAL base model. Returns (converted PeftModel, converted rank)."""
    from peft import LoraConfig, PeftModel, set_peft_model_state_dict

    with tempfile.TemporaryDirectory(prefix="pissa-convert-") as tmp_name:
        tmp = Path(tmp_name)
        # The initial adapter as it was before training, saved in peft's format.
        trained_state = {k: v.detach().clone() for k, v in trained.state_dict().items() if "lora_" in k}
        cfg = trained.peft_config["default"]
        keep_init = cfg.init_lora_weights
        try:
            from peft import get_peft_model_state_dict

            current = {k: v.detach().clone() for k, v in get_peft_model_state_dict(trained).items()}
            set_peft_model_state_dict(trained, initial_state)
            cfg.init_lora_weights = True
            trained.save_pretrained(str(tmp / "init"))
            set_peft_model_state_dict(trained, current)
            trained.save_pretrained(str(tmp / "lora"), path_initial_model_for_weight_conversion=str(tmp / "init"))
        finally:
            cfg.init_lora_weights = keep_init
            # make sure the trained adapter is exactly what it was
            sd = trained.state_dict()
            for k, v in trained_state.items():
                sd[k].copy_(v)
        converted = PeftModel.from_pretrained(clone_model(base_model), str(tmp / "lora"))
        converted_cfg = converted.peft_config["default"]
        assert isinstance(converted_cfg, LoraConfig)  # a LoRA adapter, converted
        rank = converted_cfg.r
        converted.eval()
    return converted, rank
