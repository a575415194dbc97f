"""MambaLRP on FalconMamba: the forward reproduces transformers' own (with its weightless RMS norms
on Δ, B and C), relevance is conserved with the same four rules, and a user's FalconMamba folder is
picked, loaded and explained through the Relevance tab's service."""

from __future__ import annotations

import pytest
import torch

from backend.lrp import RULES, attribute_text, conservation
from backend.lrp.forward import lm_forward

torch.set_num_threads(1)


def tiny_falcon_mamba(seed: int = 0, *, conv_bias: bool = False, layers: int = 2):
    from transformers import FalconMambaConfig, FalconMambaForCausalLM

    torch.manual_seed(seed)
    cfg = FalconMambaConfig(
        vocab_size=50,
        hidden_size=32,
        state_size=8,
        num_hidden_layers=layers,
        expand=2,
        conv_kernel=4,
        time_step_rank=4,
        use_conv_bias=conv_bias,
        mixer_rms_eps=1e-6,
        tie_word_embeddings=False,
        time_step_min=0.05,
        time_step_max=0.5,
    )
    return FalconMambaForCausalLM(cfg).eval()


@pytest.fixture(scope="module")
def case():
    return tiny_falcon_mamba(1), torch.randint(0, 50, (4, 15), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("rules", [(), None, ("ssm",)])
def test_forward_equals_transformers_falcon_mamba(case, rules):
    model, ids = case
    with torch.no_grad():
        torch.testing.assert_close(lm_forward(model, ids, rules=rules), model(ids).logits, atol=2e-5, rtol=1e-5)


def test_without_the_b_c_dt_norms_the_forward_would_differ(case):
    """The norms matter on this model: dropping them (as a plain Mamba forward would) changes the logits."""
    model, ids = case
    mixers = [layer.mixer for layer in model.backbone.layers]
    saved = [(m.b_layernorm, m.c_layernorm, m.dt_layernorm) for m in mixers]
    try:
        for m in mixers:
            del m.b_layernorm, m.c_layernorm, m.dt_layernorm
        with torch.no_grad():
            plain = lm_forward(model, ids)
    finally:
        for m, (b, c, dt) in zip(mixers, saved):
            m.b_layernorm, m.c_layernorm, m.dt_layernorm = b, c, dt
    with torch.no_grad():
        assert (plain - model(ids).logits).abs().max() > 1e-2


def test_mambalrp_conserves_the_logit_on_falcon_mamba(case):
    model, ids = case
    s, f = conservation(model, ids, target=3)
    assert float(torch.median((s - f).abs() / f.abs())) <= 1e-3
    # and the rules are what makes it so: Gradient x Input is far off
    s_gi, f_gi = conservation(model, ids, target=3, method="gi")
    assert float(torch.median((s_gi - f_gi).abs() / f_gi.abs())) > 0.1
    for dropped in set(RULES) - {"ssm"}:
        s_d, f_d = conservation(model, ids, target=3, rules=set(RULES) - {dropped})
        assert float(torch.median((s_d - f_d).abs() / f_d.abs())) > 1e-4, dropped


def test_the_norms_make_the_ssm_parameter_path_sum_to_zero(case):
    """On FalconMamba Δ, B and C are RMS-normalised, so each is scale-invariant in the token's u_t:
    by Euler's theorem (degree 0) u_t · ∂/∂u_t through that path is zero, and the total stays
    conserved even without the SSM rule. The rule still decides how relevance is shared among tokens."""
    model, ids = case
    no_ssm = set(RULES) - {"ssm"}
    s, f = conservation(model, ids, target=3, rules=no_ssm)
    assert float(torch.median((s - f).abs() / f.abs())) <= 1e-3
    with_rule = attribute_text(model, ids, target=3)
    without = attribute_text(model, ids, target=3, rules=no_ssm)
    assert (with_rule - without).abs().max() > 1e-3


def test_a_users_falcon_mamba_and_mamba_folders_are_explained(tmp_path, monkeypatch):
    from backend.core import store
    from backend.lrp import service as svc
    from tests.helpers.standins import build_local
    from tests.helpers.standins import relevance as R

    monkeypatch.setenv("WORKBENCH_MODEL_ROOTS", str(tmp_path))
    monkeypatch.setattr(store, "_MODELS", type(store._MODELS)())
    build_local(tmp_path, R.LOCAL)
    for name, cls in (("own-falcon-mamba", "FalconMambaForCausalLM"), ("own-mamba", "MambaForCausalLM")):
        m = svc.load_text("zoo", str(tmp_path / name))
        assert type(m.model).__name__ == cls and m.preset.source == "local"
        res = svc.explain_text(m, "the movie was good and the cast was great", ["mambalrp", "gi"])
        assert len(res["relevance"]["mambalrp"]) == len(res["tokens"]) > 5
        ids = torch.tensor([res["ids"]])
        rel = attribute_text(m.model, ids, target=res["target_id"])
        assert torch.allclose(rel[0].float(), torch.tensor(res["relevance"]["mambalrp"]), atol=1e-5)
    with pytest.raises(svc.InputError, match="MambaLRP needs a Mamba model"):
        from tests.helpers.tiny import tiny_llama

        tiny_llama().save_pretrained(tmp_path / "llama")
        svc.load_text("zoo", str(tmp_path / "llama"))
