"""The Memorization tab's model: a Stable Diffusion pipeline's one store entry and the tab's view of
it (MemoModel: its prompt sets, θ_mem, sampling settings and neuron statistics), the models the
picker lists, and what the page shows before any weights load (`describe`)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from backend.core import picker, preload, weights
from backend.core.presets import Preset, active, presets

from . import core, data
from . import stats as nstats
from .data import STATS_JOB, own_stats_prompts
from .metrics import auroc
from .presets import TAB

# A few everyday captions: neuron statistics for a hub checkpoint, which ships no prompt sets here.
GENERIC_PROMPTS = [
    "a photo of a dog on the beach",
    "a red car parked in the street",
    "a bowl of fruit on a table",
    "a mountain landscape at sunset",
    "a cat sleeping on a sofa",
    "a city skyline at night",
    "a vase of flowers by a window",
    "a man riding a bicycle",
    "a plate of pasta with tomatoes",
    "two children playing in the park",
    "a wooden house in the forest",
    "a boat on a calm lake",
    "a bird sitting on a branch",
    "a cup of coffee and a book",
    "a train crossing a bridge",
    "a snowy road between pine trees",
    "a woman reading in a library",
    "an old castle on a hill",
    "a field of sunflowers",
    "a horse in a green meadow",
    "a kitchen with white cabinets",
    "a lighthouse on a rocky coast",
    "a bowl of soup with bread",
    "a street market with vegetables",
    "a tennis player serving the ball",
    "a pizza with cheese and basil",
    "a group of friends laughing",
    "a desert with sand dunes",
    "an airplane in a blue sky",
    "a living room with a fireplace",
    "a close-up of a green leaf",
    "a painting of a harbour",
    "a bus stop in the rain",
    "a chocolate cake on a plate",
    "a bridge over a river",
    "a garden with a stone path",
]

HUB_STATS_N = 1000  # COCO captions the statistics are computed over in-process when none are precomputed


@dataclass
class MemoModel:
    preset: Preset
    pipe: Any
    folder: Path | None
    info: dict
    theta_mem: float
    guidance_scale: float
    num_seeds: int
    num_inference_steps: int
    # the neuron search's own guidance (the official search's 0 unless the model says otherwise)
    search_guidance: float = core.SEARCH_GUIDANCE
    _stats: core.NeuronStats | None = None
    _stats_n: int | None = None
    _stats_source: dict | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def model_id(self) -> str:
        return self.preset.model_id

    @property
    def layers(self) -> list[str]:
        return core.value_layers(self.pipe.unet)

    @property
    def sizes(self) -> dict[str, int]:
        return core.layer_sizes(self.pipe.unet)

    @property
    def memorized(self) -> list[dict]:
        return list(self.info.get("memorized", []))

    @property
    def ordinary_examples(self) -> list[str]:
        return ordinary_examples(self.info, self.theta_mem)

    def detection(self) -> dict | None:
        return detection(self.info, self.theta_mem)

    def stats(self) -> core.NeuronStats:
        """μ, σ per neuron: from a precomputed file for this model when one is configured
        (`stats_path`), else computed once over the ordinary prompts (on a hub checkpoint the first
        HUB_STATS_N COCO captions; `set_stats_prompts` recomputes them over another count)."""
        with self._lock:
            if self._stats is None:
                path = self.stats_path()
                if path is not None:
                    self._stats = nstats.load_stats(path, self.pipe.unet)
                    self._stats_source = {"kind": "file", "file": str(path), "n_prompts": self._stats.n_prompts}
                else:
                    prompts = self.stats_prompts[: self._stats_n] if self._stats_n else self.stats_prompts
                    self._stats = self._kept_stats(prompts)
                    self._stats_source = {"kind": "in-process", "n_prompts": len(prompts)}
            return self._stats

    def _kept_stats(self, prompts: Sequence[str]) -> core.NeuronStats:
        """The statistics over `prompts`, computed once and kept on disk (nstats.computed_path), so
        that a ZeroGPU worker's computation outlives the worker."""
        path = nstats.computed_path(self.model_id, prompts, self.pipe)
        if path.is_file():
            try:
                return nstats.load_stats(path, self.pipe.unet)
            except ValueError:  # a torn or foreign file: computed afresh below, and replaced
                pass
        stats = core.neuron_stats(self.pipe, prompts)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            nstats.save_stats(nstats.as_tensors(stats), path, model_id=self.model_id, prompts=prompts)
        except OSError as e:  # a read-only disk: the statistics still serve this process
            logging.getLogger("workbench").warning("could not keep the NeMo statistics at %s: %s", path, e)
        return stats

    def set_stats_prompts(self, n: int, prompts: Sequence[str] | None = None) -> dict:
        """Recompute the statistics in this process over the first `n` ordinary prompts, or over the
        user's own ordinary prompts (at most OWN_STATS_MAX here; the CLI job takes any number)."""
        if prompts:
            own = own_stats_prompts(prompts)
            stats = core.neuron_stats(self.pipe, own)
            digest = hashlib.sha256("\n".join(own).encode()).hexdigest()[:12]
            with self._lock:
                self._stats = stats
                self._stats_source = {"kind": "in-process", "n_prompts": len(own), "own": digest}
            return self.stats_status()
        total = len(self.stats_prompts)
        if not 2 <= n <= total:
            raise ValueError(f"Choose between 2 and {total} prompts for the statistics.")
        stats = core.neuron_stats(self.pipe, self.stats_prompts[:n])
        with self._lock:
            self._stats, self._stats_n = stats, n
            self._stats_source = {"kind": "in-process", "n_prompts": n}
        return self.stats_status()

    @property
    def stats_tag(self) -> str:
        """What the statistics in use were computed from (part of every cache key that uses them)."""
        src = self._stats_source or {}
        return f"{src.get('kind')}:{src.get('file', '')}:{src.get('n_prompts')}:{src.get('own', '')}"

    def stats_status(self) -> dict:
        """Which statistics are in use, or would be at first use, and what to run for the paper's."""
        src = dict(self._stats_source or {})
        hub = self.preset.source != "zoo"
        set_name = "COCO 2014 captions (the paper's set)" if hub else "ordinary training captions"
        if not src:
            try:
                path = self.stats_path()
            except ValueError as e:
                path, src["error"] = None, str(e)
            if path is not None:
                src.update(
                    kind="file", file=str(path), n_prompts=int(nstats.file_meta(path).get("n_prompts", 0)), pending=True
                )
            else:
                n = min(self._stats_n or len(self.stats_prompts), len(self.stats_prompts))
                src.update(kind="in-process", n_prompts=n, pending=True)
        if src.get("own"):
            set_name = "ordinary prompts you gave"
        src.update(
            set=set_name,
            total=src["n_prompts"] if src.get("own") else len(self.stats_prompts),
            job=STATS_JOB if hub and src.get("kind") != "file" else None,
        )
        return src

    @property
    def stats_prompts(self) -> list[str]:
        """The ordinary prompts the statistics are computed over when no file is given."""
        return list(self.info.get("non_memorized") or GENERIC_PROMPTS)

    def stats_path(self) -> Path | None:
        """A statistics file written by `python -m backend.precompute.nemo_stats` for this model:
        $WORKBENCH_NEMO_STATS, else the preset's extra["stats_file"]. A file made for another
        model id is ignored (the statistics are then computed in-process)."""
        name = os.environ.get(nstats.STATS_ENV) or self.preset.extra.get("stats_file")
        if not name:
            return None
        path = Path(name)
        if not path.is_file():
            raise ValueError(f"{nstats.STATS_ENV}: no neuron statistics file at {path}")
        owner = nstats.file_meta(path).get("model_id", "")
        return path if owner in ("", self.model_id) else None

    def listed(self, prompt: str) -> dict | None:
        """The entry of the model's memorized list for this prompt (zoo: the planted captions;
        hub: the paper's LAION list with its VM/TM type), or None."""
        return self._listed.get(prompt.strip()) if prompt else None

    @property
    def _listed(self) -> dict[str, dict]:
        return {m["prompt"]: m for m in self.memorized}

    def train_image(self, prompt: str) -> np.ndarray | None:
        for m in self.memorized:
            if m["prompt"] == prompt.strip() and self.folder is not None and m.get("image"):
                from PIL import Image

                return np.asarray(Image.open(self.folder / m["image"]).convert("RGB"), np.float32) / 255
        return None


