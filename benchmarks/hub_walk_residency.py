"""The hub walk's residency part (benchmarks.hub_walk): real-config sizes through the model store, a visitor's index."""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path

from benchmarks.hub_walk_cache import (
    CLIP_L336,
    CLIP_L_TEXT,
    LLAMA2_7B,
    LLAMA3_8B,
    LLAMA32_1B,
    MISTRAL_7B,
    PINPOINTS,
    SAE_K,
    SAE_LATENTS,
    SD14_VAE,
    sd14_unet_config,
)

GB = 10**9


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
    from transformers import (
        CLIPTextConfig,
        CLIPTextModel,
        CLIPVisionConfig,
        LlamaConfig,
        LlamaForCausalLM,
        LlavaNextConfig,
        LlavaNextForConditionalGeneration,
        MambaConfig,
        MambaForCausalLM,
        MistralConfig,
        MistralForCausalLM,
    )

    def mamba(d, n):
        return lambda: MambaForCausalLM(
            MambaConfig(
                vocab_size=50280,
                hidden_size=d,
                state_size=16,
                num_hidden_layers=n,
                intermediate_size=2 * d,
                conv_kernel=4,
                time_step_rank=math.ceil(d / 16),
                tie_word_embeddings=True,
            )
        )

    def llava():
        text = LlamaConfig(vocab_size=128320, max_position_embeddings=8192, tie_word_embeddings=False, **LLAMA3_8B)
        return LlavaNextForConditionalGeneration(
            LlavaNextConfig(
                vision_config=CLIPVisionConfig(**CLIP_L336), text_config=text, image_grid_pinpoints=PINPOINTS
            )
        )

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
        (
            "Math neurons",
            "meta-llama/Llama-3.2-1B-Instruct",
            llama(LLAMA32_1B, vocab_size=128256, tie_word_embeddings=True),
            2,
            "bfloat16 (as stored)",
        ),
        ("Adapters", "meta-llama/Llama-2-7b-hf", llama(LLAMA2_7B, vocab_size=32000), 2, "float16 (as stored)"),
        (
            "Adapters",
            "mistralai/Mistral-7B-v0.1",
            llama(MISTRAL_7B, MistralForCausalLM, MistralConfig, vocab_size=32000),
            2,
            "bfloat16 (as stored)",
        ),
    ]
    out = []
    for tab, repo, build, nbytes, dtype in rows:
        n, buffers = (2 * SAE_LATENTS * 4096 + SAE_LATENTS + 4096, 0) if build is None else _params(build)
        # buffers (rotary frequencies, position ids) are small and kept in float32
        out.append(
            {
                "tab": tab,
                "checkpoint": repo,
                "entry": ENTRY_OF.get(repo, repo),
                "params": n,
                "buffers": buffers,
                "dtype": dtype,
                "bytes": n * nbytes + buffers * 4,
            }
        )
    return out


# The Features tab keeps LLaVA and its SAE as one store entry (they load and leave together).
FEATURES_ENTRY = "LLaVA-NeXT-8B + SAE 131k"
ENTRY_OF = {
    "llava-hf/llama3-llava-next-8b-hf": FEATURES_ENTRY,
    "lmms-lab/llama3-llava-next-8b-hf-sae-131k (layers.24)": FEATURES_ENTRY,
}
# The walk's order: each tab's default hub model, then the second checkpoints a visitor can pick.
WALK_ORDER = [
    "state-spaces/mamba-130m-hf",
    FEATURES_ENTRY,
    "CompVis/stable-diffusion-v1-4",
    "meta-llama/Llama-3.2-1B-Instruct",
    "meta-llama/Llama-2-7b-hf",
    "state-spaces/mamba-1.4b-hf",
    "mistralai/Mistral-7B-v0.1",
]
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
            steps.append(
                {
                    "load": model_id,
                    "evicted": [e.removeprefix("walk:") for e in evicted[before:]],
                    "resident": [k.removeprefix("walk:") for k in store._MODELS],
                    "resident_bytes": store.stats()["resident_bytes"],
                }
            )
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
        index = FeatureIndex(builder.tensors(), {"grid": int(round(patches**0.5))})
        path = index.save(Path(tmp) / "index.safetensors")
        size = path.stat().st_size
    return {
        "latents": n_latents,
        "patches": patches,
        "top_k": top_k,
        "bytes": size,
        "state_bytes": builder.state_bytes(),
        "quota_bytes": sessions.quota_bytes(),
    }
