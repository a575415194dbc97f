"""MambaLRP on tiny random transformers Mamba models: forward equality, fast scan, conservation,
rule ablations, baselines, hidden attention, faithfulness, the image model and the hub loader."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from backend.core.interventions import count_hooks
from backend.lrp import METHODS, RULES, VisionMamba, attribute, attribute_image, attribute_text, conservation
from backend.lrp.forward import lm_forward
from backend.lrp.scan import linear_recurrence
from tests.helpers import tiny

torch.set_num_threads(1)

SHAPES = [  # (hidden, layers, state, d_inner, conv kernel, dt rank, vocab, seq len)
    (16, 1, 4, 32, 4, 2, 40, 9),
    (32, 2, 8, 64, 4, 4, 50, 17),
    (24, 3, 16, 48, 3, 3, 30, 23),
    (48, 2, 8, 96, 2, 6, 64, 12),
]


def tiny_mamba(hidden, layers, state, inner, kernel, rank, vocab, *, conv_bias=False, seed=0):
    """The shared builder with one SHAPES row's sizes (transformers derives d_inner from `expand`)."""
    return tiny.tiny_mamba(
        seed,
        vocab,
        hidden,
        layers,
        state,
        expand=inner // hidden,
        conv_kernel=kernel,
        time_step_rank=rank,
        use_conv_bias=conv_bias,
        time_step_min=0.05,
        time_step_max=0.5,
    )


@pytest.fixture(scope="module", params=range(len(SHAPES)), ids=lambda i: "x".join(map(str, SHAPES[i][:4])))
def case(request):
    h, l, n, d, k, r, v, seq = SHAPES[request.param]
    model = tiny_mamba(h, l, n, d, k, r, v, seed=request.param)
    ids = torch.randint(0, v, (4, seq), generator=torch.Generator().manual_seed(request.param))
    return model, ids


def rel_err(model, ids, rules=None, method="mambalrp"):
    s, f = conservation(model, ids, target=3, method=method, rules=rules)
    return float(torch.median((s - f).abs() / f.abs()))


@pytest.mark.parametrize("rules", [(), None, ("norm",), ("silu", "ssm", "gate"), ("norm", "gate")])
def test_forward_values_equal_the_models_logits(case, rules):
    model, ids = case
    with torch.no_grad():
        ref = model(ids).logits
        out = lm_forward(model, ids, rules=rules)
    torch.testing.assert_close(out, ref, atol=2e-5, rtol=1e-5)


def test_forward_equal_with_conv_bias_and_inputs_embeds():
    model = tiny_mamba(32, 2, 8, 64, 4, 2, 50, conv_bias=True, seed=9)
    emb = model.backbone.embeddings(torch.randint(0, 50, (2, 11))).detach()
    with torch.no_grad():
        torch.testing.assert_close(
            lm_forward(model, inputs_embeds=emb), model(inputs_embeds=emb).logits, atol=2e-5, rtol=1e-5
        )


def test_plain_gradient_equals_transformers_gradient(case):
    model, ids = case
    emb = model.backbone.embeddings(ids).detach().requires_grad_(True)
    (ref,) = torch.autograd.grad(model(inputs_embeds=emb).logits[:, -1, 3].sum(), emb)
    rel = attribute_text(model, ids, target=3, method="gi")
    torch.testing.assert_close(rel, (emb * ref).sum(-1).detach(), atol=1e-5, rtol=1e-4)


