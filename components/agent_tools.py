"""The workbench's methods as tools for agents, served over the Model Context Protocol (MCP).

Each tool is a plain function with typed parameters and a docstring an agent can act on. It calls
the same backend service functions as the tab's handler does, so every fix to a method reaches the
tools too, and its interventions follow the same per-request rules (applied inside the service's
context manager, under the model's lock, restored before the answer returns). A tool answers JSON
text, plus a PNG where a picture carries the result (MCP clients show it as an image).

`install(demo, source)` registers the tools as API endpoints of the running app (`gr.api`), each
guarded and marked for ZeroGPU like a model-touching handler, and takes the UI's own events out of
the tool list. Gradio then serves them as MCP tools with `launch(mcp_server=True)` (app.py --mcp).
"""
# No `from __future__ import annotations`: gr.api reads the real type objects from the signatures
# (through the guard's and ZeroGPU's wrappers) to build each tool's schema. Each docstring's Args
# and Returns entries are one long line: Gradio's parser keeps only an entry's first line.
import json
import math
import os
import tempfile
import uuid
from pathlib import Path
from typing import Literal

import gradio as gr
import numpy as np

from backend.core import bounds
from backend.core.presets import active_source
from backend.core.zerogpu import gpu

from . import report
from .guard import HANDLER_GPU_SECONDS, guarded

_SOURCE: str | None = None  # the app's preset source, set by install()
_PNG_DIR: Path | None = None
TOP_Z = 10  # neurons listed by check_memorization
MAX_SINGULAR_VALUES = 64  # singular values listed by pissa_layer (the rest are summarised)
MAX_PNGS = 64  # images kept in this process's folder for answers still on their way out
SIG_DIGITS = 4  # numbers in answers: an agent reads them, and full floats made answers 3× longer

MathMethod = Literal["mathneuro", "wanda", "random", "lape"]
RelMethod = Literal["mambalrp", "lrp_ln", "gi", "smoothgrad", "ig", "attnroll", "mambaattr"]
RelRule = Literal["norm", "silu", "ssm", "gate"]
PissaInit = Literal["pissa", "pissa_niter_4"]  # bounds.PISSA_INITS, the tab's choices
SteerPositions = Literal["default", "prompt", "all", "image"]


def _source() -> str:
    return _SOURCE or active_source()


def _json(obj) -> str:
    def default(o):
        if isinstance(o, np.ndarray):
            return o.tolist()
        if isinstance(o, (np.floating, np.integer, np.bool_)):
            return o.item()
        raise TypeError(f"{type(o).__name__} is not JSON")

    def clean(o):  # NaN/inf are not JSON; an agent reads null; 4 significant digits are plenty
        if isinstance(o, float):
            return round_sig(o)
        if isinstance(o, dict):
            return {str(k): clean(v) for k, v in o.items()}
        if isinstance(o, (list, tuple)):
            return [clean(v) for v in o]
        return o

    return json.dumps(clean(json.loads(json.dumps(obj, default=default))), ensure_ascii=False)


def round_sig(x: float, digits: int = SIG_DIGITS) -> float | None:
    """`x` to `digits` significant digits (None for NaN and infinities, which JSON cannot carry)."""
    if not math.isfinite(x):
        return None
    return float(f"{x:.{digits}g}")


def _png(image: np.ndarray, name: str) -> gr.FileData:
    """An RGB uint8 array → a PNG file Gradio serves and MCP hands over as an image."""
    from PIL import Image

    global _PNG_DIR
    if _PNG_DIR is None:
        _PNG_DIR = Path(tempfile.mkdtemp(prefix="wb-agent-"))
    path = _PNG_DIR / f"{name}-{uuid.uuid4().hex[:12]}.png"  # unique: parallel calls never share a file
    Image.fromarray(np.ascontiguousarray(image)).save(path, format="PNG")
    # Gradio copies the file into its own cache as the answer leaves, so only the newest few are kept
    for old in sorted(_PNG_DIR.glob("*.png"), key=_mtime)[:-MAX_PNGS]:
        old.unlink(missing_ok=True)
    return gr.FileData(path=str(path), mime_type="image/png", orig_name=path.name)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:  # removed by a parallel call meanwhile
        return 0.0


