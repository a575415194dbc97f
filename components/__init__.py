"""The tabs of the workbench. A tab is one module in this package exposing TAB_ID, TITLE, ORDER,
SUMMARY and `build(ctx)`; dropping the file here adds the tab (no list to edit)."""
from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType


def tab_modules() -> list[ModuleType]:
    mods = []
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_") or info.name == "common":
            continue
        mod = importlib.import_module(f"{__name__}.{info.name}")
        if hasattr(mod, "TAB_ID") and hasattr(mod, "build"):
            mods.append(mod)
    return sorted(mods, key=lambda m: (getattr(m, "ORDER", 99), m.TAB_ID))
