"""What the Math neurons tab computes, as plain functions (no gradio): the shared model of a
preset, its evaluation sets (read and split in `sets`), masks and accuracies cached per setting.

Settings are small descriptors (method, K, number of samples, factor); masks live in a bounded
byte cache, never in UI state. Every evaluation of a modified model runs inside `scaled`, which
holds the model's lock and restores the weights bit-exactly before the lock is released.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch

from ..core import limits, picker, preload, weights
from ..core.cache import ByteLRUCache, make_key
from ..core.interventions import locked
from ..core.zerogpu import capped, gpu
from ..core.presets import Preset, active, load_pretrained, presets
from . import chat, core, sources
from . import visitor_sets
from .evaluate import accuracy, generate
from .presets import TAB
from .results import Accuracy, Answer, Description, Evaluation, Sample, ScalePoint
from .sets import (
    DEFAULT_MATH,
    DEFAULT_NONMATH,
    MAX_SAMPLES,
    SIDES,
    UI_EVAL,
    NoNonMath,
    digest,
    load_default_nonmath,
    load_hub_data,
    load_zoo_data,
    reference_of,
    set_entry,
)

MASK_CACHE = ByteLRUCache(96 * 2**20, name="mathneuro-masks")
RESULT_CACHE = ByteLRUCache(8 * 2**20, name="mathneuro-results")

# Hub mode: tokens generated per GSM8K answer (worked solutions run to ~200 tokens) and per
# non-math answer (a letter or a few words).
MATH_NEW_TOKENS = int(os.environ.get("WORKBENCH_MATH_NEW_TOKENS", "256"))
NONMATH_NEW_TOKENS = 24


def _per_item(bench) -> float:
    """GPU seconds an evaluation may take per held-out item (ZeroGPU durations): the zoo scores an
    item in one batched forward; hub mode generates up to MATH_NEW_TOKENS tokens for it (a 1B model
    at batch 32 takes about 1 ms per item and token on an H100, doubled here as a margin)."""
    return 0.1 if getattr(bench, "zoo", True) else 0.05 + 0.002 * MATH_NEW_TOKENS


@dataclass(frozen=True)
class Setting:
    method: str = "mathneuro"
    top_k: float = 0.15  # fraction
    n_samples: int = 64
    factor: float = 0.0
    seed: int = 0
    nonmath: str = DEFAULT_NONMATH  # which non-math set: "default" or the id `register_data` gave
    math: str = DEFAULT_MATH  # which math set: the organism's / GSM8K, or the id of a user's set

    def validate(self) -> "Setting":
        if self.method not in core.METHODS:
            raise ValueError(f"unknown method {self.method!r}; choose one of {', '.join(core.METHODS)}")
        core._check_k(self.top_k)
        if not (1 <= int(self.n_samples) <= MAX_SAMPLES):
            raise ValueError(f"number of samples must be between 1 and {MAX_SAMPLES}")
        if not (0.0 <= float(self.factor) <= 10.0):
            raise ValueError("scale factor must be between 0 and 10")
        return self

    def masks_key(self) -> tuple:
        return (self.method, round(self.top_k, 6), int(self.n_samples), int(self.seed), self.nonmath, self.math)

    def but(self, **kw) -> "Setting":
        return Setting(**{**self.__dict__, **kw})


class Bench:
    """The tab's view of a preset's shared model (backend.core.weights): the model, the tab's own
    tokenizer and data (made once per loaded model; they leave the store with it)."""

    def __init__(self, preset: Preset, model):
        self.preset = preset
        self.model_id = preset.model_id
        self.model = model
        self.tok = self._load_tokenizer()
        self.data = load_zoo_data(preset) if preset.source == "zoo" else load_hub_data(preset)
        self.zoo = preset.source == "zoo"
        self._guard = threading.Lock()

    def _load_tokenizer(self):
        from transformers import AutoTokenizer

        roots = [Path(self.preset.location()).parent] if self.preset.source == "zoo" else None
        tok = load_pretrained(AutoTokenizer, self.preset.location(), weights=False, roots=roots)
        tok.padding_side = "right"
        return tok

    # ------------------------------------------------------------------------------- data
    def nonmath_set(self, key: str = DEFAULT_NONMATH) -> dict:
        sets = self.data["nonmath_sets"]
        if key == DEFAULT_NONMATH and key not in sets and "nonmath_error" not in self.data:
            with self._guard:  # asked for the first time: the deployment's file or the hub
                if key not in sets and "nonmath_error" not in self.data:
                    load_default_nonmath(self.preset, self.data)
        if key in sets:
            return sets[key]
        if key == DEFAULT_NONMATH:
            raise NoNonMath(
                "no non-math set is loaded: "
                + self.data.get("nonmath_error", "name a file")
                + ". Name a non-math file (JSONL with prompt/answer or text, CSV, or plain text)."
            )
        raise ValueError("that non-math file is no longer loaded here: name it again")

    def math_set(self, key: str = DEFAULT_MATH) -> dict:
        if key in self.data["math_sets"]:
            return self.data["math_sets"][key]
        raise ValueError("that math file is no longer loaded here: name it again")

    def data_set(self, side: str, key: str) -> dict:
        return self.math_set(key) if side == "math" else self.nonmath_set(key)

    def ident(self, kind: str, s: "Setting") -> list:
        """The identification samples of one side: the zoo's texts, or (hub) token ids of each
        question and its answer in the model's chat template."""
        n = int(s.n_samples)
        items = self.data_set(kind, s.math if kind == "math" else s.nonmath)["ident"][:n]
        if self.zoo:
            return items
        return [chat.sample_ids(self.tok, it, kind) for it in items]

    def n_ident(self, s: "Setting") -> tuple[int, int]:
        """(math, non-math) samples that identify under `s`: a set may hold fewer than s.n_samples."""
        math, nonmath = (
            min(int(s.n_samples), len(self.data_set(k, s.math if k == "math" else s.nonmath)["ident"]))
            for k in ("math", "nonmath")
        )
        return math, nonmath

    def score(self, kind: str, items: list[dict]) -> float:
        """Accuracy under the set's rule (zoo: exact match of the greedy answer; hub: see chat)."""
        if self.zoo:
            return accuracy(self.model, self.tok, items)
        return chat.accuracy(
            self.model, self.tok, items, kind, MATH_NEW_TOKENS if kind == "math" else NONMATH_NEW_TOKENS
        )

    def answers(self, items: list[dict], kinds: list[str]) -> list[tuple[str, bool | None]]:
        """Greedy answers to held-out items and whether each is right (zoo: exact match; None for a
        text without a reference answer)."""
        if self.zoo:
            gens = generate(self.model, self.tok, [it["prompt"] for it in items])
            return [(g, g == str(it["answer"])) for g, it in zip(gens, items)]
        out: list[tuple[int, tuple[str, bool | None]]] = []
        for kind in ("math", "nonmath"):
            idx = [i for i, k in enumerate(kinds) if k == kind]
            if not idx:
                continue
            mt = MATH_NEW_TOKENS if kind == "math" else NONMATH_NEW_TOKENS
            chosen = [items[i] for i in idx]
            if sources.kind_of(chosen) == "text":  # no reference answers: continue the text
                gens = chat.generate(
                    self.model, self.tok, [self.tok(it["text"][:200])["input_ids"] for it in chosen], 16
                )
                out += [(i, (g, None)) for i, g in zip(idx, gens)]
                continue
            gens = chat.generate(self.model, self.tok, [chat.prompt_ids(self.tok, it, kind) for it in chosen], mt)
            out += [(i, (g, chat.correct(it, g, kind))) for i, it, g in zip(idx, chosen, gens)]
        return [v for _, v in sorted(out)]

    # ------------------------------------------------------------------------------- masks
    @gpu(duration=lambda self, s, *a, **k: capped(10 + 0.5 * s.n_samples))  # 2 × n_samples forwards
    def masks(self, s: Setting) -> dict[str, torch.Tensor]:
        s.validate()
        key = make_key(self.model_id, "masks", s.masks_key())

        def compute():
            if s.method == "random":  # same count per matrix as the (cached) MathNeuro set
                ref = self.masks(s.but(method="mathneuro", factor=0.0))
                return core.random_like(ref, s.seed)
            m, n = self.ident("math", s), self.ident("nonmath", s)
            with locked(self.model):
                return core.find(s.method, self.model, m, n, s.top_k, tokenizer=self.tok, seed=s.seed)

        return MASK_CACHE.get_or_compute(key, compute)

    def forget_masks(self, s: Setting) -> None:
        """Drop the cached masks of `s` (and of the MathNeuro set a random set copies its counts
        from): masks found on a caller's own items go with the call that brought them."""
        for m in {s, s.but(method="mathneuro", factor=0.0)}:
            MASK_CACHE.discard(make_key(self.model_id, "masks", m.masks_key()))

    # ---------------------------------------------------------------------------- accuracy
    def eval_items(self, kind: str, n_eval: int | None, key: str = DEFAULT_NONMATH) -> list[dict]:
        items = self.data_set(kind, key)["items"]
        return items[:n_eval] if n_eval else items

    @gpu(
        duration=lambda self, s, n_eval=UI_EVAL, *a, **k: capped(
            15 + _per_item(self) * (n_eval or 1000) + 0.5 * s.n_samples
        )
    )
    def evaluate(self, s: Setting, n_eval: int | None = UI_EVAL) -> Evaluation:
        """Math and non-math exact-match accuracy with the setting's masks scaled by its factor."""
        s.validate()
        key = make_key(self.model_id, "eval", (s.masks_key(), float(s.factor), n_eval))

        def compute() -> Evaluation:
            masks = self.masks(s) if float(s.factor) != 1.0 else {}
            math_items = self.eval_items("math", n_eval, s.math)
            non_items = self.eval_items("nonmath", n_eval, s.nonmath)
            with core.scaled(self.model, masks, s.factor):
                return {
                    "math": self.score("math", math_items),
                    "nonmath": self.score("nonmath", non_items),
                    "n_params": core.count(masks) if masks else core.count(self.masks(s)),
                }

        return RESULT_CACHE.get_or_compute(key, compute)

    def evaluated(self, s: Setting, n_eval: int | None = UI_EVAL) -> Evaluation | None:
        """`evaluate(s)` if it has been computed (and is still cached), else None: nothing runs."""
        s.validate()
        return RESULT_CACHE.get(make_key(self.model_id, "eval", (s.masks_key(), float(s.factor), n_eval)))

    @gpu(duration=lambda self, n_eval=UI_EVAL, *a, **k: capped(10 + _per_item(self) * (n_eval or 1000)))
    def baseline(
        self, n_eval: int | None = UI_EVAL, nonmath: str = DEFAULT_NONMATH, math: str = DEFAULT_MATH
    ) -> Accuracy:
        key = make_key(self.model_id, "baseline", (n_eval, nonmath, math))

        def compute() -> Accuracy:
            math_items = self.eval_items("math", n_eval, math)
            non_items = self.eval_items("nonmath", n_eval, nonmath)
            with locked(self.model):
                return {"math": self.score("math", math_items), "nonmath": self.score("nonmath", non_items)}

        return RESULT_CACHE.get_or_compute(key, compute)

    @gpu(
        duration=lambda self, top_k=0, n_samples=1, n_eval=UI_EVAL, *a, **k: capped(
            20 + 4 * (_per_item(self) * (n_eval or 1000) + 0.5 * n_samples)
        )
    )
    def prune_all(
        self,
        top_k: float,
        n_samples: int,
        n_eval: int | None = UI_EVAL,
        nonmath: str = DEFAULT_NONMATH,
        math: str = DEFAULT_MATH,
    ) -> dict[str, Evaluation]:
        """The paper's Figure 2: each method's set pruned (factor 0)."""
        out: dict[str, Evaluation] = {}
        for m in limits.Steps("the method comparison").each(core.METHODS):
            out[m] = self.evaluate(Setting(m, top_k, n_samples, 0.0, nonmath=nonmath, math=math), n_eval)
        return out

    @gpu(
        duration=lambda self, s, factors=(), n_eval=UI_EVAL, *a, **k: capped(
            15 + len(factors) * _per_item(self) * (n_eval or 1000)
        )
    )
    def scale_curve(self, s: Setting, factors: Sequence[float], n_eval: int | None = UI_EVAL) -> list[ScalePoint]:
        out: list[ScalePoint] = []
        for f in limits.Steps("the scale sweep").each(factors):
            r: Evaluation = self.evaluate(s.but(factor=float(f)), n_eval)
            out.append({"factor": float(f), **r})
        return out

    # ---------------------------------------------------------------------------- analysis
    @gpu(duration=lambda self, s, *a, **k: capped(10 + 0.5 * s.n_samples))
    def layers(self, s: Setting) -> dict[str, dict]:
        return core.per_layer(self.masks(s))

    @gpu(duration=lambda self, s, sizes=(1, 4, 16), n_subsets=3, *a, **k: capped(10 + n_subsets * sum(sizes)))
    def consistency(self, s: Setting, sizes: Sequence[int] = (1, 4, 16), n_subsets: int = 3) -> dict:
        key = make_key(self.model_id, "consistency", (s.masks_key(), tuple(sizes), n_subsets))

        def compute():
            ref = self.masks(s.but(method="mathneuro", factor=0.0))
            m, n = self.ident("math", s), self.ident("nonmath", s)
            with locked(self.model):
                res = core.consistency(
                    self.model,
                    m,
                    n,
                    s.top_k,
                    n_samples=[x for x in sizes if x <= s.n_samples] or [1],
                    n_subsets=n_subsets,
                    tokenizer=self.tok,
                    seed=s.seed,
                    reference=ref,
                )
            return {str(k): v for k, v in res.items()}

        return RESULT_CACHE.get_or_compute(key, compute)

    @gpu(duration=lambda self, s, k=6, *a, **kw: capped(10 + 0.5 * s.n_samples + 2 * k * _per_item(self) * 10))
    def samples(self, s: Setting, k: int = 6) -> list[Sample]:
        """A few held-out questions (math and non-math), answered before and after. Cached like the
        accuracies: the view computes them, and an export of the same setting takes them as shown."""
        s.validate()
        key = make_key(self.model_id, "samples", (s.masks_key(), float(s.factor), int(k)))

        def compute() -> list[Sample]:
            n_math = k // 2 + k % 2
            items = self.math_set(s.math)["items"][:n_math] + self.nonmath_set(s.nonmath)["items"][: k // 2]
            kinds = ["math"] * n_math + ["nonmath"] * (len(items) - n_math)
            masks = self.masks(s)
            with locked(self.model):
                before = self.answers(items, kinds)
                with core.scaled(self.model, masks, s.factor):
                    after = self.answers(items, kinds)
            return [
                {
                    "kind": "math" if kd == "math" else "non-math",
                    "prompt": it.get("prompt", it.get("text", "")),
                    "answer": reference_of(it),
                    "before": b,
                    "after": a,
                    "ok_before": ob,
                    "ok_after": oa,
                }
                for it, kd, (b, ob), (a, oa) in zip(items, kinds, before, after)
            ]

        return RESULT_CACHE.get_or_compute(key, compute)

    @gpu(duration=lambda self, prompt, s, *a, **k: capped(10 + 0.5 * s.n_samples + 40 * _per_item(self)))
    def answer(self, prompt: str, s: Setting) -> Answer:
        """Greedy answer to a user's own prompt, before and after the intervention."""
        masks = self.masks(s)
        item = {"prompt": prompt}
        with locked(self.model):
            before = self._ask(item)
            with core.scaled(self.model, masks, s.factor):
                after = self._ask(item)
        return {"prompt": prompt, "before": before, "after": after}

    def _ask(self, item: dict) -> str:
        if self.zoo:
            return generate(self.model, self.tok, [item["prompt"]])[0]
        # a user's question is answered as a math problem would be (same template, same length)
        return chat.generate(self.model, self.tok, [chat.prompt_ids(self.tok, item, "math")], MATH_NEW_TOKENS)[0]


def listed(source: str | None = None) -> list[Preset]:
    """The models the tab's picker lists: the source's default first, then the zoo organism and
    the paper's checkpoint (without the hub, the latter fails to load with a clear message)."""
    first = active(TAB, source)
    return [first] + [p for p in presets(TAB) if p != first]


def pick(source: str | None = None, model: str | None = None) -> picker.Picked:
    """The picked model: a listed preset, or the user's own causal LM with nn.Linear layers
    (checked from its config before anything loads); empty = the source's default."""
    return picker.resolve(model, listed(source), "math_neurons", default=active(TAB, source), tab=TAB)


def bench(source: str | None = None, model: str | None = None, progress=None) -> Bench:
    picked = pick(source, model)
    return bench_of(picked.preset, picked.check.n_bytes if picked.check else None, progress)


def bench_of(preset: Preset, size: int | None = None, progress=None) -> Bench:
    """The tab's bench of a preset (the shared model's view; `size` from metadata)."""
    with picker.loading(preset):
        return weights.view(preset, TAB, lambda m: Bench(preset, m), size=size, progress=progress)


preload.register(TAB, bench_of, lambda key: pick(None, key))


def register_data(
    source: str | None,
    side: str,
    path: str | os.PathLike | None = None,
    dataset: str | None = None,
    name: str | None = None,
    model: str | None = None,
    owner: str | None = None,
) -> str:
    """Load a user's math or non-math set for the picked model (or the preset of `source`): a file
    (see sources.read_items) or, where the hub is reachable, a dataset id (sources.load_hub_items).
    Returns the id a Setting names it by (`math=` or `nonmath=`). Raises ValueError or
    RuntimeError with a readable message on bad data."""
    if side not in SIDES:
        raise ValueError(f"side is 'math' or 'nonmath', not {side!r}")
    if (path is None) == (dataset is None):
        raise ValueError("name a file or a dataset id")
    if path is not None:
        items = sources.read_items(path)
    else:
        assert dataset is not None  # one of the two is named, checked above
        items = sources.load_hub_items(dataset)
    if side == "math":
        items = sources.as_math(items, name or str(path or dataset))
    b = bench(source, model)
    if b.zoo and sources.kind_of(items) != "answers":
        raise ValueError(
            "the zoo organism is scored by exact match of its answer: every item needs "
            "a prompt (or question) and an answer"
        )
    key = ("file:" if path is not None else "dataset:") + digest(items)
    label = f"{name or (Path(path).name if path is not None else dataset)} ({len(items)} items)"
    entry = set_entry(items, label, b.zoo)
    with b._guard:
        b.data[f"{side}_sets"].setdefault(key, entry)
    if owner is not None:  # a visitor's set: dropped when the last session that named it ends
        visitor_sets.hold(owner, b.data, side, key, entry)
    else:
        visitor_sets.keep(b.data, side, key, entry)
    return key


def describe(b: "Bench", nonmath: str = DEFAULT_NONMATH, math: str = DEFAULT_MATH) -> Description:
    """What is loaded, in words: model, math data and rule, non-math data and rule (or why none)."""
    try:
        entry = b.nonmath_set(nonmath)
    except (NoNonMath, ValueError):
        entry = None
    mset = b.math_set(math)
    return {
        "model": b.preset.path_or_id,
        "label": b.preset.label,
        "zoo": b.zoo,
        "math": mset["label"],
        "math_rule": mset["rule"],
        "math_own": math != DEFAULT_MATH,
        "template": None
        if b.zoo
        else (
            "the model's chat template"
            if chat.has_template(b.tok)
            else "plain text (the tokenizer has no chat template)"
        ),
        "nonmath": entry["label"] if entry else None,
        "nonmath_rule": entry["rule"] if entry else None,
        "nonmath_error": None if entry else b.data.get("nonmath_error"),
        "n_eval": UI_EVAL,
    }
