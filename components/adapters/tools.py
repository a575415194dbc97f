"""Adapters as MCP tools: the same service as the tab's handlers (registered in components.adapters)."""

# No `from __future__ import annotations`: gr.api reads the real type objects from the signatures
# (components.agents.tools) to build each tool's schema; each docstring's Args and Returns entry is one
# long line: Gradio's parser keeps only an entry's first line.
from typing import Literal

from backend.core import bounds

from components.agents.answers import _json, _source

MAX_SINGULAR_VALUES = 64  # singular values listed by pissa_layer (the rest are summarised)
PissaInit = Literal["pissa", "pissa_niter_4"]  # bounds.PISSA_INITS, the tab's choices


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
    return _json(
        {"models": [{"key": k, "label": lab} for lab, k in opts], "model": key, "layers": service.layer_names(key)}
    )


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
