"""What the Math neurons tab computes, as plain functions (no gradio): the shared model of a
preset, its evaluation sets, masks and accuracies cached per setting.

Settings are small descriptors (method, K, number of samples, factor); masks live in a bounded
byte cache, never in UI state. Every evaluation of a modified model runs inside `scaled`, which
holds the model's lock and restores the weights bit-exactly before the lock is released.
"""
from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import torch

from ..core import limits, store
from ..core.cache import ByteLRUCache, make_key
from ..core.interventions import locked
from ..core.device import place
from ..core.zerogpu import capped, gpu
from ..core.presets import Preset, active, load_preset, load_pretrained
from . import core
from .evaluate import accuracy, generate
from .presets import TAB

MASK_CACHE = ByteLRUCache(96 * 2**20, name="mathneuro-masks")
RESULT_CACHE = ByteLRUCache(8 * 2**20, name="mathneuro-results")

MAX_SAMPLES = 64
# Held-out items per set that the tab scores (the first N of each JSON set; the organism tests and
# the benchmark use all of them). Exact match on 200 + 200 items is one batched forward each.
UI_EVAL = 200


@dataclass(frozen=True)
class Setting:
    method: str = "mathneuro"
    top_k: float = 0.15  # fraction
    n_samples: int = 64
    factor: float = 0.0
    seed: int = 0

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
        return (self.method, round(self.top_k, 6), int(self.n_samples), int(self.seed))


