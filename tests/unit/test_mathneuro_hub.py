"""The Math neurons tab in hub mode on a stand-in of meta-llama/Llama-3.2-1B-Instruct (real
LlamaForCausalLM with a tied head and bf16 weights, Llama-3 byte-level BPE, a Llama-3 header chat
template) in an offline HF cache: GSM8K scored by the final number, prompts in the chat template,
the user's non-math file, identification, prune / scale evaluation and the CLI job, at the service
level, through the tab's handlers and as a process."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
import torch

from backend.mathneuro import chat, sets, sources
from tests.conftest import ROOT
from tests.helpers.standins import REVISION, build_cache, cache_env, digest, repo_folder, use_cache
from tests.helpers.standins import math as standin

torch.set_num_threads(1)
NEW_TOKENS = 8  # generated per answer here: the stand-in's answers are noise, the rules are not
MC = [
    ("Which planet is known as the red planet?", ["Venus", "Mars", "Jupiter", "Saturn"], 1),
    ("Which language is spoken in Brazil?", ["Spanish", "French", "Portuguese", "Italian"], "C"),
    ("What do bees make?", ["Honey", "Silk", "Paper", "Milk"], "Honey"),
    ("Who wrote Hamlet?", ["Dickens", "Austen", "Shakespeare", "Tolstoy"], 2),
]


# ----------------------------------------------------------------------------- rules (no model)
def test_gsm8k_reference_and_final_number_rule():
    test = sources.read_gsm8k("test")
    assert len(test) == 1319 and len(sources.read_gsm8k("train", 5)) == 5
    assert test[0]["final"] == "18" and test[0]["answer"].endswith("#### 18")
    assert all(it["final"] == it["answer"].rsplit("####", 1)[1].strip().replace(",", "") for it in test)
    assert sources.reference_number("x\n#### 1,234") == "1234"
    with pytest.raises(ValueError, match="####"):
        sources.reference_number("no marker")
    cases = {
        "She makes 9 * 2 = $18 every day.": "18",
        "The answer is 1,234.": "1234",
        "-3 degrees, then 4.5": "4.5",
        "first 7, #### 42 and then 9": "42",
        "no number here": None,
        "It costs $0.50.": "0.50",
        "Step 1: 3 + 4 = 7\nStep 2: 7 * 2 = 14\nSo 14 apples.": "14",
    }
    for text, want in cases.items():
        assert sources.final_number(text) == want, text
    item = {"final": "18"}
    assert chat.correct(item, "So she makes $18.00 a day", "math")
    assert chat.correct(item, "#### 18", "math")
    assert not chat.correct(item, "18 eggs, she sells 9", "math")  # the LAST number counts
    assert not chat.correct(item, "", "math")


def test_nonmath_files_of_every_kind(tmp_path):
    js = tmp_path / "mc.jsonl"
    js.write_text("\n".join(json.dumps({"question": q, "choices": c, "answer": a}) for q, c, a in MC) + "\n")
    items = sources.read_items(js)
    assert [it["answer"] for it in items] == ["B", "C", "A", "C"] and all(it["choice"] for it in items)
    assert "B. Mars" in items[0]["prompt"] and sources.kind_of(items) == "answers"
    assert chat.correct(items[0], "B) Mars", "nonmath") and chat.correct(items[0], "The answer is B.", "nonmath")
    assert not chat.correct(items[0], "A", "nonmath")

    csv_ = tmp_path / "qa.csv"
    csv_.write_text('prompt,answer\n"Where is Paris?",France\n"What do cows drink?",Water\n')
    qa = sources.read_items(csv_)
    assert qa == [
        {"prompt": "Where is Paris?", "answer": "France"},
        {"prompt": "What do cows drink?", "answer": "Water"},
    ]
    assert chat.correct(qa[0], "France, in Europe.", "nonmath") and not chat.correct(qa[0], "Spain", "nonmath")

    txt = tmp_path / "story.txt"
    txt.write_text("The cat sat on the mat.\n\nIt was a sunny day.\n")
    assert sources.read_items(txt) == [{"text": "The cat sat on the mat."}, {"text": "It was a sunny day."}]
    assert sources.kind_of(sources.read_items(txt)) == "text"

    for body, suffix, match in (
        ('{"question": "a"', ".jsonl", "line 1: not JSON"),
        ('{"foo": 1}\n{"foo": 2}\n', ".jsonl", "prompt/question"),
        ("only one line\n", ".txt", "at least two"),
        ('{"question": "q", "choices": ["a", "b"], "answer": "z"}\n' * 2, ".jsonl", "not an option"),
    ):
        bad = tmp_path / f"bad{suffix}"
        bad.write_text(body)
        with pytest.raises(ValueError, match=match):
            sources.read_items(bad)


def test_hub_nonmath_is_refused_offline_and_race_mmlu_rows_read(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(RuntimeError, match="HF_HUB_OFFLINE"):
        sources.load_hub_nonmath(["ehovy/race:all", "cais/mmlu:all"])
    # rows in the datasets' own schemas
    race = sources.race_items(
        [
            {
                "article": "Tom went to the zoo. He saw a lion.",
                "question": "What did Tom see?",
                "options": ["a cat", "a lion", "a dog", "a bird"],
                "answer": "B",
            }
        ]
    )
    mmlu = sources.mmlu_items(
        [
            {
                "question": "The capital of France is",
                "choices": ["Rome", "Paris", "Oslo", "Lima"],
                "answer": 1,
                "subject": "geography",
            }
        ]
    )
    for it in race + mmlu:
        assert it["answer"] == "B" and it["choice"] and "\nB. " in it["prompt"]
    assert race[0]["prompt"].startswith("Tom went to the zoo.") and "What did Tom see?" in race[0]["prompt"]


# ------------------------------------------------------------------------- the stand-in model
@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    from backend.mathneuro import service

    cache = build_cache(tmp_path_factory.mktemp("hf") / "hub", standin.REPOS)
    with pytest.MonkeyPatch.context() as mp:
        use_cache(mp, cache)
        mp.delenv(sets.NONMATH_ENV, raising=False)
        mp.setattr(service, "MATH_NEW_TOKENS", NEW_TOKENS)
        mp.setattr(service, "NONMATH_NEW_TOKENS", NEW_TOKENS)
        yield cache


@pytest.fixture(scope="module")
def svc(hub):
    from backend.mathneuro import service

    return service


@pytest.fixture(scope="module")
def b(svc):
    return svc.bench("hub")


@pytest.fixture(scope="module")
def mc_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("nonmath") / "quiz.jsonl"
    rows = [{"question": q, "choices": c, "answer": a} for q, c, a in MC] * 5  # 20: 10 identify, 10 score
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_standin_is_the_real_class_and_deterministic(hub, b, tmp_path):
    from transformers import LlamaForCausalLM

    from backend.mathneuro import core

    m, tok = b.model, b.tok
    assert isinstance(m, LlamaForCausalLM) and m.dtype == torch.bfloat16 and m.config.tie_word_embeddings
    assert core.tied_head(m) is m.lm_head and "lm_head" not in core.linear_layers(m)
    vocab = tok.get_vocab()
    assert {"Ġthe", "Ġhow", "<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>"} <= set(vocab)
    assert tok.pad_token is None and tok.eos_token == "<|eot_id|>"  # as the real tokenizer
    text = tok.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True)
    assert text.startswith("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n")
    assert text.endswith(
        "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    assert m.generation_config.do_sample and len(m.generation_config.eos_token_id) == 3
    snap = repo_folder(hub, standin.HUB_ID) / "snapshots" / REVISION
    again = build_cache(tmp_path / "again", standin.REPOS)
    assert digest(repo_folder(again, standin.HUB_ID) / "snapshots" / REVISION) == digest(snap)


def test_prompts_use_the_chat_template_with_one_bos(b):
    item = sources.read_gsm8k("test", 1)[0]
    bos = b.tok.convert_tokens_to_ids("<|begin_of_text|>")
    for ids in (chat.prompt_ids(b.tok, item, "math"), chat.sample_ids(b.tok, item, "math")):
        assert ids[0] == bos and ids.count(bos) == 1
    text = b.tok.decode(chat.prompt_ids(b.tok, item, "math"))
    assert item["prompt"] in text and text.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")
    sample = b.tok.decode(chat.sample_ids(b.tok, item, "math"))
    assert sample.rstrip().endswith("#### 18<|eot_id|>")


def test_batched_left_padded_generation_is_each_prompt_alone(b):
    import copy

    m = copy.deepcopy(b.model).float()  # float32: batch and single differ only by rounding
    items = sources.read_gsm8k("test", 3)
    prompts = [chat.prompt_ids(b.tok, it, "math") for it in items]
    assert len({len(p) for p in prompts}) == 3  # padding is exercised
    together = chat.generate(m, b.tok, prompts, NEW_TOKENS)
    alone = [chat.generate(m, b.tok, [p], NEW_TOKENS)[0] for p in prompts]
    assert together == alone and any(together)
    # the checkpoint's generation config samples; the tab overrides it: greedy, repeatable
    assert m.generation_config.do_sample and chat.generate(m, b.tok, prompts, NEW_TOKENS) == together


def test_offline_default_nonmath_is_the_shipped_captions_labelled_as_such(svc, b, tmp_path, monkeypatch):
    from backend.mathneuro import core

    info = svc.describe(b)
    assert "COCO 2014 captions" in info["nonmath"] and "HF_HUB_OFFLINE" in info["nonmath"]
    assert "next-token" in info["nonmath_rule"] and info["nonmath_error"] is None
    assert "GSM8K test" in info["math"] and "####" in info["math_rule"] and "chat template" in info["template"]
    caps = sources.read_captions()
    assert len(caps) == 400 and caps[0] == {"text": "a person standing close to an elephant"}
    s = svc.Setting("mathneuro", 0.05, 8, 0.0)
    ref = core.identify(
        b.model,
        [chat.sample_ids(b.tok, it, "math") for it in sources.read_gsm8k("train", 8)],
        [b.tok(it["text"])["input_ids"] for it in caps[:8]],
        0.05,
        tokenizer=b.tok,
    )
    masks = b.masks(s)
    assert all(torch.equal(masks[n], ref[n]) for n in ref)
    r = b.baseline(n_eval=4)
    held = b.nonmath_set()["items"][:4]
    hits = total = 0
    with torch.no_grad():  # next-token accuracy, one unpadded caption at a time
        for it in held:
            ids = torch.tensor([b.tok(it["text"])["input_ids"]])
            hits += int((b.model(ids).logits[0, :-1].argmax(-1) == ids[0, 1:]).sum())
            total += ids.shape[1] - 1
    assert 0.0 <= r["math"] <= 1.0 and r["nonmath"] == pytest.approx(hits / total)
    # no captions either: no set, and the reason; a deployment's broken file is an error, not skipped
    monkeypatch.setattr(sources, "CAPTIONS", tmp_path / "missing.csv")
    data = {"nonmath_sets": {}}
    sets.load_default_nonmath(b.preset, data)
    assert not data["nonmath_sets"] and "captions are missing" in data["nonmath_error"]
    bad = tmp_path / "mine.txt"
    bad.write_text("just one line\n")
    monkeypatch.setenv(sets.NONMATH_ENV, str(bad))
    data = {"nonmath_sets": {}}
    sets.load_default_nonmath(b.preset, data)
    assert "at least two" in data["nonmath_error"]
    with pytest.raises(ValueError, match="no longer loaded"):
        b.masks(s.but(nonmath="file:0000"))


def test_identify_prune_scale_on_gsm8k_and_a_user_file(svc, b, mc_file):
    from backend.mathneuro import core

    key = svc.register_data("hub", "nonmath", mc_file)
    assert key == svc.register_data("hub", "nonmath", mc_file)  # same content, same id
    info = svc.describe(b, key)
    assert "quiz.jsonl (20 items): 10 identify, 10 score" in info["nonmath"] and "letter" in info["nonmath_rule"]
    s = svc.Setting("mathneuro", 0.05, 8, 0.0, nonmath=key)
    masks = b.masks(s)
    assert "lm_head.weight" not in masks and "model.embed_tokens.weight" not in masks  # tied: skipped
    assert set(masks) == {f"{n}.weight" for n in core.linear_layers(b.model)}
    # the service's masks are MathNeuro on the chat-formatted samples, counted int(K*N) per matrix
    ids_m = [chat.sample_ids(b.tok, it, "math") for it in sources.read_gsm8k("train", 8)]
    ids_n = [chat.sample_ids(b.tok, it, "nonmath") for it in b.nonmath_set(key)["ident"][:8]]
    ref = core.identify(b.model, ids_m, ids_n, 0.05, tokenizer=b.tok)
    assert all(torch.equal(masks[n], ref[n]) for n in ref) and core.count(masks) > 0
    snap = {k: v.clone() for k, v in b.model.state_dict().items()}
    base = b.baseline(n_eval=6, nonmath=key)
    pruned = b.evaluate(s, n_eval=6)
    scaled = b.evaluate(s.but(factor=1.1), n_eval=6)
    for r in (base, pruned, scaled):
        assert 0.0 <= r["math"] <= 1.0 and 0.0 <= r["nonmath"] <= 1.0
    assert pruned["n_params"] == scaled["n_params"] == core.count(masks)
    figure = b.prune_all(0.05, 8, n_eval=4, nonmath=key)
    assert set(figure) == set(core.METHODS)
    assert figure["random"]["n_params"] == figure["mathneuro"]["n_params"]
    rows = b.samples(s, k=4)
    assert [r["kind"] for r in rows] == ["math", "math", "non-math", "non-math"]
    held = sources.read_items(mc_file)[10:]  # the first half identifies, the rest scores
    assert rows[0]["answer"] == "18" and [r["answer"] for r in rows[2:]] == [it["answer"] for it in held[:2]]
    for r in rows:
        want = chat.correct(
            {"final": r["answer"]} if r["kind"] == "math" else {"answer": r["answer"], "choice": True},
            r["before"],
            "math" if r["kind"] == "math" else "nonmath",
        )
        assert r["ok_before"] == want
    out = b.answer("Tom has 23 pens and finds 45 more. How many pens does he have now?", s)
    assert isinstance(out["before"], str) and isinstance(out["after"], str)
    cons = b.consistency(s, sizes=(1, 8), n_subsets=2)
    assert cons["8"]["mean"] == pytest.approx(1.0)
    assert all(torch.equal(v, snap[k]) for k, v in b.model.state_dict().items())  # restored bit-exactly


def test_tab_handlers_in_hub_mode(svc, b, mc_file):
    import gradio as gr

    from components.math_neurons import handlers as H

    live, ask = functools.partial(H.live, "hub"), functools.partial(H.ask, "hub")
    visitor = SimpleNamespace(session_hash="test-math-session")  # a set is kept for a session only
    name_nonmath = functools.partial(H.name_data("hub", "nonmath", "file"), request=visitor)
    with pytest.raises(gr.Error, match="name it again"):
        live("MathNeuro", 5, 0.0, 8, "file:0000")
    with pytest.raises(gr.Error, match="Could not read"):
        bad = mc_file.parent / "bad.jsonl"
        bad.write_text('{"foo": 1}\n{"foo": 2}\n')
        name_nonmath(str(bad))
    key, card = name_nonmath(str(mc_file))
    assert key.startswith("file:") and "quiz.jsonl" in card and "GSM8K" in card
    html, fig, rows, plot, shown = live("MathNeuro", 5, 0.0, 8, key)
    assert "MathNeuro set pruned" in html and "K = 5 %" in html and len(rows) == 6
    assert rows[0][0] == "math" and rows[0][2] == "18" and rows[0][3].endswith(("✓", "✗"))
    assert "unmodified:" in ask("What is 2 + 2?", "MathNeuro", 5, 1.1, 8, key)
    from components.math_neurons.figures import brief

    long = "She sells 16 - 3 - 4 = 9 eggs a day and makes 9 * 2 = $18 every day, so the answer is 18 dollars."
    assert brief(long, "math").startswith("18 ← …") and brief(long, "math").endswith("18 dollars.")
    assert brief("B", "non-math") == "B" and brief("", "math") == "∅"


def _sums(n: int) -> list[tuple[str, str]]:
    """Word problems with their worked answers: GSM8K's "#### n" on even rows, a bare number on odd."""
    out = []
    for i in range(n):
        a, c = 11 + 3 * i, 5 + 2 * i
        q = f"Tom has {a} apples and buys {c} more. How many apples does he have now?"
        out.append((q, f"{a} + {c} = {a + c}\n#### {a + c}" if i % 2 == 0 else str(a + c)))
    return out


