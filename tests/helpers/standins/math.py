"""Stand-in of the Math neurons tab's hub checkpoint: `meta-llama/Llama-3.2-1B-Instruct`.

A `LlamaForCausalLM` of the real class with the real config's features kept: input and output
embeddings tied (so MathNeuro must skip lm_head), grouped-query attention, the llama3 RoPE scaling,
bf16 weights, a generation config that samples by default and stops on any of three end tokens.
The tokenizer is Llama-3-style byte-level BPE ('Ġ' pieces, English words, the Llama-3 split
pattern, single digits grouped by at most three) trained deterministically on GSM8K questions, with
the Llama-3 special tokens after the BPE pieces, `<|begin_of_text|>` added by the post-processor, no
pad token, `<|eot_id|>` as eos, and a chat template of this project's own that renders the Llama-3
header format (`<|start_header_id|>role<|end_header_id|>\\n\\n...<|eot_id|>`), the BOS included,
as the real template does: tokenizing its text with special tokens added doubles the BOS.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from .bpe import llama3_bpe
from .relevance import english_lines

HUB_ID = "meta-llama/Llama-3.2-1B-Instruct"
BPE_VOCAB = 2000
SPECIALS = [
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|reserved_special_token_0|>",
    "<|reserved_special_token_1|>",
    "<|finetune_right_pad_id|>",
    "<|reserved_special_token_2|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eom_id|>",
    "<|eot_id|>",
    "<|python_tag|>",
]

# Written for this stand-in: the Llama-3 turn format (system turn with the knowledge-date lines,
# each message as a header block closed by <|eot_id|>, an open assistant header to generate into).
CHAT_TEMPLATE = (
    "{{- bos_token }}"
    "{%- if messages and messages[0]['role'] == 'system' %}"
    "{%- set system_message = messages[0]['content'] | trim %}{%- set messages = messages[1:] %}"
    "{%- else %}{%- set system_message = '' %}{%- endif %}"
    "{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}"
    "{{- 'Cutting Knowledge Date: December 2023\\nToday Date: 26 Jul 2024\\n\\n' }}"
    "{{- system_message + '<|eot_id|>' }}"
    "{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim"
    " + '<|eot_id|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
)


def gsm8k_texts() -> list[str]:
    """English questions to train the BPE on (GSM8K, shipped under assets/data)."""
    return english_lines(3000)


def llama3_tokenizer():
    from tokenizers import AddedToken, processors

    tok = llama3_bpe(gsm8k_texts(), BPE_VOCAB)
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIALS])
    bos = tok.token_to_id(SPECIALS[0])
    tok.post_processor = processors.Sequence(
        [
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(
                single=f"{SPECIALS[0]}:0 $A:0",
                pair=f"{SPECIALS[0]}:0 $A:0 {SPECIALS[0]}:1 $B:1",
                special_tokens=[(SPECIALS[0], bos)],
            ),
        ]
    )
    return tok


def _special(content: str) -> dict:
    return {
        "content": content,
        "lstrip": False,
        "normalized": False,
        "rstrip": False,
        "single_word": False,
        "special": True,
    }


def write_tokenizer(folder: Path) -> dict[str, int]:
    """tokenizer.json, tokenizer_config.json (with the chat template) and special_tokens_map.json
    as the real repo has them; returns the special tokens' ids."""
    tok = llama3_tokenizer()
    tok.save(str(folder / "tokenizer.json"))
    ids = {s: tok.token_to_id(s) for s in SPECIALS}
    cfg = {
        "added_tokens_decoder": {str(i): _special(s) for s, i in ids.items()},
        "bos_token": "<|begin_of_text|>",
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": True,
        "eos_token": "<|eot_id|>",
        "model_input_names": ["input_ids", "attention_mask"],
        "model_max_length": 131072,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    (folder / "special_tokens_map.json").write_text(
        json.dumps({"bos_token": _special("<|begin_of_text|>"), "eos_token": _special("<|eot_id|>")}, indent=2) + "\n"
    )
    ids["size"] = tok.get_vocab_size()
    return ids


def build(folder: Path) -> None:
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    ids = write_tokenizer(folder)
    bos, eot = ids["<|begin_of_text|>"], ids["<|eot_id|>"]
    eos = [ids["<|end_of_text|>"], ids["<|eom_id|>"], eot]
    cfg = LlamaConfig(
        vocab_size=ids["size"],
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        hidden_act="silu",
        max_position_embeddings=1024,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
        rope_parameters={
            "rope_type": "llama3",
            "rope_theta": 500000.0,
            "factor": 32.0,
            "high_freq_factor": 4.0,
            "low_freq_factor": 1.0,
            "original_max_position_embeddings": 64,
        },
        bos_token_id=bos,
        eos_token_id=eos,
        attention_bias=False,
        mlp_bias=False,
        # drawn wide enough that greedy answers vary with the prompt and hold numbers
        # (at the usual 0.02 every answer is the same newline, and no rule is exercised)
        initializer_range=0.3,
    )
    torch.manual_seed(1203)
    model = LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    model.save_pretrained(folder)
    GenerationConfig(bos_token_id=bos, eos_token_id=eos, do_sample=True, temperature=0.6, top_p=0.9).save_pretrained(
        folder
    )


REPOS = {HUB_ID: build}
