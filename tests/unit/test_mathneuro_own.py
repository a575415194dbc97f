"""MathNeuro on architectures the papers did not use: a user's Llama-3.2-style and Qwen2 folders,
picked through the same resolver as the tab, scored on every nn.Linear, and pruned."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from backend.core import picker, presets
from backend.core.modelcheck import ModelCheckError
from backend.mathneuro import HUB_PRESET, TAB, ZOO_PRESET, core
from tests.helpers.standins import lms, math as l3

BUILDERS = {"own-llama": l3.build, "own-qwen2": lms.build_qwen2}
MATH = [
    "Tom has 3 apples and buys 4 more. How many apples does he have?",
    "A train travels 60 miles in 2 hours. What is its speed?",
    "What is 12 times 7 minus 5?",
]
NONMATH = [
    "The sky was grey and the wind came from the sea.",
    "She read the letter twice before folding it away.",
    "Which animal barks at the postman every morning?",
]


@pytest.fixture(scope="module")
def roots(tmp_path_factory):
    root = tmp_path_factory.mktemp("math-own")
    for name, build in BUILDERS.items():
        (root / name).mkdir()
        build(root / name)
    (root / "own-gpt2").mkdir()
    lms.build_gpt2(root / "own-gpt2")
    return root


@pytest.fixture
def allowed(roots, monkeypatch):
    monkeypatch.setenv("WORKBENCH_MODEL_ROOTS", str(roots))
    return roots


def _load(folder):
    picked = picker.resolve(str(folder), [ZOO_PRESET, HUB_PRESET], "math_neurons", tab=TAB)
    assert picked.preset.source == "local"
    with picker.loading(picked.preset):
        model = presets.load_preset(picked.preset).float().eval()
    from transformers import AutoTokenizer

    tok = presets.load_pretrained(AutoTokenizer, folder, weights=False, roots=[folder.parent])
    return picked, model, tok


@pytest.mark.parametrize("name, cls", [("own-llama", "LlamaForCausalLM"), ("own-qwen2", "Qwen2ForCausalLM")])
def test_mathneuro_scores_every_linear_and_pruning_changes_outputs(allowed, name, cls):
    picked, model, tok = _load(allowed / name)
    assert type(model).__name__ == cls and cls in picked.describe()
    linears = {f"{n}.weight" for n, m in model.named_modules() if isinstance(m, nn.Linear)}
    # both stand-ins tie the head to the embeddings, and MathNeuro leaves a tied head alone
    assert core.tied_head(model) is not None
    k = 0.1
    # id lists, as the tab's bench passes them: neither tokenizer has a pad token to pad strings with
    m, n = ([tok(t)["input_ids"] for t in texts] for texts in (MATH, NONMATH))
    masks = core.identify(model, m, n, k, tokenizer=tok)
    assert set(masks) == linears - {"lm_head.weight"}
    params = dict(model.named_parameters())
    for n, mask in masks.items():
        w = params[n]
        assert mask.shape == w.shape
        # math's top-K % of the matrix less non-math's: never more than K % of the matrix
        assert int(mask.sum()) <= int(w.numel() * k)
    assert core.count(masks) > 0
    ids = tok(MATH[0], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        before = model(ids).logits
        with core.scaled(model, masks, 0.0):
            pruned = model(ids).logits
        after = model(ids).logits
    assert not torch.allclose(before, pruned)
    torch.testing.assert_close(before, after, rtol=0, atol=0)  # the intervention is undone exactly


def test_a_gpt2_folder_is_refused_with_the_conv1d_reason(allowed):
    with pytest.raises(ModelCheckError) as e:
        picker.resolve(str(allowed / "own-gpt2"), [], "math_neurons", tab=TAB)
    assert "Conv1D" in str(e.value)


def test_your_own_math_and_non_math_sets_on_the_zoo_organism(tmp_path):
    """The organism's held-out problems, uploaded as a file of one's own, score as the organism's
    exact-match rule scores them; text without answers is refused (the organism has no other rule)."""
    import json

    from backend.mathneuro import service
    from backend.mathneuro.evaluate import accuracy

    b = service.bench("zoo")
    mine = b.data["math"][:40]
    path = tmp_path / "arith.jsonl"
    path.write_text("\n".join(json.dumps({"prompt": it["prompt"], "answer": it["answer"]}) for it in mine))
    key = service.register_data("zoo", "math", path)
    info = service.describe(b, math=key)
    assert "arith.jsonl (40 items): 20 identify, 20 score" in info["math"] and "exact match" in info["math_rule"]
    r = b.baseline(n_eval=None, math=key)
    assert r["math"] == pytest.approx(accuracy(b.model, b.tok, mine[20:])) and r["math"] > 0.5
    s = service.Setting("mathneuro", 0.15, 16, 0.0, math=key)
    assert b.evaluate(s, n_eval=None)["math"] < r["math"] - 0.3  # its own MathNeuro set breaks it
    text = tmp_path / "words.txt"
    text.write_text("ann has a cat .\nbob lives by the lake .\n")
    with pytest.raises(ValueError, match="needs a prompt"):
        service.register_data("zoo", "nonmath", text)


def test_a_set_held_for_a_call_goes_with_it_and_one_kept_for_good_stays():
    """Issue 51 (6): an MCP call's own items are held for the call only (components.agents.language
    releases them after the answer); a set the owner's shared builds named stays whoever else held
    the same set and let it go, and a set two holders hold stays until both let it go."""
    from backend.mathneuro import visitor_sets

    data = {"math_sets": {}}
    visitor_sets.hold("mcp-call-1", data, "math", "file:a", {"items": [1]})
    visitor_sets.hold("session-s", data, "math", "file:a", {"items": [1]})
    visitor_sets.release("mcp-call-1")
    assert "file:a" in data["math_sets"]
    visitor_sets.release("session-s")
    assert data["math_sets"] == {}
    visitor_sets.keep(data, "math", "file:b", {"items": [2]})
    visitor_sets.hold("mcp-call-2", data, "math", "file:b", {"items": [2]})
    visitor_sets.release("mcp-call-2")
    assert data["math_sets"] == {"file:b": {"items": [2]}}


def test_an_mcp_calls_own_items_leave_with_their_masks_and_keep_their_accuracies():
    """The masks found on an agent's own items go with the call, as the items do (a new setting's
    masks otherwise stayed in the shared cache); the accuracies stay cached by the items' content."""
    import json

    from backend.mathneuro import data, service
    from components.math_neurons.tools import math_neurons

    items = [{"question": it["prompt"], "answer": it["answer"]} for it in data.math_set(40, 777)]
    masks_before, results_before = len(service.MASK_CACHE), len(service.RESULT_CACHE)
    out = json.loads(math_neurons(k_percent=3, n_samples=4, math_items=items))
    assert out["math_set"] == "yours" and out["n_params"] > 0
    assert len(service.MASK_CACHE) == masks_before  # no mask of the call's set is left
    assert len(service.RESULT_CACHE) > results_before
    again = json.loads(math_neurons(k_percent=3, n_samples=4, math_items=items))
    assert again["modified"] == out["modified"] and again["layers"] == out["layers"]


