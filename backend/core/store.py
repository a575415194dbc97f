"""Models loaded once per process and shared by every request (read-only; see interventions).

With WORKBENCH_CHECK_WEIGHTS=1 (set by the api tests) a fingerprint of every model's weights is
taken at load time, so a check after each request can prove that no weight changed and no hook
was left behind.

Byte budget. The store holds about WORKBENCH_MODEL_BUDGET bytes of models ("8GB", "512MiB", a plain
number of bytes; "none" for no limit; by default 80 % of the GPU's memory, or 60 % of the machine's
RAM without one). A model's bytes are its tensors (parameters and buffers of its nn.Modules, each
storage once, on any device); tokenizers and data count as nothing and are never evicted. Before
and after every load the least recently used models that no request is using are evicted until the
rest fits, so the store exceeds its budget by at most the model being loaded. A model larger than
the whole budget is kept alone, and stays loaded (the most recently used entry is never evicted
just to fit) until another model is needed: then it goes before that one loads. Every request that
loads it hears why (`notes()`: the tabs show it). A model in use is never evicted, so concurrent
requests that hold different models can push the store past its budget until they end (the log
says so).

One entry per weights, views per tab. An entry holds one loaded model (its tensors), whichever tabs
use it. What a tab derives from it (the model with its tokenizer, an LRP wrapper, a MathNeuro
bench, a task's data) is a *view*, `get_view(model_id, name, loader, derive)`, kept in the entry
under the view's name: no tab can receive another tab's type under a shared id, the weights are
counted once, a view's own tensors (beyond the model's) are added to its entry's bytes, and the
views leave with their entry.

Request scopes. components.serving.guard opens `request_scope()` around every event handler (and
`scoped_iter` / `scoped_aiter` of backend.core.streamscope around streams, whose steps may run in
different threads). Every `get_or_load` inside a scope marks its model as in use until the scope
ends; the scope is a context variable, so a thread started with a copy of the context shares it.
Outside any scope (a notebook, the CLI) a model is in use only during the call that returns it.

Load progress. A first load of a paper's checkpoint takes long enough that whoever waits must see
it: inside `load_progress(report)` (components.serving.guard opens one per request, on the handler's
progress bar) every load calls `report(fraction, "loading <model> (n of N shards)")` as its weight
files are read (presets.load_pretrained → prefetch.read_shards), and "loaded <model> in s" at the end
(backend.core.loadprogress). The budget is read in backend.core.budget, sizes in backend.core.sizes.
"""

from __future__ import annotations

import contextvars
import gc
import logging
import os
import threading
import time
import weakref
from collections import Counter, OrderedDict
from contextlib import contextmanager
from typing import Any, Callable

import torch

from . import loadgate
from .budget import budget_bytes, default_budget, fmt_bytes, gpu_budget, parse_bytes  # noqa: F401 (the store's API)
from .loadprogress import LOADING_ID, REPORT, display_name, load_progress, report_shards, reporting  # noqa: F401 (the store's API)
from .loadwait import in_load, loading_here, waiting_for
from .sizes import fingerprint, hooks_on, modules_of, nbytes_of  # noqa: F401 (the store's API)

log = logging.getLogger("workbench")

_MODELS: "OrderedDict[str, dict[str, Any]]" = OrderedDict()  # least recently used first
_GUARD = threading.Lock()
_LOADING: dict[str, threading.Lock] = {}
# How long each model's last load took (gate wait excluded), kept past its eviction: a load that would
# not end within its request's time left is not begun (backend.core.loadgate).
_LOAD_S: "OrderedDict[str, float]" = OrderedDict()
_LOAD_S_KEEP = 256
_IN_USE: Counter = Counter()  # model id → scopes (and calls in progress) holding it
_STATS: dict[str, Any] = {"peak_bytes": 0, "evictions": 0, "retained": []}
_EVICT_LISTENERS: list[Callable[[str], None]] = []
_LOADED_HERE: list[str] = []  # every model id this process loaded, in order (a fork inherits the list)
_COLLECT_BYTES = 64 * 10**6  # a garbage collection pass costs ~0.1 s: worth it for large models only