def test_linear_recurrence_matches_a_naive_loop_in_both_directions():
    g = torch.Generator().manual_seed(0)
    a = torch.rand(13, 2, 5, 3, generator=g, dtype=torch.float64).requires_grad_(True)
    b = torch.randn(13, 2, 5, 3, generator=g, dtype=torch.float64).requires_grad_(True)
    h, hs = torch.zeros(2, 5, 3, dtype=torch.float64), []
    for t in range(13):
        h = a[t] * h + b[t]
        hs.append(h)
    ref = torch.stack(hs)
    out = linear_recurrence(a, b)
    torch.testing.assert_close(out, ref)
    w = torch.randn_like(ref)
    ga, gb = torch.autograd.grad((ref * w).sum(), (a, b))
    ga2, gb2 = torch.autograd.grad((out * w).sum(), (a, b))
    torch.testing.assert_close(ga2, ga)
    torch.testing.assert_close(gb2, gb)
    assert torch.autograd.gradcheck(
        linear_recurrence, (a[:5, :1, :2].detach().requires_grad_(), b[:5, :1, :2].detach().requires_grad_())
    )


def test_mambalrp_conserves_the_logit(case):
    model, ids = case
    assert rel_err(model, ids) <= 1e-3


@pytest.mark.parametrize("dropped", RULES)
def test_dropping_any_rule_breaks_conservation(case, dropped):
    model, ids = case
    full = rel_err(model, ids)
    ablated = rel_err(model, ids, rules=set(RULES) - {dropped})
    # "by how much" lands in the report; each single rule matters by orders of magnitude
    assert ablated > 1e-4 and ablated > 100 * full, (dropped, ablated, full)


def test_gradient_x_input_is_far_from_conservation(case):
    model, ids = case
    assert rel_err(model, ids, method="gi") > 0.1


def test_gamma_rule_conserves_too(case):
    model, ids = case
    rel, f = attribute_text(model, ids, target=3, gamma=0.25, return_score=True)
    assert float(torch.median((rel.sum(-1) - f).abs() / f.abs())) <= 1e-3


def test_conv_bias_absorbs_a_share():
    model = tiny_mamba(32, 2, 8, 64, 4, 2, 50, conv_bias=True, seed=3)
    with torch.no_grad():
        for layer in model.backbone.layers:
            layer.mixer.conv1d.bias.normal_(0, 0.5)
    ids = torch.randint(0, 50, (4, 12), generator=torch.Generator().manual_seed(1))
    assert rel_err(model, ids) > 1e-3


@pytest.mark.parametrize("method", METHODS)
def test_every_method_gives_one_value_per_token(case, method):
    model, ids = case
    r = attribute(model, ids[0], target=5, method=method)
    assert r.shape == (ids.shape[1],) and torch.isfinite(r).all()
    if method in ("attnroll", "mambaattr"):
        assert (r >= 0).all()
    # batched and single agree (smoothgrad draws its noise per call)
    if method != "smoothgrad":
        rb = attribute_text(model, ids, target=5, method=method)
        torch.testing.assert_close(rb[0], r, atol=1e-5, rtol=1e-4)


def test_position_argument_and_causality():
    model = tiny_mamba(32, 2, 8, 64, 4, 2, 50, seed=4)
    ids = torch.randint(0, 50, (12,), generator=torch.Generator().manual_seed(2))
    r = attribute(model, ids, target=7, position=5)
    assert r[6:].abs().max() == 0  # tokens after the explained position cannot matter
    with torch.no_grad():
        logit = lm_forward(model, ids[None])[0, 5, 7]
    assert abs(float(r.sum() - logit)) <= 1e-4 * max(1.0, abs(float(logit)))
    with pytest.raises(IndexError):
        attribute(model, ids, target=7, position=40)


def test_bad_arguments_are_refused():
    model = tiny_mamba(16, 1, 4, 32, 4, 2, 40)
    ids = torch.randint(0, 40, (6,))
    with pytest.raises(ValueError, match="unknown method"):
        attribute(model, ids, target=1, method="shap")
    with pytest.raises(ValueError, match="unknown LRP rule"):
        attribute(model, ids, target=1, rules={"norm", "softmax"})
    with pytest.raises(TypeError):
        attribute(torch.nn.Linear(3, 3), ids, target=1)


