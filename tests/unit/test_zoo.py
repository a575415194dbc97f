import json
import subprocess
import sys

import pytest
import torch

from backend import zoo
from backend.zoo import manifest as mf
from backend.zoo import registry
from tests.conftest import ROOT
from tests.helpers.tiny import tiny_llama


@pytest.fixture
def toy_recipe():
    """A throwaway organism: a tiny Llama fitted for a few steps to a fixed next-token rule."""
    name = "unit-toy"

    @zoo.recipe(
        name, seed=123, model_class="transformers.LlamaForCausalLM", description="unit-test organism", default_steps=5
    )
    def train(out_dir, *, seed, steps):
        model = tiny_llama(seed=seed).train()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        ids = torch.randint(0, 64, (4, 8))
        for _ in range(steps):
            loss = model(ids, labels=ids).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.save_pretrained(out_dir)
        (out_dir / "truth.json").write_text(json.dumps({"planted": [1, 2, 3]}))
        return {"steps": steps, "metrics": {"loss": loss.item()}}

    yield name
    registry._RECIPES.pop(name, None)


def test_build_writes_manifest_and_loads_through_from_pretrained(toy_recipe, tmp_path):
    m = zoo.build(toy_recipe, out_root=tmp_path)
    folder = tmp_path / toy_recipe
    assert m["seed"] == 123 and m["steps"] == 5 and m["metrics"]["loss"] > 0
    assert m["wall_time_s"] >= 0 and m["versions"]["torch"] == torch.__version__
    assert set(m["files"]) >= {"config.json", "model.safetensors", "truth.json"}
    assert mf.verify(folder) == []
    model = zoo.load(toy_recipe, root=tmp_path, check=True)
    assert type(model).__name__ == "LlamaForCausalLM"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp folder left


def test_build_is_deterministic(toy_recipe, tmp_path):
    a = zoo.build(toy_recipe, out_root=tmp_path / "a")
    b = zoo.build(toy_recipe, out_root=tmp_path / "b")
    assert a["files"]["model.safetensors"] == b["files"]["model.safetensors"]
    c = zoo.build(toy_recipe, out_root=tmp_path / "c", seed=7)
    assert c["files"]["model.safetensors"] != a["files"]["model.safetensors"]


def test_verify_detects_tampering(toy_recipe, tmp_path):
    zoo.build(toy_recipe, out_root=tmp_path, steps=1)
    folder = tmp_path / toy_recipe
    (folder / "truth.json").write_text("{}")
    (folder / "extra.txt").write_text("x")
    problems = zoo.verify_all(tmp_path)[toy_recipe]
    assert any("mismatch in truth.json" in p for p in problems)
    assert any("not in manifest: extra.txt" in p for p in problems)
    with pytest.raises(RuntimeError, match="mismatch"):
        zoo.load(toy_recipe, root=tmp_path, check=True)


def test_failed_build_leaves_nothing(tmp_path):
    @zoo.recipe("unit-broken", seed=1, model_class="transformers.LlamaForCausalLM")
    def train(out_dir, *, seed, steps):
        (out_dir / "half.bin").write_bytes(b"x")
        raise RuntimeError("diverged")

    try:
        with pytest.raises(RuntimeError, match="diverged"):
            zoo.build("unit-broken", out_root=tmp_path)
        assert list(tmp_path.iterdir()) == []
    finally:
        registry._RECIPES.pop("unit-broken", None)


def test_unknown_and_unbuilt_organisms(tmp_path):
    with pytest.raises(KeyError, match="unknown organism"):
        zoo.build("no-such-organism", out_root=tmp_path)
    with pytest.raises(FileNotFoundError, match="python -m backend.zoo build"):
        zoo.load("no-such-organism", root=tmp_path)


def test_committed_zoo_verifies_via_cli():
    out = subprocess.run(
        [sys.executable, "-m", "backend.zoo", "verify"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stdout + out.stderr
    listed = subprocess.run(
        [sys.executable, "-m", "backend.zoo", "list"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert listed.returncode == 0, listed.stderr


def test_remeasure_recomputes_from_the_committed_folder_and_keeps_the_files(tmp_path):
    import shutil

    from transformers import AutoTokenizer

    from backend.mathneuro import core
    from backend.mathneuro.evaluate import accuracy
    from backend.zoo.recipes import math as recipe

    shutil.copytree(zoo.zoo_path("math-llama"), tmp_path / "math-llama")
    before = mf.read(tmp_path / "math-llama")
    m = zoo.remeasure("math-llama", root=tmp_path)
    assert m["files"] == before["files"] and mf.verify(tmp_path / "math-llama") == []
    assert set(m["remeasured"]["previous"]) == {"pruned_k3_math_acc_heldout", "pruned_k3_nonmath_acc_heldout"}
    assert m["metrics"]["math_acc_heldout"] == before["metrics"]["math_acc_heldout"]  # not measured again
    # the value equals pruning the MathNeuro set found on the folder's identification texts
    folder = tmp_path / "math-llama"
    model = zoo.load("math-llama", root=tmp_path).eval()
    tok = AutoTokenizer.from_pretrained(folder)
    read = lambda n: json.loads((folder / n).read_text())  # noqa: E731
    masks = core.find(
        "mathneuro", model, read("ident_math.json"), read("ident_nonmath.json"), recipe.PRUNE_K, tokenizer=tok
    )
    with core.scaled(model, masks, 0.0):
        assert m["metrics"]["pruned_k3_math_acc_heldout"] == accuracy(model, tok, read("eval_math.json"))
    assert m["metrics"]["pruned_k3_math_acc_heldout"] <= 0.3 * m["metrics"]["math_acc_heldout"]
    # a changed file is refused, and an organism without `measure` says so
    (folder / "world.json").write_text("{}")
    with pytest.raises(ValueError, match="differs from its manifest"):
        zoo.remeasure("math-llama", root=tmp_path)
    with pytest.raises(ValueError, match="nothing to measure"):
        zoo.remeasure("pissa-toy", root=tmp_path)