def _to_uint8(img: np.ndarray) -> np.ndarray:
    a = np.asarray(img)
    if a.dtype != np.uint8:
        a = (np.clip(a.astype(np.float32), 0, 1) * 255).round().astype(np.uint8)
    if a.ndim == 2:
        a = np.repeat(a[..., None], 3, -1)
    return a[..., :3]


def _grid(rows: list[list[np.ndarray]], side: int = 96, pad: int = 4) -> np.ndarray:
    """Images laid out in rows on a white canvas, each scaled (nearest) to side × side."""
    from PIL import Image

    n = max((len(r) for r in rows), default=1)
    canvas = np.full((pad + len(rows) * (side + pad), pad + n * (side + pad), 3), 255, np.uint8)
    for i, row in enumerate(rows):
        for j, im in enumerate(row):
            tile = np.asarray(Image.fromarray(_to_uint8(im)).resize((side, side), Image.NEAREST))
            y, x = pad + i * (side + pad), pad + j * (side + pad)
            canvas[y:y + side, x:x + side] = tile
    return canvas


def _whole(value, name: str, lo: int, hi: int) -> int:
    return bounds.check(bounds.Range(name, lo, hi), value)


# ------------------------------------------------------------------------------------ Relevance
def token_relevance(text: str, methods: list[RelMethod] | None = None, rules: list[RelRule] | None = None,
                    target: str = "", model: str = "") -> str:
    """Explain a Mamba language model's prediction as relevance per input token (MambaLRP and baselines).

    Runs the text through the Relevance tab's Mamba LM and attributes the target's logit at the last
    position to every input token. MambaLRP's relevance sums to that logit (conservation) when all
    four rules are on; dropping a rule breaks it. Cost: about a second per method on a CPU for a
    sentence (IG and SmoothGrad take tens of passes); at most 256 tokens.

    Args:
        text: the input text (1 to 256 tokens, at most 2,000 characters).
        methods: attribution methods, any of mambalrp, lrp_ln (LRP with only the norm rule), gi (Gradient×Input), smoothgrad, ig (Integrated Gradients), attnroll (attention rollout), mambaattr (Mamba's hidden attention); default mambalrp, gi, ig, mambaattr.
        rules: MambaLRP rules to apply, any of norm, silu, ssm, gate; default all four (leave one out to ablate it).
        target: the word or token whose logit is explained; empty = the model's own top prediction.
        model: a text model of the tab (its hub id or zoo folder); empty = the tab's default.

    Returns:
        JSON: tokens, per-method relevance per token (same order as tokens; signed for mambalrp, lrp_ln, gi, smoothgrad, ig; non-negative for attnroll and mambaattr), target and its logit, sum_relevance per method, top_next predictions, conv_bias (true means the conv bias absorbs part of the logit).
    """
    from backend.lrp import service as svc

    if not isinstance(text, str):
        raise ValueError("text must be a string.")
    methods = ["mambalrp", "gi", "ig", "mambaattr"] if methods is None else list(methods)
    rules = list(svc.RULES) if rules is None else list(rules)
    m = svc.load_text(_source(), model or None)
    return _json(svc.explain_text(m, text, methods, rules, target or None))


# ------------------------------------------------------------------------------------- Features
def _organism():
    from backend.sae import loading

    try:
        return loading.get_organism(_source())
    except FileNotFoundError as e:
        raise ValueError(f"The Features organism is not built: {e}") from None


def find_features(query: str = "", sort: Literal["density", "max_act", "iou"] = "density",
                  limit: int = 20) -> str:
    """List sparse-autoencoder features of the Features tab's vision-language model, with their labels.

    Reads the feature index only (no model call; milliseconds). Use it to pick a feature id for
    open_feature or steer_feature.

    Args:
        query: text to match in a feature's label (e.g. 'red', 'circle'); empty = all features.
        sort: order: density (share of image tokens where it fires, 0-1), max_act (largest activation), iou (concept-mask IoU, 0-1, zoo only).
        limit: how many features to return, 1 to 500 (default 20).

    Returns:
        JSON: list of {feature, label, iou, density, max_act}, best first.
    """
    from backend.sae import pages

    org = _organism()
    if sort not in ("density", "max_act", "iou"):
        raise ValueError("sort must be one of density, max_act, iou.")
    n = bounds.check(bounds.FEAT_LIMIT, limit)
    if org.index is None:
        raise ValueError("This model has no feature index yet: build one in the Features tab.")
    return _json(pages.feature_table(org, query or "", sort, limit=n))


