"""The data of hub mode: GSM8K as shipped (math), and non-math sets from a file the user names or,
where a hub is reachable, RACE / MMLU through the `datasets` library.

Items are dicts: {"prompt", "answer"} (+ "final" for GSM8K: the number after "####"), or
{"text"} for plain text without a question. Every reader raises ValueError with a message a user
can act on; nothing here reaches the network unless `load_hub_nonmath` is called on a machine
where the hub is allowed.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
from pathlib import Path

from ..core.presets import REPO_ROOT

GSM8K_DIR = REPO_ROOT / "assets" / "data" / "gsm8k"
GSM8K_SOURCE = "GSM8K (openai/grade-school-math, MIT; shipped in assets/data/gsm8k)"
MAX_FILE_BYTES = 20 * 2**20
MAX_ITEMS = 5000

# Plain English text the app ships, the non-math fallback when no file is named and no hub is
# reachable: COCO captions, as the NeMo paper's repository lists them (MIT).
CAPTIONS = REPO_ROOT / "assets" / "data" / "nemo" / "coco2014_val_10000.csv"
CAPTIONS_SOURCE = "COCO 2014 captions (shipped in assets/data/nemo, MIT)"

# A number as written in an answer: optional sign, thousands commas, decimals ("$1,234.50", "-3").
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")


def parse_number(text: str) -> float | None:
    try:
        return float(text.replace(",", "").rstrip("."))
    except ValueError:
        return None


def reference_number(answer: str) -> str:
    """The number after the last "####" of a GSM8K answer, commas removed."""
    if "####" not in answer:
        raise ValueError("a GSM8K answer ends with '#### <number>'")
    tail = answer.rsplit("####", 1)[1].strip()
    m = _NUMBER.search(tail)
    if not m:
        raise ValueError(f"no number after '####' in {tail!r}")
    return m.group(0).replace(",", "")


def final_number(text: str) -> str | None:
    """The number the model gives last ("... so she makes $18." -> "18"); None when there is none.
    A "####" in the model's text, if any, marks its answer as in the reference format."""
    if "####" in text:
        tail = _NUMBER.findall(text.rsplit("####", 1)[1])
        if tail:
            return tail[0].replace(",", "")
    found = _NUMBER.findall(text)
    return found[-1].replace(",", "").rstrip(".") if found else None


def same_number(a: str | None, b: str | None) -> bool:
    if a is None or b is None:
        return False
    x, y = parse_number(a), parse_number(b)
    return x is not None and y is not None and abs(x - y) <= 1e-6 * max(1.0, abs(y))


def read_gsm8k(split: str, n: int | None = None) -> list[dict]:
    """GSM8K items {"prompt": question, "answer": worked solution, "final": number}."""
    if split not in ("train", "test"):
        raise ValueError(f"GSM8K split is 'train' or 'test', not {split!r}")
    path = GSM8K_DIR / f"{split}.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"GSM8K is not shipped at {path}")
    out: list[dict] = []
    with path.open(encoding="utf-8") as f:
        for line in f:
            if n is not None and len(out) >= n:
                break
            row = json.loads(line)
            out.append({"prompt": row["question"], "answer": row["answer"], "final": reference_number(row["answer"])})
    return out


def read_captions(n: int = 400) -> list[dict]:
    """The first `n` shipped COCO captions as plain-text items."""
    if not CAPTIONS.exists():
        raise FileNotFoundError(f"the shipped captions are missing ({CAPTIONS})")
    with CAPTIONS.open(encoding="utf-8", newline="") as f:
        rows = csv.DictReader(f, delimiter=";")
        out = [{"text": r["Caption"].strip()} for r in rows if (r.get("Caption") or "").strip()]
    return out[:n]


# ------------------------------------------------------------------------------ user's files
_PROMPT_KEYS = ("prompt", "question", "input", "instruction", "query", "article")
_ANSWER_KEYS = ("answer", "output", "response", "target", "label", "completion")
_TEXT_KEYS = ("text", "content", "sentence", "passage")
LETTERS = "ABCDEFGHIJ"


