"""The hub-mode walk (benchmarks/hub_walk.py) runs end to end on the tests' stand-ins, and its
residency table follows the model store's own budget and eviction order."""

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT

GB = 10**9


@pytest.fixture(scope="module")
def walked(tmp_path_factory):
    out = tmp_path_factory.mktemp("walk") / "walk.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    r = subprocess.run(
        [sys.executable, "-m", "benchmarks.hub_walk", "--scale", "tiny", "--json", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-3000:])
    return json.loads(out.read_text()), r.stdout


@pytest.mark.timeout(420)
def test_every_tab_answers_twice_with_time_and_peak_memory(walked):
    res, stdout = walked
    assert res["scale"] == "tiny"
    tabs = ["Relevance", "Features", "Features", "Features", "Memorization", "Math neurons", "Adapters"]
    assert [r["tab"] for r in res["rows"]] == tabs
    for r in res["rows"]:
        assert "error" not in r, r
        for phase in ("cold", "warm"):
            assert r[f"{phase}_s"] > 0 and 0.1 < r[f"{phase}_rss_gb"] < 20
            assert r[f"{phase}_gpu_gb"] is None  # no CUDA here: the column says to re-run on a GPU
    results = {r["tab"]: r["cold_result"] + r["warm_result"] for r in res["rows"] if r["tab"] != "Features"}
    analyse, contrast, steer = (r["cold_result"] + r["warm_result"] for r in res["rows"] if r["tab"] == "Features")
    assert "Model answer" in analyse and "tested features" in contrast and "alone" in steer
    assert "wb-relevance-heatmap" in results["Relevance"]
    assert "Memorization score" in results["Memorization"]
    assert "MathNeuro set pruned" in results["Math neurons"] and "scaled × 2" in results["Math neurons"]
    assert "plotly" in results["Adapters"]
    # the app's own store after each action: one more model per tab (the test's budget is large)
    held = [len(r["store"]["models"]) for r in res["rows"]]
    assert held == sorted(held) and held[-1] >= 5 and res["rows"][-1]["store"]["evictions"] == 0
    head = (
        "| tab | main action | sizes | first call (cold, s) | second call (warm, s) | peak RSS GB | peak GPU GB "
        "| store after: models, bytes (evictions so far) |"
    )
    assert head in stdout
    assert stdout.count("to re-run on a GPU") == len(tabs)


@pytest.mark.timeout(420)
def test_residency_follows_the_store_budget_and_lru_order(walked):
    from backend.core import store

    res = walked[0]["residency"]
    params = {c["checkpoint"]: c["params"] for c in res["checkpoints"]}
    # the published parameter counts of the real checkpoints, from their configs
    assert params["meta-llama/Llama-2-7b-hf"] == 6_738_415_616
    assert params["mistralai/Mistral-7B-v0.1"] == 7_241_732_096
    assert params["meta-llama/Llama-3.2-1B-Instruct"] == 1_235_814_400
    entries: dict[str, int] = {}
    for c in res["checkpoints"]:
        assert c["bytes"] == c["params"] * (4 if c["dtype"].startswith("float32") else 2) + 4 * c["buffers"]
        entries[c["entry"]] = entries.get(c["entry"], 0) + c["bytes"]
    first_five = [s["load"] for s in res["runs"][0]["steps"][:5]]
    assert res["five_tabs_bytes"] == sum(entries[e] for e in first_five)
    assert 35 * GB < res["five_tabs_bytes"] < 45 * GB
    assert store.gpu_budget(80 * GB) == 64 * GB
    for run in res["runs"]:
        limit = store.gpu_budget(run["gpu_gb"] * GB)
        assert run["budget"] == limit and run["five_tabs_fit"] == (res["five_tabs_bytes"] <= limit)
        resident: list[str] = []  # least recently used first, replayed here by hand
        for step in run["steps"]:
            need = entries[step["load"]]
            evicted = []
            while resident and sum(entries[m] for m in resident) + need > limit:
                evicted.append(resident.pop(0))
            resident.append(step["load"])
            assert step["evicted"] == evicted and step["resident"] == resident
            assert step["resident_bytes"] == sum(entries[m] for m in resident) <= limit
    by_gpu = {run["gpu_gb"]: run for run in res["runs"]}
    assert by_gpu[80]["five_tabs_fit"] and not any(s["evicted"] for s in by_gpu[80]["steps"][:5])
    assert not by_gpu[48]["five_tabs_fit"] and any(s["evicted"] for s in by_gpu[48]["steps"][:5])


@pytest.mark.timeout(420)
def test_visitor_index_size_is_measured_beside_the_session_quota(walked):
    from backend.core import sessions
    from backend.sae.index import IndexBuilder

    res, stdout = walked
    vi = res["visitor_index"]
    assert (vi["latents"], vi["patches"], vi["top_k"]) == (256, 16, 16)  # the stand-in SAE's sizes
    bound = IndexBuilder.bound_bytes(256, 16, 16)
    assert vi["state_bytes"] == bound and bound <= vi["bytes"] < 1.01 * bound + 4096  # the file is the state
    assert vi["quota_bytes"] == sessions.quota_bytes()
    assert "A visitor's own feature index (256 latents" in stdout


@pytest.mark.timeout(300)
def test_width_scale_keeps_the_real_width_with_two_layers(tmp_path):
    """The widening the CPU walk applies, on the Math tab's checkpoint: the stand-in's tokenizer and
    class, Llama-3.2-1B's width, 2 layers, loadable by from_pretrained."""
    import torch
    from transformers import LlamaForCausalLM

    from benchmarks.hub_walk import WIDEN
    from tests.helpers.standins import math as stand_in, put

    repo = "meta-llama/Llama-3.2-1B-Instruct"
    snap = put(tmp_path, repo, stand_in.build)
    WIDEN[repo](snap, repo, "width")
    model = LlamaForCausalLM.from_pretrained(snap)
    cfg = model.config
    assert (
        cfg.hidden_size,
        cfg.intermediate_size,
        cfg.num_attention_heads,
        cfg.num_key_value_heads,
        cfg.num_hidden_layers,
    ) == (2048, 8192, 32, 8, 2)
    assert model.model.layers[0].mlp.up_proj.weight.shape == (8192, 2048)
    assert cfg.tie_word_embeddings and model.dtype == torch.bfloat16  # the stand-in's own features kept
    assert len(list(snap.glob("*.safetensors"))) == 1 and (snap / "tokenizer.json").exists()
