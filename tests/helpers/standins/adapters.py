"""Stand-ins of the Adapters tab's hub checkpoints: `meta-llama/Llama-2-7b-hf` and
`mistralai/Mistral-7B-v0.1`.

Both are of the real classes (`LlamaForCausalLM`, `MistralForCausalLM`) with the real configs'
features kept at a tiny width: untied embeddings, Llama-2's full multi-head attention and Mistral's
grouped-query attention (4 query heads per key/value head, as 32:8) with its sliding window, the
real intermediate/hidden ratios, and the real weight dtypes (Llama-2-7b-hf is float16, Mistral-7B-v0.1
bfloat16), so every computation meets the half-precision round-off the real checkpoints bring.

The tokenizer is a SentencePiece-style BPE as both repos ship it in `tokenizer.json`: '▁' word
pieces, `<unk>`/`<s>`/`</s>` at ids 0-2, the 256 byte-fallback pieces `<0x00>`..`<0xFF>` after them,
the normalizer that prepends '▁' and turns spaces into '▁', no pre-tokenizer, `<s>` added by the
post-processor, no pad token. It is trained deterministically here on GSM8K questions (the real
vocabularies have 32,000 pieces); `tokenizer_config.json` names `LlamaTokenizer` as both repos do.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import torch

from .relevance import english_lines

LLAMA2 = "meta-llama/Llama-2-7b-hf"
MISTRAL = "mistralai/Mistral-7B-v0.1"
SPECIALS = ["<unk>", "<s>", "</s>"]
BYTES = [f"<0x{i:02X}>" for i in range(256)]
PIECES = 1200  # learned pieces after the specials and bytes
SPACE = "▁"


@functools.lru_cache(maxsize=1)
def sentencepiece_bpe_json() -> str:
    """tokenizer.json of a Llama-2-style BPE (the Hugging Face conversion of a SentencePiece model),
    trained once per process on English questions."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    # Learn the merges word by word, as SentencePiece does (no piece spans a '▁' boundary).
    trainer_tok = Tokenizer(models.BPE())
    trainer_tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=SPACE, prepend_scheme="always", split=True)
    trainer = trainers.BpeTrainer(
        vocab_size=PIECES + len(SPECIALS) + len(BYTES), show_progress=False, special_tokens=SPECIALS + BYTES
    )
    trainer_tok.train_from_iterator(english_lines(3000), trainer=trainer)
    learned = json.loads(trainer_tok.to_str())["model"]
    # ids 0-2 specials, 3-258 bytes, then the learned pieces in the trainer's order
    vocab = {t: i for i, t in enumerate(SPECIALS + BYTES)}
    for piece, _ in sorted(learned["vocab"].items(), key=lambda kv: kv[1]):
        vocab.setdefault(piece, len(vocab))
    merges = [m if isinstance(m, str) else " ".join(m) for m in learned["merges"]]

    def added(i, s):
        return {
            "id": i,
            "content": s,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }

    spec = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [added(i, s) for i, s in enumerate(SPECIALS)],
        "normalizer": {
            "type": "Sequence",
            "normalizers": [
                {"type": "Prepend", "prepend": SPACE},
                {"type": "Replace", "pattern": {"String": " "}, "content": SPACE},
            ],
        },
        "pre_tokenizer": None,
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [
                {"SpecialToken": {"id": "<s>", "type_id": 0}},
                {"Sequence": {"id": "A", "type_id": 0}},
                {"SpecialToken": {"id": "<s>", "type_id": 1}},
                {"Sequence": {"id": "B", "type_id": 1}},
            ],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}},
        },
        "decoder": {
            "type": "Sequence",
            "decoders": [
                {"type": "Replace", "pattern": {"String": SPACE}, "content": " "},
                {"type": "ByteFallback"},
                {"type": "Fuse"},
                {"type": "Strip", "content": " ", "start": 1, "stop": 0},
            ],
        },
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": "<unk>",
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": True,
            "byte_fallback": True,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": merges,
        },
    }
    text = json.dumps(spec, ensure_ascii=False, indent=2)
    Tokenizer.from_str(text)  # it must load as the tokenizers library reads it
    return text


def _added(content: str) -> dict:
    return {
        "content": content,
        "lstrip": False,
        "normalized": False,
        "rstrip": False,
        "single_word": False,
        "special": True,
    }


def write_tokenizer(folder: Path, *, legacy: bool) -> int:
    """tokenizer.json, tokenizer_config.json and special_tokens_map.json as the real repos have them
    (Llama-2 with legacy False, Mistral with legacy True); returns the vocabulary size."""
    raw = sentencepiece_bpe_json()
    (folder / "tokenizer.json").write_text(raw, encoding="utf-8")
    cfg = {
        "add_bos_token": True,
        "add_eos_token": False,
        "added_tokens_decoder": {str(i): _added(s) for i, s in enumerate(SPECIALS)},
        "bos_token": "<s>",
        "clean_up_tokenization_spaces": False,
        "eos_token": "</s>",
        "legacy": legacy,
        "model_max_length": 1000000000000000019884624838656,
        "pad_token": None,
        "sp_model_kwargs": {},
        "tokenizer_class": "LlamaTokenizer",
        "unk_token": "<unk>",
    }
    if legacy:
        cfg.update(
            {
                "additional_special_tokens": [],
                "spaces_between_special_tokens": False,
                "use_default_system_prompt": False,
            }
        )
    else:
        cfg["padding_side"] = "right"
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    (folder / "special_tokens_map.json").write_text(
        json.dumps({"bos_token": _added("<s>"), "eos_token": _added("</s>"), "unk_token": _added("<unk>")}, indent=2)
        + "\n"
    )
    return len(json.loads(raw)["model"]["vocab"])


def _save(model, folder: Path, dtype: torch.dtype, **generation) -> None:
    from transformers import GenerationConfig

    model.to(dtype).eval().save_pretrained(folder)
    GenerationConfig(bos_token_id=1, eos_token_id=2, **generation).save_pretrained(folder)


def build_llama2(folder: Path) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    vocab = write_tokenizer(folder, legacy=False)
    # 4096 → 64 wide: 11008/4096 of it in the MLP, 32 heads of 128 → 4 heads of 16, all key/value heads
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=172,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        hidden_act="silu",
        max_position_embeddings=4096,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=None,
        initializer_range=0.02,
        pretraining_tp=1,
        attention_bias=False,
        mlp_bias=False,
    )
    torch.manual_seed(7001)
    # Llama-2's generation config samples and names 0 as the pad id, though the tokenizer has no pad
    _save(
        LlamaForCausalLM(cfg),
        folder,
        torch.float16,
        pad_token_id=0,
        do_sample=True,
        temperature=0.6,
        top_p=0.9,
        max_length=4096,
    )


def build_mistral(folder: Path) -> None:
    from transformers import MistralConfig, MistralForCausalLM

    vocab = write_tokenizer(folder, legacy=True)
    # 4096 → 64 wide: 14336/4096 of it in the MLP, 32 query heads over 8 key/value heads → 4 over 1
    cfg = MistralConfig(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=224,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=16,
        hidden_act="silu",
        max_position_embeddings=32768,
        rms_norm_eps=1e-5,
        sliding_window=4096,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
        initializer_range=0.02,
    )
    torch.manual_seed(7002)
    _save(MistralForCausalLM(cfg), folder, torch.bfloat16)


REPOS = {LLAMA2: build_llama2, MISTRAL: build_mistral}