def open_feature(feature: int) -> tuple[str, gr.FileData]:
    """Open one SAE feature's page: top-activating images, activation statistics and label.

    Reads the feature index (no model call; well under a second). The image shows the top images
    (top row), the activation map over each (middle row, brighter = stronger) and each image with
    everything outside the activation region dimmed (bottom row), left to right in rank order.

    Args:
        feature: the feature id, 0 to the number of features - 1 (see find_features).

    Returns:
        JSON: feature, label (concept or empty), family, iou (0-1), density (share of image tokens with a non-zero activation, 0-1), max_act, mean_act (mean of the non-zero activations), hist_counts/hist_edges (log-binned histogram), top: list of {image_id, score (mean activation over the image's patches), caption}; and a PNG of the top images.
    """
    from backend.sae import pages

    from .feature_figures import dimmed, overlay

    org = _organism()
    f = _whole(feature, "The feature id", 0, org.n_features - 1)
    page = pages.feature_page(org, f)
    vmax = max([float(np.max(m)) for m in page["maps"] if np.size(m)] or [1.0])
    imgs = list(page["images"])
    rows = [imgs, [overlay(im, m, vmax) for im, m in zip(imgs, page["maps"])],
            [dimmed(im, r) for im, r in zip(imgs, page["regions"])]]
    return _json(pages.page_json(page)), _png(_grid(rows if imgs else [[np.full((8, 8, 3), 255, np.uint8)]]),
                                             f"feature-{f}")


def steer_feature(feature: int, value: float = -1.0, scene: int = 0, positions: SteerPositions = "default",
                  add_error: bool = False, suppress_rivals: bool | None = None,
                  image_base64: str = "") -> tuple[str, gr.FileData]:
    """Clamp one SAE feature while the model captions an image; compare the caption with and without.

    During the prompt pass the feature is set to `value` and the hooked layer's output is replaced
    by the SAE's reconstruction (optionally plus the SAE's error term); everything is restored
    before the answer returns. Cost: two greedy captions (about a second on the zoo model).

    Args:
        feature: the feature id to clamp, 0 to the number of features - 1.
        value: the clamp value in activation units, 0 to 10× the index's largest activation (the tab's range); a negative value (the default) = the tab's default for this feature (a calibrated multiple of its max activation).
        scene: which held-out scene to caption, 0 to the number of held-out scenes - 1.
        positions: where to clamp: prompt (every prompt position, the paper's choice), all (prompt and generated tokens), image (the image positions only), default (the setting the tab starts with, calibrated for this model).
        add_error: add the SAE's reconstruction error back (keeps everything the SAE does not explain).
        suppress_rivals: also zero the features labelled with the other concepts of the same family (e.g. the other colours); null = the tab's default for this model.
        image_base64: your own image as base64 PNG or JPEG (a data: URI is fine), at most 8 MB; when given, it is captioned instead of a held-out scene. Models without a scene set (the papers' LLaVA-NeXT) need it.

    Returns:
        JSON: baseline and steered captions, value, positions, well_formed (whether the steered caption parses; null for free text), hookpoint, suppressed feature ids; and a PNG of the scene.
    """
    from backend.sae import analysis
    from backend.sae import steer as ST
    from backend.sae import scenes as S

    org = _organism()
    f = _whole(feature, "The feature to clamp", 0, org.n_features - 1)
    own = _decode_image(image_base64) if image_base64 else None
    if own is None and not org.heldout_specs:
        raise ValueError("This model has no held-out scenes to caption: pass your image as image_base64.")
    i = None if own is not None else _whole(scene, "The held-out scene", 0, len(org.heldout_specs) - 1)
    v = analysis.default_clamp_value(org, f) if value is None or (isinstance(value, (int, float)) and value < 0) \
        else bounds.check(analysis.clamp_range(org), value)
    defaults = analysis.steering_defaults(org)
    positions = defaults["positions"] if positions == "default" else positions
    if positions not in ST.POSITION_MODES:
        raise ValueError(f"positions must be default or one of {', '.join(ST.POSITION_MODES)}.")
    suppress = defaults["suppress"] if suppress_rivals is None else bool(suppress_rivals)
    img = analysis.model_image(org, own) if own is not None else S.render(org.heldout_specs[i])[0]
    out = analysis.steer_caption(org, img, f, v, positions=positions, add_error=bool(add_error),
                           suppress_family=suppress)
    name = f"scene-{i}" if i is not None else "your-image"
    return _json({**out, "scene": i}), _png(_grid([[img]], side=192), name)


