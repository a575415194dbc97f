"""The PiSSA toy organism: digits → PCA → MLP pre-trained on odd digits; the paper's claims on it."""

import pytest
import torch

from backend.pissa import DigitsTask, RaceConfig, error_reduction_ratio, linear_layers, race
from backend.pissa.race import loss_at
from backend.pissa.toy import DigitsMLP, accuracy, load_digits_data, subset
from backend.zoo import load, zoo_path
from backend.zoo.manifest import verify

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def toy():
    return load("pissa-toy")


@pytest.fixture(scope="module")
def splits():
    import json

    return json.loads((zoo_path("pissa-toy") / "splits.json").read_text())


def test_organism_loads_through_from_pretrained_and_verifies(toy):
    assert isinstance(toy, DigitsMLP)
    assert verify(zoo_path("pissa-toy")) == []
    assert set(linear_layers(toy)) == {"fc1", "fc2", "head"}


def test_pretrained_on_odd_digits_only(toy, splits):
    x, y = load_digits_data()
    xo, yo = subset(x, y, splits["test"], splits["pretrain_classes"])
    xe, ye = subset(x, y, splits["test"], splits["finetune_classes"])
    assert accuracy(toy, xo, yo) >= 0.95
    assert accuracy(toy, xe, ye) == 0.0  # the new task is genuinely new


@pytest.mark.timeout(120)
def test_pissa_loss_below_lora_at_step_100_for_3_of_3_seeds(toy, splits):
    task = DigitsTask(toy, splits)
    events = list(race(task, RaceConfig(methods=("lora", "pissa"), seeds=(0, 1, 2), steps=100)))
    curves = {}
    for e in events:
        if "step" not in e:
            continue
        curves.setdefault((e["method"], e["seed"]), []).append(e["loss"])
    for seed in (0, 1, 2):
        lora, pissa = loss_at(curves[("lora", seed)], 100), loss_at(curves[("pissa", seed)], 100)
        assert pissa < lora, f"seed {seed}: PiSSA {pissa:.3f} vs LoRA {lora:.3f}"
    settings = events[-1]["summary"]["settings"]
    assert settings["rank"] == 8 and settings["alpha"] == 8  # same r, alpha (and lr) for both


def test_quantization_error_ratios_on_every_layer(toy):
    for name, layer in linear_layers(toy).items():
        w = layer.weight.detach()
        loftq1 = error_reduction_ratio(w, 8, "loftq", 1)
        qpissa5 = error_reduction_ratio(w, 8, "qpissa", 5)
        assert qpissa5 > loftq1 > 0, name
    # on the square hidden layer (the LLM-like shape) one QPiSSA iteration already beats LoftQ
    w = toy.fc2.weight.detach()
    assert error_reduction_ratio(w, 8, "qpissa", 1) > error_reduction_ratio(w, 8, "loftq", 1)


def test_recipe_smoke_build_is_loadable(tmp_path):
    from backend.zoo import build

    manifest = build("pissa-toy", out_root=tmp_path, steps=3)
    assert manifest["steps"] == 3 and "model.safetensors" in manifest["files"]
    model = load("pissa-toy", root=tmp_path)
    assert isinstance(model, DigitsMLP)
    assert (tmp_path / "pissa-toy" / "splits.json").exists()
