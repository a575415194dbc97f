"""The pieces the full-size benchmarks share (`benchmarks.fullsize`, its GPU-shape account
`benchmarks.fullsize_account`, NeMo's rows `benchmarks.nemo_fullsize`): the models at the papers'
configs, one feature-index step, timing and a result row. Kept below all three, so none imports another
back.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from typing import Callable

import torch


class default_dtype:
    """Build modules directly in `dtype` (no float32 copy of an 8B model on the way)."""

    def __init__(self, dtype):
        self.dtype = dtype

    def __enter__(self):
        self.old = torch.get_default_dtype()
        torch.set_default_dtype(self.dtype)

    def __exit__(self, *exc):
        torch.set_default_dtype(self.old)


# ------------------------------------------------------------------------------------ measuring
def sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def measure(fn: Callable, dev: torch.device, repeats: int) -> dict:
    """Median seconds over `repeats` runs after one warm-up, and the peak GPU memory of a run
    (GiB, absolute and above what was allocated before it; None on a CPU)."""
    fn()
    sync(dev)
    times, peak, extra = [], None, None
    for _ in range(repeats):
        if dev.type == "cuda":
            torch.cuda.empty_cache()
            base = torch.cuda.memory_allocated(dev)
            torch.cuda.reset_peak_memory_stats(dev)
        t0 = time.perf_counter()
        fn()
        sync(dev)
        times.append(time.perf_counter() - t0)
        if dev.type == "cuda":
            p = torch.cuda.max_memory_allocated(dev)
            peak, extra = max(peak or 0, p / 2**30), max(extra or 0, (p - base) / 2**30)
    return {"s": statistics.median(times), "peak_gib": peak, "extra_gib": extra}


def row(tab: str, what: str, main: dict, base: dict, baseline: str, **extra) -> dict:
    return {
        "tab": tab,
        "what": what,
        "s": main["s"],
        "baseline": baseline,
        "baseline_s": base["s"],
        "ratio": main["s"] / base["s"],
        "peak_gib": main["peak_gib"],
        "extra_gib": main["extra_gib"],
        "baseline_peak_gib": base["peak_gib"],
        **extra,
    }


def account_row(tab: str, what: str, main, base, baseline: str) -> dict:
    """A row of the GPU-shape account's table (benchmarks.fullsize_account): two accounts and their
    projections on the H200."""
    from benchmarks.account_projection import H200, project

    p, b = project(main, H200), project(base, H200)
    return {
        "tab": tab,
        "what": what,
        "baseline": baseline,
        "account": main.as_dict(),
        "baseline_account": base.as_dict(),
        "projected_s": p["total_s"],
        "baseline_projected_s": b["total_s"],
        "projected_ratio": p["total_s"] / b["total_s"],
        "projection": p,
        "baseline_projection": b,
        "gpu_model": H200.name,
    }


def sd_pipeline(scale: str, dev: torch.device):
    from diffusers import AutoencoderKL, DDIMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel

    from backend.zoo.recipes.memorization import make_tokenizer

    # the GPU's dtype on a GPU and on the meta device (the account builds the modules there directly)
    dtype = torch.float32 if dev.type == "cpu" else torch.float16
    torch.manual_seed(0)
    tok = make_tokenizer()
    meta = dev.type == "meta"
    with (
        torch.device(dev) if meta else contextlib.nullcontext(),
        default_dtype(dtype) if meta else contextlib.nullcontext(),
    ):
        if scale in ("full", "width"):  # the whole SD-1.4 UNet at its 64 × 64 latents in both
            from tests.unit.test_nemo import SD14_UNET

            unet = UNet2DConditionModel(**{k: v for k, v in SD14_UNET.items() if not k.startswith("_")})
            tok.model_max_length = 77
            te = CLIPTextModel(
                CLIPTextConfig(
                    vocab_size=len(tok),
                    hidden_size=768,
                    intermediate_size=3072,
                    num_hidden_layers=12,
                    num_attention_heads=12,
                    max_position_embeddings=77,
                )
            )
            vae = AutoencoderKL()
        else:
            unet = UNet2DConditionModel(
                block_out_channels=(32, 64),
                layers_per_block=1,
                sample_size=8,
                down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
                cross_attention_dim=32,
                attention_head_dim=4,
                norm_num_groups=8,
            )
            tok.model_max_length = 16
            te = CLIPTextModel(
                CLIPTextConfig(
                    vocab_size=len(tok),
                    hidden_size=32,
                    intermediate_size=64,
                    num_hidden_layers=2,
                    num_attention_heads=4,
                    max_position_embeddings=16,
                )
            )
            vae = AutoencoderKL(block_out_channels=(8,), norm_num_groups=8, latent_channels=4, sample_size=8)
    pipe = StableDiffusionPipeline(
        vae=vae,
        text_encoder=te,
        tokenizer=tok,
        unet=unet,
        scheduler=DDIMScheduler(
            beta_schedule="scaled_linear",
            beta_start=0.00085,
            beta_end=0.012,
            steps_offset=1,
            clip_sample=False,
            set_alpha_to_one=False,
        ),
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    )
    if not meta:
        pipe.to(dev, dtype)
    for m in (pipe.unet, pipe.vae, pipe.text_encoder):
        m.eval().requires_grad_(False)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def cfg_latents(unet) -> str:
    size = unet.config.sample_size
    size = size if isinstance(size, int) else size[0]
    return f"{size}×{size}"


# LLaVA-NeXT-8B's SAE at each scale: latents, k, image tokens (the base image), prompt tokens
SAE_SHAPE = {"full": (131072, 256, 576, 24), "width": (131072, 256, 576, 24), "tiny": (512, 8, 36, 8)}


def tiny_llama_config(**extra):
    """The 64-wide, 2-layer Llama every "tiny" row stands in with."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=1000,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        **extra,
    )


