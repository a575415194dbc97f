"""Interventions as scoped contexts: applied on entry, restored exactly in `finally`.

Every context names its target by (model, submodule name), takes the model's re-entrant lock for its
whole duration, and removes its hooks / restores its weights even when the body raises. A caller
that reads a shared model without intervening takes the same lock with `locked(model)`, so it never
sees another request's intervention half-applied. The lock is how model calls queue per model: the
app runs several model calls at once (components.common), two on different models side by side,
two on the same model one after the other. The values passed in (channel lists, masks,
factors) are small descriptors a UI can keep in its state; no model is ever left modified.
"""

from __future__ import annotations

import threading
import weakref
from contextlib import ExitStack, contextmanager
from typing import Callable, Iterable, Iterator, Mapping, Sequence

import torch
from torch import nn

from . import limits, loadgate


class ModelLock:
    """A model's re-entrant lock. A call that has to wait for it (another request computes on the
    model) steps out of the load gate while it waits (backend.core.loadgate): a waiting call computes
    nothing, so a load of another model need not wait for it. The wait ends at the request's
    deadline (backend.core.limits)."""

    def __init__(self):
        self._lock = threading.RLock()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if self._lock.acquire(blocking=False):
            return True
        if not blocking:
            return False
        left = limits.remaining()
        bounded = timeout < 0 and left is not None  # the wait ends at the request's deadline
        with loadgate.waiting():
            got = self._lock.acquire(timeout=max(left, 0.0) if bounded and left is not None else timeout)
        if not got and bounded:
            raise limits.JobTooLong(
                f"The wait for another request's computation on this model ran past "
                f"{limits.limit_words()}; try again when the server is less busy. "
                "Nothing was computed."
            )
        return got

    def release(self) -> None:
        self._lock.release()

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


_LOCKS: "weakref.WeakKeyDictionary[nn.Module, ModelLock]" = weakref.WeakKeyDictionary()
_LOCKS_GUARD = threading.Lock()


def model_lock(model: nn.Module) -> ModelLock:
    with _LOCKS_GUARD:
        lock = _LOCKS.get(model)
        if lock is None:
            lock = _LOCKS[model] = ModelLock()
        return lock


@contextmanager
def locked(model: nn.Module) -> Iterator[nn.Module]:
    with model_lock(model):
        yield model


def _ours(hook) -> bool:
    """Whether a hook is the workbench's (or anyone's but transformers'): transformers 5 puts its
    own output-capturing forward hooks on a model at its first forward that asks for hidden states
    or attentions, and they stay as part of the loaded model."""
    fn = getattr(hook, "__func__", hook)
    return not str(getattr(fn, "__module__", "") or "").startswith("transformers.")


def count_hooks(model: nn.Module) -> int:
    """Forward, pre-forward and backward hooks on every submodule that someone other than
    transformers itself put there (0 when no intervention is left behind)."""
    n = 0
    for m in model.modules():
        for hooks in (m._forward_hooks, m._forward_pre_hooks, m._backward_hooks, getattr(m, "_backward_pre_hooks", {})):
            n += sum(1 for h in hooks.values() if _ours(h))
    return n


def _edit_first(output, fn: Callable[[torch.Tensor], torch.Tensor]):
    # Decoder layers and attention blocks may return tuples; the hidden state comes first.
    if isinstance(output, torch.Tensor):
        return fn(output)
    if isinstance(output, tuple) and output and isinstance(output[0], torch.Tensor):
        return (fn(output[0]),) + tuple(output[1:])
    if hasattr(output, "last_hidden_state"):  # ModelOutput
        output.last_hidden_state = fn(output.last_hidden_state)
        return output
    raise TypeError(f"cannot edit a module output of type {type(output).__name__}")


@contextmanager
def edit_output(model: nn.Module, name: str, fn: Callable[[torch.Tensor], torch.Tensor]):
    """Replace the output of `model.<name>` by `fn(output)` for the duration of the context."""
    module = model.get_submodule(name)
    with model_lock(model):
        handle = module.register_forward_hook(lambda _m, _i, out: _edit_first(out, fn))
        try:
            yield model
        finally:
            handle.remove()


def _channel_index(channels: Sequence[int], size: int, device) -> torch.Tensor:
    idx = torch.as_tensor(list(channels), dtype=torch.long, device=device)
    if idx.numel() and (idx.min() < -size or idx.max() >= size):
        raise IndexError(f"channel out of range for a layer of {size} channels")
    return idx


@contextmanager
def scale_channels(model: nn.Module, name: str, channels: Sequence[int], factor: float = 0.0):
    """Multiply chosen output channels (last dimension) of `model.<name>` by `factor`."""

    def fn(out: torch.Tensor) -> torch.Tensor:
        idx = _channel_index(channels, out.shape[-1], out.device)
        scale = torch.ones(out.shape[-1], dtype=out.dtype, device=out.device)
        scale[idx] = factor
        return out * scale

    with edit_output(model, name, fn):
        yield model


