"""Single-matrix PiSSA facts: peft's PiSSA split, CPU LoftQ / QPiSSA, error-reduction ratios."""

import pytest
import torch

from backend.pissa import (
    error_reduction_ratio,
    loftq_cpu,
    low_rank,
    nf4_roundtrip,
    pissa_split,
    planted_spike,
    qpissa_cpu,
    singular_spectrum,
)

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def spike():
    return planted_spike(128, 96, spike_rank=8, seed=3)


@pytest.mark.parametrize("init", ["pissa", "pissa_niter_4"])
def test_residual_plus_adapter_reproduces_w(spike, init):
    s = pissa_split(spike, 8, init=init)
    assert s.lora_A.shape == (8, 96) and s.lora_B.shape == (128, 8)
    rel = float((s.residual + s.principal() - spike).norm() / spike.norm())
    assert rel <= 1e-5


def test_pissa_adapter_is_the_principal_part(spike):
    s = pissa_split(spike, 8)
    sv = singular_spectrum(spike)
    # the adapter carries the top-8 singular values, the residual the rest
    assert torch.allclose(singular_spectrum(s.principal())[:8], sv[:8], rtol=1e-4)
    assert torch.allclose(singular_spectrum(s.residual)[: len(sv) - 8], sv[8:], rtol=1e-3, atol=1e-6)
    a, b = low_rank(spike, 8)
    assert torch.allclose(b @ a, s.principal(), atol=1e-5)
    # the residual is narrower than W: that is why it quantizes better
    assert s.residual.abs().max() < spike.abs().max()


def test_alpha_changes_scaling_not_the_product(spike):
    s = pissa_split(spike, 4, alpha=16)
    assert s.scaling == 4.0
    assert torch.allclose(s.residual + s.principal(), spike, atol=1e-6)


def test_loftq_one_iteration_is_svd_of_the_quantization_error(spike):
    q, a, b = loftq_cpu(spike, 8, iters=1)
    assert torch.equal(q, nf4_roundtrip(spike))
    a2, b2 = low_rank(spike - q, 8)
    assert torch.allclose(b @ a, b2 @ a2, atol=1e-6)


def test_qpissa_quantizes_the_residual(spike):
    q, a, b = qpissa_cpu(spike, 8, iters=1)
    s = pissa_split(spike, 8)
    assert torch.allclose(q, nf4_roundtrip(s.residual), atol=1e-6)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ratio_ordering_on_planted_spikes(seed):
    w = planted_spike(160, 128, spike_rank=6, seed=seed)
    qlora = error_reduction_ratio(w, 8, "qlora")
    loftq1 = error_reduction_ratio(w, 8, "loftq", 1)
    loftq5 = error_reduction_ratio(w, 8, "loftq", 5)
    qp1 = error_reduction_ratio(w, 8, "qpissa", 1)
    qp5 = error_reduction_ratio(w, 8, "qpissa", 5)
    assert qlora == 0.0
    assert qp1 > loftq1 > 0
    assert loftq5 > loftq1
    assert qp5 >= qp1 - 1e-6
    assert qp5 < 1


def test_ratio_is_the_nuclear_norm_formula(spike):
    q, a, b = qpissa_cpu(spike, 4, iters=1)
    num = torch.linalg.matrix_norm((spike - (q + b @ a)).double(), "nuc")
    den = torch.linalg.matrix_norm((spike - nf4_roundtrip(spike)).double(), "nuc")
    assert error_reduction_ratio(spike, 4, "qpissa", 1) == pytest.approx(float(1 - num / den), rel=1e-6)


@pytest.mark.parametrize(
    "kwargs", [dict(rank=0, method="qpissa"), dict(rank=500, method="loftq"), dict(rank=4, method="gptq")]
)
def test_bad_arguments(spike, kwargs):
    with pytest.raises(ValueError):
        error_reduction_ratio(spike, **kwargs)


def test_non_matrix_refused():
    with pytest.raises(ValueError):
        singular_spectrum(torch.randn(3, 4, 5))
    with pytest.raises(ValueError):
        pissa_split(torch.randn(8, 8), 4, init="olora")


def test_fast_init_is_reproducible_and_leaves_the_global_rng_alone(spike):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    a = pissa_split(spike, 8, init="pissa_niter_2")
    b = pissa_split(spike, 8, init="pissa_niter_2")
    assert torch.equal(a.lora_A, b.lora_A) and torch.equal(a.residual, b.residual)
    assert torch.equal(torch.rand(3), expected)
