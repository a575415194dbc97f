"""Stand-in of the Memorization tab's hub checkpoint: `CompVis/stable-diffusion-v1-4`.

A `StableDiffusionPipeline` of the real classes in the real folder layout, written by
`save_pretrained` (model_index.json, unet/, vae/, text_encoder/, tokenizer/, scheduler/, and the
safety_checker/ + feature_extractor/ the real repository declares), with SD-1.4's shape at tiny
sizes: three cross-attention down blocks of two transformer layers plus a plain one, a cross-attention
mid block (so NeMo finds 7 value layers, as on SD-1.4), 4-channel latents at 1/8 of the image, the
PNDM scheduler config the real repository ships, and a CLIP text encoder whose config keeps the real
one's legacy `eos_token_id: 2`. The tokenizer is CLIP's format: byte-level BPE with `</w>` ends of
words in `vocab.json` + `merges.txt`, merges learned from English captions the project ships, the two
specials last, `model_max_length` 77, lower-casing, as `openai/clip-vit-large-patch14`'s files are.
The merges come from the COCO captions shipped in assets/data/nemo (the paper's statistics prompts).
"""

from __future__ import annotations

import heapq
import json
import re
from collections import Counter
from pathlib import Path

import torch


MODEL_ID = "CompVis/stable-diffusion-v1-4"
HIDDEN = 32
N_MERGES = 3000
MAX_LEN = 77
SPECIALS = ["<|startoftext|>", "<|endoftext|>"]
# CLIP's pre-tokenizer: contractions, letter runs, single digits, other symbol runs
_CLIP_SPLIT = re.compile(
    r"<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[^\W\d_]+|\d|[^\s\w]+", re.IGNORECASE
)


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2/CLIP's reversible byte → printable character table."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def clip_bpe(lines: list[str], n_merges: int = N_MERGES) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """vocab.json and merges in CLIP's layout: the 256 byte characters, the same with `</w>`, one entry
    per merge in merge order, then <|startoftext|>, <|endoftext|>. Merges are learned greedily on the
    word counts (ties broken by the pair itself, so the result is deterministic)."""
    b2u = bytes_to_unicode()
    counts = Counter(w for line in lines for w in _CLIP_SPLIT.findall(" ".join(line.lower().split())))
    words = {w: c for w, c in counts.items()}
    seqs = {}
    for w in words:
        chars = [b2u[b] for b in w.encode("utf-8")]
        seqs[w] = tuple(chars[:-1]) + (chars[-1] + "</w>",)
    pair_counts: Counter = Counter()
    where: dict[tuple[str, str], set[str]] = {}  # pair → the words holding it
    for w, s in seqs.items():
        for p in zip(s, s[1:]):
            pair_counts[p] += words[w]
            where.setdefault(p, set()).add(w)
    # a heap of (−count, pair) with stale entries skipped: the most frequent pair, ties by the pair
    heap = [(-c, p) for p, c in pair_counts.items()]
    heapq.heapify(heap)
    merges: list[tuple[str, str]] = []
    while len(merges) < n_merges and heap:
        c, best = heapq.heappop(heap)
        if -c != pair_counts.get(best, 0) or c >= 0:
            continue
        merges.append(best)
        joined = best[0] + best[1]
        touched: set = set()
        for w in sorted(where.pop(best, ())):
            s, out, i = seqs[w], [], 0
            while i < len(s):
                if i + 1 < len(s) and (s[i], s[i + 1]) == best:
                    out.append(joined)
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            c = words[w]
            for p in zip(s, s[1:]):
                pair_counts[p] -= c
                touched.add(p)
            out = tuple(out)
            for p in zip(out, out[1:]):
                pair_counts[p] += c
                touched.add(p)
                if p != best:
                    where.setdefault(p, set()).add(w)
            seqs[w] = out
        pair_counts.pop(best, None)
        touched.discard(best)
        for p in sorted(touched):
            if pair_counts.get(p, 0) > 0:
                heapq.heappush(heap, (-pair_counts[p], p))
        touched.clear()
    units = list(b2u.values())
    tokens = units + [u + "</w>" for u in units] + [a + b for a, b in merges] + SPECIALS
    vocab: dict[str, int] = {}
    for t in tokens:
        vocab.setdefault(t, len(vocab))
    return vocab, merges


def write_tokenizer(folder: Path) -> None:
    """The four files SD-1.4's tokenizer/ holds."""
    folder.mkdir(parents=True, exist_ok=True)
    from backend.nemo.data import coco_captions  # English captions the project ships (assets/data/nemo)

    vocab, merges = clip_bpe(list(coco_captions()))
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False) + "\n", encoding="utf-8")
    (folder / "merges.txt").write_text("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges), encoding="utf-8")

    def added(content):
        return {
            "__type": "AddedToken",
            "content": content,
            "lstrip": False,
            "normalized": True,
            "rstrip": False,
            "single_word": False,
        }

    (folder / "special_tokens_map.json").write_text(
        json.dumps(
            {
                "bos_token": added("<|startoftext|>"),
                "eos_token": added("<|endoftext|>"),
                "pad_token": "<|endoftext|>",
                "unk_token": added("<|endoftext|>"),
            },
            indent=2,
        )
        + "\n"
    )
    (folder / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "add_prefix_space": False,
                "bos_token": added("<|startoftext|>"),
                "do_lower_case": True,
                "eos_token": added("<|endoftext|>"),
                "errors": "replace",
                "model_max_length": MAX_LEN,
                "name_or_path": "openai/clip-vit-large-patch14",
                "pad_token": "<|endoftext|>",
                "special_tokens_map_file": "./special_tokens_map.json",
                "tokenizer_class": "CLIPTokenizer",
                "unk_token": added("<|endoftext|>"),
            },
            indent=2,
        )
        + "\n"
    )


