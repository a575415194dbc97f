"""The Features instrument's backend: presets, loading the VLM + SAE + index once, and the feature
pages, image analysis and steering the tab shows. No gradio here.

Zoo preset: `llava-scenes` (captioner) + `llava-scenes-sae` (SAE, index, labels).
Hub preset: `llava-hf/llama3-llava-next-8b-hf` + SAE `lmms-lab/llama3-llava-next-8b-hf-sae-131k`
at `model.layers.24`, loaded through the same `load_pretrained` / `load_sae` code.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..core import presets as P
from ..core import store
from ..core.cache import ByteLRUCache, make_key
from ..core.device import device_of, pick_device, place
from ..core.interventions import locked
from ..core.zerogpu import gpu
from . import explain as E
from . import scenes as S
from . import steer as ST
from . import vlm
from .index import INDEX_FILE, FeatureIndex
from .sae import TopKSAE, load_sae

TAB = "features"
ZOO_MODEL = "llava-scenes"
ZOO_SAE = "llava-scenes-sae"
HUB_MODEL = "llava-hf/llama3-llava-next-8b-hf"
HUB_SAE = "lmms-lab/llama3-llava-next-8b-hf-sae-131k"
HUB_HOOKPOINT = "model.layers.24"

ZOO_PRESET = P.register(P.Preset(TAB, "zoo", ZOO_MODEL, "transformers.LlavaForConditionalGeneration",
                                 label="tiny LLaVA on synthetic scenes + TopK SAE",
                                 extra={"sae": ZOO_SAE}))
HUB_PRESET = P.register(P.Preset(TAB, "hub", HUB_MODEL, "transformers.LlavaNextForConditionalGeneration",
                                 label="LLaVA-NeXT-8B + lmms-lab SAE (131k latents, k=256)",
                                 extra={"sae": HUB_SAE, "hookpoint": HUB_HOOKPOINT}))

PAGE_CACHE = ByteLRUCache(32 * 2**20, name="features-pages")
_RESULT_CACHE = ByteLRUCache(16 * 2**20, name="features-results")
LABEL_MIN_IOU = 0.05  # below this the best concept explains nothing: shown as "no concept"


def shown_label(lab: dict) -> str:
    return lab.get("label", "") if float(lab.get("score", 0.0)) >= LABEL_MIN_IOU else ""


@dataclass
class Organism:
    """Everything the tab needs, loaded once per process (read-only; interventions are scoped)."""
    name: str
    folder: Path
    model: Any
    tokenizer: Any
    processor: Any
    sae: TopKSAE
    hookpoint: str
    index: FeatureIndex | None = None
    labels: dict[str, dict] = field(default_factory=dict)
    summary: dict = field(default_factory=dict)
    index_specs: list[dict] = field(default_factory=list)
    heldout_specs: list[dict] = field(default_factory=list)
    model_id: str = ""

    @property
    def n_features(self) -> int:
        return self.sae.n_latents


def _read_json(path: Path, default):
    return json.loads(path.read_text()) if path.exists() else default


def load_zoo(sae_name: str = ZOO_SAE, root: Path | None = None) -> Organism:
    from ..zoo import zoo_path

    sae_dir = zoo_path(sae_name, root)
    info = _read_json(sae_dir / "organism.json", {})
    cap_dir = zoo_path(info.get("captioner", ZOO_MODEL), root)
    from transformers import AutoProcessor, LlavaForConditionalGeneration

    roots = [cap_dir.parent]
    model = place(P.load_pretrained(LlavaForConditionalGeneration, cap_dir, roots=roots).eval())
    processor = P.load_pretrained(AutoProcessor, cap_dir, weights=False, roots=roots)
    sae = load_sae(P.validate_local_path(sae_dir, roots), device=device_of(model))
    hook = sae.cfg.hookpoint or info.get("hookpoint", "")
    index = FeatureIndex.load(sae_dir / INDEX_FILE) if (sae_dir / INDEX_FILE).exists() else None
    return Organism(sae_name, sae_dir, model, processor.tokenizer, processor, sae, hook, index,
                    _read_json(sae_dir / "labels.json", {}), _read_json(sae_dir / "summary.json", {}),
                    vlm.load_scene_set(sae_dir, "index_scenes.json") if (sae_dir / "index_scenes.json").exists() else [],
                    vlm.load_scene_set(cap_dir), model_id=f"zoo:{sae_name}")


def load_hub(model_id: str = HUB_MODEL, sae_id: str = HUB_SAE, hookpoint: str = HUB_HOOKPOINT,
             *, model_class: str = "transformers.LlavaNextForConditionalGeneration") -> Organism:
    """The paper's checkpoint and SAE. Local folders (validated against the allowed roots) or hub ids;
    from the hub only the SAE's hookpoint folder is fetched, as safetensors."""
    from transformers import AutoProcessor

    half = pick_device().type == "cuda"
    model = place(P.load_pretrained(model_class, model_id, dtype=torch.bfloat16 if half else None).eval())
    processor = P.load_pretrained(AutoProcessor, model_id, weights=False)
    if P.looks_local(sae_id):
        sae_dir = Path(P.resolve(sae_id))
    else:  # pragma: no cover - needs the network
        from huggingface_hub import snapshot_download

        sae_dir = Path(snapshot_download(P.validate_hub_id(sae_id), allow_patterns=[f"{hookpoint}/*"]))
    sae = load_sae(sae_dir, hookpoint=hookpoint, device=device_of(model))
    return Organism(f"hub:{sae_id}", sae_dir, model, processor.tokenizer, processor, sae,
                    vlm.resolve_hookpoint(model, hookpoint), model_id=f"hub:{model_id}|{sae_id}")


