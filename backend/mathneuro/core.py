"""MathNeuro: math-specific parameters from forward passes only, and the baselines.

For every `nn.Linear` weight W (out × in) and a set of samples, the importance of W_ij is

    S_ij = Σ_samples |W_ij| · ‖X_j‖₂

where X is the layer's input for that sample and the norm runs over the sample's tokens. The top
K % of S per weight matrix (flattened) is computed separately on math and on non-math samples;
the math-specific parameters are the math top-K minus the non-math top-K. Baselines: "wanda" (the
math top-K without the subtraction), "random" (the same count per matrix at random positions) and
"lape" (MLP neurons by activation-probability entropy). Masks are `{parameter name: BoolTensor}`,
the descriptor that `scaled(model, masks, factor)` applies (0 prunes) and restores bit-exactly.
"""

from __future__ import annotations

import inspect
import math
import re
from contextlib import contextmanager
from typing import Any, Iterable, Iterator, Mapping, Sequence

import torch
from torch import nn

from ..core.device import device_of
from ..core.interventions import indexable, model_lock, scale_weights
from .select import check_k as _check_k
from .select import importance as _importance
from .select import select_masks, top_fraction  # noqa: F401  (top_fraction: the package re-exports it)

METHODS = ("mathneuro", "wanda", "random", "lape")
Masks = dict[str, torch.Tensor]


# ----------------------------------------------------------------------------------------- inputs
def tied_head(model: nn.Module) -> nn.Module | None:
    """The output embedding when it shares its weight with the input embedding, else None."""
    get_out = getattr(model, "get_output_embeddings", None)
    get_in = getattr(model, "get_input_embeddings", None)
    head = get_out() if get_out else None
    emb = get_in() if get_in else None
    if head is None or emb is None or getattr(head, "weight", None) is None:
        return None
    w, e = head.weight, emb.weight
    same = w is e or (w.shape == e.shape and w.device == e.device and w.data_ptr() == e.data_ptr())
    return head if same else None


def linear_layers(model: nn.Module, include_lm_head: bool = True) -> dict[str, nn.Linear]:
    """Every `nn.Linear` of the model by module name, the paper's set: an untied output
    embedding (lm_head) included, a tied one skipped (its weight is the input embedding, which
    scaling it would change too). `include_lm_head=False` leaves an untied head out as well."""
    get_out = getattr(model, "get_output_embeddings", None)
    head = get_out() if get_out else None
    skip = head if (not include_lm_head or tied_head(model) is not None) else None
    return {
        name: m for name, m in model.named_modules() if isinstance(m, nn.Linear) and (skip is None or m is not skip)
    }