def test_your_own_math_file_replaces_gsm8k_for_identification_and_scoring(svc, b, tmp_path):
    from backend.mathneuro import core

    path = tmp_path / "my-math.jsonl"
    path.write_text("\n".join(json.dumps({"question": q, "answer": a}) for q, a in _sums(20)))
    key = svc.register_data("hub", "math", path)
    assert key.startswith("file:") and key == svc.register_data("hub", "math", path)
    info = svc.describe(b, math=key)
    assert "my-math.jsonl (20 items): 10 identify, 10 score" in info["math"] and info["math_own"]
    assert info["math_rule"] == sets.RULES["final"] and "GSM8K" not in info["math"]
    held = b.math_set(key)["items"]
    assert [it["final"] for it in held[:2]] == [str(11 + 30 + 5 + 20), str(11 + 33 + 5 + 22)]
    s = svc.Setting("mathneuro", 0.05, 8, 0.0, math=key)
    ids_m = [chat.sample_ids(b.tok, it, "math") for it in b.math_set(key)["ident"][:8]]
    ids_n = [chat.sample_ids(b.tok, it, "nonmath") for it in b.nonmath_set()["ident"][:8]]
    ref = core.identify(b.model, ids_m, ids_n, 0.05, tokenizer=b.tok)
    masks = b.masks(s)
    assert all(torch.equal(masks[n], ref[n]) for n in ref)
    gsm = b.masks(s.but(math=sets.DEFAULT_MATH))  # GSM8K's samples find another set
    assert core.overlap(masks, gsm) < 0.999
    want = chat.accuracy(b.model, b.tok, held[:4], "math", NEW_TOKENS)
    assert b.baseline(n_eval=4, math=key)["math"] == pytest.approx(want)
    rows = b.samples(s, k=2)
    assert rows[0]["prompt"] == held[0]["prompt"] and rows[0]["answer"] == held[0]["final"]
    # plain math text (no answers) is scored by next-token accuracy; an answer marker without a
    # number is refused with its line
    txt = tmp_path / "proofs.txt"
    txt.write_text("\n".join(f"Let x = {i}. Then 2x + 1 = {2 * i + 1}, an odd number." for i in range(6)))
    tkey = svc.register_data("hub", "math", txt)
    assert svc.describe(b, math=tkey)["math_rule"] == sets.RULES["text"]
    items = b.math_set(tkey)["items"]
    assert b.baseline(n_eval=None, math=tkey)["math"] == pytest.approx(chat.next_token_accuracy(b.model, b.tok, items))
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        json.dumps({"question": "q", "answer": "#### none"}) + "\n" + json.dumps({"question": "r", "answer": "2"})
    )
    with pytest.raises(ValueError, match="no number after '####'"):
        svc.register_data("hub", "math", bad)
    with pytest.raises(ValueError, match="no longer loaded"):
        b.baseline(math="file:0000")