class Bench:
    """One preset's model, tokenizer and data (loaded once per process)."""

    def __init__(self, preset: Preset):
        self.preset = preset
        self.model_id = preset.model_id
        self.model = store.get_or_load(self.model_id, lambda: place(load_preset(preset).eval()))
        self.tok = store.get_or_load(self.model_id + "#tokenizer", self._load_tokenizer)
        self.data = store.get_or_load(self.model_id + "#data", self._load_data)
        self._guard = threading.Lock()

    def _load_tokenizer(self):
        from transformers import AutoTokenizer

        roots = [Path(self.preset.location()).parent] if self.preset.source == "zoo" else None
        tok = load_pretrained(AutoTokenizer, self.preset.location(), weights=False, roots=roots)
        tok.padding_side = "right"
        return tok

    def _load_data(self) -> dict[str, Any]:
        if self.preset.source != "zoo":
            return load_hub_data(self.preset)
        folder = Path(self.preset.location())
        read = lambda key: json.loads((folder / self.preset.extra[key]).read_text())  # noqa: E731
        return {"math": read("math"), "nonmath": read("nonmath"),
                "ident_math": read("ident_math"), "ident_nonmath": read("ident_nonmath")}

    # ------------------------------------------------------------------------------- masks
    @gpu(duration=lambda self, s, *a, **k: capped(10 + 0.5 * s.n_samples))  # 2 × n_samples forwards
    def masks(self, s: Setting) -> dict[str, torch.Tensor]:
        s.validate()
        key = make_key(self.model_id, "masks", s.masks_key())

        def compute():
            if s.method == "random":  # same count per matrix as the (cached) MathNeuro set
                ref = self.masks(Setting("mathneuro", s.top_k, s.n_samples, seed=s.seed))
                return core.random_like(ref, s.seed)
            m = self.data["ident_math"][: s.n_samples]
            n = self.data["ident_nonmath"][: s.n_samples]
            with locked(self.model):
                return core.find(s.method, self.model, m, n, s.top_k, tokenizer=self.tok, seed=s.seed)

        return MASK_CACHE.get_or_compute(key, compute)

    # ---------------------------------------------------------------------------- accuracy
    def eval_items(self, kind: str, n_eval: int | None) -> list[dict]:
        items = self.data["math" if kind == "math" else "nonmath"]
        return items[:n_eval] if n_eval else items

    @gpu(duration=lambda self, s, n_eval=UI_EVAL, *a, **k: capped(15 + 0.1 * (n_eval or 1000) + 0.5 * s.n_samples))
    def evaluate(self, s: Setting, n_eval: int | None = UI_EVAL) -> dict[str, float]:
        """Math and non-math exact-match accuracy with the setting's masks scaled by its factor."""
        s.validate()
        key = make_key(self.model_id, "eval", (s.masks_key(), float(s.factor), n_eval))

        def compute():
            masks = self.masks(s) if float(s.factor) != 1.0 else {}
            with core.scaled(self.model, masks, s.factor):
                return {"math": accuracy(self.model, self.tok, self.eval_items("math", n_eval)),
                        "nonmath": accuracy(self.model, self.tok, self.eval_items("nonmath", n_eval)),
                        "n_params": core.count(masks) if masks else core.count(self.masks(s))}

        return RESULT_CACHE.get_or_compute(key, compute)

    @gpu(duration=lambda self, n_eval=UI_EVAL, *a, **k: capped(10 + 0.1 * (n_eval or 1000)))
    def baseline(self, n_eval: int | None = UI_EVAL) -> dict[str, float]:
        key = make_key(self.model_id, "baseline", n_eval)

        def compute():
            with locked(self.model):
                return {"math": accuracy(self.model, self.tok, self.eval_items("math", n_eval)),
                        "nonmath": accuracy(self.model, self.tok, self.eval_items("nonmath", n_eval))}

        return RESULT_CACHE.get_or_compute(key, compute)

    @gpu(duration=lambda self, top_k=0, n_samples=1, n_eval=UI_EVAL, *a, **k: capped(20 + 4 * (0.1 * (n_eval or 1000) + 0.5 * n_samples)))
    def prune_all(self, top_k: float, n_samples: int, n_eval: int | None = UI_EVAL) -> dict[str, dict]:
        """The paper's Figure 2: each method's set pruned (factor 0)."""
        out = {}
        for m in core.METHODS:
            limits.check("the method comparison")
            out[m] = self.evaluate(Setting(m, top_k, n_samples, 0.0), n_eval)
        return out

    @gpu(duration=lambda self, s, factors=(), n_eval=UI_EVAL, *a, **k: capped(15 + len(factors) * 0.1 * (n_eval or 1000)))
    def scale_curve(self, s: Setting, factors: Sequence[float], n_eval: int | None = UI_EVAL) -> list[dict]:
        out = []
        for f in factors:
            limits.check("the scale sweep")
            r = self.evaluate(Setting(s.method, s.top_k, s.n_samples, float(f), s.seed), n_eval)
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
            ref = self.masks(Setting("mathneuro", s.top_k, s.n_samples, seed=s.seed))
            m = self.data["ident_math"][: s.n_samples]
            n = self.data["ident_nonmath"][: s.n_samples]
            with locked(self.model):
                res = core.consistency(self.model, m, n, s.top_k, n_samples=[x for x in sizes if x <= s.n_samples] or [1],
                                       n_subsets=n_subsets, tokenizer=self.tok, seed=s.seed, reference=ref)
            return {str(k): v for k, v in res.items()}

        return RESULT_CACHE.get_or_compute(key, compute)

    @gpu(duration=lambda self, s, k=6, *a, **kw: capped(10 + 0.5 * s.n_samples + 2 * k))
    def samples(self, s: Setting, k: int = 6) -> list[dict]:
        """A few held-out questions (math and non-math), answered before and after."""
        items = self.data["math"][: k // 2 + k % 2] + self.data["nonmath"][: k // 2]
        prompts = [it["prompt"] for it in items]
        masks = self.masks(s)
        with locked(self.model):
            before = generate(self.model, self.tok, prompts)
            with core.scaled(self.model, masks, s.factor):
                after = generate(self.model, self.tok, prompts)
        return [{"kind": "math" if i < k // 2 + k % 2 else "non-math", "prompt": it["prompt"],
                 "answer": str(it["answer"]), "before": b, "after": a}
                for i, (it, b, a) in enumerate(zip(items, before, after))]

    @gpu(duration=lambda self, prompt, s, *a, **k: capped(10 + 0.5 * s.n_samples))
    def answer(self, prompt: str, s: Setting) -> dict:
        """Greedy answer to a user's own prompt, before and after the intervention."""
        masks = self.masks(s)
        with locked(self.model):
            before = generate(self.model, self.tok, [prompt])[0]
            with core.scaled(self.model, masks, s.factor):
                after = generate(self.model, self.tok, [prompt])[0]
        return {"prompt": prompt, "before": before, "after": after}


_BENCHES: dict[str, Bench] = {}
_BENCH_GUARD = threading.Lock()


def bench(source: str | None = None) -> Bench:
    preset = active(TAB, source)
    with _BENCH_GUARD:
        b = _BENCHES.get(preset.model_id)
        if b is None:
            b = _BENCHES[preset.model_id] = Bench(preset)
        return b


def load_hub_data(preset: Preset) -> dict[str, Any]:  # pragma: no cover - needs a hub
    """GSM8K (math) and RACE/MMLU (non-math) through the `datasets` library, where installed and
    a hub is reachable; otherwise a clear error."""
    try:
        import datasets  # noqa: F401
    except ImportError as e:
        raise RuntimeError("the hub preset needs the `datasets` package and hub access to load "
                           f"{preset.extra.get('math')} and {preset.extra.get('nonmath')}") from e
    raise RuntimeError("hub evaluation sets are loaded on the GPU Space only")