def get_organism(source: str = "zoo") -> Organism:
    preset = P.active(TAB, source)
    if preset.source == "hub":
        return store.get_or_load(preset.model_id, lambda: load_hub(preset.path_or_id, preset.extra["sae"],
                                                                   preset.extra["hookpoint"]))
    return store.get_or_load(preset.model_id, load_zoo)


def load_organism(name: str = ZOO_SAE) -> Organism:
    return load_zoo(name)


# ---------------------------------------------------------------------------------- feature list
def feature_table(org: Organism, query: str = "", sort: str = "density", limit: int = 500) -> list[dict]:
    """Rows: id, concept label, family, IoU score, density, max activation (alive features only)."""
    if org.index is None:
        return []
    t = org.index.tensors
    rows = []
    q = (query or "").strip().lower()
    for f in range(org.index.n_features):
        lab = org.labels.get(str(f), {})
        if float(t["density"][f]) <= 0:
            continue
        row = {"feature": f, "label": shown_label(lab), "family": lab.get("family", "") if shown_label(lab) else "",
               "iou": float(lab.get("score", 0.0)), "density": float(t["density"][f]),
               "max_act": float(t["max_act"][f])}
        if q and q not in row["label"].lower() and q not in row["family"].lower() and q != str(f):
            continue
        rows.append(row)
    keys = {"density": "density", "max activation": "max_act", "max_act": "max_act", "iou": "iou"}
    if sort not in keys:
        raise ValueError(f"sort by one of {sorted(set(keys))}, not {sort!r}")
    rows.sort(key=lambda r: (-r[keys[sort]], r["feature"]))
    return rows[:limit]


