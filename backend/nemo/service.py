"""What the Memorization tab asks of NeMo, as plain functions over the shared pipeline.

The pipeline is loaded once per process (backend.core.weights); results are cached per prompt and
setting in byte-bounded LRU caches; neuron selections travel as small {layer: [channel]} dicts and
are applied only inside `deactivate`, so no request ever sees another's intervention. The model, its
prompt sets and statistics are backend.nemo.model's; this module holds the tab's operations.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from backend.core.cache import ByteLRUCache, make_key
from backend.core.zerogpu import capped, gpu

from . import core, data, search
from . import visitor
from .data import OWN_STATS_MAX, STATS_JOB, clean_prompt, own_stats_prompts  # noqa: F401  (the service's API)
from .images import as_reference, resize_to  # noqa: F401  (as_reference: part of the service's API)
from .metrics import diversity, ssim_images
from .model import (
    EXAMPLE_MARGIN,  # noqa: F401
    GENERIC_PROMPTS,  # noqa: F401
    HUB_STATS_N,  # noqa: F401
    MemoModel,
    _load,  # noqa: F401
    describe,  # noqa: F401
    detection,  # noqa: F401
    get,
    get_preset,  # noqa: F401
    guidance_of,  # noqa: F401
    hub_info,  # noqa: F401
    listed,  # noqa: F401
    ordinary_examples,  # noqa: F401
    pick,  # noqa: F401
)  # (the service's API)
from .presets import TAB  # noqa: F401  (the service's API)
from .results import CheckRow, Comparison, Localized, MemorizationCheck, ResultsTable, TableRow, TableSummary
from .scenes import alignment

_RESULTS = ByteLRUCache(64 * 2**20, name="nemo-results")


# ----------------------------------------------------------------------------- neuron specs as text


def neuron_label(layer: str, channel: int) -> str:
    return f"{core.short_name(layer)}:{channel}"


def spec_labels(spec: dict[str, list[int]]) -> list[str]:
    """Labels by layer and channel (a search keeps its lists in the order it tried them)."""
    return [neuron_label(layer, c) for layer, chans in spec.items() for c in sorted(chans)]


def parse_neurons(m: MemoModel, items: Sequence[str] | str | None) -> dict[str, list[int]]:
    """Labels like 'down1.attn0:17' (or full layer names, or 'L2:17' by layer index) → a spec."""
    if items is None:
        return {}
    if isinstance(items, str):
        items = [s for s in re.split(r"[,\s;]+", items) if s]
    by_short = {core.short_name(n): n for n in m.layers}
    spec: dict[str, set[int]] = {}
    for it in items:
        it = str(it).strip()
        if not it:
            continue
        if ":" not in it:
            raise ValueError(f"{it!r}: write a neuron as layer:channel, e.g. {core.short_name(m.layers[0])}:3")
        layer, ch = it.rsplit(":", 1)
        layer = layer.strip()
        if layer in by_short:
            name = by_short[layer]
        elif layer in m.layers:
            name = layer
        elif re.fullmatch(r"L\d+", layer) and int(layer[1:]) < len(m.layers):
            name = m.layers[int(layer[1:])]
        else:
            raise ValueError(f"unknown layer {layer!r}; layers: {', '.join(by_short)}")
        try:
            c = int(ch)
        except ValueError:
            raise ValueError(f"{it!r}: the channel must be a whole number") from None
        spec.setdefault(name, set()).add(c)
    return core.validate_spec(m.pipe.unet, {k: sorted(v) for k, v in spec.items()})


# ----------------------------------------------------------------------------- the tab's operations


@gpu(duration=30)  # a noise-difference step per seed + one text-encoder pass
def check(
    prompt: str, source: str | None = None, model: str | None = None, own_dir: Path | None = None
) -> MemorizationCheck:
    """Memorization score vs θ_mem, and the per-layer z-scores of the prompt's value neurons (against
    the session's own statistics when `own_dir` holds some: backend.nemo.visitor)."""
    m = get(source, model)
    prompt = clean_prompt(prompt)
    stats, tag, status = visitor.stats_for(m, own_dir)
    key = make_key(m.model_id, prompt, {"op": "check", "g": m.guidance_scale, "n": m.num_seeds, "stats": tag})

    def compute() -> MemorizationCheck:
        score = core.memorization_score(m.pipe, prompt, num_seeds=m.num_seeds, guidance_scale=m.guidance_scale)
        acts = {k: v[0] for k, v in core.activations(m.pipe, [prompt]).items()}
        z = core.zscores(acts, stats)
        in_list = m.listed(prompt)
        return {
            "prompt": prompt,
            "score": score,
            "theta_mem": m.theta_mem,
            "memorized": bool(score > m.theta_mem),
            "layers": [core.short_name(n) for n in m.layers],
            "z": {core.short_name(n): z[n].tolist() for n in m.layers},
            "activation": {core.short_name(n): acts[n].tolist() for n in m.layers},
            "max_z": float(max(z[n].max() for n in m.layers)),
            "is_training_prompt": m.train_image(prompt) is not None,
            "listed_type": in_list.get("type", "VM") if in_list else None,
            "detection": m.detection(),
            "stats": status,
        }

    return _RESULTS.get_or_compute(key, compute)


