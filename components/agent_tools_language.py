"""The MCP tools of the language-model tabs (Relevance, Math neurons, Adapters): each calls the
same backend service as the tab's handler (components.agent_tools registers them)."""
# No `from __future__ import annotations`: gr.api reads the real type objects from the signatures
# (components.agent_tools) to build each tool's schema; each docstring's Args and Returns entry is one
# long line: Gradio's parser keeps only an entry's first line.
import json
import tempfile
import uuid
from pathlib import Path
from typing import Literal

from backend.core import bounds
from backend.mathneuro import visitor_sets

from .agent_answers import _json, _source

MAX_SINGULAR_VALUES = 64  # singular values listed by pissa_layer (the rest are summarised)
MathMethod = Literal["mathneuro", "wanda", "random", "lape"]
RelMethod = Literal["mambalrp", "lrp_ln", "gi", "smoothgrad", "ig", "attnroll", "mambaattr"]
RelRule = Literal["norm", "silu", "ssm", "gate"]
PissaInit = Literal["pissa", "pissa_niter_4"]  # bounds.PISSA_INITS, the tab's choices


# ------------------------------------------------------------------------------------ Relevance
def token_relevance(text: str, methods: list[RelMethod] | None = None, rules: list[RelRule] | None = None,
                    target: str = "", model: str = "") -> str:
    """Explain a Mamba language model's prediction as relevance per input token (MambaLRP and baselines).

    Runs the text through the Relevance tab's Mamba LM and attributes the target's logit at the last
    position to every input token. MambaLRP's relevance sums to that logit (conservation) when all
    four rules are on; dropping a rule breaks it. Cost: about a second per method on a CPU for a
    sentence (IG and SmoothGrad take tens of passes); at most 256 tokens.

    Args:
        text: the input text (1 to 256 tokens, at most 2,000 characters).
        methods: attribution methods, any of mambalrp, lrp_ln (LRP with only the norm rule), gi (Gradient×Input), smoothgrad, ig (Integrated Gradients), attnroll (attention rollout), mambaattr (Mamba's hidden attention); default mambalrp, gi, ig, mambaattr.
        rules: MambaLRP rules to apply, any of norm, silu, ssm, gate; default all four (leave one out to ablate it).
        target: the word or token whose logit is explained; empty = the model's own top prediction.
        model: a text model of the tab (its hub id or zoo folder); empty = the tab's default.

    Returns:
        JSON: tokens, per-method relevance per token (same order as tokens; signed for mambalrp, lrp_ln, gi, smoothgrad, ig; non-negative for attnroll and mambaattr), target and its logit, sum_relevance per method, top_next predictions, conv_bias (true means the conv bias absorbs part of the logit).
    """
    from backend.lrp import service as svc

    if not isinstance(text, str):
        raise ValueError("text must be a string.")
    methods = ["mambalrp", "gi", "ig", "mambaattr"] if methods is None else list(methods)
    rules = list(svc.RULES) if rules is None else list(rules)
    svc.check_text_request(text, methods, rules)
    m = svc.load_text(_source(), model or None)
    return _json(svc.explain_text(m, text, methods, rules, target or None))


# -------------------------------------------------------------------------------- Math neurons
def math_neurons(method: MathMethod = "mathneuro", k_percent: float = 3.0, factor: float = 0.0,
                 n_samples: int = 64, math_items: list[dict] | None = None,
                 nonmath_items: list[dict] | None = None) -> str:
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

    bounds.check_choice("method", method, service.core.METHODS)
    k = bounds.check(bounds.MATH_K, k_percent)
    f = bounds.check(bounds.MATH_FACTOR, factor)
    n = bounds.check(bounds.MATH_SAMPLES, n_samples)
    try:
        b = service.bench(_source())
    except FileNotFoundError as e:
        raise ValueError(f"The math model is not available: {e}") from None
    # An agent's items are held for this call only (`call`): registered without a holder they stayed
    # in the shared bench for good (ten calls of 5,000 items kept +204 MB). The answers stay cached
    # by the items' content, so the same items again are served from the caches.
    call = f"mcp-call-{uuid.uuid4().hex}"
    try:
        sets = {side: _own_items(service, side, items, call)
                for side, items in (("math", math_items), ("nonmath", nonmath_items))}
        sets = {side: key for side, key in sets.items() if key}
        s = Setting(method, k / 100.0, n, f, **sets)
        base, mod = b.baseline(**{side: s.__dict__[side] for side in ("math", "nonmath")}), b.evaluate(s)
        n_total = sum(m.weight.numel() for m in service.core.linear_layers(b.model).values())
        return _json({"method": method, "k_percent": k, "factor": f, "n_samples": n, "model": b.model_id,
                      "action": "pruned" if f == 0 else f"scaled × {f:g}",
                      "baseline": base, "modified": {k_: mod[k_] for k_ in ("math", "nonmath")},
                      "n_scored": {side: len(b.eval_items(side, service.UI_EVAL, s.__dict__[side]))
                                   for side in ("math", "nonmath")},
                      "math_set": "yours" if "math" in sets else "the model's",
                      "nonmath_set": "yours" if "nonmath" in sets else "the model's",
                      "n_params": mod["n_params"], "n_total": n_total, "share": mod["n_params"] / max(n_total, 1),
                      "layers": b.layers(s)})
    finally:
        visitor_sets.release(call)


