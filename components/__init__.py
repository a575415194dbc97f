"""The workbench's user interface: one package per tab (components/<tab id>/, declaring a `Tab` in its
`__init__.py`: components.tab), and the serving parts every tab shares (serving, inputs, links,
report, agents, gradio_fixes). A package that declares a tab is a tab: no list to edit."""

from __future__ import annotations

import functools
import importlib
import pkgutil
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from components.tab import Tab


@functools.cache
def _discovered() -> tuple[Tab, ...]:
    found = []
    for info in pkgutil.iter_modules(__path__):
        if not info.ispkg or info.name.startswith("_"):
            continue
        tab = getattr(importlib.import_module(f"{__name__}.{info.name}"), "TAB", None)
        if tab is not None:
            if tab.id != info.name:  # handlers are told apart by their package (components.serving.guard)
                raise ValueError(
                    f"components/{info.name} declares the tab {tab.id!r}: a tab's id is its package's name"
                )
            found.append(tab)
    return tuple(sorted(found, key=lambda t: (t.order, t.id)))


def tabs() -> list[Tab]:
    """Every tab, in its order."""
    return list(_discovered())


def tab_by_id(tab_id: str) -> Tab | None:
    return next((t for t in _discovered() if t.id == tab_id), None)
