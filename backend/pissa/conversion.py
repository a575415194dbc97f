"""The Adapters tab's PiSSA → LoRA conversion check: fine-tune with PiSSA for a few steps, convert the
adapter to a plain LoRA on the original weights and compare the outputs, within a bound set by the
weights' dtype. A topic of its own beside `service`, whose picked model, task and rank check it uses."""

from __future__ import annotations

import torch

from ..core.interventions import locked
from ..core.zerogpu import capped, gpu
from .adapters import linear_layers
from .race import DigitsTask
from .results import Conversion
from .service import ServiceError, check_rank, task_for


def conversion_tolerance(dtype: torch.dtype) -> float:
    """The largest relative output difference (max |Δ| / max |output|) that still reads as "the same
    outputs" after a PiSSA → LoRA conversion, for a model whose weights are of `dtype`.

    In exact arithmetic the two models are equal. In floating point the PiSSA model holds
    W_res = W − AB rounded to the weights' dtype (half a unit in the last place: 2⁻¹¹ ≈ 4.9e-4
    relative in float16, 2⁻⁸ ≈ 3.9e-3 in bfloat16), so it already differs from the base model at
    step 0, and that round-off grows slowly with depth. Measured on Llama models of width 64 after
    20 PiSSA steps, the conversion's difference equals that step-0 round-off within 30 % and grows
    from 1.0 machine epsilon at 2 layers to 2.5 at 32 (float16 and bfloat16 alike). Four epsilons
    (float16 3.9e-3, bfloat16 3.1e-2) hold a 32-layer model; a wider bound would call outputs that
    moved by 0.36 (bf16 Qwen2: 4.4e-2 relative, 5.6 epsilons) "the same". A wrong conversion is off
    by about as much as the fine-tuning moved the outputs. Float32 keeps 1e-4."""
    return max(1e-4, 4 * torch.finfo(dtype).eps)


@gpu(duration=lambda key, rank=8, steps=20, *a, **k: capped(15 + 0.2 * int(steps)))
def conversion_demo(
    key: str, rank: int = 8, steps: int = 20, lr: float | None = None, layer: str | None = None
) -> Conversion:
    """Fine-tune with PiSSA for a few steps, convert the adapter to a plain LoRA (rank 2r) on the
    ORIGINAL weights with peft, and compare outputs of the two models on held-out inputs. `layer`:
    adapt that linear layer only (default: the layers the race adapts)."""
    from peft import get_peft_model_state_dict

    from ..core.device import device_of
    from .adapters import convert_pissa_to_lora
    from .race import make_run, train_step

    if not 1 <= int(steps) <= 500:
        raise ServiceError("steps must be between 1 and 500")
    task = task_for(key)
    model = task.model()
    layers = linear_layers(model)
    if layer:
        if layer not in layers:
            raise ServiceError(f"no adaptable linear layer {str(layer)[:80]!r} in {key}")
        targets = [layer]
    else:
        targets = task.targets()
    # peft's PiSSA→LoRA conversion needs the rank to fit every adapted layer: the narrowest of
    # those it adapts bounds it, not any other layer of the model
    adapted = {n: m for n, m in layers.items() if n in targets or n.rsplit(".", 1)[-1] in targets}
    name, narrowest = min(adapted.items(), key=lambda kv: min(kv[1].weight.shape))
    rank = check_rank(rank, narrowest.weight, name)
    run = make_run(task, "pissa", seed=0, rank=rank, alpha=rank, lr=float(lr or task.default_lr), targets=targets)
    initial = {k: v.detach().clone() for k, v in get_peft_model_state_dict(run.model).items()}
    x = task.batch(torch.Generator().manual_seed(12345), 32)[0].to(device_of(model))

    @torch.no_grad()
    def outputs(m):
        out = m(x) if isinstance(task, DigitsTask) else m(input_ids=x).logits
        return out.float()

    with locked(model):
        base = outputs(model)
    run.model.eval()
    at_init = outputs(run.model)  # equal to `base` but for the dtype's round-off of W_res
    run.model.train()
    for _ in range(int(steps)):
        train_step(task, run, task.default_batch)
    run.model.eval()
    converted, conv_rank = convert_pissa_to_lora(run.model, initial, model)
    a, b = outputs(run.model), outputs(converted)
    scale = max(float(a.abs().max()), 1e-12)
    dtype = next(model.parameters()).dtype
    diff = float((a - b).abs().max())
    tol = conversion_tolerance(dtype)
    return {
        "model": key,
        "layers": targets,
        "rank": rank,
        "converted_rank": int(conv_rank),
        "steps": int(steps),
        "max_abs_diff": diff,
        "rel_diff": diff / scale,
        "output_scale": scale,
        "dtype": str(dtype).removeprefix("torch."),
        "tolerance": tol,
        "same_outputs": diff / scale <= tol,
        "roundoff_at_init": float((at_init - base).abs().max()) / max(float(base.abs().max()), 1e-12),
        "change_from_base": float((a - base).abs().max()),
        "final_loss": run.losses[-1],
        "n_inputs": int(x.shape[0]),
    }
