"""The Relevance tab's held-out evaluations: faithfulness (ΔA^F, MoRF/LeRF curves), precision@k and
conservation over many sentences, the zoo organism's held-out set or sentences the visitor gives.
They live apart from service.py, which explains one input at a time: these run over a whole set
and keep a record per sentence."""

from __future__ import annotations

import torch

from backend.core.cache import make_key
from backend.core.interventions import locked
from backend.core.zerogpu import capped, gpu

from . import evaluate as ev
from .checks import InputError, check_methods, n_methods, whole_in_range
from .methods import LABELS
from .models import Loaded
from .results import HeldoutEvaluation, SentenceEvaluation, SentenceRecord
from .sentences import DataError, parse_label_words
from .service import CACHE, is_zoo_sentiment, target_token, text_ids  # one byte budget for all the tab's results
from .tokens import token_text, token_texts

HELD_MAX_TOKENS = 64  # held-out sentences longer than this are skipped (each costs 2·L forwards)


@gpu(duration=lambda m, methods=(), n=60, *a, **k: capped(10 + 0.5 * int(n) * n_methods(methods)))
def heldout_sentiment(m: Loaded, methods, n: int = 60, progress=None) -> HeldoutEvaluation:
    """ΔA^F table, mean MoRF/LeRF curves, precision@k and the conservation scatter on the held-out set."""
    methods = check_methods(methods)
    if not is_zoo_sentiment(m) or not m.heldout:
        raise InputError("The held-out evaluation needs the zoo sentiment organism.")
    n = whole_in_range(n, 10, len(m.heldout), "The number of held-out sentences")
    key = make_key(m.model_id, ("heldout", n), {"methods": methods})

    def compute() -> HeldoutEvaluation:
        items = m.heldout[:n]
        with locked(m.model):
            res = ev.sentiment_eval(m.model, m.tokenizer, m.task, items, methods + ["random"], progress=progress)
        # sentiment_eval batches by length, a stable sort: the k-th result is items[order[k]]
        order = sorted(range(len(items)), key=lambda i: len(items[i]["words"]))
        seen = [
            (" ".join(h["words"]), h.get("label"), ["<bos>"] + h["words"] + [m.task["query"]])
            for h in (items[i] for i in order)
        ]
        return {
            "n": n,
            "methods": methods + ["random"],
            "labels": {k: LABELS[k] for k in methods + ["random"]},
            "results": res,
            "sentences": sentence_records(m, res, order, seen),
        }

    return CACHE.get_or_compute(key, compute)


def sentence_records(m: Loaded, res: dict, order: list[int], seen: list[tuple]) -> list[SentenceRecord]:
    """Per sentence, in the order given (sorted back to the input's): its text, label, tokens,
    target and, per method, relevance, ΔA^F, Σ R and logit. Takes the per-sentence lists out of
    `res` (they live here only, once)."""
    out: list[SentenceRecord] = []
    # every method explains the same target token for a sentence: decode it once, from any method
    first = next(iter(res.values()), None)
    for k, (text, label, toks) in enumerate(seen):
        rec: SentenceRecord = {
            "i": order[k] + 1,
            "text": text,
            "label": label,
            "tokens": [str(t) for t in toks],
            "target": token_text(m.tokenizer, first["target_items"][k]) if first else None,
            "relevance": {},
            "delta_af": {},
            "sum_r": {},
            "logit": {},
        }
        for meth, r in res.items():
            rec["relevance"][meth] = r["relevance_items"][k]
            rec["delta_af"][meth] = r["delta_af_items"][k]
            rec["sum_r"][meth], rec["logit"][meth] = r["sum_r"][k], r["logit"][k]
            if r.get("precision_items"):
                rec.setdefault("precision", {})[meth] = r["precision_items"][k]
        out.append(rec)
    for r in res.values():
        for key in ("relevance_items", "target_items", "delta_af_items", "precision_items"):
            r.pop(key, None)
    return sorted(out, key=lambda rec: rec["i"])


def neutral_id(m: Loaded) -> tuple[int, str]:
    """The token that replaces removed words: the zoo's <unk>, else the tokenizer's unk (GPT-NeoX:
    <|endoftext|>), pad or id 0."""
    tok = m.tokenizer
    if m.task.get("neutral_token"):
        return int(tok.convert_tokens_to_ids(m.task["neutral_token"])), m.task["neutral_token"]
    for name in ("unk_token", "pad_token", "eos_token"):
        tid = getattr(tok, f"{name}_id", None)
        if tid is not None:
            return int(tid), str(getattr(tok, name))
    return 0, token_text(tok, 0)


def label_targets(m: Loaded, words: dict[str, str]) -> tuple[dict[str, int], list[str]]:
    """Label → target id through the label words; notes for words that split. Two labels whose
    words start with the same token cannot be told apart and are refused."""
    ids, notes = {}, []
    for lab, word in words.items():
        tid, text, note = target_token(m, word)
        ids[lab] = tid
        if note:
            notes.append(f"label {lab}: {note}")
    seen: dict[int, str] = {}
    for lab, tid in ids.items():
        if tid in seen:
            raise InputError(
                f"Labels {seen[tid]!r} and {lab!r} map to the same token "
                f"{token_text(m.tokenizer, tid)!r}; name other label words (e.g. 0=bad, 1=good)."
            )
        seen[tid] = lab
    return ids, notes