@gpu(duration=lambda prompts, *a, **k: capped(10 + 3 * len(prompts)))  # one score per prompt
def check_batch(
    prompts: Sequence[str],
    progress: Callable[[float, str], None] | None = None,
    source: str | None = None,
    model: str | None = None,
    own_dir: Path | None = None,
) -> list[CheckRow]:
    """`check` for a list of prompts (at most data.MAX_PROMPTS) → one row per prompt: score,
    verdict, largest z-score and, where the model's list holds it, its memorization type."""
    get(source, model)  # a model that cannot load is refused before the prompts are read
    if isinstance(prompts, str) or not all(isinstance(p, str) for p in prompts):
        raise ValueError("The batch must be a list of prompts.")
    prompts = [clean_prompt(p) for p in prompts]
    if not prompts:
        raise ValueError("No prompts to check.")
    if len(prompts) > data.MAX_PROMPTS:
        raise ValueError(f"{len(prompts)} prompts: at most {data.MAX_PROMPTS} per batch.")
    report = progress or (lambda f, msg: None)
    rows: list[CheckRow] = []
    for i, p in enumerate(prompts):
        report(i / len(prompts), f"prompt {i + 1}/{len(prompts)}")
        r: MemorizationCheck = check(p, source=source, model=model, own_dir=own_dir)
        rows.append(
            {
                "prompt": p,
                "score": r["score"],
                "memorized": r["memorized"],
                "max_z": r["max_z"],
                "listed_type": r["listed_type"],
            }
        )
    report(1.0, "done")
    return rows


def stats_status(
    source: str | None = None, model: str | None = None, progress=None, own_dir: Path | None = None
) -> dict:
    """Which neuron statistics the loaded model uses (or will at first use) for this session."""
    return visitor.status_of(get(source, model, progress), own_dir)


@gpu(duration=120)  # one text-encoder + value-projection pass per prompt
def compute_stats(
    n_prompts: int,
    source: str | None = None,
    model: str | None = None,
    prompts: Sequence[str] | None = None,
    own_dir: Path | None = None,
    room=None,
) -> dict:
    """The small-set job from the tab: statistics over the first `n_prompts` ordinary prompts
    (COCO captions on a hub checkpoint) or over `prompts`. With `own_dir` (a visitor's session
    folder) they are that session's only; without, they replace the shared ones from now on."""
    m = get(source, model)
    try:
        n = int(n_prompts)
    except (TypeError, ValueError):
        raise ValueError("The number of prompts must be a whole number.") from None
    if own_dir is not None:
        return visitor.compute(m, n, prompts, own_dir, room)
    return m.set_stats_prompts(n, prompts)


