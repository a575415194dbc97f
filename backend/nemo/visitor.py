"""A visitor's own neuron statistics: computed from the tab (over the first N ordinary prompts, or
over prompts the visitor gives), kept as a statistics file in the visitor's session folder
(backend.core.sessions) and used for that visitor's z-scores and searches only. The shared μ, σ
(the owner's WORKBENCH_NEMO_STATS file, or those computed at first use) never change.

`own_dir` is the visitor's space's folder (`Space(session, SPACE).path()`: components.serving.visitor.space),
or None (nobody's space: the shared statistics).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable, Sequence

import torch

from ..core import sessions
from . import core
from .data import own_stats_prompts
from . import stats as nstats

SPACE = "nemo"  # this method's place in a session's folder (backend.core.sessions.Space)
_LOADED: dict[tuple[str, int], core.NeuronStats] = {}  # (file, mtime) → stats; a few small entries
_LOCK = threading.Lock()
_KEEP = 32


def own_file(m, own_dir: Path) -> Path:
    """The session's statistics for this model (one file per model, replaced by a new computation)."""
    return Path(own_dir) / f"{sessions.content_name([m.model_id], 12)}-{nstats.STATS_FILE}"


def _load(path: Path, m) -> core.NeuronStats:
    key = (str(path), path.stat().st_mtime_ns)
    with _LOCK:
        hit = _LOADED.get(key)
    if hit is None:
        hit = nstats.load_stats(path, m.pipe.unet)
        with _LOCK:
            if len(_LOADED) >= _KEEP:
                _LOADED.pop(next(iter(_LOADED)))
            _LOADED[key] = hit
    return hit


def stats_for(m, own_dir: Path | None) -> tuple[core.NeuronStats, str, dict]:
    """(statistics, cache tag, status) for a request: the session's own when it has computed them,
    else the shared ones."""
    path = own_file(m, own_dir) if own_dir is not None else None
    if path is None or not path.is_file():
        return m.stats(), m.stats_tag, m.stats_status()
    sessions.used(path)
    meta = nstats.file_meta(path)
    return _load(path, m), f"own:{meta.get('prompts_sha256', '')}:{meta.get('n_prompts')}", status(m, meta)


def status(m, meta: dict) -> dict:
    """The statistics card's words for a session's own statistics (as MemoModel.stats_status)."""
    n = int(meta.get("n_prompts", 0))
    out = {"kind": "in-process", "n_prompts": n, "session": True}
    if meta.get("own"):
        out.update(own=meta["own"], set="ordinary prompts you gave", total=n)
    else:
        out.update(set=m.stats_status().get("set"), total=len(m.stats_prompts))
    return out


def status_of(m, own_dir: Path | None) -> dict:
    return stats_for(m, own_dir)[2] if own_dir is not None else m.stats_status()


def compute(m, n: int, prompts: Sequence[str] | None, own_dir: Path, room: Callable[[int], None] | None = None) -> dict:
    """Statistics over the first `n` ordinary prompts or the visitor's own, written to the session's
    file for this model (the same checks as MemoModel.set_stats_prompts, which changes the shared ones)."""
    if prompts:
        chosen = own_stats_prompts(prompts)
    else:
        total = len(m.stats_prompts)
        if not 2 <= n <= total:
            raise ValueError(f"Choose between 2 and {total} prompts for the statistics.")
        chosen = m.stats_prompts[:n]
    if room is not None:
        room(8 * sum(m.sizes.values()) + 4096)  # μ and σ in float32, and the header
    stats = core.neuron_stats(m.pipe, chosen)
    tensors = {"count": torch.tensor([len(chosen)], dtype=torch.long)}
    for layer in stats.mean:
        tensors[f"mean/{layer}"] = stats.mean[layer].float().cpu()
        tensors[f"std/{layer}"] = stats.std[layer].float().cpu()
    path = own_file(m, own_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    # "own": the card says "prompts you gave" for these
    nstats.save_stats(
        tensors,
        path,
        model_id=m.model_id,
        prompts=chosen,
        extra={"own": nstats.prompts_digest(chosen)[:12]} if prompts else None,
    )
    return status(m, nstats.file_meta(path))
