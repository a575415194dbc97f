"""The one way a tab turns a picked model into a preset: one of its listed presets, or the user's
own model (a hub id or a folder under the allowed roots), checked before any weights load.

A pick is a *key*: a listed preset's `path_or_id`, or whatever the user typed. Custom keys go
through the server's policy (`modelcheck.allowed_custom`: WORKBENCH_CUSTOM_MODELS, owners, size
cap) and the method's architecture check (`modelcheck.check_model`), so a refusal names its reason
("LlamaForCausalLM: MambaLRP needs a Mamba model") and nothing is downloaded for a model that
cannot run. Every tab loads what `resolve` returns through its usual path, `presets.load_preset`.
"""

from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterable, Iterator

from . import modelcheck as M
from . import presets as P
from .budget import budget_bytes
from .zerogpu import in_main


@dataclass(frozen=True)
class Picked:
    preset: P.Preset
    check: M.ModelCheck | None = None  # None for a listed preset

    @property
    def custom(self) -> bool:
        return self.check is not None

    @property
    def key(self) -> str:
        return self.preset.path_or_id

    def describe(self) -> str:
        """One line for the tab: which model, and for a custom one its class and size."""
        if self.check is None:
            return self.preset.label or self.preset.path_or_id
        line = f"your model · {self.check.location} · {self.check.summary()}"
        try:
            limit = budget_bytes()
        except ValueError:  # a malformed setting is reported where a load needs it
            limit = None
        if limit is not None and (self.check.n_bytes or 0) > limit:
            line += (
                f" · larger than the model budget ({M.bytes_words(limit)}): it stays loaded alone until "
                "another model is needed"
            )
        return line


def label(p: P.Preset) -> str:
    return p.label or p.path_or_id


NOT_CACHED = "not downloaded; the hub is offline"


def unavailable(p: P.Preset) -> str | None:
    """Why a listed checkpoint cannot load now, from the local cache alone (no request): a hub one
    that is not in the cache while the hub client is offline. None where it can load."""
    if p.source != "hub":
        return None
    import huggingface_hub.constants as C
    from huggingface_hub import try_to_load_from_cache

    if not C.HF_HUB_OFFLINE:
        return None
    for name in ("config.json", "model_index.json"):
        if isinstance(try_to_load_from_cache(p.path_or_id, name, revision=p.revision), str):
            return None
    return NOT_CACHED


def choices(listed: Iterable[P.Preset]) -> list[tuple[str, str]]:
    """(label, key) pairs for a dropdown of the listed presets; one that cannot load now says why."""
    out = []
    for p in listed:
        why = unavailable(p)
        out.append((f"{label(p)} ({why})" if why else label(p), p.path_or_id))
    return out


def _refuse_unavailable(p: P.Preset) -> None:
    if unavailable(p):
        raise M.ModelCheckError(
            f"cannot load {label(p)}: the hub is not reachable and it is not in the local "
            "cache; pick another model, or download it where the hub is reachable"
        )


def resolve(
    key: str | None,
    listed: Iterable[P.Preset],
    method: str,
    *,
    default: P.Preset | None = None,
    tab: str | None = None,
    **extra,
) -> Picked:
    """The preset for a pick. Empty → `default` (or the first listed); a listed preset's key, id or
    label → that preset; anything else → the user's own model, checked for `method`.

    Raises presets.PresetError (a ValueError; modelcheck.ModelCheckError for what the checks
    refuse) with the reason."""
    listed = list(listed)
    s = "" if key is None else str(key).strip()
    if not s:
        if default is None and not listed:
            raise M.ModelCheckError("no model to pick from")
        return Picked(default or listed[0])
    for p in listed:
        if s in (p.path_or_id, p.model_id, p.label):
            return Picked(p)
    if len(s) > 4096 or "\x00" in s:
        raise M.ModelCheckError("not a hub id or folder")
    if "/" not in s and "\\" not in s and not P.looks_local(s):
        known = ", ".join(p.path_or_id for p in listed[:8])
        raise M.ModelCheckError(
            f"unknown model {s[:80]!r}: pick a listed one{f' ({known})' if known else ''}, "
            "or your own as a hub id (owner/name) or a folder"
        )
    return _custom(s, method, tab, extra)