# ----------------------------------------------------------------------------------- scopes
class Scope:
    """The models one request has used; they stay in the store until the request ends."""

    def __init__(self):
        self.ids: set[str] = set()
        self.notes: list[str] = []  # what this request's loads want the user to know
        self.closed = False

    def _hold(self, model_id: str) -> None:  # caller holds _GUARD
        if not self.closed and model_id not in self.ids:
            self.ids.add(model_id)
            _IN_USE[model_id] += 1

    @contextmanager
    def active(self):
        token = _SCOPE.set(self)
        try:
            yield self
        finally:
            _SCOPE.reset(token)

    def close(self) -> None:
        with _GUARD:
            if self.closed:
                return
            self.closed = True
            for model_id in self.ids:
                _release(model_id)
            self.ids.clear()
        _evict_to_fit()  # models this request kept past the budget can go now


_SCOPE: contextvars.ContextVar[Scope | None] = contextvars.ContextVar("workbench_store_scope", default=None)


def _release(model_id: str) -> None:  # caller holds _GUARD
    _IN_USE[model_id] -= 1
    if _IN_USE[model_id] <= 0:
        del _IN_USE[model_id]


@contextmanager
def request_scope():
    """Hold every model loaded or reused inside until the block ends (a nested scope joins the
    outer one)."""
    current = _SCOPE.get()
    if current is not None and not current.closed:
        yield current
        return
    scope = Scope()
    try:
        with scope.active():
            yield scope
    finally:
        scope.close()


def in_use() -> dict[str, int]:
    """model id → number of requests (or calls) holding it now."""
    with _GUARD:
        return dict(_IN_USE)


# ----------------------------------------------------------------------------------- load, evict
def _touch(model_id: str, scope: Scope | None) -> Any:  # caller holds _GUARD
    _MODELS[model_id] = _MODELS.pop(model_id)  # to the end: most recently used (any dict keeps order)
    if scope is not None:
        scope._hold(model_id)
    return _MODELS[model_id]["model"]


def get_or_load(
    model_id: str,
    loader: Callable[[], Any],
    *,
    size_hint: int | None = None,
    progress: Callable[[float, str], None] | None = None,
) -> Any:
    """Load `model_id` once; concurrent first callers wait for the same load.

    `size_hint` (bytes, e.g. from modelcheck.check_model) makes room before loading, so the
    store stays within its budget even while the model loads; `progress(fraction, message)` is told
    when the load starts, as each weight file is read (report_shards) and when it ends; without it
    the request's `load_progress` reporter is."""
    scope = _SCOPE.get()
    progress = progress or REPORT.get()
    with _GUARD:
        if model_id in _MODELS:
            return _touch(model_id, scope)
        lock = _LOADING.setdefault(model_id, threading.Lock())
    if progress is not None and lock.locked():
        progress(0.0, f"loading {display_name(model_id)} (started by another request)")
    with waiting_for(lock), loading_here():
        with _GUARD:
            if model_id in _MODELS:
                return _touch(model_id, scope)
            _IN_USE[model_id] += 1  # this call's own hold, so the eviction after loading spares it
        try:
            return _load(model_id, loader, size_hint, progress, scope)
        finally:
            with _GUARD:
                _release(model_id)


def _load(
    model_id: str,
    loader: Callable[[], Any],
    size_hint: int | None,
    progress: Callable[[float, str], None] | None,
    scope: Scope | None,
) -> Any:
    _evict_to_fit(reserve=size_hint or 0, incoming=True)  # another model is needed: room for it
    if progress is not None:
        progress(0.0, f"loading {display_name(model_id)}")
    with _GUARD:
        expected = _LOAD_S.get(model_id)
    tokens = (REPORT.set(progress), LOADING_ID.set(model_id))  # shard reports (load_progress)
    try:
        # never beside a computation, and not begun without the time it took last time
        with loadgate.loading(expected, display_name(model_id)):
            t0 = time.perf_counter()
            model = loader()
            took = time.perf_counter() - t0
    finally:
        LOADING_ID.reset(tokens[1])
        REPORT.reset(tokens[0])
    _LOADED_HERE.append(model_id)
    with _GUARD:
        _LOAD_S[model_id] = took
        _LOAD_S.move_to_end(model_id)
        while len(_LOAD_S) > _LOAD_S_KEEP:
            _LOAD_S.popitem(last=False)
    entry = {"model": model, "load_s": took, "bytes": nbytes_of(model), "views": {}, "view_bytes": {}}
    if os.environ.get("WORKBENCH_CHECK_WEIGHTS") == "1":
        entry["fingerprint"] = fingerprint(model)
    limit = budget_bytes()
    if limit is not None and entry["bytes"] > limit:
        name = model_id.split("|")[0].removesuffix("@main")  # the checkpoint, as a user knows it
        entry["note"] = (
            f"{name} ({fmt_bytes(entry['bytes'])}) is larger than the model budget "
            f"({fmt_bytes(limit)}): it stays loaded alone until another model is needed, "
            "and loads again at its next use after that"
        )
        log.warning("model %s", entry["note"])
    with _GUARD:
        _MODELS[model_id] = entry
        _STATS["peak_bytes"] = max(_STATS["peak_bytes"], _resident_locked())
        if scope is not None:
            scope._hold(model_id)
            if "note" in entry and entry["note"] not in scope.notes:
                scope.notes.append(entry["note"])
    log.info("loaded %s (%s) in %.1f s", model_id, fmt_bytes(entry["bytes"]), entry["load_s"])
    _evict_to_fit()
    if progress is not None:
        progress(1.0, f"loaded {display_name(model_id)} in {entry['load_s']:.1f} s")
    return model


