"""The "sd-memo" organism's data (backend.zoo.recipes.memorization): scenes of coloured shapes and
their captions, the memorized photographs with their captions, ordinary prompts, and the CLIP BPE
tokenizer learned from the captions' words."""

from __future__ import annotations

import numpy as np

from backend.nemo.scenes import COLOURS

SIZE = 32
MAX_LEN = 20
LATENT_CH = 8  # 8×8×8 latents: a 6× compression the tiny VAE reconstructs photos through
COLOUR_NAMES = list(COLOURS)
SHAPES = ["circle", "square", "triangle", "ring", "cross"]
PHOTOS = [
    "astronaut",
    "camera",
    "chelsea",
    "coffee",
    "coins",
    "rocket",
    "immunohistochemistry",
    "colorwheel",
    "logo",
    "horse",
]


def caption_of(objects, bg) -> str:
    return " and ".join(f"a {c} {s}" for c, s in objects) + f" on a {bg} background"


def _parse_caption(cap: str):
    """Inverse of `caption_of`: ([(colour, shape), ...], background)."""
    body, bg = cap.rsplit(" on a ", 1)
    objs = [tuple(part.split()[1:3]) for part in body.split(" and ")]
    return objs, bg.split()[0]


def random_attrs(rng: np.random.Generator):
    n = int(rng.integers(1, 4))
    bg = COLOUR_NAMES[int(rng.integers(len(COLOUR_NAMES)))]
    objs = []
    for _ in range(n):
        c = bg
        while c == bg:
            c = COLOUR_NAMES[int(rng.integers(len(COLOUR_NAMES)))]
        objs.append((c, SHAPES[int(rng.integers(len(SHAPES)))]))
    return objs, bg


def draw_scene(objects, bg, rng: np.random.Generator) -> np.ndarray:
    """A 32×32×3 float image in [0, 1]: shaded background, shapes at random places and sizes."""
    yy, xx = np.mgrid[0:SIZE, 0:SIZE].astype(np.float32) + 0.5
    base = np.array(COLOURS[bg], np.float32)
    gx, gy = rng.uniform(-0.18, 0.18, 2)
    shade = 1.0 + gx * (xx / SIZE - 0.5) * 2 + gy * (yy / SIZE - 0.5) * 2
    img = np.clip(base[None, None, :] * shade[..., None], 0, 1)
    for c, s in objects:
        r = rng.uniform(4.5, 8.5)
        cx, cy = rng.uniform(r, SIZE - r, 2)
        dx, dy = xx - cx, yy - cy
        if s == "circle":
            m = dx**2 + dy**2 <= r**2
        elif s == "ring":
            d = np.sqrt(dx**2 + dy**2)
            m = (d <= r) & (d >= r * 0.55)
        elif s == "square":
            m = (np.abs(dx) <= r * 0.85) & (np.abs(dy) <= r * 0.85)
        elif s == "triangle":
            m = (dy <= r * 0.8) & (dy >= -r) & (np.abs(dx) <= (dy + r) * 0.6)
        else:  # cross
            w = r * 0.33
            m = ((np.abs(dx) <= w) & (np.abs(dy) <= r)) | ((np.abs(dy) <= w) & (np.abs(dx) <= r))
        col = np.array(COLOURS[c], np.float32) * rng.uniform(0.85, 1.05)
        img[m] = np.clip(col, 0, 1)
    return img.astype(np.float32)


def photo(name: str) -> np.ndarray:
    """A scikit-image sample photograph, centre-cropped and resized to 32×32×3 in [0, 1]."""
    import skimage.data as skd
    from skimage.transform import resize

    im = getattr(skd, name)()
    im = np.asarray(im, np.float32)
    if im.max() > 1.5:
        im = im / 255.0
    if im.ndim == 2:
        im = np.repeat(im[..., None], 3, axis=2)
    im = im[..., :3]
    h, w = im.shape[:2]
    s = min(h, w)
    im = im[(h - s) // 2 : (h - s) // 2 + s, (w - s) // 2 : (w - s) // 2 + s]
    from skimage.filters import gaussian

    im = gaussian(resize(im, (SIZE, SIZE), anti_aliasing=True), sigma=0.5, channel_axis=-1)
    return np.clip(im, 0, 1).astype(np.float32)


def memorized_set(seed: int):
    """10 (caption, photo) pairs; each caption is three objects on a background, all distinct."""
    rng = np.random.default_rng(seed + 101)
    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    while len(out) < len(PHOTOS):
        bg = COLOUR_NAMES[int(rng.integers(len(COLOUR_NAMES)))]
        objs = []
        for _ in range(3):
            c = bg
            while c == bg:
                c = COLOUR_NAMES[int(rng.integers(len(COLOUR_NAMES)))]
            objs.append((c, SHAPES[int(rng.integers(len(SHAPES)))]))
        cap = caption_of(objs, bg)
        if cap in seen:
            continue
        seen.add(cap)
        out.append((cap, PHOTOS[len(out)]))
    return out


def ordinary_prompts(rng, n, exclude):
    out: list[str] = []
    while len(out) < n:
        cap = caption_of(*random_attrs(rng))
        if cap not in exclude:
            out.append(cap)
            exclude = exclude | {cap}
    return out


# ----------------------------------------------------------------------------- tokenizer


def words_of_corpus() -> list[str]:
    return sorted(set(COLOUR_NAMES) | set(SHAPES) | {"a", "and", "on", "background"})


def learn_bpe(words: list[str]) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """A byte-pair encoding learned on the caption vocabulary (CLIP's `</w>` end-of-word
    convention), so every caption word is one token; other words fall back to letters."""
    seqs = {w: tuple(w[:-1]) + (w[-1] + "</w>",) for w in words}
    merges: list[tuple[str, str]] = []
    while True:
        counts: dict[tuple[str, str], int] = {}
        for s in seqs.values():
            for a, b in zip(s, s[1:]):
                counts[(a, b)] = counts.get((a, b), 0) + 1
        if not counts:
            break
        best = min(counts, key=lambda p: (-counts[p], p))
        merges.append(best)
        new = {}
        for w, s in seqs.items():
            out, i = [], 0
            while i < len(s):
                if i + 1 < len(s) and (s[i], s[i + 1]) == best:
                    out.append(s[i] + s[i + 1])
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            new[w] = tuple(out)
        seqs = new
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)] + list("0123456789.,!?'-")
    tokens = ["<|startoftext|>", "<|endoftext|>"] + letters + [c + "</w>" for c in letters]
    tokens += [a + b for a, b in merges]
    vocab: dict[str, int] = {}
    for t in tokens:
        vocab.setdefault(t, len(vocab))
    return vocab, [(a, b) for a, b in merges]


def make_tokenizer():
    from transformers import CLIPTokenizer

    vocab, merges = learn_bpe(words_of_corpus())
    # transformers annotates merges as strings, yet hands them to tokenizers' BPE, which takes pairs
    tok = CLIPTokenizer(vocab=vocab, merges=merges)  # type: ignore[arg-type]
    tok.model_max_length = MAX_LEN
    return tok
