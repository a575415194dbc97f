"""Each paper's guided tour, one module per paper beside its tab (relevance, features, memorization,
math_neurons, adapters); the Guided tour tab (components.tour) only runs them.

A module exposes TOUR, a `Tour` whose steps each compute a real result through the paper's backend
on the zoo model and return (plotly figure, caption html, numbers). Figures go through the shared
theme (backend.core.colors.themed: transparent backgrounds), so one figure serves the light and the
dark page, with exact values on hover.

This package defines no TAB_ID or `build`, so components' tab discovery never takes it for a tab.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

from backend.core.presets import ZOO_ROOT

# The papers' order in the tour tab and in the 'all' tour (the tabs' order).
PAPERS = ("relevance", "features", "memorization", "math_neurons", "adapters")


@dataclass
class Step:
    """One screen of a tour: `compute()` runs the backend and returns (figure, caption, numbers)."""
    title: str
    compute: Callable[[], tuple[object, str, dict]]


@dataclass
class Tour:
    tour_id: str
    title: str
    organism: str | tuple[str, ...]
    steps: list[Step]

    def available(self) -> bool:
        names = (self.organism,) if isinstance(self.organism, str) else self.organism
        return all((ZOO_ROOT / name / "manifest.json").exists() for name in names)


def all_tours() -> list[Tour]:
    """Every paper's tour, present or not, in the tabs' order."""
    return [importlib.import_module(f"{__name__}.{name}").TOUR for name in PAPERS]
