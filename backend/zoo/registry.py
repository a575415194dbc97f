"""The registry of model organisms: recipes that train a tiny model with planted ground truth.

A recipe is a function `train(out_dir: Path, *, seed: int, steps: int | None) -> dict` that writes
a `from_pretrained`-loadable folder (config, safetensors, tokenizer/processor files, any ground
truth it plants) into `out_dir` and returns at least {"steps": int, "metrics": {...}}. Each tab's
issue adds one module to RECIPE_MODULES; the module registers its recipes with `@recipe`.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

# One line per organism module.
RECIPE_MODULES: list[str] = [
]


@dataclass(frozen=True)
class Recipe:
    name: str
    train: Callable
    seed: int
    model_class: str  # dotted class whose from_pretrained loads the folder
    description: str = ""
    default_steps: int | None = None


_RECIPES: dict[str, Recipe] = {}


def recipe(name: str, *, seed: int, model_class: str, description: str = "",
           default_steps: int | None = None):
    def deco(fn: Callable) -> Callable:
        _RECIPES[name] = Recipe(name, fn, seed, model_class, description, default_steps)
        return fn
    return deco


def recipes() -> dict[str, Recipe]:
    for mod in RECIPE_MODULES:
        importlib.import_module(mod)
    return dict(_RECIPES)


def get(name: str) -> Recipe:
    all_ = recipes()
    if name not in all_:
        raise KeyError(f"unknown organism {name!r}; known: {sorted(all_)}")
    return all_[name]