def test_no_hooks_and_no_weight_change_left_behind(case):
    model, ids = case
    before = {k: v.clone() for k, v in model.state_dict().items()}
    flags = {k: p.requires_grad for k, p in model.named_parameters()}
    for m in METHODS:
        attribute_text(model, ids[:2], target=2, method=m)
    with pytest.raises(IndexError):
        attribute_text(model, ids[:2], target=2, position=999)
    assert count_hooks(model) == 0
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k
    assert flags == {k: p.requires_grad for k, p in model.named_parameters()}
    assert all(p.grad is None for p in model.parameters())


def test_hidden_attention_reproduces_the_scan():
    from backend.lrp.forward import Capture
    from backend.lrp.hidden_attention import alpha

    model = tiny_mamba(16, 1, 4, 32, 4, 2, 40, seed=5)
    ids = torch.randint(0, 40, (2, 10), generator=torch.Generator().manual_seed(0))
    cap = Capture()
    with torch.no_grad():
        lm_forward(model, ids, capture=cap)
    A = -torch.exp(model.backbone.layers[0].mixer.A_log.float())
    u, dt = cap.u[0], cap.dt[0]
    a = alpha(dt, torch.cumsum(dt, 1), A, cap.B[0], cap.C[0])  # [b, t, s, d]
    y = torch.einsum("btsd,bsd->btd", a, u)
    torch.testing.assert_close(y, cap.y_ssm[0], atol=1e-5, rtol=1e-4)


def test_faithfulness_curves_and_oracle_order():
    from backend.lrp.faithfulness import text_curves

    model = tiny_mamba(32, 2, 8, 64, 4, 2, 50, seed=6)
    ids = torch.randint(3, 50, (10,), generator=torch.Generator().manual_seed(0))
    rel = attribute(model, ids, target=4)
    c = text_curves(model, ids, rel, target=4, candidates=range(9), neutral_id=0)
    with torch.no_grad():
        f0 = float(lm_forward(model, ids[None])[0, -1, 4])
    assert len(c.morf) == len(c.lerf) == 10
    assert abs(c.morf[0] - f0) < 1e-4 and abs(c.lerf[0] - f0) < 1e-4
    assert abs(c.morf[-1] - c.lerf[-1]) < 1e-4  # everything removed either way
    anti = text_curves(model, ids, -rel, target=4, candidates=range(9), neutral_id=0)
    assert abs(anti.delta + c.delta) < 1e-4


def tiny_vision(seed=0):
    torch.manual_seed(seed)
    return VisionMamba(
        {
            "image_size": 8,
            "patch_size": 2,
            "channels": 1,
            "num_labels": 3,
            "mamba": {
                "vocab_size": 2,
                "hidden_size": 16,
                "state_size": 4,
                "num_hidden_layers": 2,
                "intermediate_size": 32,
                "conv_kernel": 4,
                "time_step_rank": 2,
                "use_conv_bias": False,
                "time_step_min": 0.05,
                "time_step_max": 0.5,
            },
        }
    ).eval()


def test_vision_model_roundtrip_and_pixel_maps(tmp_path):
    from backend.core.presets import PresetError, load_pretrained

    model = tiny_vision()
    model.save_pretrained(tmp_path / "vim")
    loaded = load_pretrained("backend.lrp.vision.VisionMamba", tmp_path / "vim", roots=[tmp_path])
    x = torch.rand(3, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), model(x))
    for m in METHODS:
        r = attribute(loaded, pixel_values=x[0], target=1, method=m)
        assert r.shape == (8, 8) and torch.isfinite(r).all()
    with pytest.raises(PresetError):
        load_pretrained("backend.lrp.vision.VisionMamba", tmp_path / "vim")  # outside allowed roots