@gpu(duration=240)  # NeMo's search: dozens of noise-difference evaluations
def find(
    prompt: str,
    progress: Callable[[float, str], None] | None = None,
    source: str | None = None,
    model: str | None = None,
    own_dir: Path | None = None,
) -> Localized:
    """NeMo's localisation of one prompt → the neurons (as labels and as a spec) and the history."""
    m = get(source, model)
    prompt = clean_prompt(prompt)
    stats, tag, _ = visitor.stats_for(m, own_dir)
    key = make_key(
        m.model_id, prompt, {"op": "find", "g": m.search_guidance, "n": m.num_seeds, "theta": m.theta_mem, "stats": tag}
    )

    def compute() -> Localized:
        loc = search.localize(
            m.pipe,
            prompt,
            stats,
            m.theta_mem,
            num_seeds=m.num_seeds,
            guidance_scale=m.search_guidance,
            progress=progress,
        )
        return {**loc.to_json(), "labels": spec_labels(loc.neurons), "initial_labels": spec_labels(loc.initial)}

    return _RESULTS.get_or_compute(key, compute)


def _compare_seconds(prompt, spec=None, seeds=(), *a, **k) -> float:
    """Each condition (the neurons on; off, only where some are named) generates every seed and
    scores the prompt once. Counted as two conditions always, a call without neurons was estimated
    from measured calls with them at twice its cost (8 seeds: 15 s estimated, 8.5 s taken)."""
    conditions = 2 if any(len(v) for v in (spec or {}).values()) else 1
    return capped(conditions * (10 + 5 * len(seeds)))


@gpu(duration=_compare_seconds)
def compare(
    prompt: str,
    spec: dict[str, list[int]],
    seeds: Sequence[int],
    source: str | None = None,
    reference: np.ndarray | None = None,
    model: str | None = None,
) -> Comparison:
    """Generations for each seed with the neurons on and off, their SSIM to a reference image (the
    one the user gives, else the prompt's training image where the model ships it), diversity
    across seeds, alignment proxy and memorization score in both conditions."""
    m = get(source, model)
    prompt = clean_prompt(prompt)
    spec = core.validate_spec(m.pipe.unet, spec)
    seeds = [int(s) for s in seeds]
    if not seeds or len(seeds) > 8:
        raise ValueError("Choose between 1 and 8 seeds.")
    ref = None if reference is None else as_reference(reference)
    key = make_key(
        m.model_id,
        (prompt, ref),
        {"op": "compare", "spec": spec, "seeds": seeds, "g": m.guidance_scale, "steps": m.num_inference_steps},
    )

    def compute() -> Comparison:
        train = m.train_image(prompt)
        kind = "training image" if train is not None else None
        if ref is not None:
            train, kind = ref, "your image"

        def condition(
            s: dict[str, list[int]],
        ) -> tuple[np.ndarray, list[float] | None, float | None, float | None, float]:
            """One condition's images, their SSIMs, diversity and alignment, and the score."""
            nonlocal train
            imgs = core.generate(
                m.pipe,
                prompt,
                seeds,
                guidance_scale=m.guidance_scale,
                num_inference_steps=m.num_inference_steps,
                spec=s,
            )
            if train is not None and train.shape != imgs.shape[1:]:
                train = resize_to(train, imgs.shape[1:3])
            ssim = ssim_images(imgs, np.repeat(train[None], len(imgs), 0)).tolist() if train is not None else None
            div = diversity(imgs) if len(imgs) > 1 else None
            # None for every image or for none: it depends on the prompt only
            al = [a for im in imgs if (a := alignment(im, prompt)) is not None]
            return (
                imgs,
                ssim,
                div,
                float(np.mean(al)) if al else None,
                core.memorization_score(m.pipe, prompt, num_seeds=m.num_seeds, guidance_scale=m.guidance_scale, spec=s),
            )

        on = condition({})
        off = condition(spec) if spec else on  # nothing switched off: the same generations, not computed twice
        return {
            "prompt": prompt,
            "seeds": seeds,
            "neurons": spec_labels(spec),
            "n_neurons": core.count(spec),
            "theta_mem": m.theta_mem,
            "images_on": on[0],
            "ssim_on": on[1],
            "diversity_on": on[2],
            "alignment_on": on[3],
            "score_on": on[4],
            "images_off": off[0],
            "ssim_off": off[1],
            "diversity_off": off[2],
            "alignment_off": off[3],
            "score_off": off[4],
            "train_image": train,
            "reference_kind": kind,
        }

    return _RESULTS.get_or_compute(key, compute)


