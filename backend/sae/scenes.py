"""Synthetic scenes with planted concepts: per-pixel masks and a caption built from the attributes.

A scene is one or two objects, each in its own quadrant of a square image; every object has a
shape, a colour, a texture and a position (the quadrant). `render(spec)` is deterministic, so a
scene is fully described by its small JSON-able spec: held-out sets are stored as specs and
re-rendered on demand, with the masks that serve as ground truth for the feature explainer.

    spec = sample_spec(rng)                       # {"objects": [{...}, ...]}
    image, masks = render(spec)                   # uint8 [H, W, 3], {concept: bool [H, W]}
    caption(spec)                                 # "a plain red circle top left and a ..."
"""

from __future__ import annotations

import numpy as np

IMAGE_SIZE = 48
PATCH_SIZE = 4

COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (225, 45, 45),
    "green": (40, 185, 70),
    "blue": (50, 90, 230),
    "yellow": (235, 205, 40),
}
SHAPES = ("circle", "square", "triangle")
TEXTURES = ("plain", "striped")
POSITIONS = ("top left", "top right", "bottom left", "bottom right")
BACKGROUND = (38, 38, 44)

# Concept families (what a feature can be explained by) and every concept's name.
FAMILIES: dict[str, tuple[str, ...]] = {
    "colour": tuple(COLOURS),
    "shape": SHAPES,
    "texture": TEXTURES,
    "position": POSITIONS,
}
CONCEPTS: tuple[str, ...] = tuple(c for fam in FAMILIES.values() for c in fam)
FAMILY_OF: dict[str, str] = {c: fam for fam, cs in FAMILIES.items() for c in cs}

WORDS = ("a", "and") + tuple(COLOURS) + SHAPES + TEXTURES + ("top", "bottom", "left", "right")


def sample_spec(
    rng: np.random.Generator, *, size: int = IMAGE_SIZE, max_objects: int = 2, min_objects: int = 1
) -> dict:
    """A random scene: 1–2 objects in distinct quadrants, attributes uniform."""
    n = int(rng.integers(min_objects, max_objects + 1))
    quads = rng.choice(len(POSITIONS), size=n, replace=False)
    half = size // 2
    objects = []
    for q in sorted(int(x) for x in quads):
        extent = int(rng.integers(int(half * 0.62), int(half * 0.88) + 1))  # 15..21 px at 48
        slack = half - extent
        oy = int(rng.integers(0, slack + 1)) + (half if q >= 2 else 0)
        ox = int(rng.integers(0, slack + 1)) + (half if q % 2 == 1 else 0)
        objects.append(
            {
                "shape": SHAPES[int(rng.integers(len(SHAPES)))],
                "colour": list(COLOURS)[int(rng.integers(len(COLOURS)))],
                "texture": TEXTURES[int(rng.integers(len(TEXTURES)))],
                "position": POSITIONS[q],
                "box": [oy, ox, extent],  # top, left, side length in pixels
            }
        )
    return {"size": size, "objects": objects, "noise_seed": int(rng.integers(2**31 - 1))}


def shape_mask(shape: str, box, size: int) -> np.ndarray:
    top, left, ext = box
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) + 0.5
    y = (yy - top) / ext  # 0..1 inside the box
    x = (xx - left) / ext
    inside = (y >= 0) & (y <= 1) & (x >= 0) & (x <= 1)
    if shape == "square":
        return inside
    if shape == "circle":
        return (y - 0.5) ** 2 + (x - 0.5) ** 2 <= 0.25
    if shape == "triangle":  # apex up, base at the bottom
        return inside & (np.abs(x - 0.5) <= 0.5 * y)
    raise ValueError(f"unknown shape {shape!r}")


def render(spec: dict) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The scene as uint8 [H, W, 3] and a boolean mask [H, W] for every concept (empty if absent)."""
    size = int(spec.get("size", IMAGE_SIZE))
    rng = np.random.default_rng(int(spec.get("noise_seed", 0)))
    img = np.empty((size, size, 3), np.float32)
    img[:] = BACKGROUND
    img += rng.normal(0, 4.0, size=(size, size, 1))
    masks = {c: np.zeros((size, size), bool) for c in CONCEPTS}
    yy = np.arange(size)[:, None] + np.zeros((1, size), int)
    for obj in spec["objects"]:
        m = shape_mask(obj["shape"], obj["box"], size)
        col = np.asarray(COLOURS[obj["colour"]], np.float32)
        if obj["texture"] == "striped":
            light = (yy // 2) % 2 == 1  # horizontal stripes, period 4 px
            pix = np.where(light[..., None], 0.45 * col + 0.55 * 255.0, col)
        else:
            pix = np.broadcast_to(col, (size, size, 3))
        img[m] = pix[m]
        for key in ("shape", "colour", "texture", "position"):
            masks[obj[key]] |= m
    return np.clip(img, 0, 255).astype(np.uint8), masks


def object_phrase(obj: dict) -> str:
    return f"a {obj['texture']} {obj['colour']} {obj['shape']} {obj['position']}"


def caption(spec: dict) -> str:
    """Objects in reading order (top left, top right, bottom left, bottom right), joined by 'and'."""
    objs = sorted(spec["objects"], key=lambda o: POSITIONS.index(o["position"]))
    return " and ".join(object_phrase(o) for o in objs)


def parse_caption(text: str) -> list[dict] | None:
    """The objects a caption names, or None when it is not a well-formed caption of the template
    (so repeated words, missing attributes or trailing junk count as malformed)."""
    words = text.strip().split()
    objs, i = [], 0
    while True:
        if len(words) < i + 6 or words[i] != "a":
            return None
        tex, col, shp, v, h = words[i + 1 : i + 6]
        if tex not in TEXTURES or col not in COLOURS or shp not in SHAPES or f"{v} {h}" not in POSITIONS:
            return None
        objs.append({"texture": tex, "colour": col, "shape": shp, "position": f"{v} {h}"})
        i += 6
        if i == len(words):
            break
        if words[i] != "and":
            return None
        i += 1
    if len({o["position"] for o in objs}) != len(objs):
        return None
    return objs


def attribute_accuracy(pred: str, spec: dict) -> dict[str, float]:
    """Per-attribute exact match of a predicted caption against the scene (objects matched by
    position); a malformed caption scores 0 on everything."""
    truth = {o["position"]: o for o in spec["objects"]}
    parsed = parse_caption(pred) or []
    got = {o["position"]: o for o in parsed}
    out = {}
    for key in ("colour", "shape", "texture"):
        hits = [float(pos in got and got[pos][key] == o[key]) for pos, o in truth.items()]
        out[key] = float(np.mean(hits))
    out["position"] = float(set(got) == set(truth))
    out["exact"] = float(pred.strip() == caption(spec))
    return out


def batch(rng: np.random.Generator, n: int, **kw) -> tuple[list[dict], np.ndarray]:
    specs = [sample_spec(rng, **kw) for _ in range(n)]
    return specs, np.stack([render(s)[0] for s in specs])
