"""The hub walk's stand-in cache (benchmarks.hub_walk): the papers' sizes per scale, checkpoints widened to them."""

from __future__ import annotations

import json
import math
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

# --------------------------------------------------------------------------- sizes per scale
# (hidden, layers) of each language model; None keeps the stand-in as it is.
MAMBA = {"state-spaces/mamba-130m-hf": (768, 24), "state-spaces/mamba-1.4b-hf": (2048, 48)}
LLAMA32_1B = dict(
    hidden_size=2048,
    intermediate_size=8192,
    num_attention_heads=32,
    num_key_value_heads=8,
    head_dim=64,
    num_hidden_layers=16,
)
LLAMA2_7B = dict(
    hidden_size=4096,
    intermediate_size=11008,
    num_attention_heads=32,
    num_key_value_heads=32,
    head_dim=128,
    num_hidden_layers=32,
)
MISTRAL_7B = dict(
    hidden_size=4096,
    intermediate_size=14336,
    num_attention_heads=32,
    num_key_value_heads=8,
    head_dim=128,
    num_hidden_layers=32,
)
LLAMA3_8B = dict(
    hidden_size=4096,
    intermediate_size=14336,
    num_attention_heads=32,
    num_key_value_heads=8,
    head_dim=128,
    num_hidden_layers=32,
)
CLIP_L336 = dict(
    hidden_size=1024,
    intermediate_size=4096,
    num_attention_heads=16,
    num_hidden_layers=24,
    image_size=336,
    patch_size=14,
    projection_dim=768,
)
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
    cfg.update(
        dict(
            hidden_size=hidden,
            intermediate_size=2 * hidden,
            state_size=16,
            time_step_rank=math.ceil(hidden / 16),
            num_hidden_layers=layers_at(scale, layers),
        )
    )
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
        cfg.update(
            {**sizes, "num_hidden_layers": layers_at(scale, sizes["num_hidden_layers"]), "initializer_range": 0.02}
        )
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
    sizes = {
        "size": {"shortest_edge": 336},
        "crop_size": {"height": 336, "width": 336},
        "image_grid_pinpoints": PINPOINTS,
    }
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
    enc = torch.randn(n_latents, d_in, generator=g).mul_(d_in**-0.5)
    dec = torch.randn(n_latents, d_in, generator=g)
    dec /= dec.norm(dim=1, keepdim=True)
    save_file(
        {"encoder.weight": enc, "encoder.bias": torch.zeros(n_latents), "W_dec": dec, "b_dec": torch.zeros(d_in)},
        str(sub / "sae.safetensors"),
    )
    (sub / "cfg.json").write_text(
        json.dumps(
            {
                "expansion_factor": n_latents // d_in,
                "normalize_decoder": True,
                "num_latents": n_latents,
                "k": k,
                "multi_topk": False,
                "skip_connection": False,
                "d_in": d_in,
            }
        )
        + "\n"
    )


def widen_sae(folder: Path, repo: str, scale: str) -> None:
    for sub in [p for p in folder.iterdir() if p.is_dir()]:
        shutil.rmtree(sub)
    write_sae(folder, 4096, SAE_LATENTS, SAE_K, hookpoint_at(scale))


def sd14_unet_config() -> dict:
    from tests.unit.test_nemo import SD14_UNET

    return {k: v for k, v in SD14_UNET.items() if not k.startswith("_")}


SD14_VAE = dict(
    in_channels=3,
    out_channels=3,
    latent_channels=4,
    sample_size=512,
    layers_per_block=2,
    block_out_channels=(128, 256, 512, 512),
    down_block_types=("DownEncoderBlock2D",) * 4,
    up_block_types=("UpDecoderBlock2D",) * 4,
    act_fn="silu",
    norm_num_groups=32,
    scaling_factor=0.18215,
)
CLIP_L_TEXT = dict(
    hidden_size=768,
    intermediate_size=3072,
    num_hidden_layers=12,
    num_attention_heads=12,
    max_position_embeddings=77,
    projection_dim=768,
)


def widen_sd(folder: Path, repo: str, scale: str) -> None:
    """SD-1.4's UNet, VAE and CLIP text encoder at their real configs, at every scale but tiny (the
    UNet's depth is its per-step work; it is not cut). The safety checker stays the stand-in's: the
    Memorization tab never runs it."""
    import torch
    from diffusers import AutoencoderKL, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel

    for sub, model in (
        ("unet", lambda: UNet2DConditionModel(**sd14_unet_config())),
        ("vae", lambda: AutoencoderKL(**SD14_VAE)),
    ):
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
WIDEN = {
    "state-spaces/mamba-130m-hf": widen_mamba,
    "meta-llama/Llama-3.2-1B-Instruct": widen_causal_lm(LLAMA32_1B),
    "meta-llama/Llama-2-7b-hf": widen_causal_lm(LLAMA2_7B),
    "llava-hf/llama3-llava-next-8b-hf": widen_llava,
    "lmms-lab/llama3-llava-next-8b-hf-sae-131k": widen_sae,
    "CompVis/stable-diffusion-v1-4": widen_sd,
}


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
