"""What the Relevance tab computes, as plain functions (no gradio): validated inputs in, plain
results (lists, numpy arrays, dicts) out. Every model computation holds the model's lock; results
are cached per (model, revision, input, settings) in a byte-bounded LRU cache. The evaluations over
many sentences are in heldout.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from backend.core import bounds, preload
from backend.core.cache import ByteLRUCache, make_key
from backend.core.interventions import locked
from backend.core.zerogpu import capped, gpu

from . import faithfulness as fa
from .checks import (
    InputError,
    check_methods,
    check_rules,
    check_text,
    check_text_request,  # noqa: F401
    n_methods,
    whole_in_range,
)  # (check_text_request: the tab checks before a load)
from .forward import RULES, lm_forward
from .methods import LABELS, attribute_image, attribute_text, mambalrp_choosing_target
from .models import IMAGE_ZOO, LONG_ZOO, TAB, TEXT_ZOO, Loaded, _read_task, load, text_preset, text_presets
from .results import ImageExplanation, LongRange, TextExplanation, TopToken
from .tokens import WordError, resolve_word, token_text, token_texts

MAX_TOKENS = 256


def _gpu_s(m, text="", methods=(), *a, **k) -> float:
    """ZeroGPU estimate: a few seconds per method (IG/SmoothGrad take tens of passes), more for
    long text (up to MAX_TOKENS). A text over the bound is refused before any work, so the formula
    counts at most the bound's characters: a 100,000-character text is not estimated as 50 texts."""
    return capped(10 + n_methods(methods) * (4 + min(len(str(text)), bounds.REL_TEXT_CHARS) / 200))


CACHE = ByteLRUCache(64 * 2**20, name="relevance")


def is_zoo_sentiment(m: Loaded) -> bool:
    return m.preset.source == "zoo" and "query" in m.task


def text_ids(m: Loaded, text: str) -> tuple[torch.Tensor, list[str], list[int]]:
    """Token ids, token strings and the positions that count as input words (for faithfulness)."""
    check_text(text)
    tok = m.tokenizer
    if is_zoo_sentiment(m):
        words = text.lower().replace(",", " ").replace(".", " ").split()
        words = [w for w in words if w != m.task["query"]]
        if not words:
            raise InputError("Type a sentence first.")
        toks = ["<bos>"] + words + [m.task["query"]]
        ids = tok.convert_tokens_to_ids(toks)
        words_pos = list(range(1, len(toks) - 1))
    elif m.preset.source == "zoo" and "answer_token" in m.task:
        words = [w for w in text.split() if w != m.task["answer_token"]]
        if not words:
            raise InputError("Type a sequence first.")
        toks = ["<bos>"] + words + [m.task["answer_token"]]
        ids = tok.convert_tokens_to_ids(toks)
        words_pos = list(range(1, len(toks) - 1))
    else:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        toks = token_texts(tok, ids)  # ' was', not the piece 'Ġwas'
        words_pos = list(range(0, len(ids) - 1))
    if len(ids) > MAX_TOKENS:
        raise InputError(f"The input has {len(ids)} tokens; the limit is {MAX_TOKENS}.")
    return torch.tensor(ids), [str(t) for t in toks], words_pos


def unknown_words(m: Loaded, ids: torch.Tensor, toks: list[str]) -> list[str]:
    """The typed words a word-level (zoo) vocabulary lacks: the model reads each as its unk token.
    Byte-level BPE vocabularies (the hub checkpoints) spell any text, so they have none."""
    unk = getattr(m.tokenizer, "unk_token_id", None)
    if m.preset.source != "zoo" or unk is None:
        return []
    seen = []
    for i, t in zip(ids.tolist(), toks):
        if i == unk and t != m.tokenizer.unk_token and t not in seen:
            seen.append(t)
    return seen


def target_token(m: Loaded, target: str) -> tuple[int, str, str]:
    """A typed target as the model's token: (id, its text, a note when the word splits)."""
    try:
        return resolve_word(m.tokenizer, target)
    except WordError as e:
        raise InputError(str(e)) from None


def resolve_target(
    m: Loaded, ids: torch.Tensor, target: str | None, logits: torch.Tensor | None = None
) -> tuple[int, str, dict, str]:
    """The explained token: the predicted next token unless one is named; returns its id, its text,
    the top-5 next tokens (text → logit) and a note about how a typed word was read. `logits`: the
    last position's, when a forward already computed them."""
    if logits is None:
        with torch.no_grad():
            logits = lm_forward(m.model, ids[None])[0, -1]
    top = torch.topk(logits, 5)
    tops = {token_text(m.tokenizer, int(i)): float(v) for v, i in zip(top.values, top.indices)}
    if target and str(target).strip() and str(target).strip() != "(predicted)":
        tid, name, note = target_token(m, str(target))
        if tid >= logits.shape[-1]:
            raise InputError(f"{name!r} has id {tid}, outside this model's {logits.shape[-1]} logits.")
        return tid, name, tops, note
    if is_zoo_sentiment(m):  # the label the model prefers
        lab = m.tokenizer.convert_tokens_to_ids(m.task["labels"])
        tid = lab[int(torch.argmax(logits[lab]))]
    else:
        tid = int(top.indices[0])
    return int(tid), token_text(m.tokenizer, tid), tops, ""