def load_count() -> int:
    """How many models this process has loaded so far (a worker forked from it starts from its count)."""
    return len(_LOADED_HERE)


def loads_since(count: int) -> list[str]:
    """The model ids loaded after `load_count()` returned `count`."""
    return list(_LOADED_HERE[count:])


def wait_for_loads() -> None:
    """Return once no model or view is loading in this process (loads started meanwhile included).
    Called from inside a load (a view derived with a marked call) it returns at once: that load
    cannot end before its own call does."""
    if in_load():
        return
    while True:
        with _GUARD:
            busy = [lock for lock in _LOADING.values() if lock.locked()]
        if not busy:
            return
        for lock in busy:
            with lock:
                pass


def get_view(
    model_id: str,
    name: str,
    loader: Callable[[], Any],
    derive: Callable[[Any], Any],
    *,
    size_hint: int | None = None,
    progress: Callable[[float, str], None] | None = None,
) -> Any:
    """The view `name` (a tab, or a tab's part: "relevance", "adapters.tokenizer") of the model
    `model_id`: `derive(model)` once per loaded model, loading the model first if needed (as
    `get_or_load`). The view lives in the model's entry and leaves with it."""
    with _held(model_id):
        model = get_or_load(model_id, loader, size_hint=size_hint, progress=progress)
        with _GUARD:
            entry = _MODELS.get(model_id)
            if entry is not None and entry["model"] is model and name in entry["views"]:
                return entry["views"][name]
            lock = _LOADING.setdefault(f"{model_id}\x00{name}", threading.Lock())
        with waiting_for(lock), loading_here():
            with _GUARD:
                entry = _MODELS.get(model_id)
                if entry is not None and entry["model"] is model and name in entry["views"]:
                    return entry["views"][name]
            view = derive(model)
            own = nbytes_of(view, besides=model)
            with _GUARD:
                entry = _MODELS.get(model_id)
                if entry is not None and entry["model"] is model:  # not evicted meanwhile (held: never)
                    entry["views"][name] = view
                    entry["view_bytes"][name] = own
            return view


@contextmanager
def _held(model_id: str):
    """Hold `model_id` for the block even outside a request scope."""
    with _GUARD:
        _IN_USE[model_id] += 1
    try:
        yield
    finally:
        with _GUARD:
            _release(model_id)


def _bytes(entry: dict) -> int:
    return entry["bytes"] + sum(entry.get("view_bytes", {}).values())


def _resident_locked() -> int:
    return sum(_bytes(e) for e in _MODELS.values())