# A custom pick is checked once and remembered for a few minutes: every request of a tab resolves
# its pick again, and asking the hub for a config costs a round trip (switching to a loaded model
# must stay far below 200 ms). The policy settings are part of the key, so changing them takes
# effect at once. Refusals are not remembered by the process that made them (a fixed folder or repo
# is checked afresh at once), but a ZeroGPU worker forked just after the main process refused the
# call's pick (backend.core.preload.own) repeats that refusal instead of asking the hub again; a
# pick that passes in the main process drops it.
_TTL_S = 300.0
_REFUSAL_TTL_S = 60.0
_POLICY = (
    "WORKBENCH_CUSTOM_MODELS",
    "WORKBENCH_CUSTOM_OWNERS",
    "WORKBENCH_CUSTOM_MAX_GB",
    "SPACE_ID",
    "WORKBENCH_MODEL_ROOTS",
)
_CHECKED: dict[tuple, tuple[float, Picked]] = {}
_REFUSED: dict[tuple, tuple[float, P.PresetError]] = {}
_LOCK = threading.Lock()


def _custom(s: str, method: str, tab: str | None, extra: dict) -> Picked:
    try:
        key = (s, M.method_key(method), tab, tuple(sorted(extra.items())), tuple(os.environ.get(v) for v in _POLICY))
        hash(key)
    except TypeError:  # unhashable extras: check every time
        key = None
    now, main = time.monotonic(), in_main()
    with _LOCK:
        hit = _CHECKED.get(key) if key is not None else None
        refused = None if main or key is None else _REFUSED.get(key)
    if hit is not None and now - hit[0] < _TTL_S:
        return hit[1]
    if refused is not None and now - refused[0] < _REFUSAL_TTL_S:
        raise refused[1]
    try:
        M.allowed_custom(s)
        check = M.check_model(s, method)
    except P.PresetError as e:
        if key is not None and main:
            with _LOCK:
                if len(_REFUSED) > 256:
                    _REFUSED.clear()
                _REFUSED[key] = (now, e)
        raise
    picked = Picked(check.preset(tab, **extra), check)
    if key is not None:
        with _LOCK:
            if len(_CHECKED) > 256:
                _CHECKED.clear()
            _CHECKED[key] = (now, picked)
            _REFUSED.pop(key, None)
    return picked


def checked_own(store_keys) -> list[tuple[P.Preset, int | None]]:
    """The user's own models this process has checked whose weights' store keys
    (backend.core.weights.key) are among `store_keys`, with their bytes: what a ZeroGPU worker tells
    the main process about the own models it loaded (backend.core.preload.mirror)."""
    from .weights import key

    wanted = set(store_keys)
    if not wanted:
        return []
    with _LOCK:
        picks = [picked for _, picked in _CHECKED.values()]
    out = []
    for picked in picks:
        assert picked.check is not None  # _CHECKED holds own models only, each with its check
        item = (picked.preset, picked.check.n_bytes)
        if key(picked.preset) in wanted and item not in out:
            out.append(item)
    return out


def forget() -> None:
    """Drop the remembered checks (tests; a folder replaced on disk)."""
    with _LOCK:
        _CHECKED.clear()
        _REFUSED.clear()


def check_line(key: str | None, listed: Iterable[P.Preset], method: str) -> str:
    """What the picker shows under itself: the picked model's description, or why it is refused.
    Reads metadata only; never raises for bad input."""
    try:
        picked = resolve(key, listed, method)
        if not picked.custom:
            _refuse_unavailable(picked.preset)
        return picked.describe()
    except P.PresetError as e:
        return f"✗ {e}"


@contextmanager
def loading(preset: P.Preset | str) -> Iterator[None]:
    """Turn a failed load of a picked model (a preset, or a hub id or folder) into a clear message:
    a hub checkpoint that is neither reachable nor cached, a folder missing a file (tokenizer,
    processor), a damaged weights file. The store keeps nothing of a failed load, so the next pick
    starts clean."""
    from safetensors import SafetensorError

    if isinstance(preset, str):
        preset = P.Preset("", P.LOCAL if P.looks_local(preset) else "hub", preset, "")
    _refuse_unavailable(preset)  # at once, not after the hub client's retries

    try:
        yield
    except SafetensorError as e:  # a weights file cut short or damaged after the check read it
        raise M.ModelCheckError(
            f"cannot load {label(preset)}: a weights file is damaged ({str(e)[:200]}); copy or download it again"
        ) from e
    except OSError as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
        where = "the hub is not reachable and it is not in the local cache" if preset.source == "hub" else first
        raise M.ModelCheckError(f"cannot load {label(preset)}: {where}") from e
