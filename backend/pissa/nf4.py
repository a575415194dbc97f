"""A small NF4 quantizer that runs anywhere torch runs (CPU included).

NF4 (QLoRA, Dettmers et al. 2023) stores each weight as a 4-bit index into 16 "normal float" levels,
one absmax scale per block of 64 consecutive values of the flattened tensor. The levels are the
quantiles of a standard normal: 8 positive ones from `ndtri(linspace(0.9677083, 0.5, 9))[:-1]`, 7
negative ones from `-ndtri(linspace(0.9677083, 0.5, 8))[:-1]`, an exact zero, all divided by the
largest. `NF4_PUBLISHED` is the table bitsandbytes ships; `nf4_levels()` recomputes it from the
normal quantiles and the unit tests check that the two agree.

bitsandbytes (which peft's LoftQ needs) only quantizes on CUDA/XPU; this module is what makes QLoRA,
LoftQ and QPiSSA error figures computable on a CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

BLOCK_SIZE = 64
NF4_OFFSET = 0.9677083

# The published NF4 code book (bitsandbytes `create_normal_map` / its CUDA lookup table).
NF4_PUBLISHED = (
    -1.0,
    -0.6961928009986877,
    -0.5250730514526367,
    -0.39491748809814453,
    -0.28444138169288635,
    -0.18477343022823334,
    -0.09105003625154495,
    0.0,
    0.07958029955625534,
    0.16093020141124725,
    0.24611230194568634,
    0.33791524171829224,
    0.44070982933044434,
    0.5626170039176941,
    0.7229568362236023,
    1.0,
)


def nf4_levels(offset: float = NF4_OFFSET) -> torch.Tensor:
    """The 16 NF4 levels computed from standard-normal quantiles (float32, ascending)."""
    pos = torch.special.ndtri(torch.linspace(offset, 0.5, 9, dtype=torch.float64)[:-1])
    neg = -torch.special.ndtri(torch.linspace(offset, 0.5, 8, dtype=torch.float64)[:-1])
    levels = torch.cat([pos, neg, torch.zeros(1, dtype=torch.float64)]).sort().values
    return (levels / levels.max()).to(torch.float32)


LEVELS = torch.tensor(NF4_PUBLISHED, dtype=torch.float32)
_MIDPOINTS = (LEVELS[1:] + LEVELS[:-1]) / 2


@dataclass(frozen=True)
class NF4Tensor:
    """A packed NF4 tensor: two 4-bit codes per byte, one float32 absmax per block."""

    packed: torch.Tensor  # uint8, ceil(n / 2)
    absmax: torch.Tensor  # float32, ceil(n / block_size)
    shape: tuple[int, ...]
    dtype: torch.dtype
    block_size: int = BLOCK_SIZE

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def nbytes(self) -> int:
        return self.packed.numel() + 4 * self.absmax.numel()

    def codes(self) -> torch.Tensor:
        """The unpacked 4-bit indices (uint8 in 0..15), flattened, without padding."""
        hi = self.packed >> 4
        lo = self.packed & 0x0F
        return torch.stack([hi, lo], dim=1).reshape(-1)[: self.numel]


def nf4_quantize(w: torch.Tensor, block_size: int = BLOCK_SIZE) -> NF4Tensor:
    """Quantize `w` to NF4: per block of `block_size` values, divide by the block's absmax and
    store the index of the nearest of the 16 levels."""
    if block_size <= 0:
        raise ValueError("block_size must be positive")
    if not torch.is_floating_point(w):
        raise TypeError("nf4_quantize expects a floating-point tensor")
    flat = w.detach().reshape(-1).to(torch.float32)
    n = flat.numel()
    if n == 0:
        raise ValueError("cannot quantize an empty tensor")
    if not torch.isfinite(flat).all():
        raise ValueError("cannot quantize a tensor with NaN or infinite values")
    pad = (-n) % block_size
    if pad:
        flat = torch.cat([flat, flat.new_zeros(pad)])
    blocks = flat.view(-1, block_size)
    absmax = blocks.abs().amax(dim=1)
    scale = torch.where(absmax > 0, absmax, torch.ones_like(absmax))
    normed = (blocks / scale[:, None]).reshape(-1)
    codes = torch.bucketize(normed, _MIDPOINTS.to(normed.device)).to(torch.uint8)
    if codes.numel() % 2:
        codes = torch.cat([codes, codes.new_full((1,), 7)])  # code 7 is 0.0
    pairs = codes.view(-1, 2)
    packed = (pairs[:, 0] << 4) | pairs[:, 1]
    return NF4Tensor(packed=packed, absmax=absmax, shape=tuple(w.shape), dtype=w.dtype, block_size=block_size)


def nf4_dequantize(q: NF4Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Back to a dense tensor: level[code] × absmax of its block."""
    codes = q.codes().long()
    n = codes.numel()
    pad = (-n) % q.block_size
    values = LEVELS.to(q.absmax.device)[codes]
    if pad:
        values = torch.cat([values, values.new_zeros(pad)])
    dense = (values.view(-1, q.block_size) * q.absmax[:, None]).reshape(-1)[:n]
    return dense.view(q.shape).to(dtype or q.dtype)


def nf4_roundtrip(w: torch.Tensor, block_size: int = BLOCK_SIZE) -> torch.Tensor:
    """nf4(w): quantize then dequantize, in float32 (the "fake-quantized" weight)."""
    return nf4_dequantize(nf4_quantize(w, block_size), torch.float32)
