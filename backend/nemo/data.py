"""The NeMo paper's prompt lists for Stable Diffusion v1.4 (shipped in assets/data/nemo, MIT, from
the paper's repository) and the prompt lists a user brings (pasted text, .txt, .csv, .json)."""

from __future__ import annotations

import csv
import io
import json
from functools import lru_cache
from pathlib import Path

from backend.core.presets import REPO_ROOT

DATA = REPO_ROOT / "assets" / "data" / "nemo"
MEMORIZED = DATA / "memorized_laion_prompts.csv"
UNMEMORIZED = DATA / "unmemorized_laion_prompts.csv"
COCO = DATA / "coco2014_val_10000.csv"
TYPES = {"VM": "verbatim memorization", "TM": "template memorization"}
MAX_PROMPTS = 100  # one batch-detection request
MAX_CHARS = 300


def _rows(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f, delimiter=";"))


@lru_cache(maxsize=None)
def memorized_laion() -> tuple[dict, ...]:
    """The 500 LAION captions SD-1.4 memorizes: prompt, type (VM/TM) and the training image's URL."""
    return tuple(
        {"prompt": r["Caption"].strip(), "type": r["type"].strip(), "url": r["URL"].strip()}
        for r in _rows(MEMORIZED)
        if r.get("Caption", "").strip()
    )


@lru_cache(maxsize=None)
def unmemorized_laion() -> tuple[str, ...]:
    return tuple(r["Caption"].strip() for r in _rows(UNMEMORIZED) if r.get("Caption", "").strip())


@lru_cache(maxsize=None)
def coco_captions() -> tuple[str, ...]:
    """10,000 COCO 2014 validation captions: the paper's non-memorized prompts for the statistics."""
    return tuple(r["Caption"].strip() for r in _rows(COCO) if r.get("Caption", "").strip())


def parse_prompts(text: str, name: str = "") -> list[str]:
    """A prompt list from text: a JSON list (of strings or of {"prompt"/"caption"} objects), a CSV with
    a Caption/caption/prompt column (`;` or `,` separated, as the paper's files), or one per line."""
    text = text.lstrip("\ufeff")
    stripped = text.strip()
    suffix = Path(name).suffix.lower()
    items: list = []
    if suffix == ".json" or (not suffix and stripped.startswith("[")):
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError as e:
            raise ValueError(f"{name or 'the text'} is not valid JSON ({e.msg})") from None
        if not isinstance(data, list):
            raise ValueError("a JSON prompt list must be a list")
        for it in data:
            if isinstance(it, dict):
                it = it.get("prompt", it.get("caption", it.get("Caption")))
            if not isinstance(it, str):
                raise ValueError('a JSON prompt list holds strings or {"prompt": ...} objects')
            items.append(it)
    elif suffix == ".csv":
        first = stripped.splitlines()[0] if stripped else ""
        delim = ";" if first.count(";") >= first.count(",") else ","
        reader = csv.DictReader(io.StringIO(stripped), delimiter=delim)
        col = next(
            (c for c in (reader.fieldnames or []) if c and c.strip().lower() in ("caption", "prompt", "text")), None
        )
        if col is None:
            raise ValueError(f"{name}: no Caption/prompt column (columns: {', '.join(reader.fieldnames or [])})")
        items = [r.get(col) or "" for r in reader]
    else:
        items = stripped.splitlines()
    prompts = [" ".join(p.split()) for p in items if p and p.strip()]
    prompts = list(dict.fromkeys(prompts))  # each prompt once, in order
    if not prompts:
        raise ValueError("No prompts found: paste one prompt per line, or upload a .txt, .csv or .json list.")
    if len(prompts) > MAX_PROMPTS:
        raise ValueError(f"{len(prompts)} prompts: at most {MAX_PROMPTS} per batch.")
    long = [p for p in prompts if len(p) > MAX_CHARS]
    if long:
        raise ValueError(f"A prompt is too long ({MAX_CHARS} characters at most): {long[0][:60]}…")
    return prompts


def read_prompt_file(path: str | Path) -> list[str]:
    path = Path(path)
    if path.stat().st_size > 2 * 2**20:
        raise ValueError(f"{path.name} is larger than 2 MB.")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{path.name} is not UTF-8 text.") from None
    return parse_prompts(text, path.name)


def read_stats_prompts(path: str | Path) -> list[str]:
    """The statistics job's prompts: the paper's CSVs by their caption column, else backend's texts."""
    path = Path(path)
    if path.suffix.lower() == ".csv":
        with open(path, newline="", encoding="utf-8") as f:
            first = f.readline()
            f.seek(0)
            reader = csv.DictReader(f, delimiter=";" if first.count(";") >= first.count(",") else ",")
            col = next(
                (c for c in (reader.fieldnames or []) if c and c.strip().lower() in ("caption", "prompt", "text")), None
            )
            if col is None:
                raise ValueError(f"{path}: no Caption/prompt column")
            return [r[col].strip() for r in reader if (r.get(col) or "").strip()]
    from backend.core.precompute import read_texts

    return read_texts(path)


def clean_prompt(prompt: str | None) -> str:
    if prompt is not None and not isinstance(prompt, str):
        raise ValueError("The prompt must be text.")
    p = (prompt or "").strip()
    if not p:
        raise ValueError("Type a prompt first (or pick an example).")
    if len(p) > 300:
        raise ValueError("The prompt is too long (300 characters at most).")
    return p


OWN_STATS_MAX = 2000  # a user's own ordinary prompts for the statistics, computed from the tab
STATS_JOB = (
    "python -m backend.precompute.nemo_stats --source hub --out DIR  "
    "(all 10,000 COCO captions; then start the app with WORKBENCH_NEMO_STATS=DIR/nemo-stats.safetensors)"
)


def own_stats_prompts(prompts) -> list[str]:
    """A visitor's own ordinary prompts for the statistics, cleaned, between 2 and OWN_STATS_MAX."""
    own = [clean_prompt(p) for p in prompts]
    if not 2 <= len(own) <= OWN_STATS_MAX:
        raise ValueError(
            f"Give between 2 and {OWN_STATS_MAX} ordinary prompts for the statistics "
            f"(got {len(own)}); for more, run {STATS_JOB.split('  ')[0]} --prompts FILE."
        )
    return own