def _memo_model(preset: Preset, pipe) -> MemoModel:
    """The tab's view of a pipeline's shared weights (backend.core.weights: the paper's checkpoints
    and a user's own run in half precision on a GPU, the zoo's tiny pipeline as saved): its
    prompt sets, θ_mem and sampling settings."""
    folder, info = None, {}
    if preset.source == "zoo":
        folder = Path(preset.location())
        info = json.loads((folder / "memorization.json").read_text())
    else:
        info = hub_info()
    settings = info.get("settings", {})
    model = MemoModel(
        preset=preset,
        pipe=pipe,
        folder=folder,
        info=info,
        theta_mem=float(info.get("theta_mem", preset.extra.get("theta_mem", 0.428))),
        guidance_scale=guidance_of(settings, preset),
        num_seeds=int(settings.get("num_seeds", preset.extra.get("num_seeds", 5))),
        num_inference_steps=int(settings.get("num_inference_steps", preset.extra.get("num_inference_steps", 10))),
        search_guidance=float(
            settings.get("search_guidance_scale", preset.extra.get("search_guidance_scale", core.SEARCH_GUIDANCE))
        ),
    )
    if preset.source != "zoo":  # the paper's checkpoint or a user's own: the first COCO captions
        model._stats_n = HUB_STATS_N
    return model


