"""MXFP8: fp8 in blocks of 32 consecutive elements, each block with a power-of-two E8M0 scale (one byte).

Transformer Engine at d0067d0 (common/cast/mxfp8/quantize_mxfp8.cuh, the rowwise path; common/util/ptx_arch_spec.cuh:
float_to_e8m0; common/util/ptx.cuh: exp2f_rcp):

    block amax   max |x| over the 32 elements, in fp32
    exponent     e = float_to_e8m0(fl32(amax · fl32(1/max_fp8))): the fp32 exponent field, plus one when any
                 mantissa bit is set (rounding up to a power of two: the block's amax lands at or below max_fp8);
                 0 for 0, 0xFE for inf, 0xFF for NaN; 0 also for a subnormal at most 2^-127
    q            fp8(x · 2^(127 - e)), saturating (x · a power of two: exact unless it leaves fp32's normal range)
    received     q · 2^(e - 127) (exact), rounded once to the receiver's format
A last block shorter than 32 is scaled by its own elements (the kernel pads a partial block; its padding adds
nothing to the amax). NOTE: Blackwell converts with `cvt.rp.satfinite.ue8m0x2.f32` (round toward +inf), the
software path's rounding above; not confirmable here without a GPU.
"""

from __future__ import annotations

import numpy as np

from zerosim.precision._formats import get_format
from zerosim.precision.cast import cast
from zerosim.precision.quantize._fp8_scaling import fp8_format

BLOCK = 32  # MXFP8BlockScaling: "Each group of 32 consecutive values is scaled together"


def block_count(m: int) -> int:
    """The blocks (and E8M0 scale bytes) of a piece of m elements: ceil(m / 32), a last partial block its own."""
    return -(-m // BLOCK)


def float_to_e8m0(val: np.ndarray) -> np.ndarray:
    """ptx::float_to_e8m0's software path on fp32 values >= 0: the biased exponent, rounded up (uint8)."""
    v = np.asarray(val, np.float32)
    bits = v.view(np.uint32)
    exponent = (bits >> np.uint32(23)) & np.uint32(0xFF)
    mantissa = bits & np.uint32(0x7FFFFF)
    up = (mantissa > 0) & (exponent != 0xFE) & ~((exponent == 0) & (mantissa <= 0x400000))
    e = (exponent + up.astype(np.uint32)).astype(np.uint32)
    e = np.where(v == 0, 0, e)
    e = np.where(np.isinf(v), 0xFE, e)
    return np.where(np.isnan(v), 0xFF, e).astype(np.uint8)


def e8m0_scale_inverse(e: np.ndarray) -> np.ndarray:
    """exp2f_rcp<float>: 2^(127 - e) in fp32 (254 -> 2^-127, a subnormal; 255 -> NaN)."""
    e = np.asarray(e, np.uint32)
    bits = (np.uint32(254) - np.minimum(e, 254)) << np.uint32(23)
    bits = np.where(e == 254, np.uint32(0x00400000), bits)
    bits = np.where(e == 255, np.uint32(0x7FFFFFFF), bits)
    return bits.astype(np.uint32).view(np.float32)


def mxfp8_quantize(x, fmt="fp8_e4m3") -> tuple:
    """(q (M,) fp8, e (ceil(M/32),) uint8): `x` (flat, any float format) in blocks of 32."""
    f = fp8_format(fmt)
    x32 = np.asarray(x).astype(np.float32).reshape(-1)
    n = x32.size
    blocks = block_count(n)
    padded = np.zeros(blocks * BLOCK, np.float32)
    padded[:n] = x32
    amax = np.abs(padded.reshape(blocks, BLOCK)).max(axis=1) if blocks else np.zeros(0, np.float32)
    rcp = np.float32(1.0 / f.max)  # Quantized_Limits::max_norm_rcp = 1.0 / max_norm (a constexpr float)
    e = float_to_e8m0((amax * rcp).astype(np.float32))  # one fp32 multiply
    inv = e8m0_scale_inverse(e)
    with np.errstate(over="ignore", invalid="ignore"):
        y = (padded.reshape(blocks, BLOCK) * inv[:, None]).reshape(-1)[:n]
    return cast(y, f, saturate=True), e


def mxfp8_dequantize(q, e, out_format="fp32", block_of=None) -> np.ndarray:
    """q · 2^(e - 127), rounded once to `out_format` (the product is exact in float64). `block_of`: each element's
    block, an index into e (a receiver's buffer of several pieces, each in blocks of its own: `block_index`);
    default the consecutive blocks of 32 of one piece."""
    q = np.asarray(q)
    scale = np.ldexp(1.0, np.asarray(e, np.int64) - 127)  # (blocks,) float64, exact
    per = np.repeat(scale, BLOCK)[: q.size] if block_of is None else scale[block_of]
    return cast(q.astype(np.float64) * per, get_format(out_format))


def block_index(counts) -> np.ndarray:
    """(Σ m_r,) int64: each element's block in pieces of `counts` elements laid end to end, each piece in blocks of
    32 of its own (its last one cut at its end), the blocks numbered in order: where the E8M0 byte of a gathered
    element sits among the gathered scales."""
    out, first = [], 0
    for m in counts:
        out.append(first + np.arange(m, dtype=np.int64) // BLOCK)
        first += block_count(m)
    return np.concatenate(out) if out else np.zeros(0, np.int64)
