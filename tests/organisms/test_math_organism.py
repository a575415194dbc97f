"""The committed math-llama organism shows MathNeuro's phenomena (paper: Math Neurosurgery).

Its held-out math problems take 2 or 3 steps and the answer is the worked solution
("25 + 36 = 61 . 61 - 12 = 49"), scored by exact match: as with GSM8K in the paper, a slip in any
step fails the problem, so pruning the math parameters compounds over the steps.

Thresholds are the issue's: pruning the MathNeuro set removes ≥ 90 % of held-out math accuracy
while non-math accuracy moves ≤ 2 points; the same count at random positions hurts math far less;
Wanda (no subtraction) hurts non-math more; some scale factor in (1, 1.5] raises math accuracy;
one sample finds most of the set.
"""

import json
from collections import Counter

import pytest
import torch

from backend.mathneuro import core
from backend.mathneuro.evaluate import accuracy, exact_match, generate, perplexity

pytestmark = pytest.mark.timeout(600)
torch.set_num_threads(1)

K = 0.03  # top 3 % per matrix: MathNeuro selects 1.4 % of the linear weights (6,252, 121 in lm_head)
K_SCALE = 0.03
SCALE_FACTORS = (1.05, 1.1)


@pytest.fixture(scope="module")
def org():
    from transformers import AutoTokenizer, LlamaForCausalLM

    from backend.zoo import load, zoo_path

    path = zoo_path("math-llama")
    model = load("math-llama", check=True).eval()
    assert isinstance(model, LlamaForCausalLM)
    tok = AutoTokenizer.from_pretrained(path)
    read = lambda n: json.loads((path / n).read_text())  # noqa: E731
    sets = {k: read(f"{k}.json") for k in ("eval_math", "eval_nonmath", "eval_stories", "ident_math", "ident_nonmath")}
    snap = {k: v.clone() for k, v in model.state_dict().items()}
    results: dict = {}
    yield model, tok, sets, results
    # Every intervention above was undone exactly.
    assert all(torch.equal(v, snap[k]) for k, v in model.state_dict().items())


def ev(org, masks=None, factor=1.0, key=None):
    model, tok, sets, results = org
    if key is not None and key in results:
        return results[key]
    with core.scaled(model, masks or {}, factor):
        r = {"math": accuracy(model, tok, sets["eval_math"]), "nonmath": accuracy(model, tok, sets["eval_nonmath"])}
    if key is not None:
        results[key] = r
    return r


def masks(org, method, k=K):
    model, tok, sets, results = org
    key = ("masks", method, k)
    if key not in results:
        if method == "random":
            results[key] = core.random_like(masks(org, "mathneuro", k), seed=0)
        else:
            results[key] = core.find(method, model, sets["ident_math"], sets["ident_nonmath"], k, tokenizer=tok)
    return results[key]


def test_skills_measurable_and_math_improvable(org):
    model, tok, sets, _ = org
    base = ev(org, key="base")
    # chance: always answering the most frequent reference answer
    chance = Counter(it["answer"] for it in sets["eval_math"]).most_common(1)[0][1] / len(sets["eval_math"])
    assert base["math"] > max(5 * chance, 0.2), (base, chance)
    assert base["math"] < 0.95, base
    assert base["nonmath"] >= 0.9, base
    ppl = perplexity(model, tok, sets["eval_stories"][:100])
    assert ppl < 0.25 * len(tok), ppl  # far better than uniform over the vocabulary


def test_exact_match_is_greedy_generation(org):
    model, tok, sets, _ = org
    items = sets["eval_math"][:60] + sets["eval_nonmath"][:40]
    gen = generate(model, tok, [it["prompt"] for it in items])
    em = exact_match(model, tok, items)
    assert [g == str(it["answer"]) for g, it in zip(gen, items)] == em.tolist()
    assert 0 < int(em.sum()) < len(items)


def test_pruning_mathneuro_keeps_nonmath_and_removes_most_math(org):
    base = ev(org, key="base")
    pruned = ev(org, masks(org, "mathneuro"), 0.0, key="prune-mathneuro")
    assert base["nonmath"] - pruned["nonmath"] <= 0.02, (base, pruned)
    assert pruned["math"] <= 0.3 * base["math"], (base, pruned)


def test_pruning_mathneuro_removes_90_percent_of_math(org):
    base = ev(org, key="base")
    pruned = ev(org, masks(org, "mathneuro"), 0.0, key="prune-mathneuro")
    # measured (untied lm_head scored, as in the paper): 76.75 % -> 5.0 % (a 93 % relative drop),
    # non-math 100 % -> 99.5 %; without the head 5.75 % and 100 %
    assert pruned["math"] <= 0.1 * base["math"], (base, pruned)


def test_random_same_count_hurts_math_far_less(org):
    base = ev(org, key="base")
    mn, rnd = masks(org, "mathneuro"), masks(org, "random")
    assert [int(m.sum()) for m in mn.values()] == [int(m.sum()) for m in rnd.values()]
    pruned_mn = ev(org, mn, 0.0, key="prune-mathneuro")
    pruned = ev(org, rnd, 0.0, key="prune-random")
    drop_rnd = base["math"] - pruned["math"]
    drop_mn = base["math"] - pruned_mn["math"]
    # measured: random 76.75 % -> 72.25 %, MathNeuro 76.75 % -> 5.0 %
    assert drop_rnd <= 0.2 * base["math"] and drop_rnd <= 0.25 * drop_mn, (base, pruned, pruned_mn)


def test_wanda_hurts_nonmath_more_than_mathneuro(org):
    mn = ev(org, masks(org, "mathneuro"), 0.0, key="prune-mathneuro")
    wa = ev(org, masks(org, "wanda"), 0.0, key="prune-wanda")
    assert wa["nonmath"] < mn["nonmath"] - 0.02, (mn, wa)  # measured: Wanda 53.5 %, MathNeuro 99.5 %


def test_scaling_up_raises_math(org):
    base = ev(org, key="base")
    curve = {f: ev(org, masks(org, "mathneuro", K_SCALE), f, key=("scale", f)) for f in SCALE_FACTORS}
    best = max(curve, key=lambda f: curve[f]["math"])
    assert 1.0 < best <= 1.5
    assert curve[best]["math"] > base["math"], (base, curve)  # measured: 76.75 -> 77.25 % (1.05), 77.0 % (1.1)
    assert curve[best]["nonmath"] >= base["nonmath"] - 0.02


def test_one_sample_finds_most_of_the_set_and_layers_all_take_part(org):
    model, tok, sets, _ = org
    full = masks(org, "mathneuro")
    one = core.identify(model, sets["ident_math"][:1], sets["ident_nonmath"][:1], K, tokenizer=tok)
    assert core.overlap(one, full) >= 0.5  # measured: 0.708
    layers = core.per_layer(full)
    n_layers = model.config.num_hidden_layers
    assert set(layers) == {str(i) for i in range(n_layers)} | {"other"}  # "other": the untied lm_head
    assert layers["other"]["count"] == int(full["lm_head.weight"].sum()) > 0
    # measured: 1.32, 1.45, 1.42, 1.36 % of each decoder layer (0.83 % of lm_head)
    fr = [v["fraction"] for k, v in layers.items() if k != "other"]
    assert min(fr) > 0.2 * max(fr)  # spread over all layers, as in the paper