def test_the_tab_says_what_a_small_set_and_a_plain_text_model_use(tmp_path):
    """A set of 12 identifies with its 6 first items, not the slider's 64; a model without a chat
    template is explained as prompted in plain text, as its data card says; a new model empties
    the boxes of files it no longer uses."""
    import json

    from backend.mathneuro import service, sets
    from components.math_neurons import figures as figures
    from components.math_neurons import handlers as H
    from components.math_neurons import words

    b = service.bench("zoo")
    path = tmp_path / "twelve.jsonl"
    path.write_text(
        "\n".join(json.dumps({"prompt": it["prompt"], "answer": it["answer"]}) for it in b.data["math"][:12])
    )
    key = service.register_data("zoo", "math", path)
    s = service.Setting("mathneuro", 0.03, 64, 0.0, math=key)
    assert b.n_ident(s) == (12, 64)  # fewer than 16: the same 12 identify and score
    r = b.evaluate(s)
    card = figures.accuracy_html(b.baseline(math=key), r, s, 1000, b.n_ident(s))
    assert "12 math and 64 non-math samples" in card and "64 samples per set" not in card
    plain = "plain text (the tokenizer has no chat template)"
    text = words.explain_for(
        service.pick("zoo", None).preset.__class__("math_neurons", "local", "x", "m", "mine"), plain
    )
    assert "every question in plain text" in text and "its own chat template" not in text
    assert words.samples_label(False).endswith("right under the set's rule)")
    out = H.on_model("zoo", None)
    assert out[:2] == (sets.DEFAULT_NONMATH, sets.DEFAULT_MATH) and out[3:] == (None, None)
