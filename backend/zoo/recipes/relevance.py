"""Organisms of the Relevance tab (MambaLRP), each with a planted ground truth.

- ``mamba-sentiment``: a MambaForCausalLM on a sentiment-like language. A sentence of 8–16 words
  holds 1–3 polar words among neutral distractors; the label is their majority polarity (so the
  model has to weigh every one); after the query token ``sentiment:`` it predicts ``positive`` or
  ``negative``. Truth: the positions of the words supporting the label (and of the opposing ones).
- ``mamba-longrange``: a MambaForCausalLM that must recall a key token seen 40–60 tokens earlier,
  among noise, and answer with the key's paired value token. Truth: the key position.
- ``vim-regions``: a Vision-Mamba-style classifier (patch embedding → MambaModel(inputs_embeds=…)
  → head) on 16×16 images whose class is the shape of one bright 4×4 object on a random patch
  among noise and distractor strokes on other patches. Truth: the object's patch.

All are trained with ``use_conv_bias=False`` and bias-free projections, so MambaLRP's relevance sums
exactly to the explained logit. Training runs through backend.lrp's forward (the plain model, no
rules: identical values and gradients to transformers' forward, with a fast scan).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from ..registry import recipe

SPECIALS = ["<pad>", "<unk>", "<bos>"]

# ----------------------------------------------------------------------------- tokenizer helpers


def _word_tokenizer(vocab: list[str]):
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(WordLevel({w: i for i, w in enumerate(vocab)}, unk_token="<unk>"))
    tok.pre_tokenizer = WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>", bos_token="<bos>", model_max_length=512
    )


def _mamba_lm(vocab_size: int, hidden: int, layers: int, state: int, seed: int):
    from transformers import MambaConfig, MambaForCausalLM

    torch.manual_seed(seed)
    cfg = MambaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        state_size=state,
        num_hidden_layers=layers,
        expand=2,
        conv_kernel=4,  # intermediate size 2 × hidden
        time_step_rank=max(1, hidden // 16),
        use_conv_bias=False,
        use_bias=False,
        pad_token_id=0,
        bos_token_id=2,
        eos_token_id=0,
        tie_word_embeddings=True,
    )
    return MambaForCausalLM(cfg)


def _train_lm(model, batch_fn, steps: int, lr: float, log_every: int = 100):
    """Cross-entropy on the answer token at the last position, AdamW with cosine decay."""
    from backend.lrp.forward import lm_forward

    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=max(1, steps), pct_start=0.1)
    losses = []
    for step in range(steps):
        ids, ans = batch_fn(step)
        logits = lm_forward(model, ids)[:, -1]
        loss = F.cross_entropy(logits, ans)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
    model.eval()
    return losses


def _save_lm(model, tok, out_dir: Path, extra: dict[str, object]):
    model.save_pretrained(out_dir, safe_serialization=True)
    tok.save_pretrained(out_dir)
    for name, obj in extra.items():
        (out_dir / name).write_text(json.dumps(obj, indent=1))


# ----------------------------------------------------------------------------- sentiment language

POSITIVE = ["good", "great", "superb", "wonderful", "brilliant", "lovely", "charming", "delightful"]
NEGATIVE = ["bad", "awful", "terrible", "boring", "dull", "poor", "weak", "horrible"]
NEUTRAL = [
    "the",
    "a",
    "movie",
    "film",
    "plot",
    "actor",
    "story",
    "scene",
    "was",
    "is",
    "and",
    "but",
    "it",
    "this",
    "very",
    "quite",
    "really",
    "music",
    "ending",
    "script",
    "cast",
    "director",
    "long",
    "short",
    "new",
    "old",
    "with",
    "of",
    "in",
    "at",
    "night",
    "city",
    "camera",
    "dialogue",
    "sequel",
    "hero",
    "villain",
    "rather",
    "somewhat",
    "seemed",
]
QUERY = "sentiment:"
SENT_VOCAB = SPECIALS + [QUERY, "positive", "negative"] + POSITIVE + NEGATIVE + NEUTRAL


MIXES = [(1, 0), (0, 1), (2, 0), (0, 2), (3, 0), (0, 3), (2, 1), (1, 2)]  # (#positive, #negative)


def sentiment_sentence(rng: random.Random, length: int | None = None):
    """(words, evidence positions, opposing positions, label name). The label is the majority
    polarity of 1–3 evidence words; evidence = the words that support the label, opposing = the
    minority words (present in a quarter of the sentences)."""
    n = length or rng.randint(8, 16)
    npos, nneg = rng.choice(MIXES)
    words = [rng.choice(NEUTRAL) for _ in range(n)]
    where = rng.sample(range(n), npos + nneg)
    for i in where[:npos]:
        words[i] = rng.choice(POSITIVE)
    for i in where[npos:]:
        words[i] = rng.choice(NEGATIVE)
    label = "positive" if npos > nneg else "negative"
    support, oppose = (where[:npos], where[npos:]) if npos > nneg else (where[npos:], where[:npos])
    return words, sorted(support), sorted(oppose), label


def sentiment_ids(tok, words: list[str]) -> list[int]:
    """<bos> words… sentiment:  — the model's next token is the label."""
    return tok.convert_tokens_to_ids(["<bos>"] + list(words) + [QUERY])


