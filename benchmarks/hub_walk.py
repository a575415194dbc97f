"""Full-size walk of hub mode: the app served on random-weight stand-ins of every paper checkpoint
built from the real configs (nothing downloaded), every tab's main action once, timed, with peak
memory; then whether all five tabs' models fit in the model store together.

    python -m benchmarks.hub_walk --scale width     # the papers' widths, fewer layers (a CPU, ~35 min)
    python -m benchmarks.hub_walk --scale full      # the real configs (a GPU machine)
    python -m benchmarks.hub_walk --scale tiny      # the tests' stand-ins (seconds)
    python -m benchmarks.hub_walk --residency-only  # the residency table alone (no models built)

The stand-ins of tests/helpers/standins (real classes, tokenizers, processors, folder layout) are
written into an offline Hugging Face cache under the real hub ids, then their weights are replaced by
random ones at the sizes of `--scale`; the app (benchmarks/walk_server.py) runs on that cache with
HF_HUB_OFFLINE=1 and WORKBENCH_PRESET=hub, and gradio_client drives it. Each action runs twice: the
first call loads the tab's model (cold), the second runs on it loaded (warm), on another input so
no result cache answers it. Peak RSS is the server's VmHWM during the call (reset before it); with
CUDA the peak GPU memory is sampled from nvidia-smi.

At `--scale width` every language model keeps its real width with 2 layers (the SAE then hooks the
last of them, `model.layers.1`), the CLIP vision tower 3 layers, the UNet is SD-1.4's whole at
64 × 64 latents; vocabularies are the stand-ins' small ones (the embedding and head are not
per-layer work). Per-layer costs carry over to the full depth; totals do not.

The residency part needs no weights: each checkpoint's parameters are counted from its real config
(modules built on the meta device) at the dtype the app loads it in on a GPU, and placeholders of
those byte sizes go through the real model store (backend.core.store) in the walk's order, under
the default budget of an 80 GB GPU and of a 48 GB one: what stays resident, what is evicted, when.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SCALES = ("tiny", "width", "full")
GB = 10**9

# --------------------------------------------------------------------------- sizes per scale
# (hidden, layers) of each language model; None keeps the stand-in as it is.
MAMBA = {"state-spaces/mamba-130m-hf": (768, 24), "state-spaces/mamba-1.4b-hf": (2048, 48)}
LLAMA32_1B = dict(hidden_size=2048, intermediate_size=8192, num_attention_heads=32, num_key_value_heads=8,
                  head_dim=64, num_hidden_layers=16)
LLAMA2_7B = dict(hidden_size=4096, intermediate_size=11008, num_attention_heads=32, num_key_value_heads=32,
                 head_dim=128, num_hidden_layers=32)
MISTRAL_7B = dict(hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8,
                  head_dim=128, num_hidden_layers=32)
LLAMA3_8B = dict(hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8,
                 head_dim=128, num_hidden_layers=32)
CLIP_L336 = dict(hidden_size=1024, intermediate_size=4096, num_attention_heads=16, num_hidden_layers=24,
                 image_size=336, patch_size=14, projection_dim=768)
PINPOINTS = [[336, 672], [672, 336], [672, 672], [1008, 336], [336, 1008]]
SAE_LATENTS, SAE_K = 131072, 256
WIDTH_LAYERS, WIDTH_VISION_LAYERS = 2, 3


def layers_at(scale: str, full: int) -> int:
    return full if scale == "full" else WIDTH_LAYERS


def hookpoint_at(scale: str) -> str:
    """The Features tab's SAE hookpoint: the real layers.24 at full size; the last of the 2 layers at
    width; layers.8 on the tests' stand-ins (which hold an SAE there too), so the quick run goes
    through the same hookpoint switch the width walk needs."""
    return {"full": "model.layers.24", "width": f"model.layers.{WIDTH_LAYERS - 1}", "tiny": "model.layers.8"}[scale]


# --------------------------------------------------------------------------- building the cache
def _replace_weights(folder: Path, model) -> None:
    for p in list(folder.glob("*.safetensors")) + list(folder.glob("*.safetensors.index.json")):
        p.unlink()
    model.save_pretrained(folder, safe_serialization=True)


def _dtype_of(cfg) -> "torch.dtype":
    import torch

    d = getattr(cfg, "dtype", None) or getattr(cfg, "torch_dtype", None) or torch.float32
    return getattr(torch, d) if isinstance(d, str) else d


def _build_in(cls, cfg, dtype, seed: int):
    """A model of `cls` with random weights, built directly in `dtype` (no float32 copy on the way)."""
    import torch

    torch.manual_seed(seed)
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype if dtype.is_floating_point else torch.float32)
    try:
        return cls(cfg).eval()
    finally:
        torch.set_default_dtype(old)


def widen_mamba(folder: Path, repo: str, scale: str) -> None:
    import torch
    from transformers import MambaConfig, MambaForCausalLM

    hidden, layers = MAMBA[repo]
    cfg = MambaConfig.from_pretrained(folder)
    cfg.update(dict(hidden_size=hidden, intermediate_size=2 * hidden, state_size=16,
                    time_step_rank=math.ceil(hidden / 16), num_hidden_layers=layers_at(scale, layers)))
    model = _build_in(MambaForCausalLM, cfg, torch.float32, 0)
    with torch.no_grad():
        for layer in model.backbone.layers:
            layer.mixer.conv1d.bias.normal_(0.0, 0.1)
    _replace_weights(folder, model)


def widen_causal_lm(sizes: dict):
    def widen(folder: Path, repo: str, scale: str) -> None:
        import transformers
        from transformers import AutoConfig

        cfg = AutoConfig.from_pretrained(folder)
        cfg.update({**sizes, "num_hidden_layers": layers_at(scale, sizes["num_hidden_layers"]),
                    "initializer_range": 0.02})
        cls = getattr(transformers, cfg.architectures[0])  # the class the stand-in was saved as
        _replace_weights(folder, _build_in(cls, cfg, _dtype_of(cfg), 0))

    return widen


def widen_llava(folder: Path, repo: str, scale: str) -> None:
    from transformers import LlavaNextConfig, LlavaNextForConditionalGeneration

    cfg = LlavaNextConfig.from_pretrained(folder)
    cfg.text_config.update({**LLAMA3_8B, "num_hidden_layers": layers_at(scale, 32), "initializer_range": 0.02})
    vision = {**CLIP_L336, "num_hidden_layers": 24 if scale == "full" else WIDTH_VISION_LAYERS}
    cfg.vision_config.update(vision)
    cfg.image_grid_pinpoints = PINPOINTS
    model = _build_in(LlavaNextForConditionalGeneration, cfg, _dtype_of(cfg), 0)
    _replace_weights(folder, model)
    # the processor at CLIP-L/336's sizes: 336 px base image and tiles, 14 px patches, the real pinpoints
    # (the image processor's settings sit in their own file or inside processor_config.json)
    sizes = {"size": {"shortest_edge": 336}, "crop_size": {"height": 336, "width": 336},
             "image_grid_pinpoints": PINPOINTS}
    pre = folder / "preprocessor_config.json"
    if pre.exists():
        p = json.loads(pre.read_text())
        p.update(sizes)
        pre.write_text(json.dumps(p, indent=2, sort_keys=True) + "\n")
    proc = folder / "processor_config.json"
    if proc.exists():
        q = json.loads(proc.read_text())
        q["patch_size"] = 14
        if isinstance(q.get("image_processor"), dict):
            q["image_processor"].update(sizes)
        proc.write_text(json.dumps(q, indent=2, sort_keys=True) + "\n")


def write_sae(folder: Path, d_in: int, n_latents: int, k: int, hookpoint: str, seed: int = 24) -> None:
    """One sparsify-layout SAE folder (cfg.json + sae.safetensors, float32) at `hookpoint`."""
    import torch
    from safetensors.torch import save_file

    sub = folder / hookpoint
    sub.mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(seed)
    enc = torch.randn(n_latents, d_in, generator=g).mul_(d_in ** -0.5)
    dec = torch.randn(n_latents, d_in, generator=g)
    dec /= dec.norm(dim=1, keepdim=True)
    save_file({"encoder.weight": enc, "encoder.bias": torch.zeros(n_latents), "W_dec": dec,
               "b_dec": torch.zeros(d_in)}, str(sub / "sae.safetensors"))
    (sub / "cfg.json").write_text(json.dumps({"expansion_factor": n_latents // d_in, "normalize_decoder": True,
                                              "num_latents": n_latents, "k": k, "multi_topk": False,
                                              "skip_connection": False, "d_in": d_in}) + "\n")


def widen_sae(folder: Path, repo: str, scale: str) -> None:
    for sub in [p for p in folder.iterdir() if p.is_dir()]:
        shutil.rmtree(sub)
    write_sae(folder, 4096, SAE_LATENTS, SAE_K, hookpoint_at(scale))


def sd14_unet_config() -> dict:
    from tests.unit.test_nemo import SD14_UNET

    return {k: v for k, v in SD14_UNET.items() if not k.startswith("_")}


SD14_VAE = dict(in_channels=3, out_channels=3, latent_channels=4, sample_size=512, layers_per_block=2,
                block_out_channels=(128, 256, 512, 512), down_block_types=("DownEncoderBlock2D",) * 4,
                up_block_types=("UpDecoderBlock2D",) * 4, act_fn="silu", norm_num_groups=32, scaling_factor=0.18215)
CLIP_L_TEXT = dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                   max_position_embeddings=77, projection_dim=768)


def widen_sd(folder: Path, repo: str, scale: str) -> None:
    """SD-1.4's UNet, VAE and CLIP text encoder at their real configs, at every scale but tiny (the
    UNet's depth is its per-step work; it is not cut). The safety checker stays the stand-in's: the
    Memorization tab never runs it."""
    import torch
    from diffusers import AutoencoderKL, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel

    for sub, model in (("unet", lambda: UNet2DConditionModel(**sd14_unet_config())),
                       ("vae", lambda: AutoencoderKL(**SD14_VAE))):
        torch.manual_seed(0)
        m = model().eval()
        for p in (folder / sub).glob("*.safetensors"):
            p.unlink()
        m.save_pretrained(folder / sub, safe_serialization=True)
        del m
    cfg = CLIPTextConfig.from_pretrained(folder / "text_encoder")
    cfg.update(CLIP_L_TEXT)
    _replace_weights(folder / "text_encoder", _build_in(CLIPTextModel, cfg, torch.float32, 0))


# The checkpoints the walk's actions load; the others (mamba-1.4b, Mistral-7B: a visitor's second
# picks) stay the tests' stand-ins, which keeps a full-size cache within a GPU machine's disk.
WIDEN = {"state-spaces/mamba-130m-hf": widen_mamba,
         "meta-llama/Llama-3.2-1B-Instruct": widen_causal_lm(LLAMA32_1B),
         "meta-llama/Llama-2-7b-hf": widen_causal_lm(LLAMA2_7B),
         "llava-hf/llama3-llava-next-8b-hf": widen_llava,
         "lmms-lab/llama3-llava-next-8b-hf-sae-131k": widen_sae,
         "CompVis/stable-diffusion-v1-4": widen_sd}


def build_cache(cache: Path, scale: str, log=print) -> dict[str, float]:
    """The stand-ins under the real hub ids, their weights at `scale`; seconds per repository."""
    from tests.helpers.standins import all_repos, put

    took = {}
    for repo, build in all_repos().items():
        t0 = time.perf_counter()
        snap = put(cache, repo, build)
        if scale != "tiny" and repo in WIDEN:
            WIDEN[repo](snap, repo, scale)
        took[repo] = time.perf_counter() - t0
        log(f"[built {repo} in {took[repo]:.1f} s]")
    return took


# --------------------------------------------------------------------------- measuring the server
def peak_rss_reset(pid: int) -> None:
    """Reset the process's peak RSS (VmHWM) so the next reading is this call's own peak."""
    with contextlib.suppress(OSError):
        Path(f"/proc/{pid}/clear_refs").write_text("5")


def peak_rss_gb(pid: int) -> float | None:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024 / GB
    return None


class GpuSampler:
    """Peak GPU memory used by `pid` while the context is open, from nvidia-smi every 0.2 s."""

    def __init__(self, pid: int):
        self.pid, self.peak, self._stop = pid, None, threading.Event()
        self.available = shutil.which("nvidia-smi") is not None

    def _read(self) -> float | None:
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10).stdout
        used = [float(m) for p, m in (line.split(",") for line in out.splitlines() if "," in line)
                if int(p) == self.pid]
        return sum(used) * 2**20 / GB if used else None

    def _loop(self):
        while not self._stop.wait(0.2):
            with contextlib.suppress(Exception):
                v = self._read()
                if v is not None:
                    self.peak = max(self.peak or 0.0, v)

    def __enter__(self):
        if self.available:
            self._thread = threading.Thread(target=self._loop, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self.available:
            self._thread.join(timeout=5)


def sample_images(folder: Path, n: int, side: int) -> list[str]:
    """Photos that ship with scikit-image, resized to about `side` px (anyres picks a tile grid by
    aspect ratio, so they differ in shape)."""
    from PIL import Image
    from skimage import data

    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for _i, name in enumerate(("astronaut", "coffee", "chelsea", "rocket")[:n]):
        img = Image.fromarray(getattr(data, name)())
        w, h = img.size
        s = side / max(w, h)
        p = folder / f"{name}.png"
        img.resize((max(8, round(w * s)), max(8, round(h * s)))).save(p)
        out.append(str(p))
    return out


# Each tab's main action: (tab, what, call(client, images, i) for the i-th run (0 cold, 1 warm)).
def actions():
    from gradio_client import handle_file

    sentences = ["the plot was dull but the cast was brilliant", "the food was cold but the service was warm"]
    prompts = ["The No Limits Business Woman Podcast", "a photo of a dog on the beach"]

    def relevance(c, imgs, i):
        return c.predict(sentences[i], ["mambalrp", "gi"], ["norm", "silu", "ssm", "gate"], "was", True,
                         "state-spaces/mamba-130m-hf", api_name="/explain_text")

    def features(c, imgs, i):
        return c.predict(handle_file(imgs[i]), None, api_name="/analyse_image")

    def memorization(c, imgs, i):
        return c.predict(prompts[i], api_name="/memo_check")

    def math_(c, imgs, i):  # identify the math parameters, then prune them (cold) or scale them (warm)
        return c.predict("MathNeuro", 3, [0.0, 2.0][i], 8, api_name="/mn_evaluate")

    def adapters(c, imgs, i):
        key = "meta-llama/Llama-2-7b-hf"
        layers = c.predict(key, api_name="/layers")
        listed = layers[0]
        # the i-th listed weight (q_proj, then k_proj of layer 0: the same shape)
        layer = listed["choices"][i][1] if isinstance(listed, dict) and "choices" in listed else listed["value"]
        return c.predict(key, layer, 16, "pissa", api_name="/analyse")

    return [("Relevance", "MambaLRP + Gradient×Input of one sentence (mamba-130m)", relevance),
            ("Features", "one image's SAE features (LLaVA-NeXT-8B + 131k SAE)", features),
            ("Memorization", "memorization check of one prompt (SD-1.4)", memorization),
            ("Math neurons", "MathNeuro identification + GSM8K / non-math accuracy with them pruned, then scaled "
             "(Llama-3.2-1B; 16 items of 16 new tokens)", math_),
            ("Adapters", "list Llama-2-7B's weights, analyse one: spectrum, PiSSA vs LoRA init (r = 16)", adapters)]


def walk(url: str, pid: int, images: list[str], log=print) -> list[dict]:
    from gradio_client import Client

    client = Client(url, verbose=False)
    rows = []
    for tab, what, call in actions():
        row = {"tab": tab, "what": what}
        for i, phase in enumerate(("cold", "warm")):
            peak_rss_reset(pid)
            with GpuSampler(pid) as gpu:
                t0 = time.perf_counter()
                try:
                    out = call(client, images, i)
                    row[f"{phase}_result"] = repr(out)[:300]
                    ok = out is not None and (not isinstance(out, (list, tuple)) or any(o is not None for o in out))
                    if not ok:
                        row["error"] = f"{phase}: empty result"
                except Exception as e:  # one failing tab must not hide the others' figures
                    row["error"] = f"{phase}: {type(e).__name__}: {str(e)[:300]}"
                took = time.perf_counter() - t0
            row[f"{phase}_s"] = took
            row[f"{phase}_rss_gb"] = peak_rss_gb(pid)
            row[f"{phase}_gpu_gb"] = gpu.peak
            log(f"[{tab} {phase}: {took:.1f} s, peak RSS {row[f'{phase}_rss_gb'] or 0:.2f} GB"
                + (f", {row['error']}" if "error" in row else "") + "]")
            if "error" in row:
                break
        row["store"] = store_after(client)
        rows.append(row)
    return rows


def store_after(client) -> dict | None:
    """The running app's model store after an action (the Overview's status endpoint): its budget,
    what it holds and how many models it has evicted so far."""
    try:
        status = client.predict(api_name="/status")[1]
    except Exception:  # the figures above stand without it
        return None
    st = (status or {}).get("model_store") or {}
    return {"budget_bytes": st.get("budget_bytes"), "resident_bytes": st.get("resident_bytes"),
            "evictions": st.get("evictions"), "models": [m["id"] for m in st.get("models", [])]}


def server_env(cache: Path, scale: str) -> dict[str, str]:
    from tests.helpers.standins import cache_env

    env = {**cache_env(cache), "WALK_SAE_HOOKPOINT": hookpoint_at(scale),
           # the GSM8K page scores a few short answers; a question is one generation either way
           "WORKBENCH_MATH_EVAL_ITEMS": "16", "WORKBENCH_MATH_NEW_TOKENS": "16",
           "WALK_NEMO_STATS_N": "1000" if scale == "full" else "8"}
    if scale != "full":
        env["WORKBENCH_DEVICE"] = "cpu"
    return env


# --------------------------------------------------------------------------- residency
def _params(build) -> tuple[int, int]:
    """(parameters, buffer elements) of a model built on the meta device (no memory)."""
    import torch

    with torch.device("meta"):
        model = build()
    return sum(p.numel() for p in model.parameters()), sum(b.numel() for b in model.buffers())


def checkpoint_sizes() -> list[dict]:
    """Each hub checkpoint the tabs load: parameters counted from its real config, bytes at the dtype
    the app holds it in on a GPU (the checkpoint's own dtype, unless the tab casts)."""
    from diffusers import AutoencoderKL, UNet2DConditionModel
    from transformers import (CLIPTextConfig, CLIPTextModel, CLIPVisionConfig, LlamaConfig, LlamaForCausalLM,
                              LlavaNextConfig, LlavaNextForConditionalGeneration, MambaConfig, MambaForCausalLM,
                              MistralConfig, MistralForCausalLM)

    def mamba(d, n):
        return lambda: MambaForCausalLM(MambaConfig(vocab_size=50280, hidden_size=d, state_size=16, num_hidden_layers=n,
                                                    intermediate_size=2 * d, conv_kernel=4,
                                                    time_step_rank=math.ceil(d / 16), tie_word_embeddings=True))

    def llava():
        text = LlamaConfig(vocab_size=128320, max_position_embeddings=8192, tie_word_embeddings=False, **LLAMA3_8B)
        return LlavaNextForConditionalGeneration(LlavaNextConfig(
            vision_config=CLIPVisionConfig(**CLIP_L336), text_config=text, image_grid_pinpoints=PINPOINTS))

    def sd():  # the components the tab loads (no safety checker: it is left out at load)
        import torch

        class Pipe(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.unet = UNet2DConditionModel(**sd14_unet_config())
                self.vae = AutoencoderKL(**SD14_VAE)
                self.text_encoder = CLIPTextModel(CLIPTextConfig(vocab_size=49408, **CLIP_L_TEXT))
        return Pipe()

    def llama(sizes, cls=LlamaForCausalLM, cfg=LlamaConfig, **kw):
        return lambda: cls(cfg(**{**sizes, **kw}))

    rows = [
        ("Relevance", "state-spaces/mamba-130m-hf", mamba(768, 24), 4, "float32 (as stored)"),
        ("Relevance", "state-spaces/mamba-1.4b-hf", mamba(2048, 48), 4, "float32 (as stored)"),
        ("Features", "llava-hf/llama3-llava-next-8b-hf", llava, 2, "bfloat16"),
        ("Features", "lmms-lab/llama3-llava-next-8b-hf-sae-131k (layers.24)", None, 4, "float32 (as stored)"),
        ("Memorization", "CompVis/stable-diffusion-v1-4", sd, 2, "float16"),
        ("Math neurons", "meta-llama/Llama-3.2-1B-Instruct",
         llama(LLAMA32_1B, vocab_size=128256, tie_word_embeddings=True), 2, "bfloat16 (as stored)"),
        ("Adapters", "meta-llama/Llama-2-7b-hf", llama(LLAMA2_7B, vocab_size=32000), 2, "float16 (as stored)"),
        ("Adapters", "mistralai/Mistral-7B-v0.1",
         llama(MISTRAL_7B, MistralForCausalLM, MistralConfig, vocab_size=32000), 2, "bfloat16 (as stored)"),
    ]
    out = []
    for tab, repo, build, nbytes, dtype in rows:
        n, buffers = (2 * SAE_LATENTS * 4096 + SAE_LATENTS + 4096, 0) if build is None else _params(build)
        # buffers (rotary frequencies, position ids) are small and kept in float32
        out.append({"tab": tab, "checkpoint": repo, "entry": ENTRY_OF.get(repo, repo), "params": n,
                    "buffers": buffers, "dtype": dtype, "bytes": n * nbytes + buffers * 4})
    return out


# The Features tab keeps LLaVA and its SAE as one store entry (they load and leave together).
FEATURES_ENTRY = "LLaVA-NeXT-8B + SAE 131k"
ENTRY_OF = {"llava-hf/llama3-llava-next-8b-hf": FEATURES_ENTRY,
            "lmms-lab/llama3-llava-next-8b-hf-sae-131k (layers.24)": FEATURES_ENTRY}
# The walk's order: each tab's default hub model, then the second checkpoints a visitor can pick.
WALK_ORDER = ["state-spaces/mamba-130m-hf", FEATURES_ENTRY, "CompVis/stable-diffusion-v1-4",
              "meta-llama/Llama-3.2-1B-Instruct", "meta-llama/Llama-2-7b-hf",
              "state-spaces/mamba-1.4b-hf", "mistralai/Mistral-7B-v0.1"]
FIVE_TABS = WALK_ORDER[:5]  # each tab's default hub model


def entry_bytes(sizes: list[dict]) -> dict[str, int]:
    out: dict[str, int] = {}
    for s in sizes:
        out[s["entry"]] = out.get(s["entry"], 0) + s["bytes"]
    return out


def simulate(sizes: list[dict], budget: int, order: list[str]) -> dict:
    """Load placeholders of the checkpoints' byte sizes through the real model store in `order`
    under `budget`: after each load, what is resident and what was evicted."""
    import numpy as np

    from backend.core import store

    by_id = entry_bytes(sizes)
    evicted, steps = [], []
    store.on_evict(evicted.append)
    old_models, old_env = store._MODELS, os.environ.get("WORKBENCH_MODEL_BUDGET")
    store._MODELS = type(old_models)()
    os.environ["WORKBENCH_MODEL_BUDGET"] = str(budget)
    try:
        for model_id in order:
            n = by_id[model_id]
            # a byte-sized stand-in for the weights: one byte of memory whose array claims n bytes
            def placeholder(n=n):
                return {"weights": np.lib.stride_tricks.as_strided(np.zeros(1, np.uint8), shape=(n,), strides=(0,))}

            before = len(evicted)
            store.get_or_load(f"walk:{model_id}", placeholder, size_hint=n)
            steps.append({"load": model_id, "evicted": [e.removeprefix("walk:") for e in evicted[before:]],
                          "resident": [k.removeprefix("walk:") for k in store._MODELS],
                          "resident_bytes": store.stats()["resident_bytes"]})
    finally:
        store._MODELS = old_models
        store._EVICT_LISTENERS.remove(evicted.append)
        if old_env is None:
            os.environ.pop("WORKBENCH_MODEL_BUDGET", None)
        else:
            os.environ["WORKBENCH_MODEL_BUDGET"] = old_env
    return {"budget": budget, "steps": steps}


def residency(gpus_gb=(80, 48)) -> dict:
    from backend.core import store

    sizes = checkpoint_sizes()
    by_id = entry_bytes(sizes)
    five = sum(by_id[m] for m in FIVE_TABS)
    runs = []
    for gb in gpus_gb:
        budget = store.gpu_budget(gb * GB)
        runs.append({"gpu_gb": gb, "five_tabs_fit": five <= budget, **simulate(sizes, budget, WALK_ORDER)})
    return {"checkpoints": sizes, "five_tabs_bytes": five, "runs": runs}


# --------------------------------------------------------------------------- a visitor's index
def visitor_index(n_latents: int, patches: int, top_k: int = 16, k: int = SAE_K) -> dict:
    """The file a visitor's own feature index is saved as (backend.sae.index: top-`top_k` images with
    their patch maps per latent, plus per-latent statistics) after one image, measured on disk,
    beside the default session quota. Its size does not grow with the images: the state is dense."""
    import torch

    from backend.core import sessions
    from backend.sae.index import FeatureIndex, IndexBuilder

    g = torch.Generator().manual_seed(0)
    builder = IndexBuilder(n_latents, patches, top_k)
    vals = torch.rand(1, patches, k, generator=g) + 0.05
    idx = torch.stack([torch.randperm(n_latents, generator=g)[:k] for _ in range(patches)])[None]
    builder.update(vals, idx)
    with tempfile.TemporaryDirectory() as tmp:
        index = FeatureIndex(builder.tensors(), {"grid": int(round(patches ** 0.5))})
        path = index.save(Path(tmp) / "index.safetensors")
        size = path.stat().st_size
    return {"latents": n_latents, "patches": patches, "top_k": top_k, "bytes": size,
            "state_bytes": builder.state_bytes(), "quota_bytes": sessions.quota_bytes()}


# --------------------------------------------------------------------------- tables
def _size(n: int) -> str:
    return f"{n / GB:.2f} GB" if n >= GB / 10 else f"{n / 10**6:.1f} MB"


def _num(x, fmt="{:.1f}"):
    return "–" if x is None else fmt.format(x)


def walk_table(res: dict) -> str:
    note = {"tiny": "tests' stand-ins", "width": "real widths, 2 LM layers (CPU)", "full": "real configs"}[res["scale"]]
    lines = ["| tab | main action | sizes | first call (cold, s) | second call (warm, s) | peak RSS GB | peak GPU GB "
             "| store after: models, bytes (evictions so far) |", "|---|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        gpu = r.get("cold_gpu_gb") or r.get("warm_gpu_gb")
        gpu_s = _num(max(v for v in (r.get("cold_gpu_gb"), r.get("warm_gpu_gb")) if v is not None)
                     if gpu is not None else None, "{:.2f}")
        if gpu is None and res["scale"] != "full":
            gpu_s = "to re-run on a GPU"
        rss = [v for v in (r.get("cold_rss_gb"), r.get("warm_rss_gb")) if v is not None]
        what = r["what"] + (f" — FAILED: {r['error']}" if "error" in r else "")
        st = r.get("store") or {}
        held = (f"{len(st['models'])}, {_size(st['resident_bytes'])} ({st['evictions']})"
                if st.get("models") is not None and st.get("resident_bytes") is not None else "–")
        lines.append(f"| {r['tab']} | {what} | {note} | {_num(r.get('cold_s'))} | {_num(r.get('warm_s'))} | "
                     f"{_num(max(rss) if rss else None, '{:.2f}')} | {gpu_s} | {held} |")
    return "\n".join(lines)


def residency_table(res: dict) -> str:
    lines = ["| tab | checkpoint | parameters | dtype on a GPU | GB |", "|---|---|---|---|---|"]
    for s in res["checkpoints"]:
        lines.append(f"| {s['tab']} | {s['checkpoint']} | {s['params'] / 1e9:.3f} B | {s['dtype']} | "
                     f"{s['bytes'] / GB:.2f} |")
    lines.append(f"| all five tabs | {', '.join(m.split('/')[-1] for m in FIVE_TABS)} | | | "
                 f"**{res['five_tabs_bytes'] / GB:.2f}** |")
    for run in res["runs"]:
        verdict = "fit" if run["five_tabs_fit"] else "do not fit"
        lines += ["", f"{run['gpu_gb']} GB GPU, default budget {run['budget'] / GB:.1f} GB "
                  f"(store.gpu_budget): the five tabs' models {verdict} together.", "",
                  "| step | loads | evicts | resident after (GB) |", "|---|---|---|---|"]
        for i, st in enumerate(run["steps"], 1):
            ev = ", ".join(st["evicted"]) or "—"
            n = len(st["resident"])
            lines.append(f"| {i} | {st['load']} | {ev} | {st['resident_bytes'] / GB:.2f} ({n} model{'s' * (n != 1)}) |")
    return "\n".join(lines)


# --------------------------------------------------------------------------- main
def load_average() -> str:
    with contextlib.suppress(OSError):
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    return "?"


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", choices=SCALES, default=None, help="default: full with a GPU, width without")
    ap.add_argument("--cache", type=Path, default=None, help="where to write the stand-in cache (default: a temp dir)")
    ap.add_argument("--keep-cache", action="store_true", help="reuse --cache if it is already built")
    ap.add_argument("--residency-only", action="store_true",
                    help="only the residency table and the index size (no models built)")
    ap.add_argument("--json", type=Path, default=None, help="also write the results as JSON here")
    ap.add_argument("--log", type=Path, default=None, help="the server's log (default: beside the cache)")
    args = ap.parse_args(argv)
    import torch

    scale = args.scale or ("full" if torch.cuda.is_available() else "width")
    out: dict = {"scale": scale, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                 "torch": torch.__version__, "load_before": load_average()}
    if not args.residency_only:
        tmp = None
        cache = args.cache
        if cache is None:
            tmp = tempfile.mkdtemp(prefix="hub-walk-")
            cache = Path(tmp) / "hub"
        try:
            t0 = time.perf_counter()
            if not (args.keep_cache and cache.exists()):
                build_cache(cache, scale, log=lambda m: print(m, file=sys.stderr, flush=True))
            out["build_s"] = time.perf_counter() - t0
            images = sample_images(cache.parent / "walk-images", 2, 64 if scale == "tiny" else 600)
            from tests.helpers.server import serve

            log_path = args.log or cache.parent / "walk-server.log"
            with serve(env=server_env(cache, scale), log_path=log_path, app_path=ROOT / "benchmarks" / "walk_server.py",
                       python=["nice", "-n", "10", sys.executable] if scale == "width" else None) as (url, proc):
                out["rows"] = walk(url, proc.pid, images, log=lambda m: print(m, file=sys.stderr, flush=True))
            out["server_evictions"] = [line.strip() for line in log_path.read_text().splitlines() if "evicted" in line]
        finally:
            if tmp:
                shutil.rmtree(tmp, ignore_errors=True)
    out["residency"] = residency()
    # the Features tab's own sizes: the tests' stand-in SAE at tiny scale, the lmms-lab SAE otherwise
    out["visitor_index"] = visitor_index(256, 16, k=16) if scale == "tiny" else visitor_index(SAE_LATENTS, 576)
    out["load_after"] = load_average()
    print(f"hub walk, scale {scale} — {out['date']}, torch {out['torch']}, "
          f"load {out['load_before']} → {out['load_after']}")
    if "rows" in out:
        print(walk_table(out))
        print()
    print(residency_table(out["residency"]))
    vi = out["visitor_index"]
    quota = "no quota" if vi["quota_bytes"] is None else f"{vi['quota_bytes'] / GB:.2f} GB"
    print(f"\nA visitor's own feature index ({vi['latents']} latents × top {vi['top_k']} images × {vi['patches']} "
          f"patches): {vi['bytes'] / GB:.3f} GB on disk (the session quota, WORKBENCH_SESSION_QUOTA: {quota}).")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    if any("error" in r for r in out.get("rows", [])):
        sys.exit(1)
    return out


if __name__ == "__main__":
    main()
