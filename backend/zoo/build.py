"""Deterministic training of an organism into assets/zoo/NAME, and loading it back."""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from ..core.presets import ZOO_ROOT, import_class, load_pretrained, zoo_path
from . import manifest as mf
from .registry import get


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def build(
    name: str,
    *,
    out_root: Path | None = None,
    steps: int | None = None,
    seed: int | None = None,
    threads: int | None = None,
) -> dict:
    """Train recipe `name` and write its folder with a manifest; returns the manifest.

    The folder is written to a temporary sibling first and swapped in at the end, so an interrupted
    build never leaves a half-written organism behind.
    """
    rec = get(name)
    seed = rec.seed if seed is None else seed
    out_root = Path(out_root or ZOO_ROOT)
    out_root.mkdir(parents=True, exist_ok=True)
    # Fixed thread count: results do not depend on how many cores the machine happens to have.
    prev_threads = torch.get_num_threads()
    torch.set_num_threads(threads or int(os.environ.get("ZOO_THREADS", "1")))
    seed_everything(seed)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=out_root))
    try:
        t0 = time.perf_counter()
        result = rec.train(tmp, seed=seed, steps=steps if steps is not None else rec.default_steps) or {}
        wall = time.perf_counter() - t0
        info = {
            "name": name,
            "recipe": f"{rec.train.__module__}.{rec.train.__name__}",
            "model_class": rec.model_class,
            "seed": seed,
            "wall_time_s": round(wall, 2),
            "steps": result.pop("steps", steps),
            "metrics": result.pop("metrics", {}),
            "description": rec.description,
            **result,
        }
        manifest = mf.write(tmp, info)
        final = out_root / name
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
        return manifest
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        torch.set_num_threads(prev_threads)


def remeasure(name: str, *, root: Path | None = None, threads: int | None = None) -> dict:
    """Recompute the metrics a recipe can compute from its committed folder alone (`Recipe.measure`)
    and write them into the manifest, with the previous values and today's library versions; the
    files and their checksums stay as trained."""
    rec = get(name)
    if rec.measure is None:
        raise ValueError(f"organism {name!r} has nothing to measure without training again")
    folder = zoo_path(name, root)
    problems = mf.verify(folder)
    if problems:
        raise ValueError(f"{name}: the folder differs from its manifest: {problems}")
    prev_threads = torch.get_num_threads()
    torch.set_num_threads(threads or int(os.environ.get("ZOO_THREADS", "1")))
    try:
        metrics = rec.measure(folder)
    finally:
        torch.set_num_threads(prev_threads)
    manifest = mf.read(folder)
    old = manifest.get("metrics", {})
    manifest["metrics"] = {**old, **metrics}
    manifest["remeasured"] = {"previous": {k: old.get(k) for k in metrics}, "versions": mf.versions()}
    (folder / mf.MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True, default=str) + "\n")
    return manifest


def verify_all(root: Path | None = None) -> dict[str, list[str]]:
    root = Path(root or ZOO_ROOT)
    return (
        {d.name: mf.verify(d) for d in sorted(root.iterdir()) if d.is_dir() and not d.name.startswith(".")}
        if root.exists()
        else {}
    )


def load(name: str, cls=None, *, root: Path | None = None, check: bool = False, **kwargs):
    """The organism's model through its class's ordinary `from_pretrained`."""
    path = zoo_path(name, root)
    if check:
        problems = mf.verify(path)
        if problems:
            raise RuntimeError("; ".join(problems))
    cls = cls or import_class(mf.read(path)["model_class"])
    return load_pretrained(cls, path, roots=[path.parent], **kwargs)
