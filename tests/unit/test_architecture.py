"""Rules that keep the project livable, checked over the source tree."""

import ast
from pathlib import Path

from tests.conftest import ROOT

PY = [p for p in ROOT.rglob("*.py") if ".venv" not in p.parts and "test-artifacts" not in p.parts]


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_backend_never_imports_gradio():
    offenders = [str(p.relative_to(ROOT)) for p in (ROOT / "backend").rglob("*.py") if "gradio" in imports_of(p)]
    assert offenders == []


def test_no_remote_code_and_no_pickle_loading():
    bad = []
    for p in PY:
        if p.relative_to(ROOT).parts[0] == "tests":  # tests write pickles on purpose, to see them refused
            continue
        text = p.read_text()
        if "trust_remote_code=True" in text:
            bad.append(f"{p.relative_to(ROOT)}: trust_remote_code=True")
        tree = ast.parse(text)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                owner = getattr(node.func.value, "id", "")
                if (owner, node.func.attr) in {("torch", "load"), ("pickle", "load"), ("pickle", "loads")}:
                    bad.append(f"{p.relative_to(ROOT)}:{node.lineno}: {owner}.{node.func.attr}")
    assert bad == []


def test_zoo_is_safetensors_and_small():
    zoo = ROOT / "assets" / "zoo"
    files = [p for p in zoo.rglob("*") if p.is_file()] if zoo.exists() else []
    assert not [p.name for p in files if p.suffix in (".bin", ".pt", ".pth", ".ckpt", ".pkl")]
    total = sum(p.stat().st_size for p in files)
    assert total <= 60 * 2**20, f"assets/zoo holds {total / 2**20:.1f} MB"


def _ruff() -> str:
    import shutil
    import sys

    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    assert ruff, "ruff is in requirements-dev.txt: run `bash scripts/install.sh --dev`"
    return ruff


def test_ruff_format_would_change_nothing():
    """Every Python file is as `ruff format` writes it (pyproject.toml [tool.ruff]): run it before a
    commit. The files it would change are named."""
    import subprocess

    done = subprocess.run(
        [_ruff(), "format", "--check", "--no-cache", str(ROOT)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_ruff_finds_nothing():
    """The lint rules of pyproject.toml ([tool.ruff]) hold over the whole tree: an unused import, an
    undefined name, a dead assignment or a blind `pytest.raises(Exception)` fails the suite."""
    import subprocess

    done = subprocess.run(
        [_ruff(), "check", "--no-cache", "--output-format", "concise", str(ROOT)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_mypy_finds_nothing_in_backend(request, tmp_path):
    """The type checks of pyproject.toml ([tool.mypy]) hold over backend/: a None where a value is
    needed, a wrong argument type or a stale `# type: ignore` fails the suite. A fresh cache in a
    temporary folder, so that a clone and a repeated run see the same. The run starts mypy as its
    collection ends (tests/helpers/early_checks.py); this reads its answer."""
    import subprocess

    from tests.helpers import early_checks

    done = early_checks.mypy_result(request.config)
    if done is None:
        run = subprocess.run(
            early_checks.mypy_command(ROOT, tmp_path), cwd=ROOT, capture_output=True, text=True, timeout=600
        )
        done = run.returncode, run.stdout + run.stderr
    rc, output = done
    assert rc == 0 and "Success: no issues found" in output, output[-6000:]


def test_no_source_file_over_500_lines():
    """Files short enough to read in one sitting: split by topic, each named for what it holds."""
    long = {str(p.relative_to(ROOT)): n for p in PY if (n := len(p.read_text().splitlines())) > 500}
    assert long == {}
