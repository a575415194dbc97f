"""Gradio without its type-stub rewriting at import; used before the first `import gradio`.

Gradio 6.31 rewrites a `.pyi` type-stub file beside the source of every component class when the
class is created (`gradio.component_meta.create_or_modify_pyi`): at each import it parses every
component's source file with `ast` and writes the stubs of its own package and of any subclass
defined elsewhere (this app's `components/*.pyi`). That is for Gradio's own development, costs
about 3 s of CPU at every start on a 2-core machine (`import gradio` 7.5 s → 4.5 s), and writes
into the app's source folder. This module is imported before gradio: it wraps the loader of
`gradio.component_meta` so that the rewrite is a no-op as soon as that module exists, before any
component class is created. Nothing else of Gradio changes: the stubs are only read by type
checkers, and the wheel ships its own.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys

MODULE = "gradio.component_meta"


def _no_rewrite(*_args, **_kwargs) -> None:
    return None


class _StubRewriteOff(importlib.abc.MetaPathFinder):
    """Finds `gradio.component_meta` as the normal path finder does and patches it once executed."""

    def find_spec(self, name, path, target=None):
        if name != MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            if hasattr(module, "create_or_modify_pyi"):
                module.create_or_modify_pyi = _no_rewrite

        spec.loader.exec_module = exec_module
        return spec


def no_stub_rewrites() -> None:
    """Turn the rewrite off for this process: by patching the loaded module if gradio is already
    imported (its classes then exist, and later subclasses skip it), else at its import."""
    loaded = sys.modules.get(MODULE)
    if loaded is not None:
        if hasattr(loaded, "create_or_modify_pyi"):
            loaded.create_or_modify_pyi = _no_rewrite
        return
    if not any(isinstance(f, _StubRewriteOff) for f in sys.meta_path):
        sys.meta_path.insert(0, _StubRewriteOff())
