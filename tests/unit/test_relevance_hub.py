"""The Relevance tab in hub mode on stand-ins of state-spaces/mamba-130m-hf and mamba-1.4b-hf (real
MambaForCausalLM, conv bias on, GPT-NeoX byte-level BPE) in an offline HF cache: readable tokens,
word targets, both checkpoints, conservation with the conv bias, held-out sentences from a user file,
at the service level and through the tab's own handlers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.helpers.standins import REVISION, build_cache, digest, repo_folder, use_cache
from tests.helpers.standins import relevance as standin

torch.set_num_threads(1)
TEXT = "The plot was dull but the cast was brilliant."
M130, M14 = standin.HUB_130M, standin.HUB_1_4B


@pytest.fixture(scope="module")
def hub(tmp_path_factory):

    cache = build_cache(tmp_path_factory.mktemp("hf") / "hub", standin.REPOS)
    with pytest.MonkeyPatch.context() as mp:
        use_cache(mp, cache)
        yield cache


@pytest.fixture(scope="module")
def svc(hub):
    from backend.lrp import service

    return service


@pytest.fixture(scope="module")
def m130(svc):
    return svc.load_text("hub")


def test_standins_are_the_real_classes_and_deterministic(hub, m130):
    from transformers import GPTNeoXTokenizer, MambaForCausalLM

    assert isinstance(m130.model, MambaForCausalLM) and isinstance(m130.tokenizer, GPTNeoXTokenizer)
    cfg = m130.model.config
    assert cfg.use_conv_bias and cfg.tie_word_embeddings and cfg.vocab_size > len(m130.tokenizer)
    assert m130.model.lm_head.weight.data_ptr() == m130.model.backbone.embeddings.weight.data_ptr()
    vocab = m130.tokenizer.get_vocab()
    assert "Ġwas" in vocab and vocab["<|endoftext|>"] == 0 and vocab["<|padding|>"] == 1
    # a second build (tokenizer retrained too) writes the same bytes
    snap = repo_folder(hub, M130) / "snapshots" / REVISION
    again = hub.parent / "again"
    again.mkdir()
    standin.neox_tokenizer_json.cache_clear()
    standin.REPOS[M130](again)
    assert digest(again) == digest(snap)


def test_tokens_are_readable_text_with_visible_leading_spaces(svc, m130):
    from components.relevance import figures as R

    res = svc.explain_text(m130, TEXT, ["mambalrp", "gi"])
    toks = res["tokens"]
    assert "".join(toks) == TEXT and not any("Ġ" in t for t in toks)
    assert " was" in toks and toks == [m130.tokenizer.decode([i]) for i in res["ids"]]
    assert not any(k.startswith("Ġ") for k in res["top_next"])
    heat = R.heatmap_html(res)
    assert "Ġ" not in heat and "<span class='wb-space' style='opacity:0.45'>·</span>was" in heat
    ticks = R.position_plot(res).layout.xaxis.ticktext
    assert "·was" in ticks and "Ġwas" not in ticks
    jpath, ppath = R.export_text(res)
    data = json.loads(Path(jpath).read_text())
    assert data["tokens"] == toks and "·was" in data["tokens_shown"]
    assert Path(ppath).read_bytes()[:4] == b"\x89PNG"
    # characters split into byte tokens read as the character and its part, not as 'Ã' '©'
    from backend.lrp.tokens import token_texts

    ids = m130.tokenizer("a café 😀", add_special_tokens=False)["input_ids"]
    texts = token_texts(m130.tokenizer, ids)
    assert "😀(1/4)" in texts and "😀(4/4)" in texts and not any("Ã" in t or "ð" in t for t in texts)


def test_word_targets_resolve_to_the_models_tokens(svc, m130):
    tok = m130.tokenizer
    space_was = tok(" was", add_special_tokens=False)["input_ids"]
    assert len(space_was) == 1
    for typed in ("was", " was", "Ġwas"):
        res = svc.explain_text(m130, TEXT, ["mambalrp"], target=typed)
        assert res["target_id"] == space_was[0] and res["target"] == " was" and res["target_note"] == ""
    parts = tok(" brilliant", add_special_tokens=False)["input_ids"]
    assert len(parts) > 1
    res = svc.explain_text(m130, TEXT, ["mambalrp"], target="brilliant")
    assert res["target_id"] == parts[0]
    assert f"{len(parts)} tokens" in res["target_note"] and "first" in res["target_note"]
    from backend.lrp.tokens import WordError, resolve_word

    # a word that is one token only without the leading space: that token, and the note says so
    assert len(tok(" Hannah", add_special_tokens=False)["input_ids"]) > 1
    tid, text, note = resolve_word(tok, "Hannah")
    assert [tid] == tok("Hannah", add_special_tokens=False)["input_ids"] and text == "Hannah"
    assert "without a leading space" in note

    with pytest.raises(WordError, match="Type a target"):
        resolve_word(tok, "  ")


def test_zoo_targets_unchanged():
    from transformers import AutoTokenizer

    from backend.core.presets import ZOO_ROOT
    from backend.lrp.tokens import WordError, resolve_word

    tok = AutoTokenizer.from_pretrained(str(ZOO_ROOT / "mamba-sentiment"))
    for word in ("positive", "negative", "sentiment:", "brilliant"):
        tid, text, note = resolve_word(tok, word)
        assert tid == tok.convert_tokens_to_ids(word) and text == word and note == ""
    with pytest.raises(WordError, match="not a token"):
        resolve_word(tok, "zebra")


def test_both_checkpoints_are_selectable(svc, m130):
    from backend.lrp.models import text_presets

    # the source's default first; the zoo organism and the paper's checkpoints are listed in both modes
    assert [p.path_or_id for p in text_presets("hub")] == [M130, M14, "mamba-sentiment"]
    assert [p.path_or_id for p in text_presets("zoo")] == ["mamba-sentiment", M130, M14]
    m14 = svc.load_text("hub", M14)
    assert m14.model_id != m130.model_id
    assert m14.model.config.hidden_size != m130.model.config.hidden_size
    a = svc.explain_text(m130, TEXT, ["mambalrp"], target="was")
    b = svc.explain_text(m14, TEXT, ["mambalrp"], target="was")
    assert a["model"] != b["model"] and abs(a["logit"] - b["logit"]) > 1e-6
    # anything else is the user's own model, read from the hub (here: offline, not cached)
    with pytest.raises(svc.InputError, match="not reachable and it is not in the local cache"):
        svc.load_text("hub", "someone/other-model")


def test_conservation_is_reported_honestly_with_the_conv_bias_on(svc, m130):
    import copy

    from backend.lrp import attribute_text
    from components.relevance import figures as R

    res = svc.explain_text(m130, TEXT, ["mambalrp"], target="was")
    ids = torch.tensor([res["ids"]])
    with torch.no_grad():
        f = float(m130.model(ids).logits[0, -1, res["target_id"]])
    assert res["logit"] == pytest.approx(f, abs=1e-4)
    s = res["sum_relevance"]["mambalrp"]
    assert s == pytest.approx(float(np.sum(res["relevance"]["mambalrp"])), abs=1e-6)
    assert res["conv_bias"] and abs(s - f) > 1e-4 * abs(f)  # the biases take their share
    assert "biases absorb a share" in R.conservation_md(res)
    # the same model with the conv biases zeroed conserves exactly: the gap was the biases'
    model = copy.deepcopy(m130.model)
    with torch.no_grad():
        for layer in model.backbone.layers:
            layer.mixer.conv1d.bias.zero_()
    r, score = attribute_text(model, ids, target=res["target_id"], return_score=True)
    assert float(r.sum()) == pytest.approx(float(score[0]), rel=1e-4, abs=1e-5)
    assert not svc.conv_bias(model)


LABELLED = (
    "sentence\tlabel\nit was a good movie .\t1\nit was a bad movie , and dull .\t0\n"
    "the cast was good and the music was good\t1\nworse than bad , the plot was long\t0\n"
    "a good day\t1\n"
)
PLAIN = "John has 5 apples and gives 2 away.\nThe train was late again.\n\nShe bought a new book.\n"


def test_heldout_on_a_user_file_with_and_without_labels(svc, m130, tmp_path):
    from backend.lrp import heldout
    from backend.lrp import sentences as S

    items = S.parse_sentences(LABELLED.encode(), "dev.tsv")
    assert [it["label"] for it in items] == ["1", "0", "1", "0", "1"]
    res = heldout.heldout_sentences(m130, items, ["mambalrp", "gi"], target="label", label_words="0=bad, 1=good")
    tok = m130.tokenizer
    assert res["label_tokens"] == {"0": " bad", "1": " good"} and res["n"] == 5
    assert res["targets_used"] == {" good": 3, " bad": 2}
    r = res["results"]
    assert set(r) == {"mambalrp", "gi", "random"} and r["mambalrp"]["n"] == 5
    assert all(np.isfinite(v["delta_af"]) and v["precision_at_k"] is None for v in r.values())
    # conservation pairs: MambaLRP tracks the logit far better than Gradient×Input
    assert r["mambalrp"]["conservation_median_rel_err"] < 0.2 < r["gi"]["conservation_median_rel_err"]
    # default label words (0/1 → negative/positive) split here: the note says which token is used
    res = heldout.heldout_sentences(m130, items, ["mambalrp"], target="label")
    assert any("tokens for this model" in n for n in res["notes"])
    assert res["label_tokens"]["1"] == tok.decode(tok(" positive", add_special_tokens=False)["input_ids"][:1])
    # a plain text file: one sentence per line, the model's own prediction as the target
    path = tmp_path / "mine.txt"
    path.write_text(PLAIN)
    plain = S.read_sentences(path)
    assert len(plain) == 3 and all(it["label"] is None for it in plain)
    res = heldout.heldout_sentences(m130, plain, ["mambalrp"], target="predicted", suffix=" Answer:", n=2)
    assert res["n"] == 2 and sum(res["targets_used"].values()) == 2 and res["suffix"] == " Answer:"
    with pytest.raises(svc.InputError, match="no labels"):
        heldout.heldout_sentences(m130, plain, ["mambalrp"], target="label")
    with pytest.raises(svc.InputError, match="same token"):
        heldout.heldout_sentences(m130, items, ["mambalrp"], target="label", label_words="0=good, 1=goodness")


def test_sentence_files_parse_and_refuse_clearly():
    from backend.lrp import sentences as S

    jl = '{"text": "a fine day", "label": 1}\n{"sentence": "a bad day", "label": "0"}\n'
    assert S.parse_sentences(jl, "x.jsonl") == [
        {"text": "a fine day", "label": "1"},
        {"text": "a bad day", "label": "0"},
    ]
    assert S.parse_sentences('text,label\n"one, two",pos\n', "x.csv") == [{"text": "one, two", "label": "pos"}]
    assert S.parse_label_words("", ["pos", "neg"]) == {"pos": "pos", "neg": "neg"}
    assert S.parse_label_words("", ["0", "1"]) == {"0": "negative", "1": "positive"}
    for raw, name, msg in (
        ("\n  \n", "x.txt", "no sentences"),
        ("{bad", "x.jsonl", "not valid JSON"),
        ('{"x": 1}', "x.jsonl", "no text field"),
        (b"\xff\xfe\x00", "x.txt", "UTF-8"),
    ):
        with pytest.raises(S.DataError, match=msg):
            S.parse_sentences(raw, name)
    with pytest.raises(S.DataError, match="label=word"):
        S.parse_label_words("0:bad", ["0"])
    with pytest.raises(S.DataError, match="(?i)offline|datasets"):
        S.load_sst2()


def _handlers(source: str) -> tuple[dict, dict]:
    import gradio as gr

    from components.relevance import layout as R
    from components.common import TabContext

    with gr.Blocks() as demo:
        with gr.Tabs() as tabs:
            with gr.Tab("Relevance") as tab:  # as app.build_app hands it over
                R.build(TabContext(tabs, source, tab=tab, tab_id="relevance"))
    fns = {f.api_name: f.fn for f in demo.fns.values() if f.api_name}
    comps = {b.elem_id: b for b in demo.blocks.values() if getattr(b, "elem_id", None)}
    comps["texts"] = " ".join(str(b.value) for b in demo.blocks.values() if isinstance(b, (gr.Markdown, gr.HTML)))
    return fns, comps


def test_tab_handlers_in_hub_mode(hub, tmp_path):
    import gradio as gr

    fns, comps = _handlers("hub")
    model = comps["rel-model"]
    assert [c[1] for c in model.choices] == [M130, M14, "mamba-sentiment"] and model.allow_custom_value
    # a deep link carries the checkpoint, or a user's own model (components.links.deep_links takes any Dropdown
    # with an elem_id; the picker takes typed values, checked when the tab resolves them)
    from components.links.deep_links import coerce

    assert coerce(model, M14) == M14
    assert coerce(model, "someone/other-model") == "someone/other-model"
    assert comps["rel-held-data"].value == "captions" and not comps["rel-held-file"].parent.visible
    assert "Not a paper checkpoint" in comps["rel-image-hub-note"].value
    assert "selected hub checkpoint" in comps["texts"] and "faint · marks" in comps["texts"]
    heat, plot, cons, jfile, pfile, res = fns["explain_text"](
        TEXT, ["mambalrp", "gi"], ["norm", "silu", "ssm", "gate"], "brilliant", True, M14
    )
    assert res["model"].endswith(f"{M14}@main") and "·</span>was" in heat and "Ġ" not in heat
    assert "tokens for this model" in cons and "biases absorb" in cons
    path = tmp_path / "dev.tsv"
    path.write_text(LABELLED)
    table, curves, scatter, note, res = fns["heldout_eval"](
        ["mambalrp", "gi"], 20, "file", str(path), "label", "0=bad, 1=good", "", M130
    )
    assert {row[0] for row in table} == {"MambaLRP", "Gradient×Input", "Random"}
    assert "your sentence file" in note and "5 sentences" in note and "`·good`" in note and "`<|endoftext|>`" in note
    _, _, _, note, res = fns["heldout_eval"](["mambalrp", "gi"], 20, "file", str(path), "predicted", "", "", M130)
    assert "own next-token prediction" in note
    # per sentence, in the file's order: what the evaluation explained, and its heatmap on selection
    texts = [line.split("\t")[0] for line in LABELLED.splitlines()[1:]]
    recs = res["sentences"]
    assert [r["i"] for r in recs] == [1, 2, 3, 4, 5] and [r["text"] for r in recs] == texts
    assert np.mean([r["delta_af"]["mambalrp"] for r in recs]) == pytest.approx(res["results"]["mambalrp"]["delta_af"])
    from backend.lrp import service as svc
    from backend.lrp.forward import lm_forward
    from backend.lrp.methods import attribute_text
    from backend.lrp.tokens import token_text

    m = svc.load_text("hub", M130)
    for r in recs:
        ids = svc.text_ids(m, r["text"])[0][None]
        with torch.no_grad():
            pred = int(lm_forward(m.model, ids)[0, -1].argmax())
        assert r["target"] == token_text(m.tokenizer, pred)
        gi = attribute_text(m.model, ids, target=pred, method="gi")[0].numpy()
        assert np.allclose(r["relevance"]["gi"], gi, atol=1e-5) and len(r["tokens"]) == ids.shape[1]
        assert sum(r["relevance"]["mambalrp"]) == pytest.approx(r["sum_r"]["mambalrp"], rel=1e-5)
    from components.relevance.heldout import sentence_frame, sentence_html

    df, kinds = sentence_frame(res)
    assert list(df["#"]) == [1, 2, 3, 4, 5] and kinds[0] == "number" and kinds[-1] == "number"
    assert list(df.columns[4:7]) == ["ΔA^F MambaLRP", "ΔA^F Gradient×Input", "ΔA^F Random"]
    assert df["conservation error (MambaLRP)"].max() < 0.2
    view = sentence_html(res, 3)
    assert "Sentence #3" in view and "music" in view and "wb-relevance-heatmap" in view
    assert sentence_html(res, 99) == ""
    # out of the box (no upload, no hub): the shipped captions, the model's own predictions as targets
    table, _, _, note, _ = fns["heldout_eval"](["mambalrp"], 20)
    assert "COCO 2014 captions" in note and "20 sentences" in note and len(table) == 2
    with pytest.raises(gr.Error, match="no labels"):
        fns["heldout_eval"](["mambalrp"], 20, "captions", None, "label", "", "", M130)
    with pytest.raises(gr.Error, match="Upload a sentence file"):
        fns["heldout_eval"](["mambalrp"], 20, "file", None, "predicted", "", "", M130)
    with pytest.raises(gr.Error, match="(?i)offline|datasets"):
        fns["heldout_eval"](["mambalrp"], 20, "sst2", None, "predicted", "", "", M130)
    heat, plot, tops = fns["explain_longrange"](comps["rel-long-text"].value, ["mambalrp"], M130)
    assert tops["top_tokens"]["mambalrp"] and "Ġ" not in heat


def test_heldout_attribution_chunks_give_the_same_numbers(m130, monkeypatch):
    from backend.lrp import evaluate as ev
    from backend.lrp import faithfulness as fa

    ids = torch.randint(5, 3000, (3, 7), generator=torch.Generator().manual_seed(0))
    groups = [(ids, torch.tensor([438, 438, 660]), list(range(6))), (ids[:2, :5], None, list(range(4)))]
    whole, used = ev.sentences_eval(m130.model, groups, ["mambalrp", "gi"], neutral_id=0)
    monkeypatch.setattr(fa, "rows_per_pass", lambda *a, **k: 1)
    parts, used1 = ev.sentences_eval(m130.model, groups, ["mambalrp", "gi"], neutral_id=0)
    assert used == used1 and used[:3] == [438, 438, 660] and len(used) == 5
    for m in ("mambalrp", "gi"):
        np.testing.assert_allclose(whole[m]["sum_r"], parts[m]["sum_r"], atol=1e-5)
        np.testing.assert_allclose(whole[m]["logit"], parts[m]["logit"], atol=1e-5)
        assert whole[m]["delta_af"] == pytest.approx(parts[m]["delta_af"], abs=1e-5)