def test_a_dataset_id_is_refused_offline_and_read_through_datasets(svc, b, monkeypatch):
    import datasets
    import gradio as gr

    from components.math_neurons import handlers as H

    with pytest.raises(RuntimeError, match="the hub is off here"):
        svc.register_data("hub", "math", dataset="openai/gsm8k:main@test")
    name_dataset = functools.partial(
        H.name_data("hub", "math", "dataset"), request=SimpleNamespace(session_hash="test-math-session")
    )
    with pytest.raises(gr.Error, match="Could not read that math dataset: the hub is off"):
        name_dataset("openai/gsm8k:main@test")
    with pytest.raises(gr.Error, match="Type a dataset id"):
        name_dataset("  ")
    with pytest.raises(ValueError, match="not a dataset id"):
        svc.register_data("hub", "math", dataset="a b c")
    monkeypatch.delenv("HF_HUB_OFFLINE")
    asked = []
    rows = [{"question": q, "answer": a} for q, a in _sums(6)]

    def load_dataset(repo, config=None, split=None):
        asked.append((repo, config, split))
        return datasets.Dataset.from_list(rows)

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    key, card = name_dataset("openai/gsm8k:main@train")
    assert asked == [("openai/gsm8k", "main", "train")] and key.startswith("dataset:")
    assert "openai/gsm8k:main@train (6 items)" in card and "reference&#x27;s number" in card
    assert [it["final"] for it in b.math_set(key)["items"]] == [str(11 + 3 * i + 5 + 2 * i) for i in range(6)]