def _batches(samples: Sequence, tokenizer, batch_size: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """(ids, mask) padded batches from strings (needs a tokenizer; padded on its own side), id
    lists or 1-D tensors (padded on the right)."""
    if len(samples) == 0:
        raise ValueError("no samples given")
    for i in range(0, len(samples), batch_size):
        chunk = list(samples[i : i + batch_size])
        if isinstance(chunk[0], str):
            if tokenizer is None:
                raise ValueError("text samples need a tokenizer")
            if tokenizer.pad_token_id is not None:
                enc = tokenizer(chunk, padding=True, return_tensors="pt")
                yield enc["input_ids"], enc["attention_mask"].bool()
                continue
            # Llama-3-style tokenizers ship without a pad token, so padding=True refuses; the mask
            # makes the pad id irrelevant, so the id lists are padded below instead.
            chunk = [tokenizer(s)["input_ids"] for s in chunk]
        seqs = [torch.as_tensor(s, dtype=torch.long).flatten() for s in chunk]
        if any(s.numel() == 0 for s in seqs):
            raise ValueError("empty sample")
        width = max(s.numel() for s in seqs)
        pad = getattr(tokenizer, "pad_token_id", None) or 0
        ids = torch.full((len(seqs), width), pad, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.bool)
        for j, s in enumerate(seqs):
            ids[j, : s.numel()] = s
            mask[j, : s.numel()] = True
        yield ids, mask


@torch.no_grad()
def input_norms(
    model: nn.Module,
    samples: Sequence,
    *,
    tokenizer=None,
    batch_size: int = 32,
    layers: Mapping[str, nn.Linear] | None = None,
    host: bool = True,
) -> dict[str, torch.Tensor]:
    """Σ_samples ‖X_j‖₂ per input feature j of every linear layer (norm over each sample's own
    tokens; padding excluded). Forward passes only; the hooks are removed whatever happens.
    `host=False` leaves the norms beside the weights (float64), for a selection there."""
    layers = dict(layers if layers is not None else linear_layers(model))
    # an unscored output head's logits are not needed: only the last position's are computed
    skip_head = _head(model) not in layers.values()
    # summed beside the weights and fetched once at the end: a host copy per layer and batch would
    # synchronise the GPU hundreds of times per pass
    acc = {name: torch.zeros(m.in_features, dtype=torch.float64, device=m.weight.device) for name, m in layers.items()}
    state: dict[str, Any] = {}  # tensors: "x", "norms", and "mask" (None when no sample is padded)

    def make_hook(name: str):
        def hook(_m, args):
            x = args[0]
            # q/k/v (and gate/up) read the same tensor: its norms are computed once per batch
            if state.get("x") is not x:
                mask = state["mask"]
                if mask is None:  # no sample padded: every token counts
                    sq = (x.float() ** 2).sum(dim=1)  # (B, in)
                else:
                    if mask.device != x.device:
                        mask = state["mask"] = mask.to(x.device)
                    # where, not a product: a fully masked pad row may hold NaN, and NaN * 0 is NaN
                    sq = torch.where(mask.unsqueeze(-1), x.float() ** 2, 0.0).sum(dim=1)
                state["x"], state["norms"] = x, sq.sqrt().sum(dim=0)
            acc[name] += state["norms"]  # float32 → float64 in the addition itself

        return hook

    handles = []
    with model_lock(model):
        was_training = model.training
        try:
            model.eval()
            for name, m in layers.items():
                handles.append(m.register_forward_pre_hook(make_hook(name)))
            dev = device_of(model)
            for ids, mask in _batches(samples, tokenizer, batch_size):
                state.clear()
                plain = bool(mask.all())  # a host tensor: no device sync
                state["mask"] = None if plain else mask
                _forward(model, ids, mask, dev, plain=plain, skip_head=skip_head)
        finally:
            state.clear()
            for h in handles:
                h.remove()
            model.train(was_training)
    return _to_host(acc) if host else acc


def _to_host(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The vectors on the host with one copy per device (a copy each would wait on the GPU each
    time: 224 waits for a 1B model's two sample sets)."""
    by_dev: dict[torch.device, list[str]] = {}
    for name, t in tensors.items():
        by_dev.setdefault(t.device, []).append(name)
    out: dict[str, torch.Tensor] = {}
    for names in by_dev.values():
        flat = torch.cat([tensors[n] for n in names]).cpu()
        out.update(zip(names, flat.split([tensors[n].numel() for n in names])))
    return {name: out[name] for name in tensors}


def _head(model: nn.Module):
    get_out = getattr(model, "get_output_embeddings", None)
    return get_out() if get_out else None


def _forward(
    model: nn.Module, ids: torch.Tensor, mask: torch.Tensor, dev, *, plain: bool = False, skip_head: bool = False
):
    """One forward of a padded batch that gives each sample what it gets alone: the attention
    mask keeps pads out (left padding would otherwise be attended to) and the position ids count
    real tokens only (left padding would otherwise shift every position). `plain` (no sample
    padded): the model's own causal path, no mask or position ids, the same values. `skip_head`:
    the logits of the last position only, where the output head is not scored."""
    kw = {"logits_to_keep": 1} if skip_head and "logits_to_keep" in _params(model) else {}
    if plain:
        return model(input_ids=ids.to(dev), use_cache=False, **kw)
    pos = (mask.long().cumsum(-1) - 1).clamp(min=0)
    return model(
        input_ids=ids.to(dev), attention_mask=mask.long().to(dev), position_ids=pos.to(dev), use_cache=False, **kw
    )


def _params(model: nn.Module) -> set[str]:
    try:
        return set(inspect.signature(type(model).forward).parameters)
    except (TypeError, ValueError):
        return set()


def importance(model: nn.Module, norms: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """S = |W| · ‖X‖ (broadcast over output rows), one matrix per linear layer's weight, on the
    weights' device."""
    mods = dict(model.named_modules())
    return {f"{name}.weight": _importance(mods[name].weight, n) for name, n in norms.items()}


def masks_from_norms(
    model: nn.Module, norms: Mapping[str, torch.Tensor], top_k: float, minus: Mapping[str, torch.Tensor] | None = None
) -> Masks:
    """Host masks of the top-`top_k` importance per weight matrix (less the top-`top_k` under the
    `minus` norms, when given): `top_fraction` of each matrix, selected beside the weights for all
    matrices of one shape together and copied to the host once, as bits (`select.select_masks`)."""
    return select_masks(model, norms, top_k, minus)


# ------------------------------------------------------------------------------------- methods
def norms(model, samples, *, tokenizer=None, batch_size: int = 32, include_lm_head: bool = True, host: bool = True):
    return input_norms(
        model,
        samples,
        tokenizer=tokenizer,
        batch_size=batch_size,
        layers=linear_layers(model, include_lm_head),
        host=host,
    )


def identify(
    model: nn.Module,
    math_texts: Sequence,
    nonmath_texts: Sequence,
    top_k: float,
    *,
    tokenizer=None,
    batch_size: int = 32,
    include_lm_head: bool = True,
) -> Masks:
    """MathNeuro: {weight name: BoolTensor} of the parameters in the top-`top_k` fraction of
    Σ|W|·‖X‖ on math samples but not on non-math samples (per weight matrix), over every linear
    layer an untied lm_head included (`linear_layers`). Norms are summed in float32/float64 as the
    activations come, not rounded to the model's bf16."""
    _check_k(top_k)
    kw = dict(tokenizer=tokenizer, batch_size=batch_size, include_lm_head=include_lm_head, host=False)
    return masks_from_norms(model, norms(model, math_texts, **kw), top_k, minus=norms(model, nonmath_texts, **kw))


def wanda(
    model, math_texts, top_k: float, *, tokenizer=None, batch_size: int = 32, include_lm_head: bool = True
) -> Masks:
    """Baseline: the math top-K without removing what matters for non-math too."""
    return masks_from_norms(
        model,
        norms(model, math_texts, tokenizer=tokenizer, batch_size=batch_size, include_lm_head=include_lm_head),
        top_k,
    )


def random_like(masks: Mapping[str, torch.Tensor], seed: int = 0) -> Masks:
    """Baseline: as many entries per matrix as `masks`, at uniformly random positions."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, m in masks.items():
        n = int(m.sum())
        flat = torch.zeros(m.numel(), dtype=torch.bool)
        flat[torch.randperm(m.numel(), generator=g)[:n]] = True
        out[name] = flat.view(m.shape)
    return out


def _mlp_triples(model: nn.Module) -> list[tuple[str, str, str]]:
    """(gate, up, down) module names of each gated MLP (Llama / Mistral / Qwen layout)."""
    names = {n for n, m in model.named_modules() if isinstance(m, nn.Linear)}
    out = []
    for n in sorted(names):
        if n.endswith(".gate_proj"):
            base = n[: -len("gate_proj")]
            if base + "up_proj" in names and base + "down_proj" in names:
                out.append((n, base + "up_proj", base + "down_proj"))
    return out


@torch.no_grad()
def activation_probability(model, samples, *, tokenizer=None, batch_size: int = 32) -> dict[str, torch.Tensor]:
    """Per MLP neuron, the fraction of tokens where its gate activation is positive
    (SiLU(g) > 0 ⇔ g > 0), keyed by the gate module's name."""
    triples = _mlp_triples(model)
    if not triples:
        raise ValueError("LAPE needs gated MLPs (gate_proj / up_proj / down_proj)")
    mods = dict(model.named_modules())
    pos = {g: torch.zeros(mods[g].out_features, dtype=torch.float64) for g, _, _ in triples}
    count = {"n": 0}
    state: dict[str, torch.Tensor] = {}

    def make_hook(name):
        def hook(_m, _args, out):
            mask = state["mask"].to(out.device).unsqueeze(-1)
            pos[name] += ((out > 0) & mask).sum(dim=(0, 1)).double().cpu()

        return hook

    handles = []
    with model_lock(model):
        try:
            for g, _, _ in triples:
                handles.append(mods[g].register_forward_hook(make_hook(g)))
            dev = device_of(model)
            for ids, mask in _batches(samples, tokenizer, batch_size):
                state["mask"] = mask
                count["n"] += int(mask.sum())
                _forward(model, ids, mask, dev)
        finally:
            for h in handles:
                h.remove()
    return {g: p / max(count["n"], 1) for g, p in pos.items()}


def lape(model, math_texts, nonmath_texts, top_k: float, *, tokenizer=None, batch_size: int = 32) -> Masks:
    """Baseline: language-activation-probability-entropy neurons, math as one "language" and
    non-math as the other. Per MLP, the `top_k` fraction of neurons with the lowest entropy of the
    normalised activation probabilities among those more active on math; each selected neuron's
    parameters (its gate and up rows, its down column) form the mask."""
    _check_k(top_k)
    pm = activation_probability(model, math_texts, tokenizer=tokenizer, batch_size=batch_size)
    pn = activation_probability(model, nonmath_texts, tokenizer=tokenizer, batch_size=batch_size)
    mods = dict(model.named_modules())
    out: Masks = {}
    for g, u, d in _mlp_triples(model):
        a, b = pm[g], pn[g]
        tot = (a + b).clamp_min(1e-12)
        qa, qb = a / tot, b / tot
        ent = -(qa * qa.clamp_min(1e-12).log() + qb * qb.clamp_min(1e-12).log())
        ent = torch.where(a > b, ent, torch.full_like(ent, float("inf")))
        n = max(1, int(round(top_k * ent.numel())))
        n = min(n, int(torch.isfinite(ent).sum()))
        chosen = torch.topk(-ent, n).indices if n else torch.zeros(0, dtype=torch.long)
        for name, rows in ((g, True), (u, True), (d, False)):
            w = mods[name].weight
            m = torch.zeros(w.shape, dtype=torch.bool)
            if rows:
                m[chosen, :] = True
            else:
                m[:, chosen] = True
            out[f"{name}.weight"] = m
    return out


def find(
    method: str, model, math_texts, nonmath_texts, top_k: float, *, tokenizer=None, batch_size: int = 32, seed: int = 0
) -> Masks:
    """One entry point for the four methods (random matches MathNeuro's count per matrix)."""
    if method == "mathneuro":
        return identify(model, math_texts, nonmath_texts, top_k, tokenizer=tokenizer, batch_size=batch_size)
    if method == "wanda":
        return wanda(model, math_texts, top_k, tokenizer=tokenizer, batch_size=batch_size)
    if method == "random":
        ref = identify(model, math_texts, nonmath_texts, top_k, tokenizer=tokenizer, batch_size=batch_size)
        return random_like(ref, seed)
    if method == "lape":
        return lape(model, math_texts, nonmath_texts, top_k, tokenizer=tokenizer, batch_size=batch_size)
    raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")


# --------------------------------------------------------------------------------- intervention
@contextmanager
def scaled(model: nn.Module, masks: Mapping[str, torch.Tensor], factor: float):
    """Multiply the masked weights by `factor` (0 prunes) for the duration of the context:
    `backend.core.interventions.scale_weights` (the model's lock for the whole context, only the
    masked entries saved, written back bit-exactly in `finally`, no copy of the model), with the
    factor required to be finite."""
    factor = float(factor)
    if not math.isfinite(factor):
        raise ValueError(f"scale factor must be finite, not {factor!r}")
    with scale_weights(model, masks, factor):
        yield model


def saved_bytes(model: nn.Module, masks: Mapping[str, torch.Tensor], *, with_index: bool = False) -> int:
    """What `scaled` keeps while active: the original values of the masked entries (and, with
    `with_index`, the int32 positions cached beside a mask of at most 1/8 of its matrix)."""
    params = dict(model.named_parameters())
    total = 0
    for n, m in masks.items():
        k = int(m.sum())
        total += k * params[n].element_size() + (4 * k if with_index and indexable(k, m.numel()) else 0)
    return total


# ----------------------------------------------------------------------------------- analysis
def count(masks: Mapping[str, torch.Tensor]) -> int:
    return sum(int(m.sum()) for m in masks.values())


def overlap(a: Mapping[str, torch.Tensor], reference: Mapping[str, torch.Tensor]) -> float:
    """Fraction of the reference set that `a` also contains (|a ∩ ref| / |ref|)."""
    inter = sum(int((a[n] & m).sum()) for n, m in reference.items() if n in a)
    total = count(reference)
    return inter / total if total else float("nan")


_LAYER_RE = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def layer_of(name: str) -> int | None:
    m = _LAYER_RE.search(name)
    return int(m.group(1)) if m else None


def per_layer(masks: Mapping[str, torch.Tensor]) -> dict[str, dict]:
    """Selected count and share of each decoder layer's linear parameters (key "other" for
    weights outside the numbered layers)."""
    out: dict[str, dict] = {}
    for name, m in masks.items():
        layer = layer_of(name)
        key = "other" if layer is None else str(layer)
        row = out.setdefault(key, {"count": 0, "total": 0})
        row["count"] += int(m.sum())
        row["total"] += m.numel()
    for row in out.values():
        row["fraction"] = row["count"] / row["total"] if row["total"] else 0.0
    return dict(sorted(out.items(), key=lambda kv: (kv[0] == "other", int(kv[0]) if kv[0].isdigit() else 0)))


def per_module(masks: Mapping[str, torch.Tensor]) -> dict[str, int]:
    """Selected count by module type (q_proj, k_proj, ..., down_proj)."""
    out: dict[str, int] = {}
    for name, m in masks.items():
        kind = name.rsplit(".", 2)[-2] if name.endswith(".weight") else name
        out[kind] = out.get(kind, 0) + int(m.sum())
    return out


def consistency(
    model,
    math_texts: Sequence,
    nonmath_texts: Sequence,
    top_k: float,
    *,
    n_samples: Iterable[int] = (1, 4, 16),
    n_subsets: int = 3,
    tokenizer=None,
    seed: int = 0,
    reference: Mapping[str, torch.Tensor] | None = None,
) -> dict[int, dict]:
    """For each subset size n: identify on `n_subsets` random subsets of n math and n non-math
    samples; report the mean and min overlap with the set found on all samples."""
    ref = reference if reference is not None else identify(model, math_texts, nonmath_texts, top_k, tokenizer=tokenizer)
    g = torch.Generator().manual_seed(seed)
    out = {}
    for n in n_samples:
        n_m, n_n = min(n, len(math_texts)), min(n, len(nonmath_texts))
        vals = []
        for _ in range(n_subsets):
            im = torch.randperm(len(math_texts), generator=g)[:n_m].tolist()
            inn = torch.randperm(len(nonmath_texts), generator=g)[:n_n].tolist()
            sub = identify(
                model, [math_texts[i] for i in im], [nonmath_texts[i] for i in inn], top_k, tokenizer=tokenizer
            )
            vals.append(overlap(sub, ref))
        out[int(n)] = {"mean": sum(vals) / len(vals), "min": min(vals), "runs": vals}
    return out