MAX_IMAGE_BYTES = 8 * 2**20


def _decode_image(data: str) -> np.ndarray:
    """An agent's image, sent inline: the tool never fetches a URL (the app sends nothing anywhere)."""
    import base64
    import binascii
    import io

    from PIL import Image, UnidentifiedImageError

    if not isinstance(data, str):
        raise ValueError("image_base64 must be a base64 string.")
    if data.startswith("data:"):
        data = data.partition(",")[2]
    if len(data) > MAX_IMAGE_BYTES * 4 // 3 + 4:
        raise ValueError(f"image_base64 is larger than {MAX_IMAGE_BYTES // 2**20} MB.")
    try:
        raw = base64.b64decode(data, validate=True)
        with Image.open(io.BytesIO(raw)) as im:
            return np.asarray(im.convert("RGB"))
    except (binascii.Error, ValueError, UnidentifiedImageError, OSError):
        raise ValueError("image_base64 is not a base64-encoded PNG or JPEG image.") from None


# ------------------------------------------------------------------------------- Memorization
def check_memorization(prompt: str) -> str:
    """Is this prompt memorized by the Memorization tab's Stable Diffusion model? (NeMo's detection)

    The score is the largest SSIM between the first noise predictions of different seeds (0-1);
    above theta_mem the model pulls every seed toward one image. Also the value neurons (output
    channels of the cross-attention to_v layers) whose activation on this prompt is most unusual
    (z = |a - mean| / std over non-memorized prompts). Cost: a noise step per seed (about a second).

    Args:
        prompt: the text prompt (1 to 300 characters).

    Returns:
        JSON: score, theta_mem, memorized (score > theta_mem), max_z, top_neurons (the 10 largest z as {neuron 'layer:channel', z}), layers, is_training_prompt, listed_type (the NeMo paper's memorization type when listed).
    """
    from backend.nemo import service

    r = service.check(prompt, source=_source())
    ranked = sorted(((z, f"{layer}:{c}") for layer, zs in r["z"].items() for c, z in enumerate(zs)), reverse=True)
    keep = ("prompt", "score", "theta_mem", "memorized", "max_z", "layers", "is_training_prompt", "listed_type")
    return _json({**{k: r[k] for k in keep},
                  "top_neurons": [{"neuron": n, "z": z} for z, n in ranked[:TOP_Z]]})


def find_memorization_neurons(prompt: str) -> str:
    """Localize the value neurons that hold a memorized prompt (NeMo's search).

    An initial set (z > theta plus the top-k activations, theta falling and k growing until
    switching them off breaks the seeds' agreement), refined greedily to the few that are needed.
    A prompt whose seeds never agree above theta_mem is skipped (not memorized). Cost: dozens of
    noise evaluations (seconds on the zoo model, minutes at full size). Nothing stays switched off.

    Args:
        prompt: the text prompt (1 to 300 characters).

    Returns:
        JSON: labels (the neurons found, 'layer:channel', pass them to generate_without_neurons), n_neurons, initial_labels, skipped, found, relaxed, threshold, theta, k, evaluations, seconds, seeds, seeds_kept, guidance_scale.
    """
    from backend.nemo import service

    loc = service.find(prompt, source=_source())
    return _json({k: v for k, v in loc.items() if k not in ("neurons", "initial", "history")})