# ---------------------------------------------------------------------------------- feature page
def feature_page(org: Organism, feature: int, n_top: int = 5) -> dict:
    """A feature's page from the index only (no model call): top images with their maps and
    regions, histogram, density, label. Cached per (organism, feature)."""
    if org.index is None:
        raise ValueError("this preset has no feature index")
    if not 0 <= int(feature) < org.index.n_features:
        raise IndexError(f"feature must be in 0..{org.index.n_features - 1}")
    key = make_key(org.model_id, ("page", int(feature), n_top))
    hit = PAGE_CACHE.get(key)
    if hit is not None:
        return hit
    f = int(feature)
    ids, maps, scores = org.index.top(f, n_top)
    specs = [org.index_specs[i] for i in ids]
    imgs = [S.render(s)[0] for s in specs]
    size = imgs[0].shape[0] if imgs else S.IMAGE_SIZE
    up = E.upsample(maps, size).numpy() if len(ids) else np.zeros((0, size, size), np.float32)
    reg = E.regions(maps, size).numpy() if len(ids) else np.zeros((0, size, size), bool)
    t = org.index.tensors
    lab = org.labels.get(str(f), {})
    page = {
        "feature": f,
        "label": shown_label(lab), "family": lab.get("family", "") if shown_label(lab) else "",
        "iou": float(lab.get("score", 0.0)),
        "concept_scores": lab.get("scores", {}),
        "density": float(t["density"][f]), "max_act": float(t["max_act"][f]), "mean_act": float(t["mean_act"][f]),
        "hist_counts": t["hist"][f].tolist(), "hist_edges": t["hist_edges"].tolist(),
        "top": [{"image_id": int(i), "score": round(float(s), 4), "caption": S.caption(sp),
                 "iou_label": round(E.iou(r, S.render(sp)[1][lab["label"]]), 4) if lab.get("label") in S.CONCEPTS else None}
                for i, s, sp, r in zip(ids, scores, specs, reg)],
        "images": imgs, "maps": up, "regions": reg,
    }
    PAGE_CACHE.put(key, page)
    return page


def page_json(page: dict) -> dict:
    """The JSON-exportable part of a page (no arrays)."""
    return {k: v for k, v in page.items() if k not in ("images", "maps", "regions")}


# ---------------------------------------------------------------------------------- analysis
@torch.no_grad()
def processor_codes(org: Organism, image: np.ndarray, prompt: str = "<image> describe") -> torch.Tensor:
    """SAE codes [n_image_tokens, F] at the hookpoint for one image, through the model's own
    processor (the path the hub checkpoint uses; image positions = the image-token ids)."""
    inputs = org.processor(images=[image], text=[prompt], return_tensors="pt")
    dev = device_of(org.model)
    inputs = {k: v.to(dev) for k, v in inputs.items()}
    grabbed = []
    with vlm.edit_residual(org.model, org.hookpoint, lambda h: grabbed.append(h.detach()) or None):
        org.model(**inputs)
    mask = inputs["input_ids"][0] == org.model.config.image_token_index
    return org.sae.encode(grabbed[0][0][mask].float().to(org.sae.W_enc.device))


def model_image(org: Organism, image: np.ndarray) -> np.ndarray:
    """Any uploaded picture as the model sees it: uint8 RGB at the vision tower's size (grayscale is
    repeated over the channels, alpha dropped)."""
    image = np.asarray(image)
    if image.ndim == 2:
        image = np.stack([image] * 3, -1)
    if image.ndim != 3 or image.shape[-1] not in (3, 4) or min(image.shape[:2]) < 1:
        raise ValueError("expected an RGB image")
    image = image[..., :3].astype(np.uint8)
    size = org.model.config.vision_config.image_size
    if image.shape[:2] != (size, size):
        from PIL import Image

        image = np.asarray(Image.fromarray(image).convert("RGB").resize((size, size), Image.BILINEAR))
    return image


