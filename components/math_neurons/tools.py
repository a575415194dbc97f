"""Math neurons as an MCP tool: the same service as the tab's handler (registered in components.math_neurons)."""

# No `from __future__ import annotations`: gr.api reads the real type objects from the signatures
# (components.agents.tools) to build each tool's schema; each docstring's Args and Returns entry is one
# long line: Gradio's parser keeps only an entry's first line.
import json
import tempfile
import uuid
from pathlib import Path
from typing import Literal

from backend.core import bounds
from backend.mathneuro import visitor_sets

from components.agents.answers import _json, _source

MathMethod = Literal["mathneuro", "wanda", "random", "lape"]


def math_neurons(
    method: MathMethod = "mathneuro",
    k_percent: float = 3.0,
    factor: float = 0.0,
    n_samples: int = 64,
    math_items: list[dict] | None = None,
    nonmath_items: list[dict] | None = None,
) -> str:
    """Find math-specific parameters (MathNeuro) and measure math vs non-math accuracy with them scaled.

    Scores every linear weight by |W_ij|·‖X_j‖ summed over samples, keeps the top K % per matrix on
    math problems minus those also top K % on non-math text, multiplies them by `factor` for this
    call only, and scores both held-out sets by exact match. The default factor 0 PRUNES the set
    (the paper's ablation); 1.1 is the paper's boost. The model is restored bit-exactly before the
    answer returns. Your own math or non-math items (as in the tab's file upload) replace the
    model's sets for identification and scoring. Cost: the identification (2 × n_samples forward
    passes) plus greedy answers to up to 200 held-out items per side (seconds on the zoo model on a
    CPU, a minute or more for a 1B model; results are cached per setting).

    Args:
        method: which set: mathneuro (math top K minus non-math top K), wanda (math top K, no subtraction), random (the same count per matrix at random), lape (MLP neurons by activation-probability entropy).
        k_percent: K, the top share per weight matrix in percent, 1 to 30 (default 3, as the tab).
        factor: the scale applied to the chosen weights, 0 to 2; default 0 = prune them; 1.1 is the paper's boost; 1 leaves the model as it is.
        n_samples: samples per side used to identify the set, 1 to 64 (default 64).
        math_items: your own math set, at least 2 items, each {"question": ..., "answer": ...} (the answer's last number, or the number after '####', is the reference); null = the model's own math set.
        nonmath_items: your own non-math set, at least 2 items, each {"question": ..., "answer": ...} or {"text": ...}; null = the model's own non-math set.

    Returns:
        JSON: action (pruned or scaled × factor), baseline {math, nonmath} and modified {math, nonmath} accuracies (0-1), n_scored {math, nonmath} (items scored per side), math_set / nonmath_set (which data), n_params (weights in the set), n_total (linear weights), share, and layers: the set's count per layer.
    """
    from backend.mathneuro import service
    from backend.mathneuro.service import Setting
    from backend.mathneuro.sets import UI_EVAL

    bounds.check_choice("method", method, service.core.METHODS)
    k = bounds.check(bounds.MATH_K, k_percent)
    f = bounds.check(bounds.MATH_FACTOR, factor)
    n = bounds.check(bounds.MATH_SAMPLES, n_samples)
    try:
        b = service.bench(_source())
    except FileNotFoundError as e:
        raise ValueError(f"The math model is not available: {e}") from None
    # An agent's items are held for this call only (`call`): registered without a holder they stayed
    # in the shared bench for good (ten calls of 5,000 items kept +204 MB), and so are the masks found
    # on them. The accuracies stay cached by the items' content, so the same items again are scored
    # from the cache.
    call = f"mcp-call-{uuid.uuid4().hex}"
    s = None
    try:
        sets = {
            side: _own_items(service, side, items, call)
            for side, items in (("math", math_items), ("nonmath", nonmath_items))
        }
        sets = {side: key for side, key in sets.items() if key}
        s = Setting(method, k / 100.0, n, f, **sets)
        base, mod = b.baseline(**{side: s.__dict__[side] for side in ("math", "nonmath")}), b.evaluate(s)
        n_total = sum(m.weight.numel() for m in service.core.linear_layers(b.model).values())
        return _json(
            {
                "method": method,
                "k_percent": k,
                "factor": f,
                "n_samples": n,
                "model": b.model_id,
                "action": "pruned" if f == 0 else f"scaled × {f:g}",
                "baseline": base,
                "modified": {k_: mod[k_] for k_ in ("math", "nonmath")},
                "n_scored": {side: len(b.eval_items(side, UI_EVAL, s.__dict__[side])) for side in ("math", "nonmath")},
                "math_set": "yours" if "math" in sets else "the model's",
                "nonmath_set": "yours" if "nonmath" in sets else "the model's",
                "n_params": mod["n_params"],
                "n_total": n_total,
                "share": mod["n_params"] / max(n_total, 1),
                "layers": b.layers(s),
            }
        )
    finally:
        visitor_sets.release(call)
        if s is not None and sets:  # the masks found on the caller's own items go with them
            b.forget_masks(s)


def _own_items(service, side: str, items, call: str) -> str | None:
    """An agent's own items, registered as the tab registers an uploaded file (same checks)."""
    if items is None:
        return None
    if not isinstance(items, list) or not all(isinstance(it, dict) for it in items):
        raise ValueError(f'{side}_items must be a list of objects like {{"question": ..., "answer": ...}}.')
    folder = Path(tempfile.mkdtemp(prefix="wb-agent-items-"))
    path = folder / f"{side}.jsonl"
    try:
        path.write_text("\n".join(json.dumps(it, ensure_ascii=False) for it in items), encoding="utf-8")
        return service.register_data(_source(), side, path=path, name=f"your {side} items", owner=call)
    finally:
        path.unlink(missing_ok=True)
        folder.rmdir()
