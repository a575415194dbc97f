"""PiSSA on the zoo LM (math-llama): exact init, quantization error on every linear layer, and the
LoRA vs PiSSA race on a new task ("how many more … does A have?")."""

import pytest
import torch

from backend.pissa import RaceConfig, adapt, error_reduction_ratio, linear_layers, race, reconstruction_error
from backend.pissa.race import loss_at

torch.set_num_threads(1)

pytestmark = pytest.mark.skipif(
    not __import__("backend.core.presets", fromlist=["ZOO_ROOT"])
    .ZOO_ROOT.joinpath("math-llama", "manifest.json")
    .exists(),
    reason="math-llama organism not built",
)


@pytest.fixture(scope="module")
def lm():
    from backend.pissa import service

    return service.get_model("math-llama")


@pytest.fixture(scope="module")
def task():
    from backend.pissa import service

    return service.task_for("math-llama")


def test_task_is_new_text_in_the_organisms_vocabulary(task):
    from backend.pissa import service

    tok = service.get_tokenizer("math-llama")
    assert tok.unk_token_id not in set(task.seqs.unique().tolist())
    text = tok.decode(task.seqs[0][task.seqs[0] != tok.pad_token_id])
    assert "how many more" in text


def test_answer_mask_points_at_the_answer_tokens():
    from backend.pissa import service
    from backend.pissa.lm_task import encode_task

    tok = service.get_tokenizer("math-llama")
    prompt = "ann has 47 cups and bob has 12 cups . how many more cups does ann have ?"
    ids, mask = encode_task(tok, [(prompt, "35")], answer_only=True)
    targets = ids[0, 1:][mask[0, :-1]]  # the tokens the masked positions must predict
    assert tok.decode(targets).replace(" ", "") == "35" + tok.eos_token
    ids_all, mask_all = encode_task(tok, [(prompt, "35")])
    assert torch.equal(ids_all, ids) and int(mask_all.sum()) == ids.shape[1] - 1


def test_pissa_init_is_exact_on_the_lm(lm, task):
    ids = task.seqs[:4]
    with torch.no_grad():
        pm = adapt(lm, "pissa", rank=8)
        assert reconstruction_error(pm, lm) <= 1e-5
        assert torch.allclose(pm(input_ids=ids).logits, lm(input_ids=ids).logits, atol=1e-4)


def test_qpissa_beats_loftq_on_every_linear_layer(lm):
    layers = linear_layers(lm)
    assert len(layers) >= 7
    for name, layer in layers.items():
        w = layer.weight.detach()
        loftq1 = error_reduction_ratio(w, 8, "loftq", 1)
        assert error_reduction_ratio(w, 8, "qpissa", 1) > loftq1 > 0, name


@pytest.mark.timeout(240)
def test_pissa_loss_below_lora_at_step_100_for_3_of_3_seeds(task):
    events = list(race(task, RaceConfig(methods=("lora", "pissa"), seeds=(0, 1, 2), steps=100, batch=8)))
    curves = {}
    for e in events:
        if "step" in e:
            curves.setdefault((e["method"], e["seed"]), []).append(e["loss"])
    for seed in (0, 1, 2):
        lora, pissa = loss_at(curves[("lora", seed)], 100), loss_at(curves[("pissa", seed)], 100)
        assert pissa < lora, f"seed {seed}: PiSSA {pissa:.3f} vs LoRA {lora:.3f}"
    s = events[-1]["summary"]["settings"]
    assert s["rank"] == 8 and s["alpha"] == 8 and s["lr"] == 1e-3