def test_vision_relevance_conserves_with_position_and_class_token_shares():
    from backend.lrp.methods import vision_scorer

    model = tiny_vision(1)
    x = torch.rand(2, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    pix, f = attribute_image(model, x, target=2, return_score=True)
    # the relevance of the learned position embeddings and class token closes the budget
    patches = model.patch_tokens(x).detach()
    emb = model.embed(x).detach().requires_grad_(True)
    s = vision_scorer(model, rules=RULES, from_embeds=True)(emb, torch.tensor([2, 2]))
    (g,) = torch.autograd.grad(s.sum(), emb)
    r_patch = (patches * g[:, :-1]).sum((1, 2))
    torch.testing.assert_close(pix.sum((1, 2)), r_patch, atol=1e-5, rtol=1e-4)
    total = (emb * g).sum((1, 2))
    torch.testing.assert_close(total, f, atol=1e-5, rtol=1e-4)


def test_hub_preset_loader_on_a_local_tiny_checkpoint(tmp_path, monkeypatch):
    from transformers import PreTrainedTokenizerFast

    from backend.core.presets import PresetError, active, load_pretrained, presets
    from backend.lrp import models
    from backend.zoo.recipes.relevance import SENT_VOCAB, _word_tokenizer

    ids = {p.path_or_id for p in presets("relevance") if p.source == "hub"}
    assert {"state-spaces/mamba-130m-hf", "state-spaces/mamba-1.4b-hf"} <= ids
    assert active("relevance", "hub").path_or_id == "state-spaces/mamba-130m-hf"
    assert active("relevance", "zoo").path_or_id == "mamba-sentiment"

    model = tiny_mamba(32, 2, 8, 64, 4, 2, len(SENT_VOCAB), seed=7)
    folder = tmp_path / "state-spaces" / "mamba-tiny-hf"
    model.save_pretrained(folder)
    _word_tokenizer(SENT_VOCAB).save_pretrained(folder)
    monkeypatch.setenv("WORKBENCH_MODEL_ROOTS", str(tmp_path))
    loaded, tok = models.load_mamba_lm(str(folder))
    assert isinstance(tok, PreTrainedTokenizerFast)
    ids = torch.tensor([tok.convert_tokens_to_ids(["<bos>", "good", "movie", "sentiment:"])])
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).logits, model(ids).logits)
    assert abs(rel_err(loaded, ids)) <= 1e-3
    # pickle-only checkpoints and paths outside the roots are refused
    bad = tmp_path / "pickle-only"
    bad.mkdir()
    torch.save(model.state_dict(), bad / "pytorch_model.bin")
    (bad / "config.json").write_text(model.config.to_json_string())
    with pytest.raises(PresetError):
        load_pretrained("transformers.MambaForCausalLM", bad)
    monkeypatch.delenv("WORKBENCH_MODEL_ROOTS")
    with pytest.raises(PresetError):
        models.load_mamba_lm(str(folder))


def test_batched_curves_equal_single_curves():
    from backend.lrp.faithfulness import text_curves, text_curves_batch

    model = tiny_mamba(32, 2, 8, 64, 4, 2, 50, seed=8)
    ids = torch.randint(3, 50, (3, 9), generator=torch.Generator().manual_seed(3))
    rel = attribute_text(model, ids, target=torch.tensor([4, 5, 6]))
    many = text_curves_batch(model, ids, rel, targets=torch.tensor([4, 5, 6]), candidates=range(1, 8), neutral_id=0)
    for b in range(3):
        one = text_curves(model, ids[b], rel[b], target=4 + b, candidates=range(1, 8), neutral_id=0)
        np.testing.assert_allclose(many[b].morf, one.morf, atol=1e-5)
        np.testing.assert_allclose(many[b].lerf, one.lerf, atol=1e-5)