def zero_channels(model: nn.Module, name: str, channels: Sequence[int]):
    return scale_channels(model, name, channels, 0.0)


@contextmanager
def scale_channels_many(model: nn.Module, spec: Mapping[str, Sequence[int]], factor: float = 0.0):
    """`scale_channels` over several layers at once: {layer name: [channel, ...]}."""
    with ExitStack() as stack:
        stack.enter_context(model_lock(model))
        for name, channels in spec.items():
            if len(channels):
                stack.enter_context(scale_channels(model, name, channels, factor))
        yield model


_INDEX_CACHE: dict[int, tuple["weakref.ref[torch.Tensor]", int, torch.Tensor | None]] = {}


def indexable(n_masked: int, numel: int) -> bool:
    """Whether a mask of `n_masked` entries in a matrix of `numel` is addressed by int32 positions:
    positions (4 B) plus the saved fp32 values (4 B) stay within a byte per entry up to density 1/8."""
    return 8 * n_masked <= numel < 2**31


def flat_index(mask: torch.Tensor) -> torch.Tensor | None:
    """The flat positions of a bool mask as int32, cached per mask tensor while it lives and is not
    modified in place (its version counter is checked): a UI that toggles between a few cached masks
    pays the nonzero() once. None when the positions would cost more than a byte per entry of the
    matrix (a mask denser than 1/8): such masks are addressed by the mask itself."""
    key = id(mask)
    hit = _INDEX_CACHE.get(key)
    if hit is not None and hit[0]() is mask and hit[1] == mask._version:
        return hit[2]
    idx = mask.reshape(-1).nonzero().squeeze(1).to(torch.int32) if indexable(int(mask.sum()), mask.numel()) else None
    ref = weakref.ref(mask, lambda _r: _INDEX_CACHE.pop(key, None))
    _INDEX_CACHE[key] = (ref, mask._version, idx)
    return idx


@contextmanager
def scale_weights(model: nn.Module, masks: Mapping[str, torch.Tensor], factor: float):
    """Multiply the masked entries of named parameters by `factor` in place (0 prunes).

    Only the masked entries are saved, so the extra memory is the size of what changes, and the
    restore writes the saved values back: bit-identical, whatever the factor. A sparse mask (at most
    1/8 of a matrix) is addressed by cached int32 positions, about 6x faster than boolean indexing;
    a denser one by the mask itself, so values plus positions never exceed a byte per parameter
    until the values alone do (fp32, a quarter of the matrix).
    """
    params = dict(model.named_parameters())
    for name, mask in masks.items():
        if name not in params:
            raise KeyError(f"no parameter named {name!r}")
        if mask.shape != params[name].shape or mask.dtype != torch.bool:
            raise ValueError(f"mask for {name!r} must be a bool tensor of shape {tuple(params[name].shape)}")
        if not params[name].is_contiguous():
            raise ValueError(f"parameter {name!r} is not contiguous")
    saved: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
    with model_lock(model), torch.no_grad():
        try:
            for name, mask in masks.items():
                flat = params[name].data.view(-1)
                idx = flat_index(mask)
                sel = (idx if idx is not None else mask.reshape(-1)).to(flat.device)
                orig = flat[sel]  # a copy of the masked entries only
                saved.append((flat, sel, orig))
                flat[sel] = orig * factor
            yield model
        finally:
            for flat, sel, orig in reversed(saved):
                flat[sel] = orig


@contextmanager
def steer(
    model: nn.Module,
    name: str,
    direction: torch.Tensor,
    value: float,
    *,
    mode: str = "add",
    positions: Iterable[int] | slice | None = None,
):
    """Move the output of `model.<name>` along `direction`.

    mode "add":   h ← h + value · d̂
    mode "clamp": h ← h + (value − ⟨h, d̂⟩) · d̂   (the component along d̂ is set to `value`)
    `positions` limits the edit to those sequence positions (dimension -2).
    """
    if mode not in ("add", "clamp"):
        raise ValueError(f"mode must be 'add' or 'clamp', not {mode!r}")
    d = direction.detach().flatten()
    norm = d.norm()
    if not torch.isfinite(norm) or norm == 0:
        raise ValueError("steering direction must be finite and non-zero")
    d = d / norm

    def fn(out: torch.Tensor) -> torch.Tensor:
        u = d.to(out.device, out.dtype)
        if mode == "add":
            delta = value * u.expand_as(out)
        else:
            delta = (value - out @ u).unsqueeze(-1) * u
        if positions is None:
            return out + delta
        keep = torch.zeros(out.shape[-2], dtype=torch.bool, device=out.device)
        keep[positions if isinstance(positions, slice) else list(positions)] = True
        return out + delta * keep.unsqueeze(-1).to(out.dtype)

    with edit_output(model, name, fn):
        yield model
