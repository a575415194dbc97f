"""The zoo organism's scene language for Memorization, seen from the method's side: the colours its
captions name, and a prompt-alignment proxy that checks an image shows them. The organism's recipe
(backend.zoo.recipes.memorization) draws its scenes in these colours; the method only reads them.
"""

from __future__ import annotations

import re

import numpy as np

COLOURS = {
    "red": (0.90, 0.15, 0.15),
    "green": (0.15, 0.72, 0.22),
    "blue": (0.15, 0.30, 0.90),
    "yellow": (0.95, 0.88, 0.20),
    "purple": (0.58, 0.22, 0.75),
    "orange": (1.00, 0.55, 0.10),
    "white": (0.95, 0.95, 0.95),
    "black": (0.08, 0.08, 0.08),
}


def alignment(image: np.ndarray, prompt: str) -> float | None:
    """Prompt-alignment proxy for the zoo's scene language: the share of the colours the caption
    names (background: most of the border; each object colour: a visible patch) that the image
    shows. None for prompts outside that language."""
    words = re.findall(r"[a-z]+", prompt.lower())
    if "background" not in words:
        return None
    names = list(COLOURS)
    pal = np.array([COLOURS[c] for c in names], np.float32)
    d = ((image[..., None, :] - pal[None, None]) ** 2).sum(-1)
    nearest = d.argmin(-1)
    bg_i = words.index("background") - 1
    bg = words[bg_i] if bg_i >= 0 and words[bg_i] in COLOURS else None
    objs = [w for i, w in enumerate(words) if w in COLOURS and i != bg_i]
    checks = []
    if bg:
        border = np.concatenate([nearest[0], nearest[-1], nearest[:, 0], nearest[:, -1]])
        checks.append(float((border == names.index(bg)).mean() >= 0.5))
    for c in objs:
        checks.append(float((nearest == names.index(c)).mean() >= 0.02))
    return float(np.mean(checks)) if checks else None
