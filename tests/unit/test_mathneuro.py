"""MathNeuro on tiny random Llamas: the importance formula, the masks, the baselines, the
bit-exact `scaled` context, and that no hook is ever left behind."""

import random

import pytest
import torch

from backend.core.interventions import count_hooks
from backend.mathneuro import core, data
from backend.mathneuro.evaluate import encode_with_answers
from backend.mathneuro.tokenizer import build_tokenizer
from tests.helpers import tiny

torch.set_num_threads(1)


def tiny_llama(seed=0, hidden=32, layers=2):
    """The shared tiny Llama with the MathNeuro tokenizer's vocabulary and special ids."""
    tok = build_tokenizer()
    return tiny.tiny_llama(
        seed,
        len(tok),
        hidden,
        layers,
        max_position_embeddings=96,
        tie_word_embeddings=False,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


@pytest.fixture(scope="module")
def model():
    return tiny_llama()


@pytest.fixture(scope="module")
def texts():
    m = data.texts_of(data.math_set(6, 0, split="train"))
    n = data.texts_of(data.nonmath_set(6, 0))
    return m, n


def snapshot(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def assert_same(model, snap):
    for k, v in model.state_dict().items():
        assert torch.equal(v, snap[k]), k


def manual_norms(model, tok, samples):
    """Σ_samples ‖X_j‖ computed one unpadded sample at a time."""
    layers = core.linear_layers(model)
    acc = {n: torch.zeros(m.in_features, dtype=torch.float64) for n, m in layers.items()}
    store = {}
    hs = [m.register_forward_hook(lambda mod, a, o, n=n: store.__setitem__(n, a[0])) for n, m in layers.items()]
    try:
        with torch.no_grad():
            for s in samples:
                model(input_ids=torch.tensor([tok(s)["input_ids"]]))
                for n, x in store.items():
                    acc[n] += x[0].double().norm(dim=0)
    finally:
        for h in hs:
            h.remove()
    return acc


def test_linear_layers_take_an_untied_head_and_skip_a_tied_one(model):
    names = core.linear_layers(model)  # the paper's set: every nn.Linear, the untied head included
    assert "lm_head" in names and len(names) == 2 * 7 + 1
    assert "lm_head" not in core.linear_layers(model, include_lm_head=False)
    assert core.tied_head(model) is None
    from transformers import LlamaForCausalLM

    tied = LlamaForCausalLM(model.config.__class__(**{**model.config.to_dict(), "tie_word_embeddings": True}))
    assert core.tied_head(tied) is tied.lm_head
    assert "lm_head" not in core.linear_layers(tied) and len(core.linear_layers(tied)) == 2 * 7


def test_input_norms_match_per_sample_computation_and_ignore_padding(model, tok, texts):
    samples = texts[0] + texts[1]
    batched = core.input_norms(model, samples, tokenizer=tok, batch_size=5)
    manual = manual_norms(model, tok, samples)
    for n in manual:
        torch.testing.assert_close(batched[n], manual[n], rtol=1e-4, atol=1e-5)
    assert count_hooks(model) == 0


def test_input_norms_accept_token_ids(model, tok, texts):
    ids = [tok(s)["input_ids"] for s in texts[0]]
    a = core.input_norms(model, ids, tokenizer=tok)
    b = core.input_norms(model, texts[0], tokenizer=tok)
    for n in a:
        torch.testing.assert_close(a[n], b[n])


def test_identify_is_top_math_minus_top_nonmath(model, tok, texts):
    m, n = texts
    k = 0.2
    masks = core.identify(model, m, n, k, tokenizer=tok)
    s_m = core.importance(model, manual_norms(model, tok, m))
    s_n = core.importance(model, manual_norms(model, tok, n))
    params = dict(model.named_parameters())
    assert set(masks) == {f"{x}.weight" for x in core.linear_layers(model)}
    for name, mask in masks.items():
        assert mask.dtype == torch.bool and mask.shape == params[name].shape
        # |W|·‖X‖ recomputed from the definition
        w = params[name].detach().abs()
        torch.testing.assert_close(s_m[name], w * manual_norms(model, tok, m)[name[:-7]].float()[None])
        kk = int(k * mask.numel())  # floor, as the paper's code counts
        top_m = torch.zeros(mask.numel(), dtype=torch.bool)
        top_m[s_m[name].flatten().argsort(descending=True)[:kk]] = True
        top_n = torch.zeros(mask.numel(), dtype=torch.bool)
        top_n[s_n[name].flatten().argsort(descending=True)[:kk]] = True
        expected = (top_m & ~top_n).view(mask.shape)
        # ties between equal scores could differ in principle; random floats have none
        assert torch.equal(mask, expected), name
    assert count_hooks(model) == 0


@pytest.mark.parametrize("side", ["right", "left"])
def test_padded_batches_give_the_masks_of_one_sample_at_a_time(side, texts):
    """Batch 1 and batch 32 with either padding side: identical norms (to float precision) and
    identical masks, on an untied Llama whose lm_head is scored too."""
    from transformers import PreTrainedTokenizerFast

    m = tiny_llama(seed=3)
    tok = build_tokenizer()
    tok.padding_side = side
    # lengths from 9 to 40 tokens in one batch: heavy padding on the chosen side
    rng = random.Random(0)
    math = [t for t in data.texts_of(data.math_set(24, 1, split="train", steps=(1, 2, 3)))]
    non = [data.story_with_facts(rng) if i % 2 else data.story(rng) for i in range(24)]
    assert isinstance(tok, PreTrainedTokenizerFast)
    one_m = core.input_norms(m, math, tokenizer=tok, batch_size=1)
    all_m = core.input_norms(m, math, tokenizer=tok, batch_size=32)
    assert "lm_head" in all_m
    for n in one_m:
        torch.testing.assert_close(all_m[n], one_m[n], rtol=1e-5, atol=1e-6)
    a = core.identify(m, math, non, 0.1, tokenizer=tok, batch_size=1)
    b = core.identify(m, math, non, 0.1, tokenizer=tok, batch_size=32)
    assert set(a) == set(b) and "lm_head.weight" in a
    assert all(torch.equal(a[n], b[n]) for n in a), [n for n in a if not torch.equal(a[n], b[n])]
    ids = [tok(t)["input_ids"] for t in math]  # token ids: padded on the right, same result
    torch.testing.assert_close(
        core.input_norms(m, ids, tokenizer=tok, batch_size=32)["lm_head"], one_m["lm_head"], rtol=1e-5, atol=1e-6
    )
    assert count_hooks(m) == 0


def test_text_samples_need_no_pad_token(texts):
    """A tokenizer without a pad token (Llama-3 ships none) still takes batches of strings: the
    same norms as one string at a time."""
    m = tiny_llama(seed=3)
    tok = build_tokenizer()
    tok.pad_token = None
    assert tok.pad_token_id is None
    with pytest.raises(ValueError):
        tok(texts[0][:2], padding=True)  # what a batch of strings used to hit
    one = core.input_norms(m, texts[0], tokenizer=tok, batch_size=1)
    many = core.input_norms(m, texts[0], tokenizer=tok, batch_size=32)
    for n in one:
        torch.testing.assert_close(many[n], one[n], rtol=1e-5, atol=1e-6)
    assert count_hooks(m) == 0


def test_same_data_for_both_sides_gives_an_empty_set(model, tok, texts):
    masks = core.identify(model, texts[0], texts[0], 0.1, tokenizer=tok)
    assert core.count(masks) == 0


def test_top_fraction_counts_round_down():
    s = torch.rand(10, 20)
    for k, n in ((0.001, 0), (0.004, 0), (0.01, 2), (0.0149, 2), (0.15, 30), (0.5, 100), (1.0, 200)):
        assert int(core.top_fraction(s, k).sum()) == n == int(k * 200)
    for bad in (0, -0.1, 1.5, 15, float("nan")):
        with pytest.raises(ValueError, match="fraction"):
            core.top_fraction(s, bad)


def test_wanda_contains_mathneuro(model, tok, texts):
    mn = core.identify(model, *texts, 0.15, tokenizer=tok)
    wa = core.wanda(model, texts[0], 0.15, tokenizer=tok)
    assert core.count(wa) > core.count(mn) > 0
    assert core.overlap(wa, mn) == 1.0


def test_random_like_matches_counts_not_positions(model, tok, texts):
    mn = core.identify(model, *texts, 0.15, tokenizer=tok)
    r1, r2 = core.random_like(mn, seed=1), core.random_like(mn, seed=1)
    r3 = core.random_like(mn, seed=2)
    for name in mn:
        assert int(r1[name].sum()) == int(mn[name].sum())
        assert torch.equal(r1[name], r2[name])
    assert any(not torch.equal(r1[n], r3[n]) for n in mn)
    assert core.overlap(r1, mn) < 0.5


def test_lape_selects_whole_neurons(model, tok, texts):
    masks = core.lape(model, *texts, 0.25, tokenizer=tok)
    assert count_hooks(model) == 0
    gates = [n for n in masks if n.endswith("gate_proj.weight")]
    assert len(gates) == 2
    for g in gates:
        base = g[: -len("gate_proj.weight")]
        rows = masks[g].any(dim=1)
        assert torch.equal(masks[g].all(dim=1), rows)  # whole rows
        assert torch.equal(masks[base + "up_proj.weight"].any(dim=1), rows)
        assert torch.equal(masks[base + "down_proj.weight"].any(dim=0), rows)  # matching columns
        assert 0 < int(rows.sum()) <= round(0.25 * rows.numel())
    probs = core.activation_probability(model, texts[0], tokenizer=tok)
    for p in probs.values():
        assert float(p.min()) >= 0 and float(p.max()) <= 1


def test_find_dispatches_and_rejects_unknown(model, tok, texts):
    for method in core.METHODS:
        masks = core.find(method, model, *texts, 0.1, tokenizer=tok)
        assert core.count(masks) > 0
    with pytest.raises(ValueError, match="unknown method"):
        core.find("magic", model, *texts, 0.1, tokenizer=tok)


@pytest.mark.parametrize("factor", [0.0, 1.1, 0.37, 2.0])
def test_scaled_applies_and_restores_bit_exactly(model, tok, texts, factor):
    masks = core.identify(model, *texts, 0.15, tokenizer=tok)
    snap = snapshot(model)
    ptrs = {n: p.data_ptr() for n, p in model.named_parameters()}
    params = dict(model.named_parameters())
    with core.scaled(model, masks, factor):
        for name, m in masks.items():
            p = params[name].detach()
            assert torch.equal(p[m], snap[name][m] * factor)
            assert torch.equal(p[~m], snap[name][~m])
        assert {n: p.data_ptr() for n, p in model.named_parameters()} == ptrs  # in place, no copy
    assert_same(model, snap)


def test_scaled_restores_after_an_exception(model, tok, texts):
    masks = core.identify(model, *texts, 0.15, tokenizer=tok)
    snap = snapshot(model)
    with pytest.raises(RuntimeError, match="boom"):
        with core.scaled(model, masks, 0.0):
            raise RuntimeError("boom")
    assert_same(model, snap)


def test_scaled_rejects_bad_masks_and_factors(model):
    with pytest.raises(KeyError):
        with core.scaled(model, {"nope.weight": torch.zeros(1, dtype=torch.bool)}, 0.0):
            pass
    w = "model.layers.0.mlp.up_proj.weight"
    with pytest.raises(ValueError):
        with core.scaled(model, {w: torch.zeros(3, dtype=torch.bool)}, 0.0):
            pass
    with pytest.raises(ValueError, match="finite"):
        with core.scaled(model, {}, float("inf")):
            pass


def test_saved_bytes_is_what_changes(model, tok, texts):
    masks = core.identify(model, *texts, 0.15, tokenizer=tok)
    assert core.saved_bytes(model, masks) == 4 * core.count(masks)
    n_params = sum(p.numel() for p in model.parameters())
    assert core.saved_bytes(model, masks, with_index=True) <= n_params  # ≤ 1 B per parameter
    dense = core.wanda(model, texts[0], 0.2, tokenizer=tok)  # denser than 1/8: addressed by the mask
    assert core.saved_bytes(model, dense, with_index=True) == core.saved_bytes(model, dense) <= n_params
    snap = {k: v.clone() for k, v in model.state_dict().items()}
    params = dict(model.named_parameters())
    for ms in (masks, dense):  # both ways of addressing the entries prune exactly the mask, and restore
        with core.scaled(model, ms, 0.0):
            for name, m in ms.items():
                assert bool((params[name][m] == 0).all())
                assert torch.equal(params[name][~m], snap[name][~m])
        assert all(torch.equal(v, snap[k]) for k, v in model.state_dict().items())


def test_hooks_removed_after_a_failing_forward(model, tok):
    bad = [[1, 2, 10_000]]  # token id out of range: the forward raises
    with pytest.raises(IndexError):  # the embedding has no row 10,000
        core.input_norms(model, bad, tokenizer=tok)
    assert count_hooks(model) == 0
    with pytest.raises(IndexError):  # the embedding has no row 10,000
        core.activation_probability(model, bad, tokenizer=tok)
    assert count_hooks(model) == 0
    with pytest.raises(ValueError, match="no samples"):
        core.identify(model, [], ["x"], 0.1, tokenizer=tok)


def test_overlap_per_layer_and_consistency(model, tok, texts):
    mn = core.identify(model, *texts, 0.15, tokenizer=tok)
    assert core.overlap(mn, mn) == 1.0
    layers = core.per_layer(mn)
    assert set(layers) == {"0", "1", "other"}  # "other": the untied lm_head
    assert sum(r["count"] for r in layers.values()) == core.count(mn)
    mods = core.per_module(mn)
    assert set(mods) == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head"}
    cons = core.consistency(model, *texts, 0.15, tokenizer=tok, n_samples=(1, 6), n_subsets=2, reference=mn)
    assert cons[6]["mean"] == pytest.approx(1.0)  # all samples: the reference itself
    assert 0.0 < cons[1]["mean"] <= 1.0


def test_encode_with_answers_marks_answer_predictions(tok):
    ids, pred = encode_with_answers(tok, [{"prompt": "ann has 3 pens . how many pens are left ?", "answer": "12"}])
    toks = tok.convert_ids_to_tokens(ids[0].tolist())
    targets = [toks[i + 1] for i in range(len(toks)) if pred[0, i]]
    assert targets == ["1", "2", "<eos>"]


def test_presets_registered_and_hub_loader_works_on_a_local_tiny_llama(tmp_path, tok, texts):
    """The hub preset's class and loading path, exercised on a tiny Llama saved locally (no hub
    is reachable here): same `load_pretrained` the Space uses, safetensors only."""
    from backend.core import presets
    from backend.mathneuro import HUB_PRESET, TAB, ZOO_PRESET

    assert presets.active(TAB, "zoo") == ZOO_PRESET and ZOO_PRESET.path_or_id == "math-llama"
    assert presets.active(TAB, "hub") == HUB_PRESET
    assert HUB_PRESET.path_or_id == "meta-llama/Llama-3.2-1B-Instruct"
    assert presets.validate_hub_id(HUB_PRESET.path_or_id)
    assert "gsm8k" in HUB_PRESET.extra["math"]

    model = tiny_llama(seed=5)
    folder = tmp_path / "tiny-llama"
    model.save_pretrained(folder, safe_serialization=True)
    tok.save_pretrained(folder)
    loaded = presets.load_pretrained(HUB_PRESET.model_class, folder, roots=[tmp_path]).eval()
    from transformers import AutoTokenizer

    tok2 = presets.load_pretrained(AutoTokenizer, folder, weights=False, roots=[tmp_path])
    ids = torch.tensor([tok2(texts[0][0])["input_ids"]])
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).logits, model(ids).logits)
    masks = core.identify(loaded, *texts, 0.1, tokenizer=tok2)
    assert core.count(masks) > 0
    with pytest.raises(presets.PresetError):
        presets.load_pretrained(HUB_PRESET.model_class, folder, roots=[tmp_path / "elsewhere"])


def test_scaled_index_cache_follows_in_place_mask_edits(model):
    name = "model.layers.1.mlp.down_proj.weight"
    p = dict(model.named_parameters())[name]
    snap = p.detach().clone()
    mask = torch.zeros_like(p, dtype=torch.bool)
    mask[0, :3] = True
    with core.scaled(model, {name: mask}, 0.0):
        assert int((p == 0).sum()) >= 3 and torch.equal(p[1:], snap[1:])
    mask[0, :3] = False  # edited in place: the cached positions must not be reused
    mask[2, 5] = True
    with core.scaled(model, {name: mask}, 0.0):
        assert float(p[2, 5]) == 0.0 and torch.equal(p[0], snap[0])
    assert torch.equal(p, snap)
