"""What the Adapters tab computes, as plain functions (no gradio).

Models are shared (loaded once per process through the preset's `from_pretrained`) and never
modified: weights are read under the model's lock, adapters are built on deep copies. Results are
cached per (model, layer, rank, settings) in bounded byte caches.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import torch

from ..core import limits, loadgate
from ..core import picker
from ..core import preload, weights
from ..core.cache import ByteLRUCache, make_key
from ..core.device import pick_device
from ..core.interventions import locked
from ..core.stopflag import StopFlag
from ..core.zerogpu import capped, gpu
from ..core.presets import ZOO_ROOT, Preset, import_class, load_pretrained, presets
from . import PRESETS, TAB  # noqa: F401  (importing the package registers the presets)
from .adapters import linear_layers
from .decompose import error_reduction_ratio, pissa_split, singular_spectrum
from .race import DigitsTask, LMTask, RaceConfig, race
from .results import ErrorRow, ErrorTable, LayerAnalysis

RESULTS = ByteLRUCache(32 * 2**20, name="pissa-results")
ERROR_VARIANTS = (("qlora", 1), ("loftq", 1), ("loftq", 5), ("qpissa", 1), ("qpissa", 5))
HEATMAP_RANKS = (1, 2, 4, 8, 16, 32, 64)
MAX_HIST = 20000


class ServiceError(ValueError):
    """Bad input the UI shows as a message."""


# --- models ------------------------------------------------------------------------------------
def _zoo_built(p: Preset) -> bool:
    return p.source != "zoo" or (ZOO_ROOT / p.path_or_id / "manifest.json").exists()


def available(source: str = "zoo") -> list[Preset]:
    """The tab's presets usable now: the source's own first, then built zoo organisms."""
    mine = [p for p in presets(TAB) if p.source == source and _zoo_built(p)]
    zoo = [p for p in presets(TAB) if p.source == "zoo" and _zoo_built(p) and p not in mine]
    return mine + zoo


def choices(source: str = "zoo") -> list[tuple[str, str]]:
    return [(f"{p.label} [{p.source}]", p.path_or_id) for p in available(source)]


def listed(source: str = "zoo") -> list[Preset]:
    """What the model picker lists: the source's presets first, then the zoo's, then the papers'
    checkpoints (listed in every mode; without the hub they fail to load with a clear message).
    Anything else the user types is their own model (backend.core.picker)."""
    first = available(source)
    return first + [p for p in presets(TAB) if p.source == "hub" and p not in first]


def pick(key: str) -> picker.Picked:
    """A listed preset or the user's own model (any transformers model with linear layers),
    checked from metadata before anything loads."""
    for p in presets(TAB):
        if p.path_or_id == key and not _zoo_built(p):
            raise ServiceError(f"the zoo model {key!r} is not built yet")
    if not key:
        raise ServiceError("Pick a model first.")
    try:
        return picker.resolve(key, presets(TAB), "adapters", tab=TAB)
    except picker.P.PresetError as e:
        raise ServiceError(str(e)) from None


def preset_for(key: str) -> Preset:
    return pick(key).preset


def _shared(key: str, fetch: Callable):
    """`fetch(preset, size)` for the picked model, a failed load as the message the tab shows."""
    picked = pick(key)
    p, size = picked.preset, picked.check.n_bytes if picked.check else None
    try:
        with picker.loading(p):
            return fetch(p, size)
    except picker.P.PresetError as e:
        raise ServiceError(str(e)) from None


def get_model(key: str, progress: Callable[[float, str], None] | None = None):
    """The picked model: the one copy every tab shares (backend.core.weights), never modified here."""
    return _shared(key, lambda p, size: weights.model(p, size, progress))


def _view(key: str, part: str, derive: Callable):
    """The tab's `part` of the picked model's entry (its tokenizer, the race's task data): made once
    per loaded model, and gone with it."""
    return _shared(key, lambda p, size: weights.view(p, f"{TAB}.{part}", derive, size=size))


preload.register(TAB, weights.model, pick)


def get_tokenizer(key: str):
    p = preset_for(key)

    def load(_model):
        from transformers import AutoTokenizer

        roots = [ZOO_ROOT] if p.source == "zoo" else None
        try:
            return load_pretrained(AutoTokenizer, p.location(), weights=False, roots=roots)
        except (OSError, ValueError) as e:
            # the race's text task needs one; the spectra and error tables do not
            raise ServiceError(
                f"{picker.label(p)} has no tokenizer the race's text task can use "
                f"({type(e).__name__}); its layers can still be analysed"
            ) from None

    return _view(key, "tokenizer", load)


def layer_names(key: str, progress: Callable[[float, str], None] | None = None) -> list[str]:
    return list(linear_layers(get_model(key, progress)))


def config_layer_names(key: str) -> list[str]:
    """The adaptable layers of a transformers checkpoint from its config alone: the model is built on
    the meta device (no weights read, no memory), so a page lists a hub model's layers before its
    first use loads it. [] where the config cannot be read (not in the cache offline)."""
    from transformers import AutoConfig

    try:
        p = preset_for(key)
        config = load_pretrained(
            AutoConfig,
            p.location() if p.source == "zoo" else p.path_or_id,
            weights=False,
            roots=[ZOO_ROOT] if p.source == "zoo" else None,
        )
        # torch's device context is per thread; accelerate's init_empty_weights patches nn.Module for
        # the whole process, so a computation running beside it would build meta parameters
        with torch.device("meta"):
            model = import_class(p.model_class)(config)
    except Exception:  # noqa: BLE001 - the list fills on first use instead
        return []
    return list(linear_layers(model))


def _weight(key: str, layer: str) -> torch.Tensor:
    model = get_model(key)
    layers = linear_layers(model)
    if layer not in layers:
        raise ServiceError(f"no adaptable linear layer {layer!r} in {key}")
    with locked(model):
        w = layers[layer].weight.detach().float().clone()
    # SVDs of a hub checkpoint's 4096-wide matrices belong on the accelerator when there is one
    return w.to(pick_device())


def check_rank(rank, w: torch.Tensor, name: str | None = None) -> int:
    try:
        rank = int(rank)
    except (TypeError, ValueError, OverflowError):  # None, a word, NaN, ±inf
        raise ServiceError("rank must be a whole number") from None
    if not 1 <= rank <= min(w.shape):
        layer = f"the {tuple(w.shape)} layer {name}" if name else f"a {tuple(w.shape)} layer"
        raise ServiceError(f"rank must be between 1 and {min(w.shape)} for {layer}")
    return rank


# --- one layer: spectrum, PiSSA split, histograms -----------------------------------------------
@gpu(duration=30)  # one full SVD + one PiSSA init of a single matrix
def layer_analysis(key: str, layer: str, rank: int, init: str = "pissa") -> LayerAnalysis:
    w = _weight(key, layer)
    rank = check_rank(rank, w)
    if not (init == "pissa" or init.startswith("pissa_niter_")):
        raise ServiceError("init must be 'pissa' or 'pissa_niter_N'")
    p = preset_for(key)
    ck = make_key(p.model_id, (layer,), {"rank": rank, "init": init, "what": "layer"}, revision=p.revision)

    def compute() -> LayerAnalysis:
        t0 = time.perf_counter()
        sv = singular_spectrum(w).cpu()
        split = pissa_split(w, rank, init=init)
        res_sv = singular_spectrum(split.residual).cpu()
        rel = float((split.residual + split.principal() - w).norm() / w.norm())
        # the adapted layer's output at init vs the base layer's, on random inputs
        x = torch.randn(64, w.shape[1], generator=torch.Generator().manual_seed(0)).to(w.device)
        base_out = x @ w.T
        adapted = x @ split.residual.T + split.scaling * (x @ split.lora_A.T) @ split.lora_B.T
        gap = float((adapted - base_out).abs().max() / base_out.abs().max().clamp_min(1e-12))
        g = torch.Generator().manual_seed(1)
        flat_w, flat_r = w.reshape(-1).cpu(), split.residual.reshape(-1).cpu()
        if flat_w.numel() > MAX_HIST:
            idx = torch.randperm(flat_w.numel(), generator=g)[:MAX_HIST]
            flat_w, flat_r = flat_w[idx], flat_r[idx]
        energy = float((sv[:rank] ** 2).sum() / (sv**2).sum())
        return {
            "model": key,
            "layer": layer,
            "shape": list(w.shape),
            "rank": rank,
            "init": init,
            "singular_values": sv.tolist(),
            "residual_singular_values": res_sv.tolist(),
            "energy_top_r": energy,
            "reconstruction_rel_error": rel,
            "init_output_rel_gap": gap,
            "w_sample": flat_w.numpy(),
            "w_res_sample": flat_r.numpy(),
            "w_absmax": float(w.abs().max()),
            "w_res_absmax": float(split.residual.abs().max()),
            "w_std": float(w.std()),
            "w_res_std": float(split.residual.std()),
            "seconds": time.perf_counter() - t0,
        }

    return RESULTS.get_or_compute(ck, compute)


# --- quantization error over layers and ranks ---------------------------------------------------
@gpu(
    duration=lambda key, rank=8, layers=None, ranks=HEATMAP_RANKS, heat_method=("qpissa", 1), max_layers=64, *a, **k: (
        capped(10 + min(len(layers) if layers else max_layers, max_layers) * (1 + 0.3 * len(ranks)))
    )
)
def error_table(
    key: str,
    rank: int,
    layers: list[str] | None = None,
    ranks=HEATMAP_RANKS,
    heat_method: tuple[str, int] = ("qpissa", 1),
    max_layers: int = 64,
    progress: Callable[[float, str], None] | None = None,
) -> ErrorTable:
    """Error-reduction ratios per layer at `rank` for QLoRA, LoftQ-1/5, QPiSSA-1/5, and a heatmap
    of one method's ratio over layers × ranks."""
    model = get_model(key)
    names = layers or list(linear_layers(model))
    unknown = [n for n in names if n not in linear_layers(model)]
    if unknown:
        raise ServiceError(f"unknown layers: {unknown[:3]}")
    names = names[:max_layers]
    if heat_method[0] not in ("qlora", "loftq", "qpissa"):
        raise ServiceError("heatmap method must be qlora, loftq or qpissa")
    p = preset_for(key)
    ck = make_key(
        p.model_id,
        tuple(names),
        {"rank": int(rank), "ranks": tuple(ranks), "heat": tuple(heat_method), "what": "errors"},
        revision=p.revision,
    )
    cached = RESULTS.get(ck)
    if cached is not None:
        return cached
    rows: list[ErrorRow] = []
    heat: list[list[float | None]] = []
    fitting: list[dict[str, float]] = []  # the ratios of the layers the rank fits
    for i, name in enumerate(limits.Steps("the error table").each(names)):
        if progress:
            progress(i / max(1, len(names)), f"layer {name}")
        w = _weight(key, name)
        fits = 1 <= int(rank) <= min(w.shape)  # a rank above the layer's own is "n/a" there
        r = (
            {
                f"{method}-{iters}" if method != "qlora" else "qlora": error_reduction_ratio(
                    w, int(rank), method, iters
                )
                for method, iters in ERROR_VARIANTS
            }
            if fits
            else {}
        )
        if fits:
            fitting.append(r)
        rows.append(
            {
                "layer": name,
                "shape": list(w.shape),
                "qlora": r.get("qlora"),
                "loftq-1": r.get("loftq-1"),
                "loftq-5": r.get("loftq-5"),
                "qpissa-1": r.get("qpissa-1"),
                "qpissa-5": r.get("qpissa-5"),
            }
        )
        heat.append([error_reduction_ratio(w, k, *heat_method) if k <= min(w.shape) else None for k in ranks])
    if not fitting:
        raise ServiceError(f"rank {rank} is larger than every selected layer allows")
    out: ErrorTable = {
        "model": key,
        "rank": int(rank),
        "rows": rows,
        "heatmap": {
            "method": f"{heat_method[0]}-{heat_method[1]}",
            "layers": names,
            "ranks": list(ranks),
            "values": heat,
        },
        "summary": {
            "layers": len(fitting),
            "skipped_layers": [r["layer"] for r in rows if r["qlora"] is None],
            "qpissa1_beats_loftq1": sum(r["qpissa-1"] > r["loftq-1"] for r in fitting),
            "qpissa5_beats_loftq1": sum(r["qpissa-5"] > r["loftq-1"] for r in fitting),
            "mean": {k: float(np.mean([r[k] for r in fitting])) for k in fitting[0]},
        },
    }
    RESULTS.put(ck, out)
    return out


# --- the race -----------------------------------------------------------------------------------
def task_for(key: str):
    p = preset_for(key)
    model = get_model(key)
    if p.extra.get("task") == "digits":

        def digits(model):
            splits = None
            if p.source == "zoo":
                f = Path(p.location()) / "splits.json"
                if f.exists():
                    splits = json.loads(f.read_text())
            return DigitsTask(model, splits)

        return _view(key, "task", digits)

    def data(_model):
        from .lm_task import difference_task_data

        return difference_task_data(get_tokenizer(key), n=512, seed=0)

    ids, mask = _view(key, "task", data)
    return LMTask(model, ids, mask, name="difference")


def request_stop(session: str, wait_s: float = 0.0) -> str:
    """Stop the session's race after its current step, and wait up to `wait_s` for it to end.

    Returns "idle" (no race was running), "stopped" (it has ended) or "stopping" (still finishing
    its step after `wait_s`). The flag is seen across processes (backend.core.stopflag): under
    ZeroGPU the race runs in a GPU worker while Stop is handled in the server."""
    flag = StopFlag(session)
    if not flag.request():
        return "idle"
    deadline = time.perf_counter() + max(0.0, float(wait_s))
    while flag.running():
        if time.perf_counter() >= deadline:
            return "stopping"
        time.sleep(0.02)
    return "stopped"


_END = object()
RACE_BACKLOG = 32  # steps the race's worker may run ahead of its consumer
# The race's training ends this long before the request's deadline: its consumer still draws the
# steps left in the backlog and the final figure, and writes the exports, within the limit (the
# export's PNG alone took 2.5 s on the 2-core machine loaded by two busy processes; with 2 s the race
# then ended 0.3 s past a 15 s limit).
RACE_WIND_DOWN_S = 3.0


@gpu(duration=lambda key, cfg, *a, **k: capped(20 + 0.02 * cfg.steps * len(cfg.methods) * len(cfg.seeds)))
def race_stream(key: str, cfg: RaceConfig, session: str = "local", heartbeat_s: float = 0.5) -> Iterator[dict]:
    """The race's events for one session; `request_stop(session)` ends it after the current step.

    The race runs in a worker thread; while it is busy (loading a model, building runs) this yields
    {"heartbeat": True} every `heartbeat_s`, so a consumer always hears from it in time."""
    try:
        cfg.validate()
    except ValueError as e:
        raise ServiceError(str(e)) from None
    preset_for(key)
    deadline = limits.deadline()  # the request's time limit: the race ends there, as at a Stop
    limit_s = limits.limit_s()
    flag = StopFlag(session).start()
    # the runs' setups, then the training's steps, timed: the race ends before one that would not fit
    # (a setup takes longer than a step: each phase is guessed from its own)
    end_by = None if deadline is None else deadline - RACE_WIND_DOWN_S
    steps = [limits.Steps("the race's setup", end_by, limit_s)]
    timed_out = threading.Event()

    def stop() -> bool:
        if flag.is_set():
            return True
        if not steps[-1].next_fits():
            timed_out.set()
        return timed_out.is_set()

    # Events pass in batches: one hand-over between the threads per batch, not per step (per-step
    # hand-overs under the GIL the training holds let the consumer fall seconds behind). The batch
    # is bounded, so what the consumer shows is never more than two batches (2 x RACE_BACKLOG
    # steps: one being shown, one filling) behind the training.
    pending: list = []
    cond = threading.Condition()
    gone = threading.Event()  # the consumer left: nobody takes batches any more
    t0 = time.perf_counter()

    def put(ev) -> None:
        with cond:
            # a Stop does not wait for a consumer busy drawing: the training goes on to its next
            # stop check (and ends) while the batch grows by the few events of the ending
            while len(pending) >= RACE_BACKLOG and not gone.is_set() and not flag.is_set():
                cond.wait(0.05)
            pending.append(ev)
            if len(pending) == 1:
                cond.notify_all()

    def work():
        try:
            # the request's deadline holds in this thread too: its waits at the load gate end there
            with limits.until(deadline, limit_s):
                task = task_for(key)
                # each training step is a model computation: a load elsewhere waits for it, not for the race
                for ev in loadgate.gated_iter(race(task, cfg, stop=stop)):
                    if ev.get("done") and ev.get("stopped") and timed_out.is_set():
                        ev = {**ev, "time_limit_s": limit_s}
                    if ev.get("setup") and ev["setup"] == ev.get("of"):
                        steps.append(limits.Steps("the race", end_by, limit_s))
                    put(ev)
        except BaseException as e:  # handed to the consumer
            put({"error": e})
        finally:
            # the race is over when its training ends, not when the consumer has drawn and
            # exported it: a Stop waiting on the flag hears so at once
            flag.finish()
            put(_END)

    worker = threading.Thread(target=work, name=f"pissa-race-{session}", daemon=True)
    worker.start()
    try:
        while True:
            with cond:
                if not pending:
                    cond.wait(timeout=heartbeat_s)
                batch = pending[:]
                pending.clear()
                cond.notify_all()  # room again for a worker waiting on a full batch
            if not batch:
                yield {"heartbeat": True, "elapsed_s": time.perf_counter() - t0}
                continue
            for ev in batch:
                if ev is _END:
                    return
                if "error" in ev:
                    err = ev["error"]
                    raise (ServiceError(str(err)) if isinstance(err, ValueError) else err)
                yield ev
    finally:
        flag.set()  # a consumer that went away (closed tab, cancelled job) stops the worker too
        gone.set()
        with cond:
            cond.notify_all()
        worker.join(timeout=30)
        flag.finish(keep_stop=worker.is_alive())  # a worker still busy keeps seeing the stop
