"""The project's NF4 quantizer: levels against the published table, block absmax, nearest level,
packing, edge cases."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from backend.pissa.nf4 import LEVELS, NF4_PUBLISHED, nf4_dequantize, nf4_levels, nf4_quantize, nf4_roundtrip

torch.set_num_threads(1)


def test_levels_match_published_table():
    computed = nf4_levels()
    published = torch.tensor(NF4_PUBLISHED)
    assert computed.shape == (16,)
    assert torch.all(computed[1:] > computed[:-1])
    assert (computed - published).abs().max() < 1e-6
    assert computed[0] == -1.0 and computed[-1] == 1.0 and (computed == 0).sum() == 1
    # asymmetric: 7 negative, 8 positive levels
    assert int((computed < 0).sum()) == 7 and int((computed > 0).sum()) == 8


def _brute_force(w: torch.Tensor, block: int = 64) -> torch.Tensor:
    flat = w.reshape(-1).float()
    out = torch.empty_like(flat)
    for s in range(0, flat.numel(), block):
        chunk = flat[s : s + block]
        m = chunk.abs().max()
        if m == 0:
            out[s : s + block] = 0
            continue
        idx = (chunk[:, None] / m - LEVELS[None, :]).abs().argmin(dim=1)
        out[s : s + block] = LEVELS[idx] * m
    return out.view(w.shape)


@pytest.mark.parametrize("shape", [(64,), (3, 64), (7, 9), (130, 70), (1, 1)])
def test_roundtrip_is_nearest_level_times_block_absmax(shape):
    torch.manual_seed(0)
    w = torch.randn(shape)
    assert torch.allclose(nf4_roundtrip(w), _brute_force(w), atol=1e-7)


def test_block_absmax_is_exact_and_blocks_are_independent():
    torch.manual_seed(1)
    w = torch.randn(4, 64)
    w[2] *= 1000  # one huge block must not affect the others
    q = nf4_quantize(w)
    assert torch.equal(q.absmax, w.abs().amax(dim=1))
    d = nf4_dequantize(q)
    # the absmax element of each block is reproduced exactly (level ±1)
    rows = torch.arange(4)
    cols = w.abs().argmax(dim=1)
    assert torch.equal(d[rows, cols], w[rows, cols])
    assert torch.allclose(d[:2], nf4_roundtrip(w[:2]))


def test_values_on_the_grid_are_exact_and_zero_blocks_stay_zero():
    levels = LEVELS.repeat(8) * 0.37  # 128 values, two blocks of absmax 0.37
    assert torch.equal(nf4_roundtrip(levels), levels)
    z = torch.zeros(3, 50)
    assert torch.equal(nf4_roundtrip(z), z)


def test_packing_uses_four_bits_per_value():
    w = torch.randn(129, 64)
    q = nf4_quantize(w)
    n = w.numel()
    assert q.packed.dtype == torch.uint8 and q.packed.numel() == (n + 1) // 2
    assert q.absmax.numel() == -(-n // 64)
    assert q.nbytes < n * 4 / 7  # vs float32: ~7.1x smaller
    codes = q.codes()
    assert codes.numel() == n and int(codes.max()) <= 15


def test_dtype_and_shape_preserved_and_block_size_option():
    w = torch.randn(5, 33, dtype=torch.float64)
    d = nf4_dequantize(nf4_quantize(w, block_size=16))
    assert d.dtype == torch.float64 and d.shape == w.shape
    assert not torch.allclose(nf4_roundtrip(w.float(), 16), nf4_roundtrip(w.float(), 64))


@pytest.mark.parametrize(
    "bad", [torch.tensor([]), torch.tensor([1.0, float("nan")]), torch.tensor([float("inf")]), torch.arange(4)]
)
def test_bad_inputs_are_refused(bad):
    with pytest.raises((ValueError, TypeError)):
        nf4_quantize(bad)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(-1e3, 1e3, allow_nan=False, width=32), min_size=1, max_size=200))
def test_error_bound_half_the_widest_gap(values):
    w = torch.tensor(values, dtype=torch.float32)
    d = nf4_roundtrip(w)
    pad = (-w.numel()) % 64
    absmax = torch.cat([w.abs(), w.new_zeros(pad)]).view(-1, 64).amax(dim=1)
    per_value = absmax.repeat_interleave(64)[: w.numel()]
    widest = float((LEVELS[1:] - LEVELS[:-1]).max())
    assert torch.all((w - d).abs() <= per_value * widest / 2 + 1e-6 * (1 + per_value))