def _item(row: dict, where: str) -> dict:
    """One item from a JSON/CSV row: {prompt, answer} (multiple choice when it has choices or
    options), or {text}."""
    low = {str(k).strip().lower(): v for k, v in row.items()}
    prompt = next((low[k] for k in _PROMPT_KEYS if isinstance(low.get(k), str) and low[k].strip()), None)
    answer = next((low[k] for k in _ANSWER_KEYS if low.get(k) not in (None, "")), None)
    choices = low.get("choices") or low.get("options")
    if isinstance(choices, str):  # a CSV cell: a JSON list or "a|b|c"
        try:
            choices = json.loads(choices)
        except ValueError:
            choices = [c.strip() for c in choices.split("|")]
    if prompt is not None and answer is not None:
        if isinstance(choices, list) and choices:
            return multiple_choice(prompt, [str(c) for c in choices], answer, where)
        return {"prompt": prompt.strip(), "answer": str(answer).strip()}
    text = next((low[k] for k in _TEXT_KEYS if isinstance(low.get(k), str) and low[k].strip()), None)
    if text is None and prompt is not None:
        text = prompt
    if text is None:
        raise ValueError(f"{where}: expected fields prompt/question + answer, or text; got {sorted(low)}")
    return {"text": text.strip()}


def multiple_choice(question: str, choices: list[str], answer, where: str = "item") -> dict:
    """A multiple-choice item as the paper's MMLU/RACE prompts: the options lettered, the answer
    a letter (given as a letter, an index, or the option's text)."""
    if len(choices) > len(LETTERS):
        raise ValueError(f"{where}: at most {len(LETTERS)} options")
    a = str(answer).strip()
    if a.isdigit() and int(a) < len(choices):
        letter = LETTERS[int(a)]
    elif len(a) == 1 and a.upper() in LETTERS[: len(choices)]:
        letter = a.upper()
    elif a in choices:
        letter = LETTERS[choices.index(a)]
    else:
        raise ValueError(f"{where}: answer {a!r} is not an option letter, index or text")
    opts = "\n".join(f"{LETTERS[i]}. {c}" for i, c in enumerate(choices))
    return {
        "prompt": f"{question.strip()}\n{opts}\nAnswer with the letter of the correct option.",
        "answer": letter,
        "choice": True,
    }


