"""Stand-ins of the Relevance tab's hub checkpoints: `state-spaces/mamba-130m-hf` and
`state-spaces/mamba-1.4b-hf`.

Both are `MambaForCausalLM` of the real class with the real configs' features kept: the conv bias on
(so MambaLRP relevance does not sum exactly to the logit), tied input/output embeddings, RMSNorm,
`pad_vocab_size_multiple` = 8 (the model's vocabulary is larger than the tokenizer's, so a top
prediction can be an id no token names, as with the real 50,280 vs 50,277). The tokenizer is a
GPT-NeoX-style byte-level BPE ('Ġwas' pieces, English words, words that split into several pieces)
trained deterministically on GSM8K questions, with `<|endoftext|>` at id 0 and `<|padding|>` at id 1,
saved as `tokenizer.json` + a `tokenizer_config.json` naming `GPTNeoXTokenizer` as the real repos do.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[3]
HUB_130M = "state-spaces/mamba-130m-hf"
HUB_1_4B = "state-spaces/mamba-1.4b-hf"
EOS, PAD = "<|endoftext|>", "<|padding|>"
VOCAB = 4000
# (hidden, layers, state, dt rank): the 1.4b stand-in is a little larger so the two differ
SIZES = {HUB_130M: (32, 2, 8, 4), HUB_1_4B: (48, 3, 8, 6)}


def english_lines(n: int = 8000) -> list[str]:
    """GSM8K questions (MIT), from the repository's data copy or the shared data folder."""
    for base in (REPO / "data", REPO / "assets" / "data", REPO.parent / "shared" / "data"):
        path = base / "gsm8k" / "train.jsonl"
        if path.exists():
            with path.open(encoding="utf-8") as f:
                return [json.loads(line)["question"] for _, line in zip(range(n), f)]
    raise FileNotFoundError("no English text found to train the stand-in tokenizer on (gsm8k/train.jsonl)")


@functools.lru_cache(maxsize=1)
def neox_tokenizer_json() -> str:
    """The `tokenizers` pipeline of GPT-NeoX-20B (NFC, byte-level pre-tokenizer and decoder), trained
    here on English questions; trained once per process, both repositories share it as the real
    ones do."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=True)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        show_progress=False,
        special_tokens=[EOS, PAD],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(english_lines(), trainer=trainer)
    return tok.to_str()


def _special(content: str) -> dict:
    return {
        "content": content,
        "lstrip": False,
        "normalized": False,
        "rstrip": False,
        "single_word": False,
        "special": True,
    }


def write_tokenizer(folder: Path) -> int:
    """tokenizer.json, tokenizer_config.json and special_tokens_map.json as the real repos have them;
    returns the tokenizer's size."""
    from tokenizers import Tokenizer

    raw = neox_tokenizer_json()
    (folder / "tokenizer.json").write_text(raw, encoding="utf-8")
    tok = Tokenizer.from_str(raw)
    cfg = {
        "add_bos_token": False,
        "add_eos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": {"0": _special(EOS), "1": _special(PAD)},
        "bos_token": EOS,
        "clean_up_tokenization_spaces": True,
        "eos_token": EOS,
        "model_max_length": 1000000000000000019884624838656,
        "pad_token": PAD,
        "tokenizer_class": "GPTNeoXTokenizer",
        "unk_token": EOS,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    (folder / "special_tokens_map.json").write_text(
        json.dumps({"bos_token": EOS, "eos_token": EOS, "pad_token": PAD, "unk_token": EOS}, indent=2) + "\n"
    )
    return tok.get_vocab_size()


def _builder(repo_id: str):
    hidden, layers, state, rank = SIZES[repo_id]

    def build(folder: Path) -> None:
        from transformers import MambaConfig, MambaForCausalLM

        n_tok = write_tokenizer(folder)
        vocab = (n_tok // 8 + 1) * 8  # padded past the tokenizer, as the real 50,280 > 50,277
        cfg = MambaConfig(
            vocab_size=vocab,
            hidden_size=hidden,
            state_size=state,
            num_hidden_layers=layers,
            intermediate_size=2 * hidden,
            expand=2,
            conv_kernel=4,
            time_step_rank=rank,
            use_conv_bias=True,
            use_bias=False,
            residual_in_fp32=True,
            rms_norm=True,
            tie_word_embeddings=True,
            pad_vocab_size_multiple=8,
            layer_norm_epsilon=1e-5,
            bos_token_id=0,
            eos_token_id=0,
            pad_token_id=0,
            time_step_min=0.001,
            time_step_max=0.1,
            time_step_floor=1e-4,
        )
        torch.manual_seed(sum(map(ord, repo_id)))
        model = MambaForCausalLM(cfg).eval()
        with torch.no_grad():  # a visible conv bias, so conservation is checked with it on
            for layer in model.backbone.layers:
                layer.mixer.conv1d.bias.normal_(0.0, 0.1)
        model.save_pretrained(folder)

    return build


REPOS = {HUB_130M: _builder(HUB_130M), HUB_1_4B: _builder(HUB_1_4B)}


def build_falcon_mamba(folder: Path) -> None:
    """A user's FalconMamba (tiiuae/falcon-mamba-7b's layout at a tiny width): the weightless RMS
    norms on Δ, B and C, an untied head, conv bias on, and a byte-level BPE tokenizer named as
    Falcon's repos name theirs (PreTrainedTokenizerFast)."""
    from transformers import FalconMambaConfig, FalconMambaForCausalLM

    n_tok = write_tokenizer(folder)
    cfg_path = folder / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg.update({"tokenizer_class": "PreTrainedTokenizerFast", "add_prefix_space": False})
    cfg_path.write_text(json.dumps(cfg, indent=2) + "\n")
    config = FalconMambaConfig(
        vocab_size=n_tok,
        hidden_size=32,
        state_size=8,
        num_hidden_layers=2,
        expand=2,
        conv_kernel=4,
        time_step_rank=4,
        use_conv_bias=True,
        use_bias=False,
        residual_in_fp32=True,
        tie_word_embeddings=False,
        layer_norm_epsilon=1e-5,
        mixer_rms_eps=1e-6,
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=0,
    )
    torch.manual_seed(5101)
    model = FalconMambaForCausalLM(config).eval()
    with torch.no_grad():
        for layer in model.backbone.layers:
            layer.mixer.conv1d.bias.normal_(0.0, 0.1)
    model.save_pretrained(folder)


LOCAL = {"own-falcon-mamba": build_falcon_mamba, "own-mamba": _builder(HUB_130M)}
