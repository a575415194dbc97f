"""The registry of model organisms: recipes that train a tiny model with planted ground truth.

A recipe is a function `train(out_dir: Path, *, seed: int, steps: int | None) -> dict` that writes
a `from_pretrained`-loadable folder (config, safetensors, tokenizer/processor files, any ground
truth it plants) into `out_dir` and returns at least {"steps": int, "metrics": {...}}. An organism
is one module in backend/zoo/recipes/ that registers its recipes with `@recipe` (found by listing
that package; no list to edit).
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Recipe:
    name: str
    train: Callable
    seed: int
    model_class: str  # dotted class whose from_pretrained loads the folder
    description: str = ""
    default_steps: int | None = None
    # measure(folder) -> metrics: recomputes what can be recomputed from the committed folder alone
    measure: Callable | None = None


_RECIPES: dict[str, Recipe] = {}


def recipe(
    name: str,
    *,
    seed: int,
    model_class: str,
    description: str = "",
    default_steps: int | None = None,
    measure: Callable | None = None,
):
    def deco(fn: Callable) -> Callable:
        _RECIPES[name] = Recipe(name, fn, seed, model_class, description, default_steps, measure)
        return fn

    return deco


def recipes() -> dict[str, Recipe]:
    pkg = importlib.import_module(__package__ + ".recipes")

    for info in pkgutil.iter_modules(pkg.__path__):
        if not info.name.startswith("_"):
            importlib.import_module(f"{pkg.__name__}.{info.name}")
    return dict(_RECIPES)


def get(name: str) -> Recipe:
    all_ = recipes()
    if name not in all_:
        raise KeyError(f"unknown organism {name!r}; known: {sorted(all_)}")
    return all_[name]
