"""The tabs of the workbench. Each tab is one module exposing TAB_ID, TITLE, SUMMARY and
`build(ctx)`; adding a tab is one file and one line below."""
from __future__ import annotations

import importlib
from types import ModuleType

TAB_MODULES: list[str] = [
    "components.overview",
]


def tab_modules() -> list[ModuleType]:
    return [importlib.import_module(m) for m in TAB_MODULES]
