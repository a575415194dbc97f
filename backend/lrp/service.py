"""What the Relevance tab computes, as plain functions (no gradio): validated inputs in, plain
results (lists, numpy arrays, dicts) out. Every model computation holds the model's lock; results
are cached per (model, revision, input, settings) in a byte-bounded LRU cache."""
from __future__ import annotations

import numpy as np
import torch

from backend.core.cache import ByteLRUCache, make_key
from backend.core.interventions import locked
from backend.core.zerogpu import capped, gpu

from . import evaluate as ev
from . import faithfulness as fa
from .forward import RULES, lm_forward
from .methods import LABELS, METHODS, attribute_image, attribute_text
from .models import IMAGE_ZOO, LONG_ZOO, TEXT_ZOO, Loaded, load

MAX_TOKENS = 256


def _n_methods(methods) -> int:
    return len(methods) if isinstance(methods, (list, tuple)) else 1


def _gpu_s(m, text="", methods=(), *a, **k) -> int:
    """ZeroGPU estimate: a few seconds per method (IG/SmoothGrad take tens of passes), more for
    long text (up to MAX_TOKENS)."""
    return capped(10 + _n_methods(methods) * (4 + len(str(text)) / 200))
CACHE = ByteLRUCache(64 * 2**20, name="relevance")


class InputError(ValueError):
    """Bad user input, with a message meant for the user."""


def check_methods(methods) -> list[str]:
    methods = [m for m in (methods or []) if m]
    if not methods:
        raise InputError("Pick at least one method.")
    bad = [m for m in methods if m not in METHODS]
    if bad:
        raise InputError(f"Unknown method(s) {bad}; choose from {list(METHODS)}.")
    return methods


def check_rules(rules) -> list[str]:
    rules = sorted(set(rules or []))
    bad = [r for r in rules if r not in RULES]
    if bad:
        raise InputError(f"Unknown rule(s) {bad}; choose from {list(RULES)}.")
    return rules


def _is_zoo_sentiment(m: Loaded) -> bool:
    return m.preset.source == "zoo" and "query" in m.task


def text_ids(m: Loaded, text: str) -> tuple[torch.Tensor, list[str], list[int]]:
    """Token ids, token strings and the positions that count as input words (for faithfulness)."""
    if not isinstance(text, str) or not text.strip():
        raise InputError("Type a sentence first.")
    tok = m.tokenizer
    if _is_zoo_sentiment(m):
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
        toks = tok.convert_ids_to_tokens(ids)
        words_pos = list(range(0, len(ids) - 1))
    if len(ids) > MAX_TOKENS:
        raise InputError(f"The input has {len(ids)} tokens; the limit is {MAX_TOKENS}.")
    return torch.tensor(ids), [str(t) for t in toks], words_pos


def resolve_target(m: Loaded, ids: torch.Tensor, target: str | None) -> tuple[int, str, dict]:
    """The explained token: the predicted next token unless one is named."""
    with torch.no_grad():
        logits = lm_forward(m.model, ids[None])[0, -1]
    top = torch.topk(logits, 5)
    tops = {m.tokenizer.convert_ids_to_tokens(int(i)): float(v) for v, i in zip(top.values, top.indices)}
    if target and str(target).strip() and str(target).strip() != "(predicted)":
        name = str(target).strip()
        tid = m.tokenizer.convert_tokens_to_ids(name)
        unk = getattr(m.tokenizer, "unk_token_id", None)
        if tid is None or (unk is not None and tid == unk and name != m.tokenizer.unk_token):
            raise InputError(f"{name!r} is not a token of this model's vocabulary.")
        return int(tid), name, tops
    if _is_zoo_sentiment(m):  # the label the model prefers
        lab = m.tokenizer.convert_tokens_to_ids(m.task["labels"])
        tid = lab[int(torch.argmax(logits[lab]))]
    else:
        tid = int(top.indices[0])
    return int(tid), str(m.tokenizer.convert_ids_to_tokens(tid)), tops


@gpu(duration=_gpu_s)
def explain_text(m: Loaded, text: str, methods, rules=RULES, target: str | None = None) -> dict:
    """Token relevance of every selected method, the conservation check and the explained logit."""
    methods = check_methods(methods)
    rules = check_rules(rules)
    ids, toks, words_pos = text_ids(m, text)
    key = make_key(m.model_id, ids, {"methods": methods, "rules": rules, "target": target or ""},
                   revision=m.preset.revision)

    def compute():
        with locked(m.model):
            tid, tname, tops = resolve_target(m, ids, target)
            rel, logit = {}, None
            for meth in methods:
                r, s = attribute_text(m.model, ids[None], target=tid, method=meth,
                                      rules=rules if meth == "mambalrp" else None, return_score=True)
                rel[meth] = r[0].numpy().astype(float).tolist()
                logit = float(s[0])
        return {"tokens": toks, "ids": ids.tolist(), "target": tname, "target_id": tid, "logit": logit,
                "top_next": tops, "methods": methods, "labels": {k: LABELS[k] for k in methods},
                "rules": rules, "relevance": rel, "word_positions": words_pos,
                "sum_relevance": {k: float(np.sum(v)) for k, v in rel.items()},
                "model": m.model_id}

    return CACHE.get_or_compute(key, compute)