@gpu(duration=20)  # one VLM prompt pass + SAE encode
@torch.no_grad()
def analyse_image(org: Organism, image: np.ndarray, top_n: int = 8) -> dict:
    """Which features fire where on one image: per-patch codes at the SAE hookpoint."""
    image = model_image(org, image)
    key = make_key(org.model_id, image, ("analyse", top_n))
    hit = _RESULT_CACHE.get(key)
    if hit is not None:
        return hit
    with locked(org.model):
        if org.model_id.startswith("zoo:"):
            h = next(vlm.residuals(org.model, org.tokenizer, image[None], org.hookpoint))[1]
            codes = org.sae.encode(h[0, vlm.image_slice(org.model)])  # [P, F]
            caption = vlm.generate_captions(org.model, org.tokenizer, image[None])[0]
        else:  # the base image's patches come first (LLaVA-NeXT appends the high-resolution tiles)
            codes = processor_codes(org, image)
            v = org.model.config.vision_config
            codes = codes[: (v.image_size // v.patch_size) ** 2]
            caption = ""
    codes = codes.float().cpu()  # the maps leave as numpy (and, under ZeroGPU, pickled)
    g = int(round(codes.shape[0] ** 0.5))
    mean = codes.mean(0)
    order = [int(f) for f in torch.argsort(mean, descending=True)[:top_n] if mean[f] > 0]
    out = {"image": image, "caption": caption,
           "features": [{"feature": f, "mean_act": round(float(mean[f]), 4),
                         "label": org.labels.get(str(f), {}).get("label", "")} for f in order],
           "maps": {f: codes[:, f].reshape(g, g).numpy() for f in order}}
    _RESULT_CACHE.put(key, out)
    return out


def family_rivals(org: Organism, feature: int) -> list[int]:
    """Features labelled with another concept of the same family (e.g. the other colours)."""
    lab = org.labels.get(str(int(feature)), {})
    fam, own = lab.get("family"), lab.get("label")
    if not fam:
        return []
    return [int(f) for f, e in org.labels.items() if e.get("family") == fam and e.get("label") != own]


def steering_defaults(org: Organism) -> dict:
    st = org.summary.get("steering", {})
    return {"positions": st.get("default_positions", "prompt"), "multiple": float(st.get("value_multiple", 2.0)),
            "suppress": bool(st.get("suppress_other_colours", False)), "hookpoint": org.hookpoint}


def default_clamp_value(org: Organism, feature: int, multiple: float | None = None) -> float:
    """`multiple` × the feature's max activation; without `multiple`, a colour feature gets the multiple
    calibrated for its colour (summary "steering.calibrated"), any other feature the sweep's best one."""
    st = org.summary.get("steering", {})
    mult = multiple
    if mult is None:
        colour = {int(f): c for c, f in st.get("colour_features", {}).items()}.get(int(feature))
        mult = float(st.get("calibrated", {}).get("multiples", {}).get(colour, st.get("value_multiple", 2.0)))
    if org.index is None:
        return 10.0
    return round(mult * float(org.index.tensors["max_act"][int(feature)]), 3)


@gpu(duration=40)  # two greedy captions (with and without the clamp)
@torch.no_grad()
def steer_caption(org: Organism, image: np.ndarray, feature: int, value: float, *, positions: str = "prompt",
                  add_error: bool = False, suppress_family: bool = False) -> dict:
    """Caption with and without the clamp, side by side."""
    if not np.isfinite(value):
        raise ValueError("clamp value must be a finite number")
    image = model_image(org, image)
    suppress = tuple(family_rivals(org, feature)) if suppress_family else ()
    key = make_key(org.model_id, image, ("steer", int(feature), float(value), positions, bool(add_error), suppress))
    hit = _RESULT_CACHE.get(key)
    if hit is not None:
        return hit
    with locked(org.model):
        base = vlm.generate_captions(org.model, org.tokenizer, image[None])[0]
        steered = ST.steered_captions(org.model, org.tokenizer, org.sae, org.hookpoint, image[None], int(feature),
                                      float(value), positions=positions, add_error=add_error,
                                      suppress=suppress)[0]
    out = {"feature": int(feature), "value": float(value), "positions": positions, "add_error": bool(add_error),
           "suppressed": list(suppress),
           "hookpoint": org.hookpoint, "baseline": base, "steered": steered,
           "well_formed": S.parse_caption(steered) is not None}
    _RESULT_CACHE.put(key, out)
    return out