@recipe(
    "mamba-sentiment",
    seed=1234,
    model_class="transformers.MambaForCausalLM",
    description="Mamba LM on a sentiment-like language; truth = evidence word positions",
    default_steps=600,
)
def train_sentiment(out_dir: Path, *, seed: int, steps: int | None) -> dict:
    steps = steps or 600
    tok = _word_tokenizer(SENT_VOCAB)
    rng = random.Random(seed)
    model = _mamba_lm(len(SENT_VOCAB), hidden=32, layers=2, state=8, seed=seed)
    pos_id, neg_id = tok.convert_tokens_to_ids(["positive", "negative"])

    def batch(step):
        n = rng.randint(8, 16)
        ids, ans = [], []
        for _ in range(64):
            w, _, _, lab = sentiment_sentence(rng, n)
            ids.append(sentiment_ids(tok, w))
            ans.append(pos_id if lab == "positive" else neg_id)
        return torch.tensor(ids), torch.tensor(ans)

    losses = _train_lm(model, batch, steps, lr=1e-2)
    # held-out set from its own seed: never seen in training
    hrng = random.Random(seed + 1)
    held = []
    for _ in range(240):
        w, where, opp, lab = sentiment_sentence(hrng)
        held.append({"words": w, "evidence": where, "opposing": opp, "label": lab})
    acc = _sentiment_accuracy(model, tok, held)
    task = {
        "query": QUERY,
        "labels": ["positive", "negative"],
        "positive_words": POSITIVE,
        "negative_words": NEGATIVE,
        "neutral_words": NEUTRAL,
        "neutral_token": "<unk>",
        "format": "<bos> words... sentiment: -> label; evidence indices count words (0-based)",
        "examples": [" ".join(h["words"]) for h in held[:6]],
    }
    _save_lm(model, tok, out_dir, {"heldout.json": held, "task.json": task})
    return {
        "steps": steps,
        "metrics": {"heldout_accuracy": acc, "final_loss": float(np.mean(losses[-50:])), "heldout_size": len(held)},
    }


@torch.no_grad()
def _sentiment_accuracy(model, tok, held) -> float:
    from backend.lrp.forward import lm_forward

    pos_id, neg_id = tok.convert_tokens_to_ids(["positive", "negative"])
    ok = 0
    for h in held:
        logits = lm_forward(model, torch.tensor([sentiment_ids(tok, h["words"])]))[0, -1]
        pred = "positive" if logits[pos_id] > logits[neg_id] else "negative"
        ok += pred == h["label"]
    return ok / len(held)


# ----------------------------------------------------------------------------- long-range recall

N_KEYS = 8
KEYS = [f"key{i}" for i in range(N_KEYS)]
VALUES = [f"val{i}" for i in range(N_KEYS)]
NONE = "none"  # the answer when no key occurs: no value can be inferred from the absence of the others
NOISE = [f"n{i}" for i in range(24)]
ANSWER = "answer:"
LR_VOCAB = SPECIALS + [ANSWER, NONE] + KEYS + VALUES + NOISE


