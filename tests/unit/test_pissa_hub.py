"""The Adapters tab in hub mode on stand-ins of meta-llama/Llama-2-7b-hf (float16) and
mistralai/Mistral-7B-v0.1 (bfloat16) in an offline HF cache: the layer analysis, the error table,
the PiSSA → LoRA conversion and a short race, through the tab's own handlers, exports included."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from tests.helpers.standins import REVISION, build_cache, digest, repo_folder, use_cache
from tests.helpers.standins import adapters as standin

torch.set_num_threads(1)
LLAMA, MISTRAL = standin.LLAMA2, standin.MISTRAL


def no_progress(*_a, **_k):
    return None


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    from backend.core.cache import ByteLRUCache
    from backend.pissa import service

    cache = build_cache(tmp_path_factory.mktemp("hf") / "hub", standin.REPOS)
    with pytest.MonkeyPatch.context() as mp:
        use_cache(mp, cache)
        mp.setattr(service, "RESULTS", ByteLRUCache(8 * 2**20, name="pissa-hub-test"))
        yield cache


@pytest.fixture(scope="module")
def ui(hub):
    from components.adapters import layout as adapters

    return adapters


def test_standins_are_the_real_classes_dtypes_and_tokenizers(hub, tmp_path):
    from transformers import AutoTokenizer, LlamaForCausalLM, MistralForCausalLM

    from backend.pissa import service

    llama, mistral = service.get_model(LLAMA), service.get_model(MISTRAL)
    assert type(llama) is LlamaForCausalLM and type(mistral) is MistralForCausalLM
    # the checkpoints' own dtypes arrive as saved: Llama-2-7b-hf float16, Mistral-7B-v0.1 bfloat16
    assert {p.dtype for p in llama.parameters()} == {torch.float16}
    assert {p.dtype for p in mistral.parameters()} == {torch.bfloat16}
    assert mistral.config.num_key_value_heads * 4 == mistral.config.num_attention_heads
    assert not llama.config.tie_word_embeddings and not mistral.config.tie_word_embeddings
    for key in (LLAMA, MISTRAL):
        tok = AutoTokenizer.from_pretrained(key)
        vocab = tok.get_vocab()
        assert [vocab[s] for s in ("<unk>", "<s>", "</s>", "<0x00>", "<0xFF>")] == [0, 1, 2, 3, 258]
        assert tok.pad_token is None and tok.bos_token == "<s>" and tok.eos_token == "</s>"
        ids = tok("Natalia sold clips to 48 of her friends in April, Ünïcode ☃")["input_ids"]
        pieces = tok.convert_ids_to_tokens(ids)
        assert ids[0] == 1 and "▁sold" in pieces and "▁friends" in pieces
        assert any(p.startswith("<0x") for p in pieces)  # unseen characters fall back to bytes
        assert (
            tok.decode(ids, skip_special_tokens=True) == "Natalia sold clips to 48 of her friends in April, Ünïcode ☃"
        )
        cfg = json.loads((repo_folder(hub, key) / "snapshots" / REVISION / "tokenizer_config.json").read_text())
        assert cfg["tokenizer_class"] == "LlamaTokenizer" and cfg["add_bos_token"] and not cfg["add_eos_token"]
    # building is deterministic, the tokenizer retrained too
    standin.sentencepiece_bpe_json.cache_clear()
    again = build_cache(tmp_path / "again", {LLAMA: standin.REPOS[LLAMA]})
    assert digest(repo_folder(again, LLAMA) / "snapshots" / REVISION) == digest(
        repo_folder(hub, LLAMA) / "snapshots" / REVISION
    )


def test_hub_presets_come_first_in_hub_mode(hub):
    from backend.pissa import service

    keys = [k for _, k in service.choices("hub")]
    assert keys[:2] == [LLAMA, MISTRAL]


def _one_component(files, model_part: str) -> list[Path]:
    paths = [Path(f) for f in files]
    for p in paths:
        assert p.exists() and p.stat().st_size > 0
        assert "/" not in p.name and model_part in p.name  # the hub id's "/" never makes a folder
    return paths


@pytest.mark.parametrize(
    "key,layer", [(LLAMA, "model.layers.1.mlp.down_proj"), (MISTRAL, "model.layers.0.self_attn.k_proj")]
)
def test_analyse_exports_under_safe_names(ui, key, layer):
    _spec, _hist, md, files, _shown = ui.analyse(key, layer, 8, "pissa", progress=no_progress)
    paths = _one_component(files, key.replace("/", "--"))
    a = json.loads(next(p for p in paths if p.suffix == ".json").read_text())
    assert a["layer"] == layer and layer in md
    # the split is exact in float32 whatever the checkpoint's dtype
    assert a["reconstruction_rel_error"] <= 1e-5 and a["init_output_rel_gap"] <= 1e-5
    assert next(p for p in paths if p.suffix == ".png").read_bytes()[:4] == b"\x89PNG"


def test_error_table_exports_under_safe_names(ui):
    table, _bars, _heat, md, files = ui.errors(LLAMA, 8, "qpissa-1", progress=no_progress)
    assert len(table) == 14  # 2 layers x 7 projections
    paths = _one_component(files, "meta-llama--Llama-2-7b-hf")
    rows = [r.split(",") for r in next(p for p in paths if p.suffix == ".csv").read_text().splitlines()[1:]]
    assert len(rows) == 14
    for r in rows:
        qlora, loftq1, loftq5, qpissa1, qpissa5 = map(float, r[2:])
        # every correction removes part of QLoRA's error, and more passes remove more; which of
        # LoftQ and QPiSSA wins depends on the spectrum (these weights are random: a flat one)
        assert qlora == 0 and 0 < loftq1 <= loftq5 < 1 and 0 < qpissa1 <= qpissa5 < 1, r
    assert "/14** layers" in md


@pytest.mark.parametrize("key,dtype", [(LLAMA, "float16"), (MISTRAL, "bfloat16")])
def test_conversion_is_judged_by_the_dtype(ui, key, dtype):
    from backend.pissa import service

    # the tab converts the layer picked (a value projection: a query one barely moves this tiny
    # model's outputs, so the check would not be telling)
    layer = next(n for n in service.layer_names(key) if n.endswith("v_proj"))
    md, r = ui.convert(key, 8, 20, layer, progress=no_progress)
    eps = torch.finfo(getattr(torch, dtype)).eps
    assert r["dtype"] == dtype and r["tolerance"] == pytest.approx(4 * eps)
    # half-precision round-off is well above float32's fixed 1e-4 (the check that said "NOT the
    # same" on an fp16 model), about one epsilon here, and equal to the round-off at step 0
    assert 1e-4 < r["rel_diff"] <= r["tolerance"] and r["same_outputs"]
    assert 0.3 < r["rel_diff"] / r["roundoff_at_init"] < 3
    # still a telling check: a conversion onto the wrong weights would be off by the fine-tuning's
    # own change, far beyond the tolerance
    assert r["change_from_base"] / r["output_scale"] > 5 * r["tolerance"]
    assert "**the same outputs**" in md and f"4 machine epsilons of {dtype}" in md
    assert "take more steps" not in md


def test_race_runs_every_method_on_a_half_precision_checkpoint(ui):
    outs = list(ui.run_race(LLAMA, ["lora", "pissa", "full"], 1, 10, 8, 0))
    status, summary, files = outs[-1][1], outs[-1][2], outs[-1][3]  # the end is one update
    assert "30/30 steps" in status and "**finished**" in status
    data = json.loads(
        next(p for p in _one_component(files, "meta-llama--Llama-2-7b-hf") if p.suffix == ".json").read_text()
    )
    curves = {c["method"]: c["loss"] for c in data["curves"]}
    assert set(curves) == {"lora", "pissa", "full"}
    assert all(math.isfinite(v) for ls in curves.values() for v in ls)
    # every run learns the new task; full fine-tuning (float32 master weights) does not diverge
    for method, losses in curves.items():
        assert losses[-1] < losses[0], method
    assert summary["settings"]["task"] == "difference"


def test_a_hub_checkpoints_layers_are_listed_from_its_config_before_it_loads(hub, monkeypatch):
    from backend.core import store
    from backend.pissa import service

    before = set(store.loaded())
    names = service.config_layer_names(MISTRAL)
    assert set(store.loaded()) == before  # nothing loaded
    assert names == service.layer_names(MISTRAL) and "model.layers.0.self_attn.k_proj" in names
    assert service.config_layer_names("someone/not-cached-model") == []