def conv_bias(model) -> bool:
    """Whether some conv1d has a non-zero bias (mamba-130m does): it absorbs a share of the logit,
    so Σ relevance differs from f by that share even with every rule on."""
    layers = getattr(getattr(model, "backbone", None), "layers", [])
    return any(
        getattr(l.mixer.conv1d, "bias", None) is not None and bool(l.mixer.conv1d.bias.abs().max() > 0) for l in layers
    )


@gpu(duration=_gpu_s)
def explain_text(m: Loaded, text: str, methods, rules=RULES, target: str | None = None) -> TextExplanation:
    """Token relevance of every selected method, the conservation check and the explained logit."""
    methods = check_methods(methods)
    rules = check_rules(rules)
    ids, toks, words_pos = text_ids(m, text)
    unknown = unknown_words(m, ids, toks)
    key = make_key(
        m.model_id, ids, {"methods": methods, "rules": rules, "target": target or ""}, revision=m.preset.revision
    )

    def compute() -> TextExplanation:
        rel: dict[str, list[float]] = {}
        logit: float | None = None
        found: list[tuple[int, str, dict, str]] = []
        with locked(m.model):
            if "mambalrp" in methods:  # the target comes from the explanation's own forward

                def choose(last):
                    found.append(resolve_target(m, ids, target, logits=last))
                    return found[0][0]

                r, logit, _ = mambalrp_choosing_target(m.model, ids, choose, rules=rules)
                rel["mambalrp"] = r.numpy().astype(float).tolist()
            tid, tname, tops, note = found[0] if found else resolve_target(m, ids, target)
            for meth in methods:
                if meth in rel:
                    continue
                r, s = attribute_text(
                    m.model,
                    ids[None],
                    target=tid,
                    method=meth,
                    rules=rules if meth == "mambalrp" else None,
                    return_score=True,
                )
                rel[meth] = r[0].numpy().astype(float).tolist()
                logit = float(s[0])
        assert logit is not None  # check_methods refuses an empty choice: some method computed it
        return {
            "tokens": toks,
            "ids": ids.tolist(),
            "target": tname,
            "target_id": tid,
            "target_note": note,
            "logit": logit,
            "top_next": tops,
            "methods": methods,
            "labels": {k: LABELS[k] for k in methods},
            "rules": rules,
            "relevance": rel,
            "word_positions": words_pos,
            "conv_bias": conv_bias(m.model),
            "sum_relevance": {k: float(np.sum(v)) for k, v in rel.items()},
            "unknown_words": unknown,
            "model": m.model_id,
            # what the zoo's prompt format adds around the typed words (<bos>, "sentiment:")
            "template_positions": [i for i in range(len(toks)) if i not in words_pos]
            if m.preset.source == "zoo"
            else [],
        }

    return CACHE.get_or_compute(key, compute)


@gpu(duration=_gpu_s)
def longrange(m: Loaded, text: str, methods, top: int = 10) -> LongRange:
    """Explain the predicted next token; where the `top` most relevant tokens sit (distance back)."""
    res: TextExplanation = explain_text(m, text, methods)
    L = len(res["tokens"])
    out: dict[str, list[TopToken]] = {}
    for meth, rel in res["relevance"].items():
        r = np.asarray(rel)
        order = np.argsort(-r[:-1], kind="stable")[:top]
        out[meth] = [
            {"position": int(i), "token": res["tokens"][i], "distance": int(L - 1 - i), "relevance": float(r[i])}
            for i in order
        ]
    return {**res, "top_tokens": out}  # a copy: the cached result stays as it was


# ----------------------------------------------------------------------------- images


def to_model_image(image, size: int) -> np.ndarray:
    """Any uploaded image (H×W, H×W×3/4, uint8 or float) → size×size grayscale in [0, 1]."""
    if image is None:
        raise InputError("Upload an image or load an example first.")
    a = np.asarray(image)
    if a.ndim == 3:
        a = a[..., :3].astype(np.float64).mean(-1) if a.shape[-1] >= 3 else a[..., 0].astype(np.float64)
    if a.ndim != 2 or min(a.shape) < 1:
        raise InputError("That does not look like an image.")
    a = a.astype(np.float64)
    if not np.isfinite(a).all():
        raise InputError("The image holds NaN or infinite pixel values.")
    if a.max() > 1.0:
        a = a / 255.0
    t = torch.tensor(a, dtype=torch.float32)[None, None]
    t = torch.nn.functional.interpolate(t, size=(size, size), mode="area")
    return t[0, 0].clamp(0, 1).numpy()