def test_perturbation_passes_are_chunked_to_a_memory_budget(monkeypatch):
    """The real 1.4B config keeps ~50 MB of scan state per 64-token row and layer: a perturbation
    batch (sentences × 65 rows) runs in chunks, with the same curves as one pass."""
    from types import SimpleNamespace

    from transformers import MambaConfig

    from backend.lrp import faithfulness as fa
    from backend.lrp.faithfulness import text_curves_batch

    big = SimpleNamespace(
        config=MambaConfig(
            hidden_size=2048, num_hidden_layers=48, state_size=16, intermediate_size=4096, vocab_size=50280
        )
    )
    assert 10 <= fa.rows_per_pass(big, 64) <= 32
    assert fa.rows_per_pass(big, 64, budget_bytes=4e9, all_layers=True) == 1
    model = tiny_mamba(32, 2, 8, 64, 4, 2, 50, seed=8)
    ids = torch.randint(3, 50, (3, 9), generator=torch.Generator().manual_seed(3))
    rel = attribute_text(model, ids, target=torch.tensor([4, 5, 6]))
    whole = text_curves_batch(model, ids, rel, targets=torch.tensor([4, 5, 6]), candidates=range(1, 8), neutral_id=0)
    calls = []
    real = fa.lm_forward
    monkeypatch.setattr(fa, "rows_per_pass", lambda *a, **k: 5)
    monkeypatch.setattr(fa, "lm_forward", lambda m, x: calls.append(len(x)) or real(m, x))
    parts = text_curves_batch(model, ids, rel, targets=torch.tensor([4, 5, 6]), candidates=range(1, 8), neutral_id=0)
    assert max(calls) == 5 and sum(calls) == 2 * 3 * 8
    for a, b in zip(whole, parts):
        np.testing.assert_allclose(a.morf, b.morf, atol=1e-5)
        np.testing.assert_allclose(a.lerf, b.lerf, atol=1e-5)


def test_numbers_are_refused_not_clamped_and_nan_pixels_refused():
    from backend.lrp import service as svc

    assert svc.whole_in_range(7.0, 0, 9, "k") == 7 and svc.whole_in_range(np.int64(0), 0, 9, "k") == 0
    for bad in (10, -1, 2.5, float("nan"), float("inf"), None, True, "3"):
        with pytest.raises(svc.InputError, match="whole number from 0 to 9"):
            svc.whole_in_range(bad, 0, 9, "k")
    img = np.ones((20, 20))
    img[3, 4] = np.nan
    with pytest.raises(svc.InputError, match="NaN"):
        svc.to_model_image(img, 16)


def _subnormal_reads_as_zero() -> bool:
    return float(torch.tensor([1e-39]) * 1.0) == 0.0


def test_attributions_flush_subnormals_on_the_cpu_and_restore_the_thread_after(monkeypatch):
    """Subnormal floats (the decaying adjoint of a long scan) cost x86 CPUs many times more: every
    attribution runs with them read as zero, and leaves the thread as it found it, failed or not."""
    from backend.lrp import methods as M

    seen = []
    for name in ("_grad_x_input", "_captum", "backbone_forward"):

        def spy(*a, _orig=getattr(M, name), _name=name, **k):
            seen.append((_name, _subnormal_reads_as_zero()))
            return _orig(*a, **k)

        monkeypatch.setattr(M, name, spy)
    model = tiny_mamba(16, 2, 4, 32, 4, 2, 50)
    assert not _subnormal_reads_as_zero()
    attribute_text(model, torch.arange(8)[None], target=3)  # MambaLRP
    attribute_text(model, torch.arange(8)[None], target=3, method="gi")  # captum
    attribute_image(tiny_vision(), torch.rand(1, 1, 8, 8), target=1)
    M.mambalrp_choosing_target(model, torch.arange(8), lambda logits: int(logits.argmax()))
    assert {n for n, _ in seen} == {"_grad_x_input", "_captum", "backbone_forward"}
    assert all(flushed for _, flushed in seen) and not _subnormal_reads_as_zero()
    monkeypatch.setattr(M, "_grad_x_input", lambda *a, **k: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        attribute_text(model, torch.arange(8)[None], target=3)
    assert not _subnormal_reads_as_zero()
