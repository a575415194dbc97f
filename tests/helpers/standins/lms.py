"""Users' own causal LMs, as folders a user saves with `save_pretrained`: the "your own model" pick of
the Math neurons and Adapters tabs, in architectures the papers did not use.

- `own-qwen2`: Qwen2ForCausalLM with attention biases on q/k/v (Qwen2's, unlike Llama), tied
  embeddings, a byte-level BPE `tokenizer.json` with Qwen's `<|endoftext|>`, `<|im_start|>` and
  `<|im_end|>` specials, no BOS, and the ChatML chat template; `Qwen2Tokenizer` named as the real
  repos name it.
- `own-gemma`: GemmaForCausalLM (GeGLU MLP, embeddings scaled by √width, RMSNorm weights stored as
  1 + w, tied head) with a SentencePiece-style BPE whose specials sit where Gemma's do
  (`<pad>` 0, `<eos>` 1, `<bos>` 2, `<unk>` 3) and its `<start_of_turn>` chat template.
- `own-llama`: the Llama-3.2-style stand-in of the Math neurons tab, saved as a local folder.
- Refusals: `own-gpt2` (transformers' Conv1D layers), `own-pickle` (pytorch_model.bin only) and
  `own-noconfig` (weights without a config.json).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from . import adapters as sp
from . import math as l3

QWEN_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] "
    "+ '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{% endif %}"
)
GEMMA_SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>"]
GEMMA_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% set role = 'model' if message['role'] == "
    "'assistant' else message['role'] %}{{ '<start_of_turn>' + role + '\\n' + message['content'] "
    "| trim + '<end_of_turn>\\n' }}{% endfor %}{% if add_generation_prompt %}"
    "{{'<start_of_turn>model\\n'}}{% endif %}"
)


def _special(content: str) -> dict:
    return {
        "content": content,
        "lstrip": False,
        "normalized": False,
        "rstrip": False,
        "single_word": False,
        "special": True,
    }


def _write_qwen_tokenizer(folder: Path) -> dict[str, int]:
    from tokenizers import AddedToken, processors

    tok = l3.llama3_tokenizer()  # the same GPT-4-style split and byte-level BPE Qwen2 uses
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in QWEN_SPECIALS])
    tok.post_processor = processors.ByteLevel(trim_offsets=False)  # Qwen adds no BOS
    tok.save(str(folder / "tokenizer.json"))
    ids = {s: tok.token_to_id(s) for s in QWEN_SPECIALS}
    cfg = {
        "added_tokens_decoder": {str(i): _special(s) for s, i in ids.items()},
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "bos_token": None,
        "chat_template": CHATML,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 32768,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    ids["size"] = tok.get_vocab_size()
    return ids


def build_qwen2(folder: Path) -> None:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    ids = _write_qwen_tokenizer(folder)
    cfg = Qwen2Config(
        vocab_size=ids["size"],
        hidden_size=32,
        intermediate_size=88,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        hidden_act="silu",
        max_position_embeddings=512,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        bos_token_id=ids["<|endoftext|>"],
        eos_token_id=ids["<|im_end|>"],
        initializer_range=0.3,
    )
    torch.manual_seed(4101)
    Qwen2ForCausalLM(cfg).to(torch.bfloat16).eval().save_pretrained(folder)


def _gemma_tokenizer_json() -> str:
    """The Llama-2-style SentencePiece BPE of the Adapters stand-ins with Gemma's specials in front
    and no '▁' prepended (Gemma's normalizer only replaces spaces)."""
    spec = json.loads(sp.sentencepiece_bpe_json())
    old = spec["model"]["vocab"]
    vocab = {s: i for i, s in enumerate(GEMMA_SPECIALS)}
    for piece, _ in sorted(old.items(), key=lambda kv: kv[1]):
        if piece not in sp.SPECIALS:
            vocab[piece] = len(vocab)
    spec["model"]["vocab"], spec["model"]["unk_token"] = vocab, "<unk>"
    spec["added_tokens"] = [
        {
            "id": i,
            "content": s,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for i, s in enumerate(GEMMA_SPECIALS)
    ]
    spec["normalizer"] = {"type": "Replace", "pattern": {"String": " "}, "content": sp.SPACE}
    bos = vocab["<bos>"]
    spec["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<bos>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [
            {"SpecialToken": {"id": "<bos>", "type_id": 0}},
            {"Sequence": {"id": "A", "type_id": 0}},
            {"SpecialToken": {"id": "<bos>", "type_id": 1}},
            {"Sequence": {"id": "B", "type_id": 1}},
        ],
        "special_tokens": {"<bos>": {"id": "<bos>", "ids": [bos], "tokens": ["<bos>"]}},
    }
    spec["decoder"]["decoders"] = [d for d in spec["decoder"]["decoders"] if d["type"] != "Strip"]
    return json.dumps(spec, ensure_ascii=False, indent=2)


def build_gemma(folder: Path) -> None:
    from transformers import GemmaConfig, GemmaForCausalLM

    raw = _gemma_tokenizer_json()
    (folder / "tokenizer.json").write_text(raw, encoding="utf-8")
    cfg = {
        "added_tokens_decoder": {str(i): _special(s) for i, s in enumerate(GEMMA_SPECIALS)},
        "add_bos_token": True,
        "add_eos_token": False,
        "bos_token": "<bos>",
        "chat_template": GEMMA_TEMPLATE,
        "eos_token": "<eos>",
        "pad_token": "<pad>",
        "unk_token": "<unk>",
        "padding_side": "left",
        "model_max_length": 8192,
        "tokenizer_class": "GemmaTokenizer",
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    vocab = len(json.loads(raw)["model"]["vocab"])
    gcfg = GemmaConfig(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=8,
        hidden_act="gelu_pytorch_tanh",
        max_position_embeddings=512,
        rms_norm_eps=1e-6,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
        tie_word_embeddings=True,
        initializer_range=0.3,
    )
    torch.manual_seed(4102)
    GemmaForCausalLM(gcfg).to(torch.bfloat16).eval().save_pretrained(folder)


def build_gpt2(folder: Path) -> None:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(4103)
    GPT2LMHeadModel(
        GPT2Config(vocab_size=64, n_positions=32, n_embd=16, n_layer=1, n_head=2, bos_token_id=0, eos_token_id=0)
    ).save_pretrained(folder)


def build_pickle_only(folder: Path) -> None:
    from tests.helpers.tiny import tiny_llama

    model = tiny_llama(seed=5)
    model.config.save_pretrained(folder)
    torch.save(model.state_dict(), folder / "pytorch_model.bin")


def build_no_config(folder: Path) -> None:
    from safetensors.torch import save_file

    save_file({"w": torch.zeros(4, 4)}, str(folder / "model.safetensors"))


LOCAL = {
    "own-qwen2": build_qwen2,
    "own-gemma": build_gemma,
    "own-llama": l3.build,
    "own-gpt2": build_gpt2,
    "own-pickle": build_pickle_only,
    "own-noconfig": build_no_config,
}