@gpu(duration=_gpu_s)
def longrange(m: Loaded, text: str, methods, top: int = 10) -> dict:
    """Explain the predicted next token; where the `top` most relevant tokens sit (distance back)."""
    res = dict(explain_text(m, text, methods))  # a copy: the cached result stays as it was
    L = len(res["tokens"])
    out = {}
    for meth, r in res["relevance"].items():
        r = np.asarray(r)
        order = np.argsort(-r[:-1], kind="stable")[:top]
        out[meth] = [{"position": int(i), "token": res["tokens"][i], "distance": int(L - 1 - i),
                      "relevance": float(r[i])} for i in order]
    res["top_tokens"] = out
    return res


@gpu(duration=lambda m, methods=(), n=60, *a, **k: capped(10 + 0.5 * int(n) * _n_methods(methods)))
def heldout_sentiment(m: Loaded, methods, n: int = 60, progress=None) -> dict:
    """ΔA^F table, mean MoRF/LeRF curves, precision@k and the conservation scatter on the held-out set."""
    methods = check_methods(methods)
    if not _is_zoo_sentiment(m) or not m.heldout:
        raise InputError("The held-out evaluation needs the zoo sentiment organism.")
    n = int(max(10, min(int(n), len(m.heldout))))
    key = make_key(m.model_id, ("heldout", n), {"methods": methods})

    def compute():
        with locked(m.model):
            res = ev.sentiment_eval(m.model, m.tokenizer, m.task, m.heldout, methods + ["random"], n=n,
                                    progress=progress)
        return {"n": n, "methods": methods + ["random"],
                "labels": {k: LABELS[k] for k in methods + ["random"]}, "results": res}

    return CACHE.get_or_compute(key, compute)


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
    if a.max() > 1.0:
        a = a / 255.0
    t = torch.tensor(a, dtype=torch.float32)[None, None]
    t = torch.nn.functional.interpolate(t, size=(size, size), mode="area")
    return t[0, 0].clamp(0, 1).numpy()


def example_image(m: Loaded, index: int, display: int = 160) -> np.ndarray:
    imgs = m.heldout["images"]
    i = int(index) % len(imgs)
    img = np.asarray(imgs[i], dtype=np.float32)
    rep = display // img.shape[0]
    return (np.kron(img, np.ones((rep, rep))) * 255).round().astype(np.uint8)


def match_example(m: Loaded, img: np.ndarray) -> int | None:
    """The held-out index this image is (so its ground-truth mask is known), or None."""
    imgs = np.asarray(m.heldout["images"], dtype=np.float32)
    d = np.abs(imgs - img[None]).reshape(len(imgs), -1).max(1)
    i = int(np.argmin(d))
    return i if d[i] < 2.5 / 255 else None


@gpu(duration=lambda m, image=None, methods=(), *a, **k: capped(10 + 5 * _n_methods(methods)))
def explain_image(m: Loaded, image, methods, rules=RULES) -> dict:
    methods = check_methods(methods)
    rules = check_rules(rules)
    model = m.model
    img = to_model_image(image, model.image_size)
    key = make_key(m.model_id, img, {"methods": methods, "rules": rules})

    def compute():
        x = torch.tensor(img)[None, None]
        with locked(model):
            with torch.no_grad():
                logits = model(x)[0]
            pred = int(logits.argmax())
            maps = {}
            for meth in methods:
                maps[meth] = attribute_image(model, x, target=pred, method=meth,
                                             rules=rules if meth == "mambalrp" else None)[0].numpy()
        idx = match_example(m, img) if m.heldout is not None else None
        share = None
        mask = None
        if idx is not None:
            mask = np.asarray(m.heldout["masks"][idx], bool)
            share = {k: float(np.clip(v, 0, None)[mask].sum() / max(np.clip(v, 0, None).sum(), 1e-12))
                     for k, v in maps.items()}
        labels = m.task.get("labels") or [str(i) for i in range(len(logits))]
        return {"image": img, "pred": labels[pred], "pred_index": pred,
                "logits": {labels[i]: float(v) for i, v in enumerate(logits)}, "maps": maps,
                "sum_relevance": {k: float(v.sum()) for k, v in maps.items()},
                "methods": methods, "labels": {k: LABELS[k] for k in methods}, "rules": rules,
                "example": idx, "mask": mask, "share_in_region": share, "model": m.model_id}

    return CACHE.get_or_compute(key, compute)


def load_text(source: str | None = None) -> Loaded:
    from .models import text_preset

    return load(text_preset(source))


def load_longrange() -> Loaded:
    return load(LONG_ZOO)


def load_image() -> Loaded:
    return load(IMAGE_ZOO)


__all__ = ["InputError", "explain_text", "longrange", "heldout_sentiment", "explain_image",
           "example_image", "load_text", "load_longrange", "load_image", "TEXT_ZOO", "fa"]