def _load(preset: Preset) -> MemoModel:
    """A private copy of a preset's model, outside the store (jobs and tests that must not share)."""
    return _memo_model(preset, weights.load(preset))


def hub_info() -> dict:
    """A hub checkpoint's prompt sets: the paper's 500 memorized LAION captions (zoo entries carry
    a training image instead of a type), its unmemorized LAION captions as ordinary examples, and the
    COCO captions for the statistics."""
    return {
        "memorized": [dict(m) for m in data.memorized_laion()],
        "heldout": list(data.unmemorized_laion()),
        "non_memorized": list(data.coco_captions()),
    }


def describe(source: str | None = None, model: str | None = None) -> dict:
    """What the tab shows before any model is loaded: examples, θ_mem, and the value layers (from
    the UNet's config, so building the page loads no weights)."""
    preset = pick(source, model).preset
    info: dict = {}
    unet_cfg: dict = {}
    if preset.source in ("zoo", "local"):
        folder = Path(preset.location())
        unet_cfg = json.loads((folder / "unet" / "config.json").read_text())
    if preset.source == "zoo":
        info = json.loads((folder / "memorization.json").read_text())
    else:  # the paper's checkpoint or a user's own pipeline: the paper's prompt sets
        info = hub_info()
        unet_cfg = unet_cfg or _cached_unet_config(preset)
    layers = []
    if unet_cfg:
        ch, lpb = unet_cfg["block_out_channels"], unet_cfg["layers_per_block"]
        lpb = lpb if isinstance(lpb, list) else [lpb] * len(ch)
        for b, kind in enumerate(unet_cfg["down_block_types"]):
            if "CrossAttn" in kind:
                layers += [(f"down{b}.attn{j}", ch[b]) for j in range(lpb[b])]
        if "CrossAttn" in (unet_cfg.get("mid_block_type") or "UNetMidBlock2DCrossAttn"):
            layers.append(("mid.attn0", ch[-1]))
    settings = info.get("settings", {})
    n_stats = len(info.get("non_memorized") or GENERIC_PROMPTS)
    env = os.environ.get(nstats.STATS_ENV) or preset.extra.get("stats_file")
    plan = (
        {"kind": "file", "file": env, "pending": True}
        if env
        else {
            "kind": "in-process",
            "pending": True,
            "n_prompts": min(HUB_STATS_N, n_stats) if preset.source != "zoo" else n_stats,
        }
    )
    plan.update(
        set="COCO 2014 captions (the paper's set)" if preset.source != "zoo" else "ordinary training captions",
        total=n_stats,
        job=STATS_JOB if preset.source != "zoo" and not env else None,
    )
    return {
        "model_id": preset.model_id,
        "label": preset.label,
        "source": preset.source,
        "stats_plan": plan,
        "memorized": [m["prompt"] for m in info.get("memorized", [])],
        # zoo captions were planted with their own image: verbatim memorization by construction
        "memorized_types": [m.get("type", "VM") for m in info.get("memorized", [])],
        "has_train_images": any(m.get("image") for m in info.get("memorized", [])),
        "guidance_scale": guidance_of(settings, preset),
        "search_guidance": settings.get(
            "search_guidance_scale", preset.extra.get("search_guidance_scale", core.SEARCH_GUIDANCE)
        ),
        "ordinary": ordinary_examples(info, info.get("theta_mem", preset.extra.get("theta_mem", 0.428))),
        "theta_mem": info.get("theta_mem", preset.extra.get("theta_mem")),
        "layers": layers,
    }


