"""Public backend entry points refuse hostile arguments with a clear exception (ValueError,
KeyError, IndexError or TypeError, with a message) or succeed; nothing else escapes, nothing hangs,
and the model is unchanged afterwards."""
import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from backend.core.interventions import count_hooks

CLEAR = (ValueError, KeyError, IndexError, TypeError)
NUMS = st.one_of(st.integers(-10**12, 10**12), st.floats(allow_nan=True, allow_infinity=True),
                 st.sampled_from([0, -1, 1, 2**63, -0.0]))
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))


def clear_or_ok(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except CLEAR as e:
        assert str(e), f"{type(e).__name__} without a message"
        return None


def snapshot(model):
    return {k: v.clone() for k, v in model.state_dict().items()}


def unchanged(model, snap):
    return count_hooks(model) == 0 and all(torch.equal(v, snap[k]) for k, v in model.state_dict().items())


@pytest.fixture(scope="module")
def tiny_mamba():
    from transformers import MambaConfig, MambaForCausalLM

    torch.manual_seed(0)
    return MambaForCausalLM(MambaConfig(vocab_size=40, hidden_size=16, state_size=4, num_hidden_layers=2,
                                        expand=2, conv_kernel=3, use_conv_bias=False)).eval()


@SETTINGS
@given(target=NUMS, position=NUMS, method=st.sampled_from(["mambalrp", "gi", "ig", "nope", "", "attnroll"]),
       rules=st.one_of(st.none(), st.lists(st.sampled_from(["norm", "silu", "ssm", "gate", "x", ""]))),
       length=st.integers(0, 6))
def test_lrp_attribute(tiny_mamba, target, position, method, rules, length):
    from backend.lrp import attribute

    snap = snapshot(tiny_mamba)
    ids = torch.randint(0, 40, (1, length))
    out = clear_or_ok(attribute, tiny_mamba, ids, target=target, position=position, method=method, rules=rules)
    if out is not None:
        assert out.shape == (length,) and torch.isfinite(out).all()
    assert unchanged(tiny_mamba, snap)


@SETTINGS
@given(rank=NUMS, method=st.sampled_from(["qlora", "loftq", "qpissa", "svd", ""]), iters=NUMS,
       shape=st.tuples(st.integers(0, 70), st.integers(0, 70)),
       poison=st.sampled_from([None, float("nan"), float("inf")]))
def test_pissa_error_reduction_ratio(rank, method, iters, shape, poison):
    from backend.pissa import error_reduction_ratio

    w = torch.randn(*shape)
    if poison is not None and w.numel():
        w[0, 0] = poison
    r = clear_or_ok(error_reduction_ratio, w, rank, method, iters=iters)
    if r is not None:
        assert math.isfinite(r)


@SETTINGS
@given(n=st.integers(0, 300), poison=st.sampled_from([None, float("nan"), float("inf"), 1e38]))
def test_nf4_roundtrip(n, poison):
    from backend.pissa import nf4_dequantize, nf4_quantize

    w = torch.randn(n)
    if poison is not None and n:
        w[0] = poison
    q = clear_or_ok(nf4_quantize, w)
    if q is not None:
        back = nf4_dequantize(q)
        assert back.shape == w.shape


@SETTINGS
@given(top_k=NUMS, n_math=st.integers(0, 3), factor=NUMS)
def test_mathneuro_identify_and_scaled(top_k, n_math, factor):
    from backend.mathneuro import identify, scaled
    from tests.helpers.tiny import tiny_llama

    model = tiny_llama()
    snap = snapshot(model)
    math_ids = [torch.randint(1, 60, (5,)) for _ in range(n_math)]
    other = [torch.randint(1, 60, (5,))]
    masks = clear_or_ok(identify, model, math_ids, other, top_k)
    if masks is not None:
        def use():
            with scaled(model, masks, factor):
                model(torch.tensor([[1, 2, 3]]))
        clear_or_ok(use)
    assert unchanged(model, snap)