def _median(xs) -> float | None:
    xs = [x for x in (xs or []) if x is not None]
    return float(np.median(xs)) if xs else None


@gpu(duration=300)  # every memorized prompt: localisation + generations
def results_table(
    progress: Callable[[float, str], None] | None = None,
    source: str | None = None,
    seeds: Sequence[int] = (0, 1, 2, 3),
    n_prompts: int | None = None,
    model: str | None = None,
    own_dir: Path | None = None,
) -> ResultsTable:
    """The paper's table for every memorized prompt of the organism: SSIM to the training image,
    diversity and alignment, with the found neurons on, off, and (baseline) as many random
    neurons off; plus the neurons-per-prompt counts for the histogram."""
    m = get(source, model)
    if not m.memorized:
        raise ValueError("This model has no list of memorized prompts.")
    report = progress or (lambda f, msg: None)
    rows: list[TableRow] = []
    t_loc: list[float] = []
    items = m.memorized[:n_prompts] if n_prompts else m.memorized
    n = len(items)
    for i, item in enumerate(items):
        report(i / n, f"prompt {i + 1}/{n}: localising")
        t0 = time.perf_counter()
        loc: Localized = find(item["prompt"], source=source, model=model, own_dir=own_dir)
        t_loc.append(loc["seconds"] if loc.get("seconds") else time.perf_counter() - t0)
        spec = loc["neurons"]
        rnd = core.random_like(m.pipe.unet, spec, seed=i)
        report((i + 0.5) / n, f"prompt {i + 1}/{n}: generating")
        c: Comparison = compare(item["prompt"], spec, seeds, source=source, model=model)
        r: Comparison = compare(item["prompt"], rnd, seeds, source=source, model=model)
        rows.append(
            {
                "prompt": item["prompt"],
                "n_neurons": loc["n_neurons"],
                "neurons": loc["labels"],
                "skipped": loc["skipped"],
                "relaxed": loc["relaxed"],
                # None where the model ships no training image (hub): diversity and scores still tell
                "ssim_on": _median(c["ssim_on"]),
                "ssim_off": _median(c["ssim_off"]),
                "ssim_random_off": _median(r["ssim_off"]),
                "type": item.get("type", "VM"),
                "diversity_random_off": r["diversity_off"],
                "diversity_on": c["diversity_on"],
                "diversity_off": c["diversity_off"],
                "alignment_on": c["alignment_on"],
                "alignment_off": c["alignment_off"],
                "score_on": c["score_on"],
                "score_off": c["score_off"],
                "score_random_off": r["score_off"],
            }
        )
    report(1.0, "done")
    found = [r for r in rows if r["n_neurons"] > 0]
    summary: TableSummary = {
        "n_prompts": n,
        "theta_mem": m.theta_mem,
        # over the prompts the seed filter kept (a skipped one has no neurons by definition)
        "median_neurons": float(np.median([r["n_neurons"] for r in rows if not r["skipped"]] or [0])),
        "n_skipped": int(sum(r["skipped"] for r in rows)),
        "n_relaxed": int(sum(r["relaxed"] for r in rows)),
        "search_guidance": m.search_guidance,
        # the effect of switching neurons off, over the prompts that had some to switch off (with
        # none off a prompt's score is its unchanged score, not a result of the method)
        "n_localized": len(found),
        "n_above_on": int(sum(r["score_on"] > m.theta_mem for r in rows)),
        "share_below_theta_off": float(np.mean([r["score_off"] <= m.theta_mem for r in found])) if found else None,
        "share_below_theta_random": (
            float(np.mean([r["score_random_off"] <= m.theta_mem for r in found])) if found else None
        ),
        "median_ssim_on": _median([r["ssim_on"] for r in rows]),
        "median_ssim_off": _median([r["ssim_off"] for r in rows]),
        "median_ssim_random_off": _median([r["ssim_random_off"] for r in rows]),
        "median_diversity_on": _median([r["diversity_on"] for r in rows]),
        "median_diversity_off": _median([r["diversity_off"] for r in rows]),
        "median_localisation_s": float(np.median(t_loc)),
    }
    return {"rows": rows, "summary": summary}