def generate_without_neurons(prompt: str, neurons: list[str], seeds: int = 4) -> tuple[str, gr.FileData]:
    """Generate images for a prompt with all value neurons on and with the given neurons switched off.

    The neurons are multiplied by 0 at every denoising step (both guidance halves) for this call
    only, then restored. Compares each generation with the prompt's training image (SSIM, 0-1;
    high = a copy), diversity across seeds (1 - mean pairwise SSIM) and the memorization score.
    Cost: two generations per seed (about a second each on the zoo model).

    Args:
        prompt: the text prompt (1 to 300 characters).
        neurons: neurons to switch off, as 'layer:channel' labels (from find_memorization_neurons or check_memorization), e.g. ['mid.attn0:5']; an empty list switches none off.
        seeds: number of seeds (0, 1, ...), 1 to 8 (default 4).

    Returns:
        JSON: neurons switched off, seeds, ssim_on/ssim_off (per seed, null without a training image), diversity_on/off, alignment_on/off (share of the prompt's colours shown), score_on/off, theta_mem; and a PNG: the training image, then one row with the neurons on and one with them off.
    """
    from backend.nemo import service

    if isinstance(neurons, str):
        neurons = [neurons]
    if not isinstance(neurons, (list, tuple)) or not all(isinstance(x, str) for x in neurons):
        raise ValueError("neurons must be a list of labels like 'down1.attn0:17'.")
    n = bounds.check(bounds.MEMO_SEEDS, seeds)
    source = _source()
    m = service.get(source)
    spec = service.parse_neurons(m, [s for it in neurons for s in it.replace(";", ",").split(",")])
    c = service.compare(prompt, spec, list(range(n)), source=source)
    rows = [[c["train_image"]]] if c["train_image"] is not None else []
    rows += [list(c["images_on"]), list(c["images_off"])]
    data = {k: v for k, v in c.items() if k not in ("images_on", "images_off", "train_image")}
    return _json(data), _png(_grid(rows), "nemo")


# -------------------------------------------------------------------------------- Math neurons
def math_neurons(method: MathMethod = "mathneuro", k_percent: float = 3.0, factor: float = 0.0,
                 n_samples: int = 64, math_items: list[dict] | None = None,
                 nonmath_items: list[dict] | None = None) -> str:
    """Find math-specific parameters (MathNeuro) and measure math vs non-math accuracy with them scaled.

    Scores every linear weight by |W_ij|·‖X_j‖ summed over samples, keeps the top K % per matrix on
    math problems minus those also top K % on non-math text, multiplies them by `factor` for this
    call only, and scores both held-out sets by exact match. The default factor 0 PRUNES the set
    (the paper's ablation); 1.1 is the paper's boost. The model is restored bit-exactly before the
    answer returns. Your own math or non-math items (as in the tab's file upload) replace the
    model's sets for identification and scoring. Cost: the identification (2 × n_samples forward
    passes) plus greedy answers to up to 200 held-out items per side (seconds on the zoo model on a
    CPU, a minute or more for a 1B model; results are cached per setting).

    Args:
        method: which set: mathneuro (math top K minus non-math top K), wanda (math top K, no subtraction), random (the same count per matrix at random), lape (MLP neurons by activation-probability entropy).
        k_percent: K, the top share per weight matrix in percent, 1 to 30 (default 3, as the tab).
        factor: the scale applied to the chosen weights, 0 to 2; default 0 = prune them; 1.1 is the paper's boost; 1 leaves the model as it is.
        n_samples: samples per side used to identify the set, 1 to 64 (default 64).
        math_items: your own math set, at least 2 items, each {"question": ..., "answer": ...} (the answer's last number, or the number after '####', is the reference); null = the model's own math set.
        nonmath_items: your own non-math set, at least 2 items, each {"question": ..., "answer": ...} or {"text": ...}; null = the model's own non-math set.

    Returns:
        JSON: action (pruned or scaled × factor), baseline {math, nonmath} and modified {math, nonmath} accuracies (0-1), n_scored {math, nonmath} (items scored per side), math_set / nonmath_set (which data), n_params (weights in the set), n_total (linear weights), share, and layers: the set's count per layer.
    """
    from backend.mathneuro import service
    from backend.mathneuro.service import Setting

    bounds.check_choice("method", method, service.core.METHODS)
    k = bounds.check(bounds.MATH_K, k_percent)
    f = bounds.check(bounds.MATH_FACTOR, factor)
    n = bounds.check(bounds.MATH_SAMPLES, n_samples)
    try:
        b = service.bench(_source())
    except FileNotFoundError as e:
        raise ValueError(f"The math model is not available: {e}") from None
    sets = {side: _own_items(service, side, items)
            for side, items in (("math", math_items), ("nonmath", nonmath_items))}
    sets = {side: key for side, key in sets.items() if key}
    s = Setting(method, k / 100.0, n, f, **sets)
    base, mod = b.baseline(**{side: s.__dict__[side] for side in ("math", "nonmath")}), b.evaluate(s)
    n_total = sum(m.weight.numel() for m in service.core.linear_layers(b.model).values())
    return _json({"method": method, "k_percent": k, "factor": f, "n_samples": n, "model": b.model_id,
                  "action": "pruned" if f == 0 else f"scaled × {f:g}",
                  "baseline": base, "modified": {k_: mod[k_] for k_ in ("math", "nonmath")},
                  "n_scored": {side: len(b.eval_items(side, service.UI_EVAL, s.__dict__[side]))
                               for side in ("math", "nonmath")},
                  "math_set": "yours" if "math" in sets else "the model's",
                  "nonmath_set": "yours" if "nonmath" in sets else "the model's",
                  "n_params": mod["n_params"], "n_total": n_total, "share": mod["n_params"] / max(n_total, 1),
                  "layers": b.layers(s)})


