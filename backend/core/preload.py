"""Loading the registered checkpoints at start, in the main process (ZeroGPU's process model).

On ZeroGPU every marked call runs in a forked GPU worker: a model loaded there is lost with the
worker, so every cold worker would read the weights again inside a visitor's GPU quota. Loaded in
the main process before the app serves, the weights are inherited by every worker (ZeroGPU packs
them once). Each tab registers how it loads a preset with `register(tab, load)`; `run()` loads the
active source's registered checkpoints that WORKBENCH_PRELOAD names, within the model budget:

    unset / auto   under ZeroGPU: every checkpoint of the active source that fits; elsewhere none
    all            every checkpoint of the active source that fits (any machine)
    none           nothing (every model loads at its tab's first request)
    a,b,...        those tabs (relevance, features, memorization, math_neurons, adapters) or
                   checkpoints (hub ids or zoo names), as far as they fit

A checkpoint fits when its size (from its metadata, before any weights load) fits what is left of
the budget; one that does not is named in the log and loads at first use as before.

A registered checkpoint that a call's arguments name is loaded in the main process before its worker
forks (`ahead`), and so is a user's own model (a hub id or an allowed folder) that the call's model
pick names (`own`): a tab that registers its pick check (`register(tab, load, pick)`) has it
resolved there with that same check (cached in backend.core.picker, so a loaded model costs a look-up)
and loaded through the same loader. The pick is what the tab's picker box holds, or, in the Features
tab, the session's source (its own VLM with the SAE and hookpoint the check's preset carries, whose
`loaded` check asks for the SAE too). Only the pick's value is resolved, never the call's other
strings, and a refusal is left to the worker's handler, which reports it as usual (without asking
again: backend.core.picker hands the main process's refusal to the worker it forks). What a worker
had to load all the same is mirrored: the worker names the weights it loaded
(backend.core.store.loads_since) and the own models among them, and `mirror` loads them in the main
process, so the next worker inherits them instead of reading the weights again. `mirrored()` lists
what was loaded that way.
"""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING, Callable, Sequence

from . import presets as P

if TYPE_CHECKING:
    from .picker import Picked

log = logging.getLogger("workbench")
ENV = "WORKBENCH_PRELOAD"
_LOADERS: dict[str, Callable[..., object]] = {}
_PICKS: dict[str, Callable[[str], Picked]] = {}
_LOADED: dict[str, Callable[[P.Preset], bool]] = {}
_MIRRORED: list[str] = []


def register(
    tab: str,
    load: Callable[..., object],
    pick: Callable[[str], Picked] | None = None,
    loaded: Callable[[P.Preset], bool] | None = None,
) -> None:
    """How `tab` loads one of its registered presets with everything its view needs. `pick(key)`:
    the check the tab's handlers run on a model pick (a backend.core.picker.Picked, or an exception
    for a refusal); with it, `load(preset, size)` also takes the user's own models it returns
    (`size`: their weights' bytes from metadata, None where unknown). `loaded(preset)`: whether such
    an own model needs nothing more loaded here (default: its weights are in the model store), for a
    tab whose view holds weights of its own (the Features tab's SAE)."""
    _LOADERS[tab] = load
    if pick is not None:
        _PICKS[tab] = pick
    if loaded is not None:
        _LOADED[tab] = loaded


def _own_loaded(preset: P.Preset) -> bool:
    from . import store
    from .weights import key

    check = _LOADED.get(preset.tab)
    if check is None:
        return key(preset) in store.loaded()
    try:
        return bool(check(preset))
    except Exception:  # noqa: BLE001 - the load meets the same, and says what it is
        return False


def wanted(source: str, setting: str | None = None) -> list[P.Preset]:
    """The registered presets of `source` the setting names, in registration order."""
    from .zerogpu import spaces_available

    s = (os.environ.get(ENV, "auto") if setting is None else setting).strip().lower()
    if s in ("", "auto"):
        s = "all" if spaces_available() else "none"
    if s in ("none", "0", "off", "no"):
        return []
    names = None if s in ("all", "1", "on", "yes") else {n.strip() for n in s.split(",") if n.strip()}
    out = []
    for p in P.presets():
        if p.source != source or p.tab not in _LOADERS or p in out:
            continue
        if names is None or p.tab in names or p.path_or_id.lower() in names:
            out.append(p)
    return out


def _size(p: P.Preset) -> int | None:
    from .modelcheck import model_size

    try:
        return model_size(p.location(), p.revision, [P.ZOO_ROOT] if p.source == "zoo" else None)[1]
    except Exception:  # unreadable metadata: the load itself will say what is wrong
        return None


