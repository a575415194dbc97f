"""Held-out evaluations on the organisms: evidence precision@k, conservation, faithfulness (ΔA^F),
relevance share inside the ground-truth region, long-range key rank."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import torch

from ..core import limits
from . import faithfulness as fa
from .forward import lm_forward
from .methods import LABELS, attribute_image, attribute_text


def sentiment_batch(tok, task: dict, items: list[dict]):
    """ids [B, L] (all the same length), word positions (1..n), evidence positions in ids."""
    query = task["query"]
    ids = torch.tensor([tok.convert_tokens_to_ids(["<bos>"] + h["words"] + [query]) for h in items])
    evidence = [[i + 1 for i in h["evidence"]] for h in items]
    return ids, evidence


def by_length(items: list[dict], key: str = "words") -> dict[int, list[dict]]:
    groups: dict[int, list[dict]] = defaultdict(list)
    for h in items:
        groups[len(h[key])].append(h)
    return dict(sorted(groups.items()))


def predicted_labels(model, tok, task, ids: torch.Tensor) -> torch.Tensor:
    lab_ids = torch.tensor(tok.convert_tokens_to_ids(task["labels"]))
    with torch.no_grad():
        logits = lm_forward(model, ids)[:, -1][:, lab_ids]
    return lab_ids[logits.argmax(-1).cpu()]


def precision_at_k(relevance: np.ndarray, evidence: list[int], candidates: list[int]) -> float:
    k = len(evidence)
    cand = np.asarray(candidates)
    top = cand[np.argsort(-relevance[cand], kind="stable")[:k]]
    return len(set(top.tolist()) & set(evidence)) / k


def sentiment_eval(
    model,
    tok,
    task: dict,
    held: list[dict],
    methods,
    *,
    n: int | None = None,
    faithfulness: bool = True,
    rules=None,
    progress=None,
) -> dict:
    """Per method: mean precision@k of the planted evidence, conservation pairs (Σ R, logit), ΔA^F
    summary; `sentences_eval` on the organism's sentences, grouped by length (a stable sort)."""
    items = held[:n] if n else held
    groups = []
    for L, group in by_length(items).items():
        ids, evidence = sentiment_batch(tok, task, group)
        groups.append((ids, predicted_labels(model, tok, task, ids), list(range(1, L + 1)), evidence))
    neutral = tok.convert_tokens_to_ids(task.get("neutral_token", "<unk>"))
    return sentences_eval(
        model, groups, methods, neutral_id=neutral, rules=rules, faithfulness=faithfulness, progress=progress
    )[0]


def summary(d: dict, faithfulness: bool = True) -> dict:
    """One method's results over a set of sentences: the means (precision@k where there is
    planted evidence, conservation, ΔA^F) and, per sentence in the evaluation's order, its
    relevance, Σ R, logit, ΔA^F and target (the tab's per-sentence table)."""
    s, f = np.array(d["sum_r"]), np.array(d["logit"])
    r = {
        "precision_at_k": float(np.mean(d["precision"])) if d.get("precision") else None,
        "conservation_median_rel_err": float(np.median(np.abs(s - f) / np.abs(f).clip(1e-12))),
        "sum_r": d["sum_r"],
        "logit": d["logit"],
        "n": len(d["sum_r"]),
        "relevance_items": [np.asarray(v, float).tolist() for v in d["rel"]],
        "target_items": list(d["targets"]),
        "precision_items": list(d.get("precision") or []),
    }
    if faithfulness:
        r.update(fa.summarize(d["curves"]))
        r["delta_af_items"] = [float(c.delta) for c in d["curves"]]
    return r


def longrange_eval(model, tok, task: dict, held: list[dict], methods, *, n: int | None = None) -> dict:
    """Per method: share of sequences whose key position is the top-1 / in the top-10 tokens."""
    items = held[:n] if n else held
    out: dict[str, dict[str, list[float]]] = {m: {"top1": [], "top10": [], "distance": []} for m in methods}
    steps = limits.Steps("the long-range evaluation")
    for _L, group in by_length(items, "tokens").items():
        ids = torch.tensor([tok.convert_tokens_to_ids(["<bos>"] + h["tokens"]) for h in group])
        with torch.no_grad():
            pred = lm_forward(model, ids)[:, -1].argmax(-1).cpu()
        for m in methods:
            steps.check()
            rel = attribute_text(model, ids, target=pred, method=m).numpy()
            for b, h in enumerate(group):
                key = h["key_position"] + 1
                order = np.argsort(-rel[b][:-1], kind="stable")  # the query token itself excluded
                out[m]["top1"].append(float(order[0] == key))
                out[m]["top10"].append(float(key in order[:10]))
                out[m]["distance"].append(ids.shape[1] - 1 - key)
    return {m: {k: float(np.mean(v)) for k, v in d.items()} for m, d in out.items()}