def _own_items(service, side: str, items) -> str | None:
    """An agent's own items, registered as the tab registers an uploaded file (same checks)."""
    if items is None:
        return None
    if not isinstance(items, list) or not all(isinstance(it, dict) for it in items):
        raise ValueError(f"{side}_items must be a list of objects like {{\"question\": ..., \"answer\": ...}}.")
    folder = Path(tempfile.mkdtemp(prefix="wb-agent-items-"))
    path = folder / f"{side}.jsonl"
    try:
        path.write_text("\n".join(json.dumps(it, ensure_ascii=False) for it in items), encoding="utf-8")
        return service.register_data(_source(), side, path=path, name=f"your {side} items")
    finally:
        path.unlink(missing_ok=True)
        folder.rmdir()


# ------------------------------------------------------------------------------------ Adapters
def pissa_layers(model: str = "") -> str:
    """List the models of the Adapters tab and the linear layers PiSSA can adapt in one of them.

    Args:
        model: a model key from the returned list, or your own model (a hub id owner/name, or a folder under the server's allowed roots); empty = the tab's default model.

    Returns:
        JSON: models (list of {key, label}), model (the one listed), layers (names to pass to pissa_layer).
    """
    from backend.pissa import service

    opts = service.choices(_source())
    key = model or (opts[0][1] if opts else "")
    if not key:
        raise ValueError("No Adapters model is available.")
    return _json({"models": [{"key": k, "label": lab} for lab, k in opts], "model": key,
                  "layers": service.layer_names(key)})


