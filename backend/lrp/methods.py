"""Explanations of Mamba models: MambaLRP, its ablations and the baselines, batched.

A *target* is the logit `target` at sequence position `position` (text) or the class logit
(image). All gradient methods act on the input embeddings and sum relevance over the embedding
dimension per token; for the image model they act on the pixels and sum over colour channels.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Sequence

import torch

from ..core.rng import seeded
from .forward import Capture, RULES, backbone_forward, lm_forward, normalise_rules, parts
from .hidden_attention import hidden_attention, rollout
from .vision import VisionMamba

METHODS = ("mambalrp", "lrp_ln", "gi", "smoothgrad", "ig", "attnroll", "mambaattr")
LABELS = {
    "mambalrp": "MambaLRP",
    "lrp_ln": "LRP (LN-rule)",
    "gi": "Gradient×Input",
    "smoothgrad": "SmoothGrad",
    "ig": "Integrated Gradients",
    "attnroll": "Attention rollout",
    "mambaattr": "MambaAttr",
    "random": "Random",
}
SIGNED = {"mambalrp", "lrp_ln", "gi", "smoothgrad", "ig", "random"}
IG_STEPS = 32
SMOOTHGRAD_SAMPLES = 16
SMOOTHGRAD_NOISE = 0.15  # noise std as a fraction of the embedding's std


def method_rules(method: str, rules=None) -> frozenset:
    if method == "mambalrp":
        return normalise_rules(rules)
    if method == "lrp_ln":
        return frozenset({"norm"})
    return frozenset()


def _positions(position, batch: int, length: int) -> torch.Tensor:
    pos = torch.as_tensor(position).reshape(-1).long()
    pos = torch.where(pos < 0, pos + length, pos)
    if pos.numel() == 1:
        pos = pos.expand(batch)
    if ((pos < 0) | (pos >= length)).any():
        raise IndexError(f"position {position} outside a sequence of length {length}")
    return pos


def _targets(target, batch: int) -> torch.Tensor:
    t = torch.as_tensor(target).reshape(-1).long()
    return t.expand(batch) if t.numel() == 1 else t


def text_scorer(model, rules=(), gamma: float = 0.0, capture: Capture | None = None) -> Callable[..., torch.Tensor]:
    """(embeds [B, L, H], targets [B], positions [B]) → the target logit per example [B], through
    the rule-switched forward. Targets/positions travel as extra forward arguments so captum
    expands them together with the inputs (IG steps, SmoothGrad samples)."""

    def score(embeds: torch.Tensor, tgt: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        logits = lm_forward(model, inputs_embeds=embeds, rules=rules, gamma=gamma, capture=capture)
        return logits[torch.arange(embeds.shape[0], device=embeds.device), pos, tgt]

    return score


def vision_scorer(
    model: VisionMamba, rules=(), gamma: float = 0.0, capture: Capture | None = None, from_embeds: bool = False
) -> Callable[..., torch.Tensor]:
    """(pixels [B, C, H, W] or token embeddings, targets [B]) → the target class logit [B]."""

    def score(x: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        emb = x if from_embeds else model.embed(x)
        h = backbone_forward(model.mamba, emb, rules, gamma=gamma, capture=capture)
        return model.head(h[:, -1])[torch.arange(x.shape[0], device=x.device), tgt]

    return score


def _grad_x_input(score, x: torch.Tensor, args: tuple) -> tuple[torch.Tensor, torch.Tensor]:
    x = x.detach().requires_grad_(True)
    with torch.enable_grad():
        s = score(x, *args)
        (g,) = torch.autograd.grad(s.sum(), x)
    return (x * g).detach(), s.detach()


def _steps_per_batch(backbone, batch: int, length: int, budget_bytes: float = 1e9) -> int:
    """How many IG steps / SmoothGrad samples fit one pass: the scan keeps ~3 float tensors of
    L × d_inner × N per layer and example for the backward pass."""
    cfg = backbone.config
    per = 3 * cfg.num_hidden_layers * length * cfg.intermediate_size * cfg.state_size * 4 * max(1, batch)
    return int(max(1, min(IG_STEPS, budget_bytes // max(per, 1))))


def _captum(
    method: str,
    score,
    x: torch.Tensor,
    args: tuple,
    baseline: torch.Tensor | None = None,
    steps_per_batch: int = IG_STEPS,
) -> torch.Tensor:
    from captum.attr import InputXGradient, IntegratedGradients, NoiseTunnel

    x = x.detach().requires_grad_(True)
    with torch.enable_grad():
        if method == "gi":
            return InputXGradient(score).attribute(x, additional_forward_args=args).detach()
        if method == "ig":
            base = torch.zeros_like(x) if baseline is None else baseline
            return (
                IntegratedGradients(score)
                .attribute(
                    x,
                    baselines=base,
                    additional_forward_args=args,
                    n_steps=IG_STEPS,
                    internal_batch_size=x.shape[0] * steps_per_batch,
                )
                .detach()
            )
        if method == "smoothgrad":
            std = float(x.std()) * SMOOTHGRAD_NOISE
            # fixed noise seed: the same input gives the same map (cacheable, reproducible), also
            # while other requests draw from the global generator (backend.core.rng)
            with seeded(0):
                out = NoiseTunnel(InputXGradient(score)).attribute(
                    x,
                    nt_type="smoothgrad",
                    nt_samples=SMOOTHGRAD_SAMPLES,
                    stdevs=std,
                    nt_samples_batch_size=min(SMOOTHGRAD_SAMPLES, steps_per_batch),
                    additional_forward_args=args,
                )
            return out.detach()
    raise ValueError(method)


def _hidden_attention_relevance(
    backbone, score, x: torch.Tensor, args: tuple, cap: Capture, method: str, pos: torch.Tensor
) -> torch.Tensor:
    """Token relevance [B, L] from the rollout of the hidden attention matrices."""
    x = x.detach().requires_grad_(method == "mambaattr")
    with torch.enable_grad():
        s = score(x, *args)
        grads: Sequence[torch.Tensor | None]
        if method == "mambaattr":
            grads = torch.autograd.grad(s.sum(), cap.y_ssm)
        else:
            grads = [None] * len(cap.y_ssm)
    layers = []
    with torch.no_grad():
        for i, block in enumerate(backbone.layers):
            A = -torch.exp(block.mixer.A_log.float())
            g = grads[i]
            g = None if g is None else g.detach()
            layers.append(
                hidden_attention(
                    cap.u[i].detach(), cap.dt[i].detach(), A, cap.B[i].detach(), cap.C[i].detach(), grad_y=g
                )
            )
        return torch.stack([rollout([a[b : b + 1] for a in layers], int(pos[b]))[0] for b in range(x.shape[0])])


def _random(shape, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g)


@contextmanager
def flush_denormals():
    """While an attribution runs on a CPU, floats below 1.2e-38 read as zero (for the calling
    thread; then restored). The adjoint of a long scan decays through subnormal numbers, which x86
    CPUs compute many times slower: at mamba-1.4b's width, 512 tokens, one product of MambaLRP's
    backward took 690 ms instead of 105 ms, and MambaLRP cost 0.89× Gradient×Input instead of 0.74×
    (1.06× instead of 0.68× on two threads). Relevance that small is nothing any figure shows.
    torch has no getter for the flag; threads start with it off, so off is what is restored."""
    turned_on = torch.set_flush_denormal(True)
    try:
        yield
    finally:
        if turned_on:
            torch.set_flush_denormal(False)


def _check_method(method: str) -> None:
    if method not in METHODS and method != "random":
        raise ValueError(f"unknown method {method!r}; choose from {list(METHODS)}")


@flush_denormals()
def attribute_text(
    model,
    input_ids=None,
    *,
    inputs_embeds=None,
    target,
    position=-1,
    method: str = "mambalrp",
    rules=None,
    gamma: float = 0.0,
    return_score: bool = False,
):
    """Batched token relevance [B, L] for a Mamba causal LM. `target`/`position`: int or [B]."""
    _check_method(method)
    backbone, _ = parts(model)
    if inputs_embeds is None:
        if input_ids is None:
            raise ValueError("give input_ids or inputs_embeds")
        input_ids = torch.as_tensor(input_ids).long()
        if input_ids.dim() == 1:
            input_ids = input_ids[None]
        with torch.no_grad():
            inputs_embeds = backbone.embeddings(input_ids.to(backbone.embeddings.weight.device))
    x = inputs_embeds.detach().float().to(backbone.embeddings.weight.device)
    if x.dim() == 2:
        x = x[None]
    Bsz, L = x.shape[:2]
    args = (_targets(target, Bsz).to(x.device), _positions(position, Bsz, L).to(x.device))
    rules_ = method_rules(method, rules)
    score_value = None
    if method in ("mambalrp", "lrp_ln"):
        rel, score_value = _grad_x_input(text_scorer(model, rules_, gamma), x, args)
        rel = rel.sum(-1)
    elif method in ("gi", "ig", "smoothgrad"):
        rel = _captum(method, text_scorer(model), x, args, steps_per_batch=_steps_per_batch(backbone, Bsz, L)).sum(-1)
    elif method in ("attnroll", "mambaattr"):
        cap = Capture()
        rel = _hidden_attention_relevance(backbone, text_scorer(model, capture=cap), x, args, cap, method, args[1])
    else:
        rel = _random(x.shape[:2])
    # results leave on the host: callers turn them into numpy, and under ZeroGPU they are pickled
    if return_score:
        if score_value is None:
            with torch.no_grad():
                score_value = text_scorer(model)(x, *args)
        return rel.float().cpu(), score_value.float().cpu()
    return rel.float().cpu()


@flush_denormals()
def mambalrp_choosing_target(model, input_ids, choose: Callable[[torch.Tensor], int], *, rules=None):
    """MambaLRP of the last position's logit for a target chosen from that same forward's logits
    (`choose(logits [V]) -> id`, e.g. the prediction): one forward and one backward, where finding
    the target first would cost a second forward (the rules change gradients, never values, so
    these logits are the model's own). Returns (relevance [L], the target's logit, logits [V])."""
    backbone, head = parts(model)
    ids = torch.as_tensor(input_ids).long().reshape(1, -1).to(backbone.embeddings.weight.device)
    with torch.no_grad():
        x = backbone.embeddings(ids).detach().float()
    x.requires_grad_(True)
    with torch.enable_grad():
        # the head on the last position only: at a 50k vocabulary it is a tenth of the whole cost
        h = backbone_forward(backbone, x, method_rules("mambalrp", rules))[0, -1]
        last = head(h.to(head.weight.device, head.weight.dtype)).float()
        tid = int(choose(last.detach()))
        (g,) = torch.autograd.grad(last[tid], x)
    return (x * g).detach().sum(-1)[0].float().cpu(), float(last[tid].detach()), last.detach().float().cpu()


@flush_denormals()
def attribute_image(
    model: VisionMamba,
    pixel_values: torch.Tensor,
    *,
    target,
    method: str = "mambalrp",
    rules=None,
    gamma: float = 0.0,
    return_score: bool = False,
):
    """Batched pixel relevance [B, H, W] for the Vision-Mamba classifier (channels summed).

    Attention methods give patch relevance; it is spread over each patch's pixels."""
    _check_method(method)
    x = torch.as_tensor(pixel_values).float().to(model.pos_embed.device)
    if x.dim() == 3:
        x = x[None]
    args = (_targets(target, x.shape[0]).to(x.device),)
    rules_ = method_rules(method, rules)
    score_value = None
    if method in ("mambalrp", "lrp_ln"):
        rel, score_value = _grad_x_input(vision_scorer(model, rules_, gamma), x, args)
        rel = rel.sum(1)
    elif method in ("gi", "ig", "smoothgrad"):
        rel = _captum(
            method,
            vision_scorer(model),
            x,
            args,
            steps_per_batch=_steps_per_batch(model.mamba, x.shape[0], model.grid**2 + 1),
        ).sum(1)
    elif method in ("attnroll", "mambaattr"):
        with torch.no_grad():
            emb = model.embed(x)
        cap = Capture()
        pos = torch.full((x.shape[0],), emb.shape[1] - 1, dtype=torch.long)
        tok = _hidden_attention_relevance(
            model.mamba, vision_scorer(model, capture=cap, from_embeds=True), emb, args, cap, method, pos
        )[:, :-1]  # drop the class token
        g, p = model.grid, model.patch_size
        rel = tok.reshape(-1, g, g).repeat_interleave(p, 1).repeat_interleave(p, 2)
    else:
        rel = _random(x.shape[:1] + x.shape[2:])
    if return_score:
        if score_value is None:
            with torch.no_grad():
                score_value = vision_scorer(model)(x, *args)
        return rel.float().cpu(), score_value.float().cpu()
    return rel.float().cpu()