def region_eval(
    model,
    images: np.ndarray,
    labels: np.ndarray,
    masks: np.ndarray,
    methods,
    *,
    neutral_value: float = 0.125,
    faithfulness: bool = True,
    batch: int = 50,
) -> dict:
    """Per method: share of positive relevance inside the object box (over the images that have
    one, and per label); ΔA^F over patches."""
    x = torch.as_tensor(images, dtype=torch.float32)[:, None]
    masks, labels = np.asarray(masks, bool), np.asarray(labels)
    has = masks.reshape(len(masks), -1).any(1)
    with torch.no_grad():
        pred = model(x).argmax(-1).cpu()
    out = {}
    for m in methods:
        rels = torch.cat(
            [
                attribute_image(model, x[i : i + batch], target=pred[i : i + batch], method=m)
                for i in range(0, len(x), batch)
            ]
        ).numpy()
        pos = np.clip(rels, 0, None)
        share = (pos * masks).sum((1, 2)) / np.clip(pos.sum((1, 2)), 1e-12, None)
        r = {
            "positive_share_in_region": float(share[has].mean()) if has.any() else float("nan"),
            "region_area_share": float(masks[has].mean()) if has.any() else 0.0,
            "share_by_label": {int(c): float(share[has & (labels == c)].mean()) for c in np.unique(labels[has])},
        }
        if faithfulness:
            curves = [
                fa.image_curves(model, x[i], rels[i], target=int(pred[i]), neutral_value=neutral_value)
                for i in range(len(x))
            ]
            r.update(fa.summarize(curves))
        out[m] = r
    return out


def sentences_eval(
    model,
    groups: list[tuple],
    methods,
    *,
    neutral_id: int,
    predict_among: list[int] | None = None,
    rules=None,
    faithfulness: bool = True,
    progress=None,
) -> tuple[dict, list[int]]:
    """Faithfulness and conservation on sentences. `groups`: batches of equal-length ids [B, L]
    with their target ids [B] (None = the model's own prediction, among `predict_among` when
    given), the positions that may be removed and, optionally, each row's planted evidence
    positions (then precision@k too). Returns per method the summary (ΔA^F, the (Σ R, logit)
    pairs, per-sentence values) and the targets used (in the groups' order)."""
    out: dict[str, dict[str, list]] = {
        m: {"precision": [], "sum_r": [], "logit": [], "curves": [], "rel": [], "targets": []} for m in methods
    }
    used: list[int] = []
    done, total = 0, len(groups) * len(methods)
    steps = limits.Steps("the held-out evaluation")
    for ids, targets, cand, *evidence in groups:
        if targets is None:
            with torch.no_grad():
                logits = lm_forward(model, ids)[:, -1].float().cpu()
            if predict_among:
                among = torch.tensor(predict_among)
                targets = among[logits[:, among].argmax(-1)]
            else:
                targets = logits.argmax(-1)
        used += [int(t) for t in targets]
        step = fa.rows_per_pass(model, ids.shape[1], budget_bytes=4e9, all_layers=True)
        for m in methods:
            steps.check()
            parts = [
                attribute_text(
                    model,
                    ids[i : i + step],
                    target=targets[i : i + step],
                    position=-1,
                    method=m,
                    rules=rules if m == "mambalrp" else None,
                    return_score=True,
                )
                for i in range(0, len(ids), step)
            ]  # rows that fit the gradient pass
            rel = torch.cat([p[0] for p in parts]).numpy()
            score = torch.cat([p[1] for p in parts])
            out[m]["sum_r"] += [float(v) for v in rel.sum(1)]
            out[m]["logit"] += [float(v) for v in score]
            out[m]["rel"] += list(rel)
            out[m]["targets"] += [int(t) for t in targets]
            if evidence:
                out[m]["precision"] += [precision_at_k(r, e, cand) for r, e in zip(rel, evidence[0])]
            if faithfulness:
                out[m]["curves"] += fa.text_curves_batch(
                    model, ids, rel, targets=targets, candidates=cand, neutral_id=neutral_id
                )
            done += 1
            if progress is not None:
                progress(done / total, f"{LABELS[m]}: sentences of {ids.shape[1]} tokens")
    return {m: summary(d, faithfulness) for m, d in out.items()}, used