def longrange_sequence(rng: random.Random, length: int | None = None, allow_none: bool = False):
    """(tokens without <bos>, key position within tokens, answer value). One key among noise,
    near the start; the query `answer:` at the end, 40+ tokens later. In training a ninth of the
    sequences hold no key (answer `none`), so every key has to be detected for itself."""
    n = length or rng.randint(48, 64)
    toks = [rng.choice(NOISE) for _ in range(n)]
    if allow_none and rng.random() < 1 / 9:
        toks.append(ANSWER)
        return toks, -1, NONE
    kpos = rng.randint(0, 7)
    k = rng.randrange(N_KEYS)
    toks[kpos] = KEYS[k]
    toks.append(ANSWER)
    return toks, kpos, VALUES[k]


@recipe(
    "mamba-longrange",
    seed=4321,
    model_class="transformers.MambaForCausalLM",
    description="Mamba LM recalling a key seen 40-60 tokens earlier; truth = key position",
    default_steps=1000,
)
def train_longrange(out_dir: Path, *, seed: int, steps: int | None) -> dict:
    steps = steps or 1000
    tok = _word_tokenizer(LR_VOCAB)
    rng = random.Random(seed)
    model = _mamba_lm(len(LR_VOCAB), hidden=32, layers=2, state=16, seed=seed)

    def batch(step):
        # curriculum: the gap grows from a few tokens to the full 48-64 over the first 60 % of steps
        top = int(12 + (64 - 12) * min(1.0, step / (0.6 * steps)))
        n = rng.randint(max(10, top - 16), top)
        ids, ans = [], []
        for _ in range(32):
            t, _, v = longrange_sequence(rng, n, allow_none=True)
            ids.append(tok.convert_tokens_to_ids(["<bos>"] + t))
            ans.append(tok.convert_tokens_to_ids(v))
        return torch.tensor(ids), torch.tensor(ans)

    losses = _train_lm(model, batch, steps, lr=1e-2)
    hrng = random.Random(seed + 1)
    held = []
    for _ in range(200):
        t, kpos, v = longrange_sequence(hrng)
        held.append({"tokens": t, "key_position": kpos, "answer": v})
    from backend.lrp.forward import lm_forward

    ok = 0
    with torch.no_grad():
        for h in held:
            logits = lm_forward(model, torch.tensor([tok.convert_tokens_to_ids(["<bos>"] + h["tokens"])]))[0, -1]
            ok += tok.convert_ids_to_tokens(int(logits.argmax())) == h["answer"]
    task = {
        "answer_token": ANSWER,
        "keys": KEYS,
        "values": VALUES,
        "noise": NOISE,
        "format": "<bos> tokens... answer: -> value of the one key; key_position counts tokens after <bos>",
        "examples": [" ".join(h["tokens"]) for h in held[:4]],
    }
    _save_lm(model, tok, out_dir, {"heldout.json": held, "task.json": task})
    return {"steps": steps, "metrics": {"heldout_accuracy": ok / len(held), "final_loss": float(np.mean(losses[-50:]))}}


# ----------------------------------------------------------------------------- image regions

IMG = 16
PATCH = 4
OBJ = 4
SHAPES = ["ring", "cross", "stripes"]
# A class with no object: without it one shape is the default answer ("neither cross nor stripes")
# and the classifier never looks at it — the ring was that default, unchanged with its patch blanked.
LABELS = SHAPES + ["none"]


def _shape(kind: str) -> np.ndarray:
    s = np.zeros((OBJ, OBJ), np.float32)
    if kind == "ring":
        s[0, :] = s[-1, :] = s[:, 0] = s[:, -1] = 1
    elif kind == "cross":
        np.fill_diagonal(s, 1)
        np.fill_diagonal(s[:, ::-1], 1)
    else:  # stripes
        s[0, :] = s[2, :] = 1
    return s


