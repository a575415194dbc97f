"""Public backend entry points refuse hostile arguments with a clear exception (ValueError,
KeyError, IndexError or TypeError, with a message) or succeed; nothing else escapes, nothing hangs,
and the model is unchanged afterwards."""

import math

import pytest
import torch
from hypothesis import HealthCheck, example, given, settings, strategies as st

from backend.core.interventions import count_hooks
from tests.helpers import tiny

CLEAR = (ValueError, KeyError, IndexError, TypeError)
NUMS = st.one_of(
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, -1, 1, 2**63, -0.0]),
)
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
def mamba():
    return tiny.tiny_mamba()


@SETTINGS
@given(
    target=NUMS,
    position=NUMS,
    method=st.sampled_from(["mambalrp", "gi", "ig", "nope", "", "attnroll"]),
    rules=st.one_of(st.none(), st.lists(st.sampled_from(["norm", "silu", "ssm", "gate", "x", ""]))),
    length=st.integers(0, 6),
)
def test_lrp_attribute(mamba, target, position, method, rules, length):
    from backend.lrp import attribute

    snap = snapshot(mamba)
    ids = torch.randint(0, 40, (1, length))
    out = clear_or_ok(attribute, mamba, ids, target=target, position=position, method=method, rules=rules)
    if out is not None:
        assert out.shape == (length,) and torch.isfinite(out).all()
    assert unchanged(mamba, snap)


@SETTINGS
@given(
    rank=NUMS,
    method=st.sampled_from(["qlora", "loftq", "qpissa", "svd", ""]),
    iters=NUMS,
    shape=st.tuples(st.integers(0, 70), st.integers(0, 70)),
    poison=st.sampled_from([None, float("nan"), float("inf")]),
)
# found under a long run: an infinite rank escaped as OverflowError; a huge count of refinements
# with a valid rank would run an SVD per refinement for hours
@example(rank=float("inf"), method="loftq", iters=0, shape=(1, 1), poison=None)
@example(rank=float("-inf"), method="qpissa", iters=1, shape=(3, 3), poison=None)
@example(rank=1, method="loftq", iters=10**12, shape=(3, 3), poison=None)
@example(rank=1, method="qpissa", iters=float("inf"), shape=(3, 3), poison=None)
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


@SETTINGS
@given(d=st.integers(0, 12), n=st.integers(0, 40), k=NUMS, width=st.integers(0, 20))
def test_sae_construction_and_encode(d, n, k, width):
    from backend.sae.sae import TopKSAE

    sae = clear_or_ok(TopKSAE, d, n, k if isinstance(k, int) else 3)
    if sae is not None:
        z = clear_or_ok(sae.encode, torch.randn(2, width))
        if z is not None:
            assert z.shape == (2, n) and int((z != 0).sum(-1).max()) <= sae.k


@SETTINGS
@given(files=st.sampled_from(["none", "cfg-only", "bad-cfg", "pickle", "garbage-safetensors"]))
def test_load_sae_refuses_broken_folders(tmp_path_factory, files):
    from backend.sae.formats import load as load_sae

    folder = tmp_path_factory.mktemp("sae")
    if files != "none":
        (folder / "cfg.json").write_text("{not json" if files == "bad-cfg" else '{"d_in": 4, "num_latents": 8, "k": 2}')
    if files == "pickle":
        torch.save({"W_dec": torch.zeros(8, 4)}, folder / "sae.pt")
    if files == "garbage-safetensors":
        (folder / "sae.safetensors").write_bytes(b"\x00garbage")
    with pytest.raises((*CLEAR, FileNotFoundError, OSError)) as info:
        load_sae(folder)
    assert str(info.value)


@pytest.fixture(scope="module")
def unet():
    return tiny.tiny_unet()


@SETTINGS
@given(
    spec=st.dictionaries(
        st.sampled_from(
            [
                "down_blocks.0.attentions.0.transformer_blocks.0.attn2.to_v",
                "mid_block.attentions.0.transformer_blocks.0.attn2.to_v",
                "up_blocks.1.attentions.0.transformer_blocks.0.attn2.to_v",
                "nope",
                "",
            ]
        ),
        st.lists(st.integers(-5, 40), max_size=5),
        max_size=3,
    )
)
def test_nemo_deactivate_validates_neurons(unet, spec):
    from backend.nemo import deactivate

    snap = snapshot(unet)

    def use():
        with deactivate(unet, spec):
            unet(torch.randn(1, 4, 8, 8), 3, encoder_hidden_states=torch.randn(1, 5, 12))

    clear_or_ok(use)
    assert unchanged(unet, snap)
