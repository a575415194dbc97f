"""Held-out sentences for the faithfulness evaluation on any text model: a file the user gives
(plain lines, CSV/TSV or JSON lines, labels optional), SST-2 from the hub through `datasets`, or
English captions that ship with the app.

Items are `{"text": str, "label": str | None}`; labels are kept as strings ("0", "positive") and are
mapped to the model's tokens through label words (`parse_label_words`)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

MAX_BYTES = 8 * 2**20
MAX_ITEMS = 5000
TEXT_KEYS = ("sentence", "text", "review", "content")
LABEL_KEYS = ("label", "labels", "sentiment")
SST2_ID = "stanfordnlp/sst2"
SST2_WORDS = {"0": "negative", "1": "positive"}  # GLUE's SST-2 label names


class DataError(ValueError):
    """Unusable sentence data, with a message meant for the user."""


def _label(v) -> str | None:
    if v is None or (isinstance(v, str) and not v.strip()):
        return None
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    return str(v).strip()


def _from_record(rec, where: str) -> dict:
    if isinstance(rec, str):
        return {"text": rec, "label": None}
    if not isinstance(rec, dict):
        raise DataError(f"{where}: expected a string or an object with a 'sentence' or 'text' field.")
    text = next((rec[k] for k in TEXT_KEYS if isinstance(rec.get(k), str)), None)
    if text is None:
        raise DataError(f"{where}: no text field (one of {', '.join(TEXT_KEYS)}).")
    label = next((_label(rec[k]) for k in LABEL_KEYS if k in rec), None)
    return {"text": text, "label": label}


def _csv(text: str, delimiter: str, name: str) -> list[dict]:
    reader = csv.DictReader(io.StringIO(text), delimiter=delimiter)
    fields = [f.strip().lower() for f in (reader.fieldnames or [])]
    if not fields:
        raise DataError(f"{name}: empty table.")
    tcol = next((f for f in TEXT_KEYS if f in fields), fields[0])
    lcol = next((f for f in LABEL_KEYS if f in fields), None)
    out = []
    for row in reader:
        row = {str(k).strip().lower(): v for k, v in row.items() if k is not None}
        out.append({"text": row.get(tcol) or "", "label": _label(row.get(lcol)) if lcol else None})
    return out


def parse_sentences(raw: bytes | str, name: str = "sentences.txt") -> list[dict]:
    """Items from a file's contents; the format comes from the name's suffix (.csv, .tsv, .jsonl,
    .json, anything else = one sentence per line). Blank texts are dropped."""
    if isinstance(raw, bytes):
        if len(raw) > MAX_BYTES:
            raise DataError(f"{name}: larger than {MAX_BYTES // 2**20} MB.")
        try:
            raw = raw.decode("utf-8-sig")
        except UnicodeDecodeError as e:
            raise DataError(f"{name}: not UTF-8 text.") from e
    suffix = Path(name).suffix.lower()
    if suffix in (".csv", ".tsv"):
        items = _csv(raw, "\t" if suffix == ".tsv" else ",", name)
    elif suffix in (".jsonl", ".json"):
        stripped = raw.strip()
        try:
            if suffix == ".json" or stripped.startswith("["):
                recs = json.loads(stripped)
                recs = recs if isinstance(recs, list) else [recs]
            else:
                recs = [json.loads(line) for line in raw.splitlines() if line.strip()]
        except json.JSONDecodeError as e:
            raise DataError(f"{name}: not valid JSON ({e.msg}, line {e.lineno}).") from e
        items = [_from_record(r, f"{name} item {i + 1}") for i, r in enumerate(recs)]
    else:
        items = [{"text": line, "label": None} for line in raw.splitlines()]
    items = [{"text": " ".join(it["text"].split()), "label": it["label"]} for it in items if str(it["text"]).strip()]
    if not items:
        raise DataError(f"{name}: no sentences found.")
    return items[:MAX_ITEMS]


def read_sentences(path) -> list[dict]:
    """Items from a file on disk (an upload's temporary path)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"No file at {str(path)!r}.")
    if path.stat().st_size > MAX_BYTES:
        raise DataError(f"{path.name}: larger than {MAX_BYTES // 2**20} MB.")
    return parse_sentences(path.read_bytes(), path.name)


def parse_label_words(spec: str | None, labels) -> dict[str, str]:
    """`"0=terrible, 1=great"` → {"0": "terrible", "1": "great"}; without a spec, SST-2's 0/1 become
    negative/positive and any other label is its own word."""
    out: dict[str, str] = {}
    for part in str(spec or "").replace(";", ",").split(","):
        if not part.strip():
            continue
        if "=" not in part:
            raise DataError(f"Label words are written label=word, e.g. 0=negative, 1=positive (got {part.strip()!r}).")
        k, v = part.split("=", 1)
        if not k.strip() or not v.strip():
            raise DataError(f"Label words are written label=word (got {part.strip()!r}).")
        out[k.strip()] = v.strip()
    present = sorted({str(l) for l in labels if l is not None})
    for lab in present:
        if lab not in out:
            out[lab] = SST2_WORDS[lab] if set(present) <= set(SST2_WORDS) else lab
    return out


CAPTIONS = Path(__file__).resolve().parents[2] / "assets" / "data" / "nemo" / "coco2014_val_10000.csv"


def load_captions(limit: int = 1000) -> list[dict]:
    """English sentences that ship with the app (COCO 2014 captions, MIT, from the NeMo paper's
    repository): held-out text for any model without a download; no labels."""
    if not CAPTIONS.exists():
        raise DataError(
            "The shipped captions (assets/data/nemo/coco2014_val_10000.csv) are missing; "
            "upload a sentence file instead."
        )
    with CAPTIONS.open(newline="", encoding="utf-8") as f:
        rows = [r.get("Caption", "") for _, r in zip(range(limit), csv.DictReader(f, delimiter=";"))]
    return [{"text": " ".join(t.split()), "label": None} for t in rows if t and t.strip()]


def load_sst2(split: str = "validation") -> list[dict]:
    """SST-2 from the hub through `datasets` (imported here only); a clear message offline."""
    try:
        import datasets  # noqa: F401
    except ImportError as e:
        raise DataError(
            "SST-2 from the hub needs the `datasets` package (pip install datasets); or upload a sentence file."
        ) from e
    import os

    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        raise DataError(
            "SST-2 cannot be loaded: the hub is offline here (HF_HUB_OFFLINE is set). "
            "Upload a sentence file instead (SST-2's dev.tsv works as it is)."
        )
    from datasets import load_dataset

    try:
        ds = load_dataset(SST2_ID, split=split)
    except Exception as e:  # noqa: BLE001 - network, auth or format: the user needs the reason
        raise DataError(
            f"SST-2 could not be loaded from the hub ({type(e).__name__}: {e}). Upload a sentence file instead."
        ) from e
    return [{"text": r["sentence"].strip(), "label": _label(r["label"])} for r in ds][:MAX_ITEMS]
