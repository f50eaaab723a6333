"""float32 and float64 rounded to float16 with `astype`'s bits, without its cost where the results are subnormal.

NumPy's wheels for x86-64 are built for a baseline without F16C, so `astype(np.float16)` converts in software
(NumPy 2.4, numpy/_core/src/common/half_private.hpp `FromFloatBits` and `FromDoubleBits`), and every inexact result
below float16's smallest normal, 2**-14, raises the underflow flag as it is made (`FloatStatus::RaiseUnderflow`,
numpy/_core/src/common/float_status.hpp: a call of `feraiseexcept` an element): ~65 ns an element on the project's
machine against ~2.5 for the rest, 25 times dearer. fp16 gradients are mostly that small: in `zerosim train --model
gpt --precision fp16-mixed` the casts into fp16 were a sixth of the run.

Where many elements are that small, every element is rounded by integer and float arithmetic on its bits, a dozen
NumPy calls over the whole array, no flag raised and no element picked out by index but NaN (`_by_bits`):

    below 2**-14   float16's numbers are the whole multiples of 2**-24, and a float16's bits there are that multiple's
                   count, 0 to 0x400 (0x400 is 2**-14 itself, where a value just below it rounds up). Adding |x| to a
                   float whose unit in the last place is 2**-24 (0.5 in float32, 2**28 in float64) rounds it to such a
                   multiple, once, to nearest, ties to even, and the sum's low bits then hold the count. The addition
                   meets no subnormal result (the sum is normal), and a subnormal input rounds to a count of 0 whether
                   the machine flushes it or not.
    2**-14 and up  |x|'s bits rounded at float16's last place (bit 13 of a float32's, bit 42 of a float64's) to
                   nearest, ties to even, as integers: + (half a place - 1) + the kept last bit, then shifted down; a
                   carry out of the mantissa moves the exponent up, as it should, and the exponent is rebiased (by
                   112 or 1008 in float16's exponent field). 65,520 and up, and inf, clamp to inf's bits, 0x7C00:
                   `FromFloatBits`' answers (its overflow flag aside: the callers ignore it).
    NaN            `astype` itself, element by element: its payload's bits are NumPy's (or the hardware's) business.

The sign bit is put back on each. Both are the IEEE answers, which `astype` gives too: tests/test_cast_fp16.py holds
them to `astype`'s bits and to a float64 reference, every float32 of the binades where the rounding decides something
(every one of the 2**32 float32 bit patterns was checked once against `astype`, 2026-11-27). An fp32 or bf16 run
never imports this module (`cast` asks for it at its first cast into fp16).

Where few elements are that small, or the array is small, the flags cost less than the dozen calls, and `astype`
takes the whole array: a sample of the array decides (`_mostly_normal`); both ways give the same bits.
"""

from __future__ import annotations

import numpy as np

# float16's smallest normal, 2**-14, as the bits of a float32 and of a float64
_F32_NORMAL_BITS, _F64_NORMAL_BITS = np.uint32(113 << 23), np.uint64(1009 << 52)
_F32_ABS, _F64_ABS = np.uint32(0x7FFFFFFF), np.uint64(0x7FFFFFFFFFFFFFFF)
# a float whose last place is 2**-24 (float16's subnormal quantum): its bits, which the sum's bits less these count
_F32_MAGIC, _F64_MAGIC = np.float32(0.5), np.float64(2.0**28)
_INF16 = 0x7C00  # float16's inf: its exponent field all ones
# per width, for `_by_bits`: (its bits' dtype, |x|'s mask, 2**-14's bits, the magic float, the shift to float16's last
# place, half that place less one, the exponent's rebias in float16's exponent field, inf's bits: above them NaN)
_F32 = (np.uint32, _F32_ABS, _F32_NORMAL_BITS, _F32_MAGIC, np.uint32(13), np.uint32(2**12 - 1), np.uint32(112 << 10),
        np.uint32(0x7F800000))
_F64 = (np.uint64, _F64_ABS, _F64_NORMAL_BITS, _F64_MAGIC, np.uint64(42), np.uint64(2**41 - 1), np.uint64(1008 << 10),
        np.uint64(0x7FF0000000000000))
_SAMPLE_FROM = 512  # elements up to which `astype` takes the array unlooked at: a sample costs ~3 µs, its flags at
# most ~33 (the casts of a GPT's fp16 run: 0.245 s against 0.413 for `astype` alone, alike from 256 to 1,024)
_SAMPLE = 64  # elements of an array looked at to decide (`_mostly_normal`)
_FEW = 4  # of them small, at most, for `astype` to take the whole array: one in 16, between where `_by_bits` and
# `astype` cost alike, one small element in 8 at 4,096 elements and one in 32 at 65,536 (the flag's ~65 ns a small
# element against a dozen calls over every element: benchmarks/README.md, the twenty-second round)


def to_fp16(x: np.ndarray) -> np.ndarray:
    """`x.astype(np.float16)` for a NumPy array `x`: the same bits, NaN, inf and -0 included, in the same layout; a
    float32 or float64 one with many small values made from its bits (the module docstring says how, and why)."""
    if (x.size <= _SAMPLE_FROM or x.dtype.char not in "fd" or not x.flags.c_contiguous  # (astype keeps a layout)
            or _mostly_normal(x)):
        return x.astype(np.float16)
    return _by_bits(x)


def _by_bits(x: np.ndarray) -> np.ndarray:
    """float16 of a C-contiguous float32 or float64 array, every element rounded from its bits (the module
    docstring): the bits `astype` gives, with no floating-point flag raised (the callers ignore `astype`'s overflow,
    and NaN's invalid: NaN takes `astype` still)."""
    wide, whole, normal_bits, magic, shift, below_half, rebias, nan_above = _F32 if x.dtype == np.float32 else _F64
    bits = x.view(wide)
    magnitude = bits & whole
    one = wide(1)
    normal = np.minimum(((magnitude + below_half + ((magnitude >> shift) & one)) >> shift) - rebias, wide(_INF16))
    small = magnitude < normal_bits  # their `normal`, wrapped below 0, clamped to _INF16: not read
    counts = (np.minimum(magnitude, normal_bits).view(x.dtype) + magic).view(wide) - magic.view(wide)
    out = np.where(small, counts, normal).astype(np.uint16)
    out |= (bits >> wide(8 * x.itemsize - 16)).astype(np.uint16) & np.uint16(0x8000)  # the sign
    nan = magnitude > nan_above
    if nan.any():
        out[nan] = x[nan].astype(np.float16).view(np.uint16)
    return out.view(np.float16)


def _mostly_normal(x: np.ndarray) -> bool:
    """Whether at most `_FEW` of `_SAMPLE` elements spread through `x` are small: nonzero and below 2**-14 in
    magnitude (a zero costs `astype` nothing: it is exact)."""
    flat = x.reshape(-1)
    sample = np.abs(flat[:: flat.size // _SAMPLE][:_SAMPLE])
    return np.count_nonzero((sample < 2.0**-14) & (sample > 0)) <= _FEW