def pissa_layer(layer: str, rank: int = 8, init: PissaInit = "pissa", model: str = "") -> str:
    """Analyse one weight matrix for PiSSA: its spectrum and the principal / residual split at rank r.

    W = U S Vᵀ; PiSSA's adapter starts from the top-r singular triplets (A = U_r S_r^½,
    B = S_r^½ V_rᵀ) and freezes W_res = W − AB (initialised by peft). Cost: one SVD of the matrix
    (milliseconds for the zoo, about a second for a 4096-wide matrix on a GPU).

    Args:
        layer: a linear layer's name (see pissa_layers).
        rank: the adapter rank r, 1 to 128 and at most min(matrix shape).
        init: pissa (full SVD) or pissa_niter_4 (fast randomized SVD, 4 subspace iterations): the tab's two choices.
        model: a model key (see pissa_layers), or your own model (hub id or allowed folder); empty = the tab's default model.

    Returns:
        JSON: shape, rank, init, energy_top_r (share of ‖W‖²_F in the top r singular values, 0-1), reconstruction_rel_error (‖W_res + AB − W‖/‖W‖), init_output_rel_gap (adapted vs base layer output at init), w_absmax / w_res_absmax and w_std / w_res_std (W vs W_res: a narrower range quantizes better), singular_values and residual_singular_values (the first 64, largest first), n_singular_values, seconds.
    """
    from backend.pissa import service

    if not isinstance(layer, str) or not layer:
        raise ValueError("Name a layer (pissa_layers lists them).")
    bounds.check_choice("init", init, bounds.PISSA_INITS)
    if not model:
        opts = service.choices(_source())
        model = opts[0][1] if opts else ""
    r = bounds.check(bounds.PISSA_RANK, rank)
    a = service.layer_analysis(model, layer, r, init)
    out = {k: v for k, v in a.items() if not k.endswith("_sample")}
    out["n_singular_values"] = len(a["singular_values"])
    for k in ("singular_values", "residual_singular_values"):
        out[k] = list(a[k][:MAX_SINGULAR_VALUES])
    return _json(out)


def memorized_prompts() -> str:
    """List the prompts the Memorization tab's Stable Diffusion model is known to have memorized.

    Reads the model's prompt lists only (no model call; milliseconds). Pass one to
    check_memorization, find_memorization_neurons or generate_without_neurons; an ordinary prompt
    of your own for contrast.

    Returns:
        JSON: model, prompts (list of {prompt, type: the NeMo paper's memorization type, VM = verbatim}), n, has_training_images (whether generate_without_neurons can compare with the training image).
    """
    from backend.nemo import service

    d = service.describe(_source())
    rows = [{"prompt": p, "type": t} for p, t in zip(d["memorized"], d["memorized_types"])]
    return _json({"model": d["model_id"], "prompts": rows, "n": len(rows),
                  "has_training_images": d["has_train_images"]})


# ------------------------------------------------------------------------------- registration
# Each tool: the tab whose ZeroGPU allowance and model queue it shares (components.guard), whether
# it reads the model (a read-only tool that does not waits behind no model call), whether it
# applies an intervention (always undone before the answer), and its typical cost on the zoo.
TOOLS = [(token_relevance, "relevance", True, True, "about a second per method"),
         (find_features, "features", False, False, "milliseconds (reads the feature index)"),
         (open_feature, "features", False, False, "well under a second (reads the feature index)"),
         (steer_feature, "features", True, True, "two greedy captions, about a second"),
         (check_memorization, "memorization", True, False, "a noise step per seed, about a second"),
         (find_memorization_neurons, "memorization", True, True, "dozens of noise evaluations, seconds"),
         (generate_without_neurons, "memorization", True, True, "two generations per seed, seconds"),
         (memorized_prompts, "memorization", False, False, "milliseconds (reads the prompt lists)"),
         (math_neurons, "math_neurons", True, True, "seconds on the zoo, a minute or more at 1B"),
         (pissa_layers, "adapters", True, False, "loads the model once, then milliseconds"),
         (pissa_layer, "adapters", True, False, "one SVD, milliseconds on the zoo"),
         (report.session_report, "report", False, False, "milliseconds to a second (writes one HTML file)")]
TOOL_NAMES = [t[0].__name__ for t in TOOLS]
# The declared ranges of the tools' cost arguments (backend.core.bounds), stated in the schemas
RANGES = {"find_features": {"limit": bounds.FEAT_LIMIT}, "generate_without_neurons": {"seeds": bounds.MEMO_SEEDS},
          "math_neurons": {"k_percent": bounds.MATH_K, "factor": bounds.MATH_FACTOR, "n_samples": bounds.MATH_SAMPLES},
          "pissa_layer": {"rank": bounds.PISSA_RANK, "init": bounds.PISSA_INITS}}