def llava_next_lm_config(scale: str, layers: int):
    """LLaVA-NeXT-8B's language model (Llama-3-8B): `layers` of them at full size; at "width" its width
    with 2 layers and a small vocabulary (not per-layer work); at "tiny" a 64-wide stand-in."""
    from transformers import LlamaConfig

    if scale == "tiny":
        return tiny_llama_config()
    return LlamaConfig(
        vocab_size=128256 if scale == "full" else 1000,
        hidden_size=4096,
        intermediate_size=14336,
        num_hidden_layers=layers if scale == "full" else 2,
        num_attention_heads=32,
        num_key_value_heads=8,
        rope_theta=500000.0,
        max_position_embeddings=8192,
    )


def llama_1b(scale: str, dev: torch.device, dtype=torch.float32):
    from transformers import LlamaConfig, LlamaForCausalLM

    if scale == "full":  # meta-llama/Llama-3.2-1B
        cfg = LlamaConfig(
            vocab_size=128256,
            hidden_size=2048,
            intermediate_size=8192,
            num_hidden_layers=16,
            num_attention_heads=32,
            num_key_value_heads=8,
            head_dim=64,
            rope_theta=500000.0,
            tie_word_embeddings=True,
            max_position_embeddings=131072,
        )
    elif scale == "width":  # its width, 2 layers; a small tied head (unscored, and not per-layer work)
        cfg = LlamaConfig(
            vocab_size=1000,
            hidden_size=2048,
            intermediate_size=8192,
            num_hidden_layers=2,
            num_attention_heads=32,
            num_key_value_heads=8,
            head_dim=64,
            rope_theta=500000.0,
            tie_word_embeddings=True,
            max_position_embeddings=131072,
        )
    else:
        cfg = tiny_llama_config(tie_word_embeddings=True)
    torch.manual_seed(0)
    with torch.device(dev), default_dtype(dtype):
        return LlamaForCausalLM(cfg).eval().requires_grad_(False)


def index_step(lm, sae, builder, x, sl):
    """One feature-index batch, as the app runs it: the LM to its last layer, the SAE on the image
    tokens `sl`, the builder's update. Returns the step and the hook's handle (remove it after);
    the timed benchmark (fullsize.py) and its account (fullsize_account.py) share it so both measure the same work."""
    grabbed = []
    handle = lm.layers[-1].register_forward_hook(lambda m, i, o: grabbed.append(o[0] if isinstance(o, tuple) else o))

    @torch.no_grad()
    def index():
        grabbed.clear()
        lm(inputs_embeds=x, use_cache=False)
        vals, idx = sae.encode_sparse(grabbed[0][:, sl])
        builder.update(vals, idx)

    return index, handle