# An example offered as "ordinary" scores at least this far below θ_mem: θ_mem is mean + 1 σ of
# ordinary prompts' scores, so about one ordinary prompt in six scores above it, and one just under
# it would read as a near miss rather than as ordinary.
EXAMPLE_MARGIN = 0.05


def ordinary_examples(info: dict, theta_mem: float, n: int = 6) -> list[str]:
    """Held-out ordinary prompts to offer as examples: where the build recorded their scores
    (`scores.heldout`, the same measure as `check`), those clearly below θ_mem first."""
    held = list(info.get("heldout", []))
    scores = (info.get("scores") or {}).get("heldout") or []
    if held and len(scores) == len(held):
        clear = [p for p, sc in zip(held, scores) if sc <= theta_mem - EXAMPLE_MARGIN]
        held = clear + [p for p in held if p not in clear]
    return held[:n] or GENERIC_PROMPTS[:n]


def detection(info: dict, theta_mem: float) -> dict | None:
    """How well the score separates the model's memorized prompts from held-out ordinary ones, from
    the scores its build recorded: AUROC, and how many ordinary prompts score above θ_mem. None
    for a model without recorded scores (a hub or user's pipeline: the batch check measures it)."""
    scores = info.get("scores") or {}
    mem, held = scores.get("memorized") or [], scores.get("heldout") or []
    if not (mem and held):
        return None
    return {
        "auroc": auroc(mem, held),
        "n_memorized": len(mem),
        "n_ordinary": len(held),
        "ordinary_above": int(sum(sc > theta_mem for sc in held)),
        "memorized_above": int(sum(sc > theta_mem for sc in mem)),
    }


def guidance_of(settings: dict, preset: Preset) -> float:
    """Detection's and generation's guidance scale: the organism's or preset's own, else 7.0 (a
    user's pipeline; what the NeMo paper's SD-1.4 runs use)."""
    return float(settings.get("guidance_scale", preset.extra.get("guidance_scale", 7.0)))


def _cached_unet_config(preset: Preset) -> dict:
    """A hub checkpoint's unet/config.json when it is already in the local cache (no download, no
    weights), so the page can name the value layers before the model loads; {} otherwise."""
    try:
        from huggingface_hub import try_to_load_from_cache

        path = try_to_load_from_cache(preset.path_or_id, "unet/config.json", revision=preset.revision)
        return json.loads(Path(path).read_text()) if isinstance(path, str) else {}
    except Exception:  # an unreadable cache only costs the early layer list
        return {}


def listed(source: str | None = None) -> list[Preset]:
    """What the model picker lists: the source's default, then the zoo organism and the paper's
    SD-1.4 (without the hub it fails to load with a clear message)."""
    first = active(TAB, source)
    return [first] + [p for p in presets(TAB) if p != first]


def pick(source: str | None = None, model: str | None = None) -> picker.Picked:
    """A listed preset, or the user's own Stable Diffusion 1.x/2.x pipeline (a UNet2DConditionModel
    with text cross-attention), checked from its model_index.json and unet/config.json first."""
    return picker.resolve(model, listed(source), "memorization", default=active(TAB, source), tab=TAB)


def get(source: str | None = None, model: str | None = None, progress=None) -> MemoModel:
    picked = pick(source, model)
    return get_preset(picked.preset, picked.check.n_bytes if picked.check else None, progress)


def get_preset(preset: Preset, size: int | None = None, progress=None) -> MemoModel:
    """The loaded model of a preset: its pipeline's one store entry (backend.core.weights) and this
    tab's view of it (`size` from metadata)."""
    with picker.loading(preset):
        return weights.view(preset, TAB, lambda pipe: _memo_model(preset, pipe), size=size, progress=progress)


preload.register(TAB, get_preset, lambda key: pick(None, key))