def read_items(path: str | os.PathLike) -> list[dict]:
    """A non-math set from a user's file: JSONL or a JSON list (objects with prompt/question and
    answer, optionally choices; or text), CSV with a header naming those fields, or plain text
    (one text a line). At least two items; at most MAX_ITEMS are kept."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"no file at {path}")
    if path.stat().st_size > MAX_FILE_BYTES:
        raise ValueError(f"{path.name} is larger than {MAX_FILE_BYTES // 2**20} MB")
    raw = path.read_text(encoding="utf-8", errors="replace")
    suffix = path.suffix.lower()
    items: list[dict] = []
    if suffix in (".jsonl", ".json"):
        stripped = raw.lstrip()
        if suffix == ".json" or stripped.startswith("["):
            rows = json.loads(raw)
            if not isinstance(rows, list):
                raise ValueError(f"{path.name}: expected a JSON list")
        else:
            rows = []
            for i, line in enumerate(raw.splitlines(), 1):
                if line.strip():
                    try:
                        rows.append(json.loads(line))
                    except ValueError as e:
                        raise ValueError(f"{path.name} line {i}: not JSON ({e})") from None
        for i, row in enumerate(rows, 1):
            if isinstance(row, str):
                items.append({"text": row.strip()})
            elif isinstance(row, dict):
                items.append(_item(row, f"{path.name} item {i}"))
            else:
                raise ValueError(f"{path.name} item {i}: expected an object or a string")
    elif suffix in (".csv", ".tsv"):
        reader = csv.DictReader(io.StringIO(raw), delimiter="\t" if suffix == ".tsv" else ",")
        if not reader.fieldnames:
            raise ValueError(f"{path.name}: no header row")
        items = [_item(row, f"{path.name} row {i}") for i, row in enumerate(reader, 2)]
    else:
        items = [{"text": line.strip()} for line in raw.splitlines() if line.strip()]
    items = [it for it in items if (it.get("text") or it.get("prompt"))]
    if len(items) < 2:
        raise ValueError(f"{path.name}: at least two non-empty items are needed")
    return items[:MAX_ITEMS]


def as_math(items: list[dict], where: str = "math set") -> list[dict]:
    """A user's math set: each answer's final number ("#### 18" as GSM8K writes it, else the last
    number in the answer) becomes the reference the model's last number is compared with. An
    answer without a number keeps the non-math rules (letter, normalised text); plain text items
    (no answers) are scored by next-token accuracy."""
    out = []
    for it in items:
        it = dict(it)
        if "answer" in it and not it.get("choice"):
            ans = str(it["answer"])
            try:
                final = reference_number(ans) if "####" in ans else final_number(ans)
            except ValueError as e:
                raise ValueError(f"{where}: {e}") from None
            if final is not None:
                it["final"] = final
        out.append(it)
    return out


def kind_of(items: list[dict]) -> str:
    """ "answers" when every item has a reference answer (scored by generation), else "text"
    (scored by next-token accuracy)."""
    return "answers" if all("answer" in it for it in items) else "text"


# ---------------------------------------------------------------------------- from the hub
def hub_allowed() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() not in ("1", "true", "yes", "on")


def load_hub_items(spec: str, n: int = MAX_ITEMS) -> list[dict]:
    """Any dataset on the hub as items, named "owner/name[:config][@split]" (split "test" unless
    named): rows with prompt/question + answer (optionally choices), or text, as in a user's file.
    Raises RuntimeError when the hub is off or `datasets` is missing, ValueError on other rows."""
    spec = (spec or "").strip()
    if not re.fullmatch(r"[\w.-]+(/[\w.-]+)?(:[\w.-]+)?(@[\w.\[\]:%-]+)?", spec):
        raise ValueError(f"{spec[:60]!r} is not a dataset id (owner/name, optionally :config and @split)")
    if not hub_allowed():
        raise RuntimeError(
            f"the hub is off here (HF_HUB_OFFLINE=1), so {spec} cannot be loaded: upload the data as a file instead"
        )
    try:
        import datasets
    except ImportError as e:
        raise RuntimeError("loading a dataset id needs the `datasets` package (pip install datasets)") from e
    spec, _, split = spec.partition("@")
    repo, _, config = spec.partition(":")
    try:
        ds = datasets.load_dataset(repo, config or None, split=split or "test")
    except Exception as e:  # noqa: BLE001 - the library's reason, said in one line
        raise RuntimeError(f"could not load {repo}: {type(e).__name__}: {str(e)[:200]}") from None
    rows = ds.select(range(min(n, len(ds))))
    items = [_item(dict(r), f"{repo} row {i}") for i, r in enumerate(rows, 1)]
    if len(items) < 2:
        raise ValueError(f"{repo}: at least two items are needed")
    return items


def load_hub_nonmath(specs, n: int = 500) -> list[dict]:
    """RACE and MMLU (the paper's non-math sets) through `datasets`, imported only here; `specs`
    like ["ehovy/race:all", "cais/mmlu:all"]. Raises RuntimeError saying what is missing."""
    if not hub_allowed():
        raise RuntimeError("the hub is off (HF_HUB_OFFLINE=1)")
    try:
        import datasets
    except ImportError as e:
        raise RuntimeError("loading RACE / MMLU needs the `datasets` package (pip install datasets)") from e
    items: list[dict] = []
    per = max(1, n // max(1, len(specs)))
    for spec in specs:
        repo, _, config = spec.partition(":")
        if "race" not in repo and "mmlu" not in repo:
            raise RuntimeError(f"no reader for {repo}")
        ds = datasets.load_dataset(repo, config or "all", split="test")
        ds = ds.shuffle(seed=0).select(range(min(per, len(ds))))
        items += race_items(ds, repo) if "race" in repo else mmlu_items(ds, repo)
    return items


def race_items(rows, where: str = "RACE") -> list[dict]:
    """RACE rows (article, question, options, answer letter) as multiple-choice items."""
    return [
        multiple_choice(f"{r['article'].strip()}\n\n{r['question'].strip()}", list(r["options"]), r["answer"], where)
        for r in rows
    ]


def mmlu_items(rows, where: str = "MMLU") -> list[dict]:
    """MMLU rows (question, choices, answer index) as multiple-choice items."""
    return [multiple_choice(r["question"], list(r["choices"]), r["answer"], where) for r in rows]
