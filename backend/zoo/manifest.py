"""Manifests: what a zoo folder holds (sha256 per file) and how it was made (recipe, seed, steps,
wall time, metrics reached, library versions)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

MANIFEST = "manifest.json"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def checksums(folder: Path) -> dict[str, str]:
    return {
        p.relative_to(folder).as_posix(): sha256_file(p)
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != MANIFEST
    }


def versions() -> dict[str, str]:
    out = {}
    for pkg in ("torch", "transformers", "diffusers", "peft", "safetensors"):
        try:
            out[pkg] = __import__(pkg).__version__
        except Exception:
            pass
    return out


def write(folder: Path, info: dict) -> dict:
    manifest = dict(info)
    manifest["files"] = checksums(folder)
    manifest["versions"] = versions()
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True, default=str) + "\n")
    return manifest


def read(folder: Path) -> dict:
    return json.loads((Path(folder) / MANIFEST).read_text())


def verify(folder: Path) -> list[str]:
    """Problems found in one folder: missing, extra or changed files. Empty when all is well."""
    folder = Path(folder)
    if not (folder / MANIFEST).exists():
        return [f"{folder.name}: no {MANIFEST}"]
    expected = read(folder).get("files", {})
    actual = checksums(folder)
    problems = []
    for rel, digest in expected.items():
        if rel not in actual:
            problems.append(f"{folder.name}: missing {rel}")
        elif actual[rel] != digest:
            problems.append(f"{folder.name}: checksum mismatch in {rel}")
    for rel in sorted(set(actual) - set(expected)):
        problems.append(f"{folder.name}: file not in manifest: {rel}")
    return problems