def example_image(m: Loaded, index: int, display: int = 160) -> np.ndarray:
    imgs = m.heldout["images"]
    i = whole_in_range(index, 0, len(imgs) - 1, "The held-out example number")
    img = np.asarray(imgs[i], dtype=np.float32)
    rep = display // img.shape[0]
    return (np.kron(img, np.ones((rep, rep))) * 255).round().astype(np.uint8)


def match_example(m: Loaded, img: np.ndarray) -> int | None:
    """The held-out index this image is (so its ground-truth mask is known), or None."""
    imgs = np.asarray(m.heldout["images"], dtype=np.float32)
    d = np.abs(imgs - img[None]).reshape(len(imgs), -1).max(1)
    i = int(np.argmin(d))
    return i if d[i] < 2.5 / 255 else None


@gpu(duration=lambda m, image=None, methods=(), *a, **k: capped(10 + 5 * n_methods(methods)))
def explain_image(m: Loaded, image, methods, rules=RULES) -> ImageExplanation:
    methods = check_methods(methods)
    rules = check_rules(rules)
    model = m.model
    img = to_model_image(image, model.image_size)
    key = make_key(m.model_id, img, {"methods": methods, "rules": rules})

    def compute() -> ImageExplanation:
        x = torch.tensor(img)[None, None]
        with locked(model):
            with torch.no_grad():
                logits = model(x)[0]
            pred = int(logits.argmax())
            maps = {}
            for meth in methods:
                maps[meth] = attribute_image(
                    model, x, target=pred, method=meth, rules=rules if meth == "mambalrp" else None
                )[0].numpy()
        idx = match_example(m, img) if m.heldout is not None else None
        share = None
        mask = None
        if idx is not None and np.asarray(m.heldout["masks"][idx]).any():  # "none" images have no box
            mask = np.asarray(m.heldout["masks"][idx], bool)
            share = {
                k: float(np.clip(v, 0, None)[mask].sum() / max(np.clip(v, 0, None).sum(), 1e-12))
                for k, v in maps.items()
            }
        labels = m.task.get("labels") or [str(i) for i in range(len(logits))]
        return {
            "image": img,
            "pred": labels[pred],
            "pred_index": pred,
            "logits": {labels[i]: float(v) for i, v in enumerate(logits)},
            "maps": maps,
            "sum_relevance": {k: float(v.sum()) for k, v in maps.items()},
            "methods": methods,
            "labels": {k: LABELS[k] for k in methods},
            "rules": rules,
            "example": idx,
            "mask": mask,
            "share_in_region": share,
            "model": m.model_id,
        }

    return CACHE.get_or_compute(key, compute)


def load_text(source: str | None = None, model: str | None = None, progress=None) -> Loaded:
    """The tab's text model: the source's default, one of the listed presets (`models.text_presets`),
    or the user's own Mamba / FalconMamba causal LM (a hub id or an allowed folder), checked from its
    config before anything loads (backend.core.picker)."""
    from backend.core import picker

    picked = pick_text(source, model)
    try:
        with picker.loading(picked.preset):
            return load(picked.preset, size=picked.check.n_bytes if picked.check else None, progress=progress)
    except picker.M.ModelCheckError as e:
        raise InputError(str(e)) from None


def pick_text(source: str | None = None, model: str | None = None):
    """The picked text model (backend.core.picker.Picked), from its metadata: nothing loads."""
    from backend.core import picker

    try:
        return picker.resolve(model, text_presets(source), "relevance", default=text_preset(source), tab=TAB)
    except ValueError as e:
        raise InputError(str(e)) from None


def load_longrange() -> Loaded:
    return load(LONG_ZOO)


def longrange_example() -> str:
    """The long-range organism's first held-out text, from its folder: the tab shows it without
    loading the model (that waits for the first explanation)."""
    _, held = _read_task(Path(LONG_ZOO.location()))
    return " ".join(held[0]["tokens"][:-1])


def load_image() -> Loaded:
    return load(IMAGE_ZOO)


__all__ = [
    "InputError",
    "explain_text",
    "longrange",
    "explain_image",
    "example_image",
    "load_text",
    "load_longrange",
    "load_image",
    "TEXT_ZOO",
    "fa",
]


# A model pick is checked as the tab's handlers check it, before its weights load (backend.core.preload)
preload.register(TAB, load, lambda key: pick_text(None, key))