def _evict_to_fit(reserve: int = 0, incoming: bool = False) -> list[str]:
    """Evict least recently used models no one holds until the rest plus `reserve` fits. The most
    recently used model stays unless another is `incoming` (about to load): a model larger than
    the whole budget is not evicted (and reloaded at the next request) while nothing else needs room."""
    limit = budget_bytes()
    if limit is None:
        return []
    victims, entry = [], None
    with _GUARD:
        total = _resident_locked()
        sized = [k for k, e in _MODELS.items() if _bytes(e)]
        keep = sized[-1] if sized and not incoming else None
        for model_id in list(_MODELS):
            if total + reserve <= limit:
                break
            entry = _MODELS[model_id]
            if _IN_USE.get(model_id) or not _bytes(entry) or model_id == keep:
                continue
            del _MODELS[model_id]
            total -= _bytes(entry)
            victims.append((model_id, _bytes(entry), _weak(entry["model"])))
            _STATS["evictions"] += 1
        over = total + reserve > limit and total > 0
    entry = None  # the store's last reference to the evicted models
    for model_id, n, _ in victims:
        log.info("evicted %s (%s) to stay within the model budget (%s)", model_id, fmt_bytes(n), fmt_bytes(limit))
        _tell(model_id)
    if sum(n for _, n, _ in victims) >= _COLLECT_BYTES:
        gc.collect()  # a large evicted model may sit in a reference cycle (hooks, closures)
        # Whatever still lives was kept by someone else (a service's own cache): its memory is not freed.
        kept = [model_id for model_id, _, ref in victims if ref is not None and ref() is not None]
        if kept:
            log.warning(
                "evicted %s, but it is still referenced elsewhere: its memory is not freed "
                "(a service should drop it in a store.on_evict listener)",
                ", ".join(kept),
            )
            with _GUARD:
                _STATS["retained"] = (_STATS["retained"] + kept)[-20:]
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.empty_cache()
    if over and reserve == 0:
        log.info(
            "model store at %s, over its budget %s: the rest is in use or kept alone",
            fmt_bytes(total),
            fmt_bytes(limit),
        )
    return [v for v, _, _ in victims]


def _tell(model_id: str) -> None:
    for listener in list(_EVICT_LISTENERS):
        try:
            listener(model_id)
        except Exception:  # a listener's defect must not break a load
            log.exception("eviction listener failed for %s", model_id)


def _weak(obj: Any):
    try:
        return weakref.ref(obj)
    except TypeError:  # dicts, tuples: nothing to tell
        return None


def on_evict(listener: Callable[[str], None]) -> None:
    """Call `listener(model_id)` after a model leaves the store (a service that keeps its own
    reference to a model drops it here, or its memory is not freed)."""
    _EVICT_LISTENERS.append(listener)


def evict(model_id: str) -> bool:
    """Remove one model (and its views) now unless a request holds it; True if it was removed."""
    with _GUARD:
        if model_id not in _MODELS or _IN_USE.get(model_id):
            return False
        del _MODELS[model_id]
        _STATS["evictions"] += 1
    _tell(model_id)
    return True


def notes() -> list[str]:
    """What the current request's loads want its user to know (a model kept alone over the budget)."""
    scope = _SCOPE.get()
    return list(scope.notes) if scope is not None else []


def loaded() -> dict[str, float]:
    """model id → seconds its load took."""
    with _GUARD:
        return {k: v["load_s"] for k, v in _MODELS.items()}


def items() -> list[tuple[str, Any]]:
    with _GUARD:
        return [(k, v["model"]) for k, v in _MODELS.items()]


def stats() -> dict[str, Any]:
    """Budget, bytes resident, the peak so far, evictions, the last evicted models something else
    still held (memory not freed), and per model (least recently used first) its bytes (the
    weights once, and the views' own), its views, load time and holders."""
    with _GUARD:
        return {
            "budget_bytes": budget_bytes(),
            "resident_bytes": _resident_locked(),
            "peak_bytes": _STATS["peak_bytes"],
            "evictions": _STATS["evictions"],
            "retained_after_eviction": list(_STATS["retained"]),
            "models": [
                {
                    "id": k,
                    "bytes": v["bytes"],
                    "views": sorted(v.get("views", {})),
                    "view_bytes": sum(v.get("view_bytes", {}).values()),
                    "load_s": v["load_s"],
                    "in_use": _IN_USE.get(k, 0),
                    **({"note": v["note"]} if "note" in v else {}),
                }
                for k, v in _MODELS.items()
            ],
        }


def reset_peak() -> None:
    with _GUARD:
        _STATS["peak_bytes"] = _resident_locked()


def integrity_problems() -> list[str]:
    """Hooks left on, or weights changed since load, for every model loaded so far that no request
    holds now: a running request's hooks and scaled weights are its intervention in progress (its
    context restores them when it ends), not something left behind."""
    with _GUARD:
        entries = [(k, e) for k, e in _MODELS.items() if k not in _IN_USE]
    problems = []
    for model_id, e in entries:
        n = hooks_on(e["model"])
        if n:
            problems.append(f"{model_id}: {n} hook(s) left on the model")
        if "fingerprint" in e and fingerprint(e["model"]) != e["fingerprint"]:
            problems.append(f"{model_id}: weights differ from the loaded ones")
    return problems