def test_cli_reads_the_files_first_and_runs_offline(hub, b, mc_file, tmp_path, capsys):
    from backend.mathneuro import core
    from backend.precompute import mathneuro as job

    env = {**os.environ, **cache_env(hub), "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    env.pop("WORKBENCH_CHECK_WEIGHTS", None)
    math_file = tmp_path / "gsm.jsonl"
    math_file.write_text("".join(line for _, line in zip(range(6), (sources.GSM8K_DIR / "train.jsonl").open())))
    cmd = [sys.executable, "-m", "backend.precompute.mathneuro", "--cpu", "--source", "hub", "--chunk", "4"]
    bad = tmp_path / "bad.txt"
    bad.write_text("one line only\n")
    t = time.perf_counter()
    # a bad file is refused while parsing the arguments, before the model or any hub is asked for
    from backend.mathneuro import service

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(service, "bench", lambda *a, **k: pytest.fail("the model was asked for before the files"))
        with pytest.raises(SystemExit):
            job.main(
                [
                    "--out",
                    str(tmp_path / "x"),
                    "--cpu",
                    "--source",
                    "hub",
                    "--math",
                    str(math_file),
                    "--nonmath",
                    str(bad),
                ]
            )
    assert "at least two" in capsys.readouterr().err
    out = subprocess.run(
        cmd + ["--out", str(tmp_path / "norms"), "--math", str(math_file), "--nonmath", str(mc_file)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    masks = job.load_masks(b.model, tmp_path / "norms", 0.05)
    ids_m = [chat.sample_ids(b.tok, it, "math") for it in sources.read_items(math_file)]
    ids_n = [chat.sample_ids(b.tok, it, "nonmath") for it in sources.read_items(mc_file)]
    ref = core.identify(b.model, ids_m, ids_n, 0.05, tokenizer=b.tok)
    assert core.overlap(masks, ref) >= 0.999 and core.count(ref) > 0
    assert time.perf_counter() - t < 240
