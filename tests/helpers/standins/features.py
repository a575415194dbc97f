"""Stand-ins of the Features tab's hub checkpoints: LLaVA-NeXT (Llama-3 8B) and the lmms-lab SAE.

- `llava-hf/llama3-llava-next-8b-hf`: a `LlavaNextForConditionalGeneration` of the real classes
  (CLIP vision tower, Llama text model with 26 layers so `model.layers.24` exists and is not the
  last), saved in float16 as the real one is; a byte-level BPE tokenizer trained on English captions
  with the Llama-3 special tokens and `<image>` after the BPE vocabulary (as 128000+ come after the
  real one), a `LlavaNextProcessor` with anyres `image_grid_pinpoints` (the real ones scaled down:
  base 32 px, tiles of 32 px) and a Llama-3 chat template of this project's own writing that renders
  the format the real processor renders.
- `lmms-lab/llama3-llava-next-8b-hf-sae-131k`: the sparsify layout, one folder per hookpoint
  (`model.layers.24/` and `model.layers.8/`), each `cfg.json` + `sae.safetensors`.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import torch

from .bpe import llama3_bpe

MODEL_ID = "llava-hf/llama3-llava-next-8b-hf"
SAE_ID = "lmms-lab/llama3-llava-next-8b-hf-sae-131k"
HIDDEN = 32
N_LATENTS, K = 256, 16
IMAGE_SIZE, PATCH = 32, 8
PINPOINTS = [[32, 64], [64, 32], [64, 64], [96, 32], [32, 96]]  # the real [[336, 672], ...] / 10.5
SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
IMAGE_TOKEN = "<image>"
REPO = Path(__file__).resolve().parents[3]

# Llama-3 turns: header, blank line, the images as "<image>\n", the text, <|eot_id|>. Written for
# this project; it renders the prompt format of the real llava-hf processor.
CHAT_TEMPLATE = (
    "{%- for m in messages -%}"
    "{{- '<|start_header_id|>' + m['role'] + '<|end_header_id|>\\n\\n' -}}"
    "{%- if m['content'] is string -%}{{- m['content'] -}}{%- else -%}"
    "{%- for part in m['content'] if part['type'] == 'image' -%}{{- '<image>\\n' -}}{%- endfor -%}"
    "{%- for part in m['content'] if part['type'] == 'text' -%}{{- part['text'] -}}{%- endfor -%}"
    "{%- endif -%}{{- '<|eot_id|>' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}{%- endif -%}"
)


def english_lines() -> list[str]:
    """English image captions the project ships (10,000 COCO val 2014 captions, MIT, from the NeMo
    paper's repository, under assets/data/nemo); the shared data folder's copy otherwise."""
    for path in (
        REPO / "assets" / "data" / "nemo" / "coco2014_val_10000.csv",
        REPO.parent / "shared" / "data" / "nemo-laion-prompts" / "coco2014_val_10000.csv",
    ):
        if path.exists():
            with path.open(newline="", encoding="utf-8") as f:
                return [row["Caption"].strip() for row in csv.DictReader(f, delimiter=";") if row.get("Caption")]
    raise FileNotFoundError(
        "no English captions found to train the stand-in tokenizer on (assets/data/nemo/coco2014_val_10000.csv)"
    )


def llama3_tokenizer(vocab_size: int = 2000):
    """A byte-level BPE tokenizer ('Ġ' pieces, English words) with the Llama-3 specials + <image>."""
    from tokenizers import processors
    from transformers import PreTrainedTokenizerFast

    tok = llama3_bpe(english_lines(), vocab_size)
    tok.add_special_tokens(SPECIALS + [IMAGE_TOKEN])
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A",
        pair="<|begin_of_text|> $A <|begin_of_text|> $B",
        special_tokens=[("<|begin_of_text|>", bos)],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|begin_of_text|>",
        eos_token="<|eot_id|>",
        extra_special_tokens={"image_token": IMAGE_TOKEN},
        model_max_length=8192,
        padding_side="left",
    )


def build_llava(folder: Path) -> None:
    from transformers import (
        CLIPVisionConfig,
        LlamaConfig,
        LlavaNextConfig,
        LlavaNextForConditionalGeneration,
        LlavaNextImageProcessorPil,
        LlavaNextProcessor,
    )

    tok = llama3_tokenizer()
    torch.manual_seed(0)
    vision = CLIPVisionConfig(
        hidden_size=HIDDEN,
        intermediate_size=2 * HIDDEN,
        num_hidden_layers=2,
        num_attention_heads=2,
        image_size=IMAGE_SIZE,
        patch_size=PATCH,
        projection_dim=HIDDEN,
    )
    text = LlamaConfig(
        vocab_size=len(tok) + 64 - len(tok) % 64,
        hidden_size=HIDDEN,
        intermediate_size=2 * HIDDEN,
        num_hidden_layers=26,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=1024,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.convert_tokens_to_ids(["<|end_of_text|>", "<|eot_id|>"]),
        rope_theta=500000.0,
        tie_word_embeddings=False,
    )
    cfg = LlavaNextConfig(
        vision_config=vision,
        text_config=text,
        image_token_index=tok.convert_tokens_to_ids(IMAGE_TOKEN),
        image_grid_pinpoints=PINPOINTS,
        vision_feature_layer=-2,
        vision_feature_select_strategy="default",
        projector_hidden_act="gelu",
        tie_word_embeddings=False,
    )
    model = LlavaNextForConditionalGeneration(cfg).eval()
    model.generation_config.pad_token_id = tok.convert_tokens_to_ids("<|end_of_text|>")
    model.to(torch.float16).save_pretrained(folder)  # the real checkpoint is float16
    ip = LlavaNextImageProcessorPil(
        size={"shortest_edge": IMAGE_SIZE},
        crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE},
        image_grid_pinpoints=PINPOINTS,
        do_pad=True,
        image_mean=[0.48145466, 0.4578275, 0.40821073],
        image_std=[0.26862954, 0.26130258, 0.27577711],
    )
    proc = LlavaNextProcessor(
        image_processor=ip,
        tokenizer=tok,
        patch_size=PATCH,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        chat_template=CHAT_TEMPLATE,
    )
    proc.save_pretrained(folder)
    # the hub's image processor is named without the PIL backend's suffix
    pre = folder / "preprocessor_config.json"
    if pre.exists():
        cfg_ = json.loads(pre.read_text())
        cfg_["image_processor_type"] = "LlavaNextImageProcessor"
        pre.write_text(json.dumps(cfg_, indent=2, sort_keys=True) + "\n")


def _sae_folder(folder: Path, seed: int) -> None:
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(seed)
    enc = torch.randn(N_LATENTS, HIDDEN, generator=g) / HIDDEN**0.5
    dec = torch.randn(N_LATENTS, HIDDEN, generator=g)
    dec /= dec.norm(dim=1, keepdim=True)
    folder.mkdir(parents=True, exist_ok=True)
    save_file(
        {
            "encoder.weight": enc.contiguous(),
            "encoder.bias": torch.zeros(N_LATENTS),
            "W_dec": dec.contiguous(),
            "b_dec": torch.zeros(HIDDEN),
        },
        str(folder / "sae.safetensors"),
    )
    cfg = {
        "expansion_factor": N_LATENTS // HIDDEN,
        "normalize_decoder": True,
        "num_latents": N_LATENTS,
        "k": K,
        "multi_topk": False,
        "skip_connection": False,
        "d_in": HIDDEN,
    }
    (folder / "cfg.json").write_text(json.dumps(cfg) + "\n")


def build_sae(folder: Path) -> None:
    _sae_folder(folder / "model.layers.24", 24)
    _sae_folder(folder / "model.layers.8", 8)
    (folder / "README.md").write_text(
        "TopK SAEs on the residual stream of llama3-llava-next-8b-hf, one folder per hookpoint (stand-in).\n"
    )


REPOS = {MODEL_ID: build_llava, SAE_ID: build_sae}


def sample_images(folder: Path, n: int = 6, seed: int = 0) -> list[Path]:
    """A few small PNGs of different sizes and aspect ratios (anyres picks different tile grids),
    with coloured rectangles so features have something to tell apart."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    sizes = [(40, 40), (30, 70), (70, 30), (48, 64), (64, 48), (50, 50)]
    out = []
    for i in range(n):
        h, w = sizes[i % len(sizes)]
        img = np.full((h, w, 3), rng.integers(0, 80), np.uint8)
        y, x = int(rng.integers(0, h // 2)), int(rng.integers(0, w // 2))
        img[y : y + h // 2, x : x + w // 2] = rng.integers(0, 256, 3)
        p = folder / f"img_{i:02d}.png"
        Image.fromarray(img).save(p)
        out.append(p)
    return out


def build_llava15(folder: Path) -> None:
    """A user's LLaVA-1.5-style model (LlavaForConditionalGeneration: CLIP vision tower, MLP
    projector, Llama language model; one block of patch tokens per image, no anyres tiles), with a
    real LlavaProcessor (CLIP image processor, the Llama-3 tokenizer above with its <image> token, the
    chat template)."""
    from transformers import (
        CLIPImageProcessorPil,
        CLIPVisionConfig,
        LlamaConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
    )

    tok = llama3_tokenizer()
    torch.manual_seed(15)
    vision = CLIPVisionConfig(
        hidden_size=HIDDEN,
        intermediate_size=2 * HIDDEN,
        num_hidden_layers=2,
        num_attention_heads=2,
        image_size=IMAGE_SIZE,
        patch_size=PATCH,
        projection_dim=HIDDEN,
    )
    text = LlamaConfig(
        vocab_size=len(tok) + 64 - len(tok) % 64,
        hidden_size=HIDDEN,
        intermediate_size=2 * HIDDEN,
        num_hidden_layers=4,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=512,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.convert_tokens_to_ids("<|eot_id|>"),
        tie_word_embeddings=False,
    )
    cfg = LlavaConfig(
        vision_config=vision,
        text_config=text,
        image_token_index=tok.convert_tokens_to_ids(IMAGE_TOKEN),
        vision_feature_layer=-2,
        vision_feature_select_strategy="default",
        projector_hidden_act="gelu",
        tie_word_embeddings=False,
    )
    model = LlavaForConditionalGeneration(cfg).eval()
    model.generation_config.pad_token_id = tok.convert_tokens_to_ids("<|end_of_text|>")
    model.save_pretrained(folder)
    ip = CLIPImageProcessorPil(
        size={"shortest_edge": IMAGE_SIZE},
        crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE},
        image_mean=[0.48145466, 0.4578275, 0.40821073],
        image_std=[0.26862954, 0.26130258, 0.27577711],
    )
    LlavaProcessor(
        image_processor=ip,
        tokenizer=tok,
        patch_size=PATCH,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        chat_template=CHAT_TEMPLATE,
    ).save_pretrained(folder)
    pre = folder / "preprocessor_config.json"
    if pre.exists():  # named as the hub names it, without the PIL backend's suffix
        cfg_ = json.loads(pre.read_text())
        cfg_["image_processor_type"] = "CLIPImageProcessor"
        pre.write_text(json.dumps(cfg_, indent=2, sort_keys=True) + "\n")


def build_llava15_sae(folder: Path) -> None:
    _sae_folder(folder / "model.layers.2", 2)


def build_llava15_saelens(folder: Path) -> None:
    """A JumpReLU SAE as SAELens 6 saves one (cfg.json with the TransformerLens hook name under
    metadata, sae_weights.safetensors with W_enc [d_in, d_sae]) on the output of layer 2."""
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(12)
    dec = torch.randn(N_LATENTS, HIDDEN, generator=g)
    dec /= dec.norm(dim=1, keepdim=True)
    folder.mkdir(parents=True, exist_ok=True)
    save_file(
        {
            "W_enc": (torch.randn(HIDDEN, N_LATENTS, generator=g) / HIDDEN**0.5).contiguous(),
            "b_enc": torch.zeros(N_LATENTS),
            "W_dec": dec.contiguous(),
            "b_dec": torch.zeros(HIDDEN),
            "threshold": torch.full((N_LATENTS,), 0.05),
        },
        str(folder / "sae_weights.safetensors"),
    )
    cfg = {
        "d_in": HIDDEN,
        "d_sae": N_LATENTS,
        "dtype": "float32",
        "device": "cpu",
        "apply_b_dec_to_input": True,
        "normalize_activations": "none",
        "reshape_activations": "none",
        "architecture": "jumprelu",
        "metadata": {
            "sae_lens_version": "6.54.12",
            "hook_name": "blocks.2.hook_resid_post",
            "model_name": "own-llava15",
        },
    }
    (folder / "cfg.json").write_text(json.dumps(cfg) + "\n")


# Users' own: a LLaVA-1.5-style model and LLaVA-NeXT saved as folders, with a sparsify SAE folder
# each, and a SAELens JumpReLU SAE for the first.
LOCAL = {
    "own-llava15": build_llava15,
    "own-llava15-sae": build_llava15_sae,
    "own-llava15-saelens": build_llava15_saelens,
    "own-llava-next": build_llava,
    "own-llava-next-sae": build_sae,
}