def _own_items(service, side: str, items, call: str) -> str | None:
    """An agent's own items, registered as the tab registers an uploaded file (same checks)."""
    if items is None:
        return None
    if not isinstance(items, list) or not all(isinstance(it, dict) for it in items):
        raise ValueError(f"{side}_items must be a list of objects like {{\"question\": ..., \"answer\": ...}}.")
    folder = Path(tempfile.mkdtemp(prefix="wb-agent-items-"))
    path = folder / f"{side}.jsonl"
    try:
        path.write_text("\n".join(json.dumps(it, ensure_ascii=False) for it in items), encoding="utf-8")
        return service.register_data(_source(), side, path=path, name=f"your {side} items", owner=call)
    finally:
        path.unlink(missing_ok=True)
        folder.rmdir()


# ------------------------------------------------------------------------------------ Adapters
def pissa_layers(model: str = "") -> str:
    """List the models of the Adapters tab and the linear layers PiSSA can adapt in one of them.

    Args:
        model: a model key from the returned list, or your own model (a hub id owner/name, or a folder under the server's allowed roots); empty = the tab's default model.

    Returns:
        JSON: models (list of {key, label}), model (the one listed), layers (names to pass to pissa_layer).
    """
    from backend.pissa import service

    opts = service.choices(_source())
    key = model or (opts[0][1] if opts else "")
    if not key:
        raise ValueError("No Adapters model is available.")
    return _json({"models": [{"key": k, "label": lab} for lab, k in opts], "model": key,
                  "layers": service.layer_names(key)})


def pissa_layer(layer: str, rank: int = 8, init: PissaInit = "pissa", model: str = "") -> str:
    """Analyse one weight matrix for PiSSA: its spectrum and the principal / residual split at rank r.

    W = U S Vᵀ; PiSSA's adapter starts from the top-r singular triplets (A = U_r S_r^½,
    B = S_r^½ V_rᵀ) and freezes W_res = W − AB (initialised by peft). Cost: one SVD of the matrix
    (milliseconds for the zoo, about a second for a 4096-wide matrix on a GPU).

    Args:
        layer: a linear layer's name (see pissa_layers).
        rank: the adapter rank r, 1 to 128 and at most min(matrix shape).
        init: pissa (full SVD) or pissa_niter_4 (fast randomized SVD, 4 subspace iterations): the tab's two choices.
        model: a model key (see pissa_layers), or your own model (hub id or allowed folder); empty = the tab's default model.

    Returns:
        JSON: shape, rank, init, energy_top_r (share of ‖W‖²_F in the top r singular values, 0-1), reconstruction_rel_error (‖W_res + AB − W‖/‖W‖), init_output_rel_gap (adapted vs base layer output at init), w_absmax / w_res_absmax and w_std / w_res_std (W vs W_res: a narrower range quantizes better), singular_values and residual_singular_values (the first 64, largest first), n_singular_values, seconds.
    """
    from backend.pissa import service

    if not isinstance(layer, str) or not layer:
        raise ValueError("Name a layer (pissa_layers lists them).")
    bounds.check_choice("init", init, bounds.PISSA_INITS)
    if not model:
        opts = service.choices(_source())
        model = opts[0][1] if opts else ""
    r = bounds.check(bounds.PISSA_RANK, rank)
    a = service.layer_analysis(model, layer, r, init)
    out = {k: v for k, v in a.items() if not k.endswith("_sample")}
    out["n_singular_values"] = len(a["singular_values"])
    for k in ("singular_values", "residual_singular_values"):
        out[k] = list(a[k][:MAX_SINGULAR_VALUES])
    return _json(out)