def run(source: str, setting: str | None = None) -> list[str]:
    """Load what the setting names (see the module's doc); returns the presets loaded. A load that
    fails is logged and left to the tab, which shows why at its first request."""
    from .budget import budget_bytes

    chosen = wanted(source, setting)
    if not chosen:
        return []
    left = budget_bytes()
    done = []
    for p in chosen:
        size = _size(p)
        if left is not None and size is not None and size > left:
            log.info(
                "preload: %s (%.2f GB) does not fit what is left of the model budget (%.2f GB); it loads at first use",
                p.path_or_id,
                size / 1e9,
                left / 1e9,
            )
            continue
        t0 = time.perf_counter()
        try:
            _LOADERS[p.tab](p)
        except Exception as e:  # noqa: BLE001 - the tab reports it to its users
            log.warning(
                "preload: %s for %s failed (%s: %s); the tab loads it at first use",
                p.path_or_id,
                p.tab,
                type(e).__name__,
                str(e)[:200],
            )
            continue
        if left is not None and size is not None:
            left -= size
        done.append(f"{p.tab}:{p.path_or_id}")
        log.info("preload: %s for %s in %.1f s", p.path_or_id, p.tab, time.perf_counter() - t0)
    return done


def ahead(tab: str, values) -> list[str]:
    """Before a worker forks: load in this (the main) process the registered presets of `tab` that
    the call's arguments name by their path or id (a picked checkpoint not preloaded, or evicted
    since), so the worker inherits them rather than reading the weights itself. Returns those loaded."""
    from . import store
    from .weights import key

    named = {v for v in values if isinstance(v, str) and v}
    if not named or tab not in _LOADERS:
        return []
    # checked one by one as they load: two listings of one checkpoint load it once
    todo = (p for p in P.presets() if p.tab == tab and p.path_or_id in named and key(p) not in store.loaded())
    return [name for name in map(lambda p: _load_here(p, "preload"), todo) if name]


def own(tab: str, key) -> str | None:
    """Before a worker forks: load in this (the main) process the user's own model that `key`, the
    call's model pick for `tab`, names, through the tab's loader, so every worker inherits it rather
    than reading the weights itself. Returns "tab:model" when it loaded one now; None where `tab`
    registered no pick check, the pick is empty or a listed preset (`ahead`), the check refuses it or
    the load fails (the worker's handler meets the same and reports it), or it is loaded already."""
    check = _PICKS.get(tab)
    if check is None or tab not in _LOADERS or not isinstance(key, str) or not key.strip():
        return None
    try:
        picked = check(key)
    except Exception as e:  # noqa: BLE001 - a refusal: the handler reports it to its user
        log.info("preload: no own model for %s from the pick %.80r (%s)", tab, key, type(e).__name__)
        return None
    if not getattr(picked, "custom", False) or _own_loaded(picked.preset):
        return None
    assert picked.check is not None  # an own model (`custom`) comes with its check
    return _load_here(picked.preset, "preload", picked.check.n_bytes)


def _load_here(preset: P.Preset, why: str, *size) -> str | None:
    """Load `preset` in this (the main) process through its tab's loader (`size`: an own model's
    bytes); "tab:model", or None where it failed: the worker that needs it meets the same failure
    and reports it to its user."""
    own = " own model" if size else ""
    try:
        _LOADERS[preset.tab](preset, *size)
    except Exception as e:  # noqa: BLE001 - see above
        log.warning(
            "%s:%s %s for %s failed (%s: %s)", why, own, preset.path_or_id, preset.tab, type(e).__name__, str(e)[:200]
        )
        return None
    log.info("%s:%s %s for %s loaded in the main process", why, own, preset.path_or_id, preset.tab)
    return f"{preset.tab}:{preset.path_or_id}"


def mirror(model_ids: list[str], own_models: Sequence[tuple[P.Preset, int | None]] = ()) -> list[str]:
    """Load in this (the main) process the registered presets whose weights a worker loaded
    (store keys, backend.core.weights.key), and the user's own models among them (`own_models`: their
    presets as the tab's pick check resolved them, with their bytes, for tabs that registered one);
    returns those loaded now."""
    from . import store
    from .weights import key

    wanted_ids = set(model_ids)
    todo: list[tuple[P.Preset, tuple[int | None, ...]]] = [(p, ()) for p in P.presets() if p.tab in _LOADERS]
    todo += [(p, (size,)) for p, size in own_models if p.tab in _PICKS and p.tab in _LOADERS]
    # checked one by one as they load: a checkpoint two tabs list loads once
    done = [
        name
        for name in (
            _load_here(p, "mirror", *size)
            for p, size in todo
            if key(p) in wanted_ids and not (_own_loaded(p) if size else key(p) in store.loaded())
        )
        if name
    ]
    _MIRRORED.extend(done)
    return done


def mirrored() -> list[str]:
    """The presets loaded in the main process because a worker needed them ("tab:path_or_id")."""
    return list(_MIRRORED)