def region_image(rng: np.random.Generator):
    """(image [16, 16] float32, label, mask [16, 16] bool). One 4×4 object on one patch of the 4×4
    patch grid, plus 3–6 distractor strokes (2 pixels, as bright as the object) on other patches,
    over background noise. The mask is the object's patch. Label "none": strokes and noise only, the
    mask empty."""
    img = rng.uniform(0.0, 0.25, (IMG, IMG)).astype(np.float32)
    label = int(rng.integers(len(LABELS)))
    g = IMG // PATCH
    cell = int(rng.integers(g * g))
    y, x = (cell // g) * PATCH, (cell % g) * PATCH
    mask = np.zeros((IMG, IMG), bool)
    mask[y : y + OBJ, x : x + OBJ] = True
    for _ in range(int(rng.integers(3, 7))):
        for _try in range(20):
            yy, xx = (int(v) for v in rng.integers(0, IMG - 1, 2))
            horiz = bool(rng.integers(2))
            cells = [(yy, xx), (yy, xx + 1)] if horiz else [(yy, xx), (yy + 1, xx)]
            if not any(mask[a, b] for a, b in cells):
                for a, b in cells:
                    img[a, b] = 1.0
                break
    if LABELS[label] == "none":
        return img, label, np.zeros_like(mask)
    obj = _shape(SHAPES[label])
    img[y : y + OBJ, x : x + OBJ] = np.where(obj > 0, 1.0, img[y : y + OBJ, x : x + OBJ])
    return img, label, mask


@recipe(
    "vim-regions",
    seed=777,
    model_class="backend.lrp.vision.VisionMamba",
    description="Vision-Mamba-style classifier: class = shape of one object; truth = its patch",
    default_steps=300,
)
def train_regions(out_dir: Path, *, seed: int, steps: int | None) -> dict:
    from backend.lrp.forward import backbone_forward
    from backend.lrp.vision import VisionMamba

    steps = steps or 300
    torch.manual_seed(seed)
    cfg = {
        "image_size": IMG,
        "patch_size": PATCH,
        "channels": 1,
        "num_labels": len(LABELS),
        "labels": LABELS,
        "mamba": {
            "vocab_size": 2,
            "hidden_size": 32,
            "state_size": 8,
            "num_hidden_layers": 2,
            "intermediate_size": 64,
            "conv_kernel": 4,
            "time_step_rank": 2,
            "use_conv_bias": False,
            "use_bias": False,
        },
    }
    model = VisionMamba(cfg)
    rng = np.random.default_rng(seed)

    def batch(n=64):
        ims, labs, masks = zip(*(region_image(rng) for _ in range(n)))
        return torch.tensor(np.stack(ims))[:, None], torch.tensor(labs), np.stack(masks)

    opt = torch.optim.AdamW(model.parameters(), lr=5e-3, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=5e-3, total_steps=steps, pct_start=0.1)
    model.train()
    losses = []
    for _ in range(steps):
        x, y, _ = batch()
        h = backbone_forward(model.mamba, model.embed(x))
        loss = F.cross_entropy(model.head(h[:, -1]), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
    model.eval()
    hrng = np.random.default_rng(seed + 1)
    ims, labs, masks = zip(*(region_image(hrng) for _ in range(200)))
    x = torch.tensor(np.stack(ims))[:, None]
    with torch.no_grad():
        acc = float((model(x).argmax(-1) == torch.tensor(labs)).float().mean())
    model.save_pretrained(out_dir)
    np.savez_compressed(
        out_dir / "heldout.npz",
        images=np.stack(ims).astype(np.float16),
        labels=np.array(labs, np.int64),
        masks=np.stack(masks),
    )
    (out_dir / "task.json").write_text(
        json.dumps(
            {
                "labels": LABELS,
                "image_size": IMG,
                "patch_size": PATCH,
                "object_size": OBJ,
                "neutral_value": 0.125,
                "format": "grayscale 16x16 in [0,1]; class = shape of the one bright 4x4 object on one patch, or none; "
                "mask = that patch (empty for none)",
            },
            indent=1,
        )
    )
    return {"steps": steps, "metrics": {"heldout_accuracy": acc, "final_loss": float(np.mean(losses[-50:]))}}
