"""The fine-tuning race: LoRA vs PiSSA (vs full fine-tuning), same lr, rank and alpha, several seeds,
streamed step by step as events {method, seed, step, loss, grad_norm}.

A task knows its base model (shared, never modified: each run trains a deep copy), how to draw a
batch and how to compute the loss. All runs of a seed see the same batches; LoRA's random A and
the batch order change with the seed. Steps of all runs are interleaved, so a consumer that draws
curves as events arrive sees the runs advance together.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

import numpy as np
import torch
from torch import nn

from ..core.device import device_of
from .adapters import adapt, clone_model, default_targets
from .results import RaceSummary

RACE_METHODS = ("lora", "pissa", "full")


class Task:
    name = "task"
    default_lr = 1e-3
    default_rank = 8
    default_batch = 32

    def model(self) -> nn.Module:
        raise NotImplementedError

    def targets(self) -> list[str]:
        return default_targets(self.model())

    def batch(self, gen: torch.Generator, size: int):
        raise NotImplementedError

    def loss(self, model: nn.Module, batch) -> torch.Tensor:
        raise NotImplementedError


class DigitsTask(Task):
    """Fine-tune the digits MLP (pre-trained on the odd digits) to the even ones."""

    name = "digits"
    default_lr = 3e-3
    default_rank = 8
    default_batch = 64

    def __init__(self, model: nn.Module, split: dict | None = None):
        from .toy import FINETUNE_CLASSES, load_digits_data, split_indices, subset

        self._model = model
        x, y = load_digits_data()
        split = split or split_indices(y, seed=0)
        self.x, self.y = subset(x, y, split["train"], FINETUNE_CLASSES)
        self.x_test, self.y_test = subset(x, y, split["test"], FINETUNE_CLASSES)

    def model(self):
        return self._model

    def batch(self, gen, size):
        i = torch.randint(0, len(self.x), (size,), generator=gen)
        return self.x[i], self.y[i]

    def loss(self, model, batch):
        x, y = (t.to(device_of(model)) for t in batch)  # the data stays on the host; batches follow the model
        return nn.functional.cross_entropy(model(x), y)


class LMTask(Task):
    """Causal-LM fine-tuning of a Llama-class model on token sequences of a new task.

    `sequences`: a LongTensor (n, T) of token ids; `loss_mask`: (n, T) bool marking the positions
    whose NEXT-token prediction counts (e.g. only the answer), or None for every position."""

    name = "lm"
    default_lr = 1e-3
    default_rank = 8
    default_batch = 16

    def __init__(
        self, model: nn.Module, sequences: torch.Tensor, loss_mask: torch.Tensor | None = None, name: str = "lm"
    ):
        if sequences.dim() != 2 or sequences.shape[1] < 2:
            raise ValueError("sequences must be (n, T) token ids with T ≥ 2")
        self._model = model
        self.seqs = sequences.long()
        self.mask = loss_mask if loss_mask is not None else torch.ones_like(self.seqs, dtype=torch.bool)
        self.name = name

    def model(self):
        return self._model

    def batch(self, gen, size):
        i = torch.randint(0, len(self.seqs), (size,), generator=gen)
        return self.seqs[i], self.mask[i]

    def loss(self, model, batch):
        ids, mask = (t.to(device_of(model)) for t in batch)
        # the loss in float32 as transformers computes it: a half-precision cross-entropy moves in
        # steps of 0.004 near 7 and turns the race's curves into stairs
        logits = model(input_ids=ids).logits[:, :-1].float()
        target = ids[:, 1:]
        m = mask[:, :-1] if mask.shape[1] == ids.shape[1] else mask
        ce = nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), target.reshape(-1), reduction="none"
        ).view_as(target)
        m = m.to(ce.dtype)
        return (ce * m).sum() / m.sum().clamp_min(1.0)


@dataclass
class RaceConfig:
    methods: tuple[str, ...] = ("lora", "pissa")
    seeds: tuple[int, ...] = (0, 1, 2)
    steps: int = 100
    lr: float | None = None
    rank: int | None = None
    alpha: float | None = None  # default: = rank (scaling 1)
    batch: int | None = None
    niter: int | None = None  # PiSSA fast SVD ("pissa_niter_N") when set
    max_grad_norm: float | None = None

    def validate(self):
        bad = [m for m in self.methods if m not in RACE_METHODS]
        if bad or not self.methods:
            raise ValueError(f"methods must be a non-empty subset of {RACE_METHODS}; got {list(self.methods)}")
        if not self.seeds:
            raise ValueError("at least one seed is needed")
        if not 1 <= int(self.steps) <= 5000:
            raise ValueError("steps must be between 1 and 5000")
        if self.lr is not None and not (0 < self.lr < 1):
            raise ValueError("learning rate must be in (0, 1)")
        if self.rank is not None and not 1 <= self.rank <= 256:
            raise ValueError("rank must be between 1 and 256")


@dataclass
class Run:
    method: str
    seed: int
    model: nn.Module
    opt: torch.optim.Optimizer
    gen: torch.Generator
    params: list = field(default_factory=list)
    losses: list = field(default_factory=list)
    grad_norms: list = field(default_factory=list)


def make_run(
    task: Task,
    method: str,
    seed: int,
    rank: int,
    alpha: float,
    lr: float,
    niter: int | None = None,
    targets: list[str] | None = None,
) -> Run:
    base = task.model()
    if method == "full":
        model = clone_model(base)
        # Adam on half-precision weights overflows within a step or two (its second moment
        # underflows to zero); full fine-tuning keeps float32 master weights as mixed precision
        # does. Adapters need nothing: peft already keeps them in float32 over a half base.
        if any(p.dtype in (torch.float16, torch.bfloat16) for p in model.parameters()):
            model = model.float()
        for p in model.parameters():
            p.requires_grad_(True)
    else:
        model = adapt(
            base,
            "lora" if method == "lora" else "pissa",
            rank=rank,
            alpha=alpha,
            targets=targets or task.targets(),
            seed=seed,
            niter=niter,
        )
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    return Run(method, seed, model, opt, torch.Generator().manual_seed(1000 + seed), params)


def train_step(task: Task, run: Run, batch_size: int, max_grad_norm: float | None = None):
    batch = task.batch(run.gen, batch_size)
    loss = task.loss(run.model, batch)
    run.opt.zero_grad(set_to_none=True)
    loss.backward()
    grads = [p.grad for p in run.params if p.grad is not None]
    gnorm = float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))) if grads else 0.0
    if max_grad_norm:
        torch.nn.utils.clip_grad_norm_(run.params, max_grad_norm)
    run.opt.step()
    value = float(loss.detach())
    run.losses.append(value)
    run.grad_norms.append(gnorm)
    return value, gnorm


def race_bytes(model: nn.Module, cfg: RaceConfig) -> int:
    """Memory a race needs beside the shared base: every run trains its own copy of the model; a full
    fine-tuning run also keeps float32 weights, their gradients and Adam's two moments. Adapter
    parameters are a rounding error at the ranks the tab offers."""
    base = sum(t.numel() * t.element_size() for t in list(model.parameters()) + list(model.buffers()))
    n = sum(p.numel() for p in model.parameters())
    per_method = {"lora": base, "pissa": base, "full": base + 16 * n}
    return sum(per_method[m] for m in cfg.methods) * len(cfg.seeds)


def available_bytes(device: torch.device) -> int | None:
    """Free memory where the runs will live: the GPU's free memory, or the host's available RAM."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        with open("/proc/meminfo") as f:
            info = dict(line.split(":", 1) for line in f)
        return int(info["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return None


def check_fits(model: nn.Module, cfg: RaceConfig) -> None:
    """Refuse a race whose copies cannot fit (a 7B model is 13.5 GB a copy in fp16: 2 methods x 3 seeds
    would need 81 GB), naming what would, rather than failing half-way with out-of-memory."""
    need, free = race_bytes(model, cfg), available_bytes(device_of(model))
    if free is None or need <= 0.9 * free:
        return
    per_seed = need // len(cfg.seeds)
    fits = int(0.9 * free // per_seed) if per_seed else 0
    hint = (
        f"at most {fits} seed{'s' if fits != 1 else ''} with these methods fit"
        if fits
        else "not even one seed of these methods fits: drop full fine-tuning or use a smaller model"
    )
    raise ValueError(
        f"This race needs about {need / 2**30:.1f} GiB for its {len(cfg.methods) * len(cfg.seeds)} "
        f"model copies, and {free / 2**30:.1f} GiB are free on {device_of(model).type}: {hint}."
    )


def race(
    task: Task,
    cfg: RaceConfig,
    stop: threading.Event | Callable[[], bool] | None = None,
) -> Iterator[dict]:
    """Yield {"setup": i, "of": n} while the runs are built, then {"method", "seed", "step", "loss",
    "grad_norm", "elapsed_s"} for every step of every run (runs interleaved step by step), then one
    {"done": True, "stopped": bool, "summary": ...} event."""
    cfg.validate()
    check_fits(task.model(), cfg)
    rank = int(cfg.rank or task.default_rank)
    alpha = float(cfg.alpha if cfg.alpha is not None else rank)
    lr = float(cfg.lr or task.default_lr)
    bs = int(cfg.batch or task.default_batch)
    should_stop = stop.is_set if isinstance(stop, threading.Event) else (stop or (lambda: False))
    t0 = time.perf_counter()
    runs = []
    plan = [(m, s) for s in cfg.seeds for m in cfg.methods]
    for i, (m, s) in enumerate(plan):
        if should_stop():
            break
        runs.append(make_run(task, m, s, rank, alpha, lr, cfg.niter))
        yield {"setup": i + 1, "of": len(plan), "elapsed_s": time.perf_counter() - t0}
    stopped = len(runs) < len(plan)
    if stopped:
        runs = []
    for step in range(1, int(cfg.steps) + 1 if runs else 1):
        for run in runs:
            if should_stop():
                stopped = True
                break
            loss, gnorm = train_step(task, run, bs, cfg.max_grad_norm)
            if not math.isfinite(loss):
                raise FloatingPointError(f"{run.method} (seed {run.seed}) diverged at step {step}; lower the lr")
            yield {
                "method": run.method,
                "seed": run.seed,
                "step": step,
                "loss": loss,
                "grad_norm": gnorm,
                "elapsed_s": time.perf_counter() - t0,
            }
        if stopped:
            break
    yield {
        "done": True,
        "stopped": stopped,
        "summary": summarize(runs, planned=int(cfg.steps), rank=rank, alpha=alpha, lr=lr, batch=bs, task=task.name),
    }


def summarize(runs: list[Run], planned: int | None = None, **settings) -> RaceSummary:
    """The losses at the last step every run completed and whether PiSSA ends below LoRA. A stopped
    race has runs one step apart (they are interleaved): every comparison uses the steps all runs
    completed, `steps_run` of `planned`; `loss_at_steps_run` is each run's loss at step `steps_run`
    (the final loss only where the race ran to its end, so it is not called that)."""
    done = min((len(r.losses) for r in runs), default=0)
    by: dict[str, dict[int, list[float]]] = {}
    for r in runs:
        by.setdefault(r.method, {})[r.seed] = r.losses[:done]
    out: RaceSummary = {
        "settings": settings,
        "steps_run": done,
        "steps_planned": planned if planned is not None else done,
        "loss_at_steps_run": {},
        "mean_loss_last10": {},
        "trainable_params": {},
    }
    for r in runs:
        out["trainable_params"][r.method] = sum(p.numel() for p in r.params)
    for m, seeds in by.items():
        out["loss_at_steps_run"][m] = {str(s): (ls[-1] if ls else None) for s, ls in seeds.items()}
        out["mean_loss_last10"][m] = (
            float(np.mean([np.mean(ls[-10:]) for ls in seeds.values() if ls])) if any(seeds.values()) else None
        )
    if "lora" in by and "pissa" in by:
        common = [s for s in by["pissa"] if s in by["lora"] and by["pissa"][s] and by["lora"][s]]
        wins = [s for s in common if _smoothed_last(by["pissa"][s]) < _smoothed_last(by["lora"][s])]
        out["pissa_beats_lora"] = {"seeds": len(common), "wins": len(wins)}
    return out


def _smoothed_last(losses: list[float], k: int = 5) -> float:
    return float(np.mean(losses[-k:]))


def loss_at(losses: list[float], step: int, k: int = 5) -> float:
    """Mean training loss over the k steps ending at `step` (1-based), smoothing batch noise."""
    return float(np.mean(losses[max(0, step - k) : step]))