READS_GROUP = "agent-reads"  # the tools that touch no model: never behind a model call


def annotations() -> dict[str, dict]:
    """MCP tool annotations: nothing a tool does persists (interventions are undone before the
    answer), so every tool is read-only to the world; `intervention` and `cost` say more."""
    return {fn.__name__: {"title": fn.__name__.replace("_", " "), "readOnlyHint": True, "destructiveHint": False,
                          "idempotentHint": True, "openWorldHint": False, "intervention": intervention,
                          "cost": cost}
            for fn, _tab, _model, intervention, cost in TOOLS}


def schema_extras(source: str) -> dict[str, dict[str, dict]]:
    """The models a `model` parameter takes, listed in the schema (an agent learnt them from an
    error before); own models (a hub id or an allowed folder) are taken too where the owner allows."""
    from backend.core.modelcheck import custom_models_setting
    from backend.lrp.models import text_presets
    from backend.pissa import service

    own = custom_models_setting() is not False

    def models(keys: list[str]) -> dict:
        keys = [""] + [k for k in keys if k]
        return {"examples": keys} if own else {"enum": keys}

    listed = models([p.path_or_id for p in text_presets(source)])
    pissa = models([k for _lab, k in service.choices(source)])
    return {"token_relevance": {"model": listed}, "pissa_layers": {"model": pissa}, "pissa_layer": {"model": pissa}}


def hide_ui_events(demo: gr.Blocks) -> int:
    """The UI's public events become "undocumented": still callable by name (gradio_client, deep
    links), but out of the API page and so out of the MCP tool list, which Gradio builds from the
    public endpoints. Returns how many were hidden."""
    n = 0
    for fn in demo.fns.values():
        if fn.api_visibility == "public" and fn.api_name not in TOOL_NAMES:
            fn.api_visibility = "undocumented"
            n += 1
    return n


def install(demo: gr.Blocks, source: str) -> list[str]:
    """Register the tools on a built app and leave them the only public endpoints."""
    from . import mcp_server
    from .common import MODEL_GROUP, model_concurrency
    from .guard import gated

    global _SOURCE
    _SOURCE = source
    hide_ui_events(demo)
    taken = sorted({fn.api_name for fn in demo.fns.values()} & set(TOOL_NAMES))
    if taken:  # a UI event of that name would shadow the tool (or the tools are installed already)
        raise ValueError(f"endpoint name(s) {taken} already used by the app")
    with demo:
        for tool, tab, model, _intervention, _cost in TOOLS:
            fn = guarded(tool)
            if model:  # queued with the app's model calls, never beside a model load
                fn = gpu(duration=HANDLER_GPU_SECONDS.get(tab, 120), estimate=False)(gated(fn))
                queue = {"concurrency_id": MODEL_GROUP, "concurrency_limit": model_concurrency()}
            else:
                queue = {"concurrency_id": READS_GROUP, "concurrency_limit": 4}
            fn._wb_guarded = True  # guard_events leaves it as it is
            gr.api(fn, api_name=tool.__name__, **queue)
    mcp_server.adjust(annotations(), schema_extras(source), RANGES)
    report.tool_results(demo, [t for t in TOOLS if t[0] is not report.session_report])  # the tools' answers
    return TOOL_NAMES


def mcp_wanted(flag: bool = False, env: dict | None = None) -> bool:
    """Whether to serve the MCP tools. Off by default, locally and on a Space (SPACE_ID set) alike:
    every tool call spends the machine's compute and, while it is on, the UI's events leave the API
    page. `--mcp` or WORKBENCH_MCP=1 (on a Space: a variable only the owner can set) turn it on;
    WORKBENCH_MCP=0 keeps it off whatever the command line says."""
    env = os.environ if env is None else env
    setting = str(env.get("WORKBENCH_MCP", "")).strip().lower()
    if setting in ("0", "false", "no", "off"):
        return False
    if setting in ("1", "true", "yes", "on"):
        return True
    if setting:
        raise ValueError(f"WORKBENCH_MCP must be 1 or 0, not {setting!r}")
    return bool(flag)
