"""What the Adapters tab's panels share: one colour and name per method, a service error shown as
the toast, and export files under names any file system takes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from backend.core import colors as C
from backend.pissa import service
from components.serving import exports
from components.common import fail


# One colour per method here and in the guided tour (backend.core.colors): PiSSA and its quantized
# QPiSSA in PiSSA's orange family, LoRA blue, LoftQ green/purple, the frozen residual W_res blue as
# the tour draws it, the untouched W grey.
COLORS = {
    "lora": C.LORA,
    "pissa": C.PISSA,
    "full": C.NEUTRAL,
    "W": C.NEUTRAL,
    "W_res": C.LORA,
    "qlora": "#bbbbbb",
    "loftq-1": C.QUALITATIVE[2],
    "loftq-5": C.QUALITATIVE[4],
    "qpissa-1": C.PISSA,
    "qpissa-5": C.QUALITATIVE[3],
}
NAMES = {"lora": "LoRA", "pissa": "PiSSA", "full": "full fine-tuning"}


def _call(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except (service.ServiceError, ValueError, KeyError, FileNotFoundError) as e:
        fail(str(e).strip("'\""))


def _exported(write) -> list[str]:
    """`write(folder)` writes an export's files and lists them; returned: the paths Gradio serves
    (components.serving.exports: nothing stays behind in a temp folder)."""
    return list(exports.hand_out(write))


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def export_name(*parts, ext: str) -> str:
    """One file name for an export: a hub id's "/" becomes "--" as in the Hugging Face cache, any
    other character a file system may refuse becomes "_", and the name stays one path component."""
    stem = "-".join(_UNSAFE.sub("_", str(p).replace("/", "--")) for p in parts if p not in (None, ""))
    stem = stem.strip(".")[:180] or "export"
    return f"{stem}.{ext}"


def _jsonable(obj):
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items() if not k.endswith("_sample")}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, (np.floating, np.integer)):
        return obj.item()
    return obj


def _write_json(folder: Path, name: str, data) -> str:
    path = folder / name
    path.write_text(json.dumps(_jsonable(data), indent=1))
    return str(path)