def _sentence_ids(m: Loaded, text: str, suffix: str) -> tuple[torch.Tensor, list[int]]:
    ids, _, words = text_ids(m, text)
    if suffix and m.preset.source != "zoo":
        extra = m.tokenizer(suffix, add_special_tokens=False)["input_ids"]
        words = list(range(len(ids)))  # every sentence token may go; the prompt stays
        ids = torch.cat([ids, torch.tensor(extra, dtype=ids.dtype)])
    return ids, words


def _held_gpu_s(m, items=(), methods=(), *a, n=60, **k) -> float:
    return capped(10 + 0.5 * min(int(n), len(items) or 1) * n_methods(methods))


@gpu(duration=_held_gpu_s)
def heldout_sentences(
    m: Loaded,
    items: list[dict],
    methods,
    *,
    target: str = "predicted",
    label_words: str | None = None,
    suffix: str = "",
    n: int = 60,
    source: str = "file",
    progress=None,
) -> SentenceEvaluation:
    """ΔA^F table, mean MoRF/LeRF curves and the conservation scatter on sentences the user gives
    (`items` from backend.lrp.sentences). `target`: "label" (each sentence's label word) or
    "predicted" (the model's own next token; for the zoo organism, the label it prefers)."""
    methods = check_methods(methods)
    if target not in ("label", "predicted"):
        raise InputError("The target is 'label' or 'predicted'.")
    if not items:
        raise InputError("No sentences: upload a file or load SST-2 first.")
    suffix = str(suffix or "")
    notes: list[str] = []
    skipped = {"no label": 0, "too long": 0, "empty": 0}
    label_ids: dict[str, int] = {}
    if target == "label":
        if not any(it.get("label") is not None for it in items):
            raise InputError("These sentences have no labels; choose the model's prediction as the target.")
        try:
            words = parse_label_words(label_words, [it.get("label") for it in items])
        except DataError as e:
            raise InputError(str(e)) from None
        label_ids, notes = label_targets(m, words)
    rows: list[tuple[torch.Tensor, list[int], int | None]] = []
    texts: list[tuple[str, str | None]] = []
    for it in items:
        if len(rows) >= int(n):
            break
        if target == "label" and it.get("label") is None:
            skipped["no label"] += 1
            continue
        try:
            ids, cand = _sentence_ids(m, it["text"], suffix)
        except InputError:
            skipped["empty"] += 1
            continue
        if len(ids) > HELD_MAX_TOKENS or not cand:
            skipped["too long" if cand else "empty"] += 1
            continue
        # a sentence without a label was skipped above when the labels are the targets
        rows.append((ids, cand, label_ids.get(it["label"]) if target == "label" else None))
        texts.append((it["text"], it.get("label")))
    if len(rows) < 2:
        raise InputError(
            f"At least two usable sentences are needed (found {len(rows)}; skipped "
            + ", ".join(f"{v} {k}" for k, v in skipped.items() if v)
            + ")."
        )
    groups: dict[tuple, list] = {}
    for k, (ids, cand, tid) in enumerate(rows):
        groups.setdefault((len(ids), tuple(cand)), []).append((ids, tid, k))
    order = [r[2] for g in groups.values() for r in g]  # the evaluation's order of the rows
    batches = [
        (
            torch.stack([r[0] for r in g]),
            None if target == "predicted" else torch.tensor([r[1] for r in g]),
            list(key[1]),
        )
        for key, g in groups.items()
    ]
    nid, nname = neutral_id(m)
    among = m.tokenizer.convert_tokens_to_ids(m.task["labels"]) if is_zoo_sentiment(m) else None
    key = make_key(
        m.model_id,
        [r[0].tolist() for r in rows],
        {"methods": methods, "target": target, "labels": label_ids, "rows": [r[2] for r in rows]},
        revision=m.preset.revision,
    )

    def compute() -> SentenceEvaluation:
        with locked(m.model):
            res, used = ev.sentences_eval(
                m.model, batches, methods + ["random"], neutral_id=nid, predict_among=among, progress=progress
            )
        counts: dict[str, int] = {}
        for t in used:
            name = token_text(m.tokenizer, t)
            counts[name] = counts.get(name, 0) + 1
        seen = [(*texts[k], token_texts(m.tokenizer, rows[k][0].tolist())) for k in order]
        return {
            "n": len(rows),
            "methods": methods + ["random"],
            "labels": {k: LABELS[k] for k in methods + ["random"]},
            "results": res,
            "sentences": sentence_records(m, res, order, seen),
            "source": source,
            "target": target,
            "label_tokens": {k: token_text(m.tokenizer, v) for k, v in label_ids.items()},
            "targets_used": dict(sorted(counts.items(), key=lambda kv: -kv[1])),
            "neutral": nname,
            "suffix": suffix,
            "skipped": {k: v for k, v in skipped.items() if v},
            "notes": notes,
            "model": m.model_id,
        }

    return CACHE.get_or_compute(key, compute)