def attribute(
    model,
    input_ids=None,
    *,
    inputs_embeds=None,
    pixel_values=None,
    target: int,
    position: int = -1,
    method: str = "mambalrp",
    rules=None,
    gamma: float = 0.0,
) -> torch.Tensor:
    """Relevance of each input token ([seq_len]) — or pixel ([H, W]) for the image model — for the
    logit `target` at `position`. `rules` ⊆ {"norm", "silu", "ssm", "gate"} ablates MambaLRP."""
    if isinstance(model, VisionMamba):
        if pixel_values is None:
            raise ValueError("the image model needs pixel_values")
        return attribute_image(model, pixel_values, target=target, method=method, rules=rules, gamma=gamma)[0]
    return attribute_text(
        model,
        input_ids,
        inputs_embeds=inputs_embeds,
        target=target,
        position=position,
        method=method,
        rules=rules,
        gamma=gamma,
    )[0]


def conservation(model, input_ids, *, target, position=-1, method="mambalrp", rules=None):
    """(Σ relevance, target logit) per example: MambaLRP with zero biases makes them equal."""
    rel, score = attribute_text(
        model, input_ids, target=target, position=position, method=method, rules=rules, return_score=True
    )
    return rel.sum(-1), score


__all__ = [
    "METHODS",
    "LABELS",
    "RULES",
    "SIGNED",
    "attribute",
    "attribute_text",
    "attribute_image",
    "mambalrp_choosing_target",
    "conservation",
    "text_scorer",
    "vision_scorer",
]
