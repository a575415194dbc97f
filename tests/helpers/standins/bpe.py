"""The Llama-3 byte-level BPE pipeline, trained here on shipped English text: the stand-ins of the
Llama-3.2 chat model (Math neurons) and of the LLaVA models' Llama-3 language side (Features) start
from it and add their own specials and post-processor."""

# The Llama-3 pre-tokenizer split: contractions, words with one leading non-letter, numbers of at
# most three digits, punctuation runs, newlines, spaces.
SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def llama3_bpe(lines: list[str], vocab_size: int):
    """A `tokenizers.Tokenizer`: BPE that ignores merges for whole-vocabulary words (as Llama-3's),
    the split above then byte-level pieces ('Ġ'), a byte-level decoder; no specials yet."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(lines, trainer=trainer)
    return tok