def build_sd14(folder: Path) -> None:
    from diffusers import AutoencoderKL, PNDMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from diffusers.pipelines.stable_diffusion.safety_checker import StableDiffusionSafetyChecker
    from transformers import (
        CLIPConfig,
        CLIPImageProcessor,
        CLIPTextConfig,
        CLIPTextModel,
        CLIPTokenizer,
        CLIPVisionConfig,
    )

    folder = Path(folder)
    write_tokenizer(folder / "tokenizer")
    tok = CLIPTokenizer.from_pretrained(folder / "tokenizer")
    torch.manual_seed(0)
    # SD-1.4's text_encoder/config.json keeps eos_token_id 2 (bos 0, pad 1): transformers then takes
    # the pooled token by argmax of the ids, which works because <|endoftext|> is the last id
    te = CLIPTextModel(
        CLIPTextConfig(
            vocab_size=len(tok.get_vocab()),
            hidden_size=HIDDEN,
            intermediate_size=2 * HIDDEN,
            num_hidden_layers=2,
            num_attention_heads=4,
            max_position_embeddings=MAX_LEN,
            hidden_act="quick_gelu",
            projection_dim=HIDDEN,
            bos_token_id=0,
            eos_token_id=2,
            pad_token_id=1,
        )
    ).eval()
    torch.manual_seed(1)
    unet = UNet2DConditionModel(
        sample_size=8,
        in_channels=4,
        out_channels=4,
        layers_per_block=2,
        block_out_channels=(32, 32, 64, 64),
        down_block_types=("CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=HIDDEN,
        attention_head_dim=8,
        norm_num_groups=32,
        act_fn="silu",
        center_input_sample=False,
        downsample_padding=1,
        flip_sin_to_cos=True,
        freq_shift=0,
        mid_block_scale_factor=1,
        norm_eps=1e-5,
    ).eval()
    torch.manual_seed(2)
    vae = AutoencoderKL(
        in_channels=3,
        out_channels=3,
        latent_channels=4,
        sample_size=64,
        block_out_channels=(32, 32, 32, 32),
        layers_per_block=1,
        norm_num_groups=32,
        down_block_types=("DownEncoderBlock2D",) * 4,
        up_block_types=("UpDecoderBlock2D",) * 4,
        act_fn="silu",
        scaling_factor=0.18215,
    ).eval()
    # the real repository ships PNDM; the workbench's loader swaps in DDIM from this config
    sched = PNDMScheduler(
        num_train_timesteps=1000,
        beta_start=0.00085,
        beta_end=0.012,
        beta_schedule="scaled_linear",
        set_alpha_to_one=False,
        skip_prk_steps=True,
        steps_offset=1,
        trained_betas=None,
    )
    torch.manual_seed(3)
    cc = CLIPConfig(
        text_config=CLIPTextConfig(
            hidden_size=HIDDEN,
            intermediate_size=2 * HIDDEN,
            num_hidden_layers=1,
            num_attention_heads=2,
            vocab_size=len(tok.get_vocab()),
            bos_token_id=0,
            eos_token_id=2,
            pad_token_id=1,
        ).to_dict(),
        vision_config=CLIPVisionConfig(
            hidden_size=HIDDEN,
            intermediate_size=2 * HIDDEN,
            num_hidden_layers=1,
            num_attention_heads=2,
            image_size=32,
            patch_size=8,
        ).to_dict(),
        projection_dim=HIDDEN,
    )
    checker = StableDiffusionSafetyChecker(cc).eval()
    fe = CLIPImageProcessor(
        crop_size={"height": 224, "width": 224},
        size={"shortest_edge": 224},
        do_center_crop=True,
        do_normalize=True,
        do_resize=True,
        image_mean=[0.48145466, 0.4578275, 0.40821073],
        image_std=[0.26862954, 0.26130258, 0.27577711],
        resample=3,
    )
    pipe = StableDiffusionPipeline(
        vae=vae,
        text_encoder=te,
        tokenizer=tok,
        unet=unet,
        scheduler=sched,
        safety_checker=checker,
        feature_extractor=fe,
        requires_safety_checker=True,
    )
    pipe.save_pretrained(folder, safe_serialization=True)
    # save_pretrained rewrites tokenizer/ in the library's own format; the real one is the four files
    for p in (folder / "tokenizer").iterdir():
        p.unlink()
    write_tokenizer(folder / "tokenizer")
    # the names the real repository's files use (the library writes its PIL backend's name here)
    index = json.loads((folder / "model_index.json").read_text())
    index.pop("image_encoder", None)
    index["feature_extractor"] = ["transformers", "CLIPImageProcessor"]
    (folder / "model_index.json").write_text(json.dumps(index, indent=2) + "\n")
    pre = folder / "feature_extractor" / "preprocessor_config.json"
    pcfg = json.loads(pre.read_text())
    pcfg["image_processor_type"] = "CLIPImageProcessor"
    pre.write_text(json.dumps(pcfg, indent=2, sort_keys=True) + "\n")
    for sub in ("unet", "vae", "text_encoder", "safety_checker"):  # no build paths in the configs
        cfg_path = folder / sub / "config.json"
        cfg = json.loads(cfg_path.read_text())
        if cfg.pop("_name_or_path", None) is not None:
            cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


REPOS = {MODEL_ID: build_sd14}


def build_sd21(folder: Path) -> None:
    """A user's Stable Diffusion 2.1 (stabilityai/stable-diffusion-2-1's layout at a tiny width):
    an OpenCLIP text encoder saved as CLIPTextModel (gelu, "!" as the pad token), a UNet with linear
    projections in its transformers, per-block head counts and upcast attention, a v-prediction
    DDIM scheduler, and no safety checker."""
    from diffusers import AutoencoderKL, DDIMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPImageProcessor, CLIPTextConfig, CLIPTextModel, CLIPTokenizer

    folder = Path(folder)
    write_tokenizer(folder / "tokenizer")
    tcfg_path = folder / "tokenizer" / "tokenizer_config.json"
    tcfg = json.loads(tcfg_path.read_text())
    tcfg["pad_token"] = "!"  # SD-2's tokenizer pads with "!" (id of that byte), not <|endoftext|>
    tcfg_path.write_text(json.dumps(tcfg, indent=2) + "\n")
    tok = CLIPTokenizer.from_pretrained(folder / "tokenizer")
    torch.manual_seed(10)
    te = CLIPTextModel(
        CLIPTextConfig(
            vocab_size=len(tok.get_vocab()),
            hidden_size=HIDDEN,
            intermediate_size=4 * HIDDEN,
            num_hidden_layers=2,
            num_attention_heads=4,
            max_position_embeddings=MAX_LEN,
            hidden_act="gelu",
            projection_dim=HIDDEN,
            bos_token_id=0,
            eos_token_id=2,
            pad_token_id=1,
        )
    ).eval()
    torch.manual_seed(11)
    unet = UNet2DConditionModel(
        sample_size=8,
        in_channels=4,
        out_channels=4,
        layers_per_block=2,
        block_out_channels=(32, 32, 64, 64),
        down_block_types=("CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=HIDDEN,
        attention_head_dim=(2, 2, 4, 4),
        use_linear_projection=True,
        upcast_attention=True,
        norm_num_groups=32,
        act_fn="silu",
        flip_sin_to_cos=True,
        freq_shift=0,
    ).eval()
    torch.manual_seed(12)
    vae = AutoencoderKL(
        in_channels=3,
        out_channels=3,
        latent_channels=4,
        sample_size=64,
        block_out_channels=(32, 32, 32, 32),
        layers_per_block=1,
        norm_num_groups=32,
        down_block_types=("DownEncoderBlock2D",) * 4,
        up_block_types=("UpDecoderBlock2D",) * 4,
        act_fn="silu",
        scaling_factor=0.18215,
    ).eval()
    sched = DDIMScheduler(
        num_train_timesteps=1000,
        beta_start=0.00085,
        beta_end=0.012,
        beta_schedule="scaled_linear",
        clip_sample=False,
        set_alpha_to_one=False,
        steps_offset=1,
        prediction_type="v_prediction",
    )
    fe = CLIPImageProcessor(crop_size={"height": 224, "width": 224}, size={"shortest_edge": 224})
    pipe = StableDiffusionPipeline(
        vae=vae,
        text_encoder=te,
        tokenizer=tok,
        unet=unet,
        scheduler=sched,
        safety_checker=None,
        feature_extractor=fe,
        requires_safety_checker=False,
    )
    pipe.save_pretrained(folder, safe_serialization=True)


LOCAL = {"own-sd15": build_sd14, "own-sd21": build_sd21}
