"""Tokens as people read them, and words typed by people as the model's tokens.

A byte-level BPE (GPT-NeoX, used by the Mamba checkpoints) stores ' was' as the piece 'Ġwas'; a
user reads the first and types 'was'. Texts here are per-token decodes, so a leading space is a real
space; `visible` turns such spaces into a thin marker for display. Word-level vocabularies (the zoo)
come out unchanged.
"""

from __future__ import annotations

SPACE_MARK = "·"  # U+00B7: a leading space, drawn thin
MARKS = {"\n": "↵", "\t": "⇥", "\r": "␍"}


class WordError(ValueError):
    """A typed word the model's vocabulary cannot name, with a message meant for the user."""


def piece(tok, tid: int) -> str | None:
    """The vocabulary piece of an id, or None where the model's (padded) vocabulary is larger than
    the tokenizer's."""
    try:
        p = tok.convert_ids_to_tokens(int(tid))
    except (IndexError, OverflowError, TypeError):
        return None
    return None if p is None else str(p)


def _specials(tok) -> frozenset:
    return frozenset(getattr(tok, "all_special_tokens", []) or [])


def _decode1(tok, tid: int) -> str | None:
    try:
        return tok.decode([int(tid)], skip_special_tokens=False, clean_up_tokenization_spaces=False)
    except Exception:  # noqa: BLE001 - a tokenizer without a decoder: its piece is its text
        return None


def token_text(tok, tid: int, specials: frozenset | None = None) -> str:
    """One token as text: the decode of that id alone ('Ġwas' → ' was'); specials and word-level
    tokens stay as they are; a piece that is only part of a character keeps its piece name."""
    p = piece(tok, tid)
    if p is None:
        return f"<id {int(tid)}>"
    if p in (_specials(tok) if specials is None else specials):
        return p
    text = _decode1(tok, tid)
    if not text or "\ufffd" in text:
        return p
    return text


def token_texts(tok, ids) -> list[str]:
    """Every token of a sequence as text. Byte-level BPE splits some characters (emoji, accents in
    a small vocabulary) into byte tokens that are no text alone: each of those shows the character
    its run of tokens spells and its place in the run, e.g. 'é(1/2)', 'é(2/2)'."""
    ids = [int(i) for i in ids]
    specials = _specials(tok)
    out = [token_text(tok, i, specials) for i in ids]
    broken = [
        piece(tok, i) is not None and out[k] == piece(tok, i) and "\ufffd" in (_decode1(tok, i) or "")
        for k, i in enumerate(ids)
    ]
    i = 0
    while i < len(ids):
        if not broken[i]:
            i += 1
            continue
        j, text = i, ""
        while j < len(ids) and broken[j]:
            j += 1
            text = tok.decode(ids[i:j], skip_special_tokens=False, clean_up_tokenization_spaces=False)
            if "\ufffd" not in text:
                break
        if text and "\ufffd" not in text and j - i > 1:
            for k in range(i, j):
                out[k] = f"{text}({k - i + 1}/{j - i})"
        i = j
    return out


def visible(text: str) -> str:
    """Display form of a token text: leading spaces become thin marks, control characters symbols."""
    s = str(text)
    stripped = s.lstrip(" ")
    s = SPACE_MARK * (len(s) - len(stripped)) + stripped
    for ch, mark in MARKS.items():
        s = s.replace(ch, mark)
    return s


def _ids(tok, text: str) -> list[int]:
    return list(tok(text, add_special_tokens=False)["input_ids"])


def resolve_word(tok, word: str) -> tuple[int, str, str]:
    """The token a typed target stands for: `(id, its text, a note for the user or "")`.

    Tried in order: ' word' as one token (how a next word is written), 'word' as one token, the exact
    vocabulary piece (e.g. 'Ġwas' or a zoo token like 'sentiment:'); a word that splits into several
    tokens is explained through its first token (the one the model predicts next), and the note says
    so. A word the vocabulary cannot name at all (only unknown tokens) is refused."""
    name = str(word).strip()
    if not name:
        raise WordError("Type a target word or leave it blank for the model's prediction.")
    unk = getattr(tok, "unk_token_id", None)
    unk_text = getattr(tok, "unk_token", None)

    def single(text: str) -> int | None:
        ids = _ids(tok, text)
        if len(ids) == 1 and (ids[0] != unk or name == unk_text):
            return int(ids[0])
        return None

    tid = single(" " + name)
    if tid is not None:
        return tid, token_text(tok, tid), ""
    tid = single(name)
    if tid is not None:
        # a word-level vocabulary has no leading spaces to speak of; a byte-level one does
        spaced = _ids(tok, " " + name)
        note = (
            ""
            if spaced == [tid] or unk in spaced
            else (
                f"' {name}' (with the leading space a next word has) is {len(spaced)} tokens for this model; "
                f"the explanation is for {visible(token_text(tok, tid))!r}, the word without a leading space."
            )
        )
        return tid, token_text(tok, tid), note
    vocab = tok.get_vocab()
    if name in vocab:
        tid = int(vocab[name])
        return tid, token_text(tok, tid), ""
    ids = _ids(tok, " " + name)
    if ids and (unk is None or unk not in ids):
        parts = token_texts(tok, ids)
        shown = " + ".join(repr(visible(p)) for p in parts)
        note = (
            f"'{name}' is {len(ids)} tokens for this model ({shown}); the explanation is for the "
            f"first one, {visible(parts[0])!r}, the token the model would predict next."
        )
        return int(ids[0]), parts[0], note
    raise WordError(f"{name!r} is not a token of this model's vocabulary.")
