"""Model organisms: tiny models of the real classes, trained here, with planted ground truth."""

from .build import build, load, remeasure, verify_all, zoo_path
from .registry import Recipe, recipe, recipes

__all__ = ["build", "load", "remeasure", "verify_all", "zoo_path", "Recipe", "recipe", "recipes"]
