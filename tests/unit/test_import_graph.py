"""The import graph of backend/ and components/, read from the source with `ast`.

Every import counts, at module level and inside functions alike: an import deferred into a function
still ties the two files together, so a circle through one is a circle of the design. An edge goes to
the module an import names (`from backend.sae import sae` names backend/sae/sae.py; `from
backend.sae.sae import TopKSAE` names the same file); the packages above it are left out, because every
package's __init__ re-exports its own modules and would close a trivial circle with each of them.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT

ROOMS = ("backend", "components")
# Packages that implement one method (or the shared core): they must not know the zoo's organisms.
METHODS = ("backend.lrp", "backend.sae", "backend.nemo", "backend.mathneuro", "backend.pissa", "backend.core")


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_modules(root: Path = ROOT) -> dict[str, Path]:
    return {module_name(p, root): p for room in ROOMS for p in sorted((root / room).rglob("*.py"))}


def _absolute(node: ast.ImportFrom, name: str, is_package: bool) -> str:
    """The absolute module an ImportFrom starts from (its relative dots resolved)."""
    if node.level == 0:
        return node.module or ""
    base = name.split(".") if is_package else name.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(path: Path, name: str, modules=frozenset()) -> list[tuple[str, int]]:
    """Every module `path` imports (absolute dotted names), with the line. `from pkg import x`
    names the module pkg.x where `modules` holds one, else pkg itself."""
    tree = ast.parse(path.read_text(), filename=str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, name, path.name == "__init__.py")
            for a in node.names:
                sub = f"{base}.{a.name}"
                out.append((sub if sub in modules else base, node.lineno))
    return out


def graph(root: Path = ROOT) -> dict[str, dict[str, int]]:
    """module -> {module of this tree it imports: the first line that does}."""
    modules = source_modules(root)
    edges: dict[str, dict[str, int]] = {m: {} for m in modules}
    for name, path in modules.items():
        for target, line in imports_of(path, name, modules.keys()):
            if target in modules and target != name:
                edges[name].setdefault(target, line)
    return edges


def circles(edges: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(found)


def describe(comp: list[str], edges: dict[str, dict[str, int]]) -> str:
    ties = [f"  {a} -> {b} (line {edges[a][b]})" for a in comp for b in sorted(edges[a]) if b in comp]
    return " <-> ".join(comp) + "\n" + "\n".join(ties)


def test_the_graph_sees_the_tree():
    """The reader finds the imports it must judge (a graph with no edges would pass everything)."""
    edges = graph()
    assert "backend.sae.sae" in edges["backend.sae.index"]
    assert "backend.core.store" in edges["components.serving.guard"] or any(
        t.startswith("backend.") for t in edges["components.serving.guard"]
    )
    # a relative import inside a function counts: backend/lrp/__init__ and its modules use them
    assert any(edges[m] for m in edges if m.startswith("backend.lrp."))


def test_no_import_circles():
    edges = graph()
    found = circles(edges)
    assert not found, "import circles:\n" + "\n".join(describe(c, edges) for c in found)


def test_methods_never_import_the_zoo():
    """Organisms know methods, never the other way round."""
    edges = graph()
    bad = [
        f"{m} -> {t} (line {line})"
        for m, targets in edges.items()
        if m.startswith(METHODS)
        for t, line in targets.items()
        if t == "backend.zoo" or t.startswith("backend.zoo.")
    ]
    assert not bad, "a method package imports the zoo:\n" + "\n".join(bad)


def test_backend_never_imports_gradio_even_lazily():
    modules = source_modules()
    bad = [
        f"{name} (line {line}): {target}"
        for name, path in modules.items()
        if name.startswith("backend")
        for target, line in imports_of(path, name)
        if target == "gradio" or target.startswith(("gradio.", "gradio_client"))
    ]
    assert not bad, "backend imports gradio:\n" + "\n".join(bad)
