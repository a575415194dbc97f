"""How the MCP tools answer (components.agents.tools): JSON with numbers to four significant digits,
pictures as PNG files Gradio serves and MCP hands over as images, checked whole numbers, and the
app's preset source the tools read their models from."""

from __future__ import annotations

import json
import math
from pathlib import Path

import gradio as gr
import numpy as np

from backend.core import bounds
from backend.core.presets import active_source

from components.serving import exports

_SOURCE: str | None = None  # the app's preset source, set by components.agents.tools.install
SIG_DIGITS = 4  # numbers in answers: an agent reads them, and full floats made answers 3× longer


def set_source(source: str) -> None:
    global _SOURCE
    _SOURCE = source


def _source() -> str:
    return _SOURCE or active_source()


def _json(obj) -> str:
    def default(o):
        if isinstance(o, np.ndarray):
            return o.tolist()
        if isinstance(o, (np.floating, np.integer, np.bool_)):
            return o.item()
        raise TypeError(f"{type(o).__name__} is not JSON")

    def clean(o):  # NaN/inf are not JSON; an agent reads null; 4 significant digits are plenty
        if isinstance(o, float):
            return round_sig(o)
        if isinstance(o, dict):
            return {str(k): clean(v) for k, v in o.items()}
        if isinstance(o, (list, tuple)):
            return [clean(v) for v in o]
        return o

    return json.dumps(clean(json.loads(json.dumps(obj, default=default))), ensure_ascii=False)


def round_sig(x: float, digits: int = SIG_DIGITS) -> float | None:
    """`x` to `digits` significant digits (None for NaN and infinities, which JSON cannot carry)."""
    if not math.isfinite(x):
        return None
    return float(f"{x:.{digits}g}")


def _png(image: np.ndarray, name: str) -> gr.FileData:
    """An RGB uint8 array → a PNG file Gradio serves and MCP hands over as an image."""
    from PIL import Image

    def write(folder: Path) -> str:
        Image.fromarray(np.ascontiguousarray(image)).save(folder / f"{name}.png", format="PNG")
        return str(folder / f"{name}.png")

    path = Path(exports.hand_out(write))
    return gr.FileData(path=str(path), mime_type="image/png", orig_name=path.name)


def _to_uint8(img: np.ndarray) -> np.ndarray:
    a = np.asarray(img)
    if a.dtype != np.uint8:
        a = (np.clip(a.astype(np.float32), 0, 1) * 255).round().astype(np.uint8)
    if a.ndim == 2:
        a = np.repeat(a[..., None], 3, -1)
    return a[..., :3]


def _grid(rows: list[list[np.ndarray]], side: int = 96, pad: int = 4) -> np.ndarray:
    """Images laid out in rows on a white canvas, each scaled (nearest) to side × side."""
    from PIL import Image

    n = max((len(r) for r in rows), default=1)
    canvas = np.full((pad + len(rows) * (side + pad), pad + n * (side + pad), 3), 255, np.uint8)
    for i, row in enumerate(rows):
        for j, im in enumerate(row):
            tile = np.asarray(Image.fromarray(_to_uint8(im)).resize((side, side), Image.NEAREST))
            y, x = pad + i * (side + pad), pad + j * (side + pad)
            canvas[y : y + side, x : x + side] = tile
    return canvas


def _whole(value, name: str, lo: int, hi: int) -> int:
    return bounds.check(bounds.Range(name, lo, hi), value)
