"""float32 and float64 rounded to float16 with `astype`'s bits, without its cost where the results are subnormal.

NumPy's wheels for x86-64 are built for a baseline without F16C, so `astype(np.float16)` converts in software
(NumPy 2.4, numpy/_core/src/common/half_private.hpp `FromFloatBits` and `FromDoubleBits`), and every inexact result
below float16's smallest normal, 2**-14, raises the underflow flag as it is made (`FloatStatus::RaiseUnderflow`,
numpy/_core/src/common/float_status.hpp: a call of `feraiseexcept` an element): ~65 ns an element on the project's
machine against ~2.5 for the rest, 25 times dearer. fp16 gradients are mostly that small: in `zerosim train --model
gpt --precision fp16-mixed` the casts into fp16 were a sixth of the run.

Below 2**-14 float16's numbers are the whole multiples of 2**-24, and a float16's bits there are that multiple's
count, 0 to 0x400 (0x400 is 2**-14 itself, where a value just below it rounds up). Adding |x| to a float whose unit
in the last place is 2**-24 (0.5 in float32, 2**28 in float64) rounds it to such a multiple, once, to nearest, ties
to even, and the sum's low bits then hold the count: the IEEE answer, which `astype` gives too. The arithmetic meets
no subnormal result (the sum is normal), and a subnormal input rounds to a count of 0 whether the machine flushes it
or not. Every other element (|x| >= 2**-14, inf, NaN: their payloads are `astype`'s business) goes through `astype`
itself, with the small ones set to 0 first (zeros stay: they are exact, and cost `astype` nothing).
tests/test_cast_fp16.py holds the two to `astype`'s bits and to a float64 reference, every float32 of the binades
concerned. An fp32 or bf16 run never imports this module (`cast` asks for it at its first cast into fp16).

Where few elements are that small, or the array is small, the flags cost less than setting them apart, and `astype`
takes the whole array: a sample of the array decides (`_mostly_normal`); both ways give the same bits.
"""

from __future__ import annotations

import numpy as np

# float16's smallest normal, 2**-14, as the bits of a float32 and of a float64
_F32_NORMAL_BITS, _F64_NORMAL_BITS = np.uint32(113 << 23), np.uint64(1009 << 52)
_F32_ABS, _F64_ABS = np.uint32(0x7FFFFFFF), np.uint64(0x7FFFFFFFFFFFFFFF)
# a float whose last place is 2**-24 (float16's subnormal quantum): its bits, which the sum's bits less these count
_F32_MAGIC, _F64_MAGIC = np.float32(0.5), np.float64(2.0**28)
_SAMPLE_FROM = 512  # elements up to which `astype` takes the array unlooked at: a sample costs ~3 µs, its flags at
# most ~33 (the casts of a GPT's fp16 run: 0.245 s against 0.413 for `astype` alone, alike from 256 to 1,024)
_SAMPLE = 64  # elements of an array looked at to decide (`_mostly_normal`)
_FEW = 4  # of them small, at most, for `astype` to take the whole array (one in 16: the flag's ~65 ns an element
# against ~4 ns an element of setting them apart, measured on the casts of a GPT's fp16 run)


def to_fp16(x: np.ndarray) -> np.ndarray:
    """`x.astype(np.float16)` for a NumPy array `x`: the same bits, NaN, inf and -0 included, in the same layout; a
    float32 or float64 one's small values made by an addition (the module docstring says how, and why)."""
    if (x.size <= _SAMPLE_FROM or x.dtype.char not in "fd" or not x.flags.c_contiguous  # (astype keeps a layout)
            or _mostly_normal(x)):
        return x.astype(np.float16)
    wide, whole, normal_bits, magic = ((np.uint32, _F32_ABS, _F32_NORMAL_BITS, _F32_MAGIC) if x.dtype == np.float32
                                       else (np.uint64, _F64_ABS, _F64_NORMAL_BITS, _F64_MAGIC))
    flat = x.reshape(-1)
    bits = flat.view(wide)
    magnitude = np.bitwise_and(bits, whole)
    small = np.flatnonzero(magnitude - wide(1) < normal_bits - wide(1))  # 0 < |x| < 2**-14 (0 wraps to the top)
    rest = flat.copy()
    rest[small] = 0.0
    out = rest.astype(np.float16)  # every element not small: normal, inf or NaN
    counts = magnitude[small].view(x.dtype) + magic  # |x| + magic, rounded once to a multiple of 2**-24
    counts = counts.view(wide) - magic.view(wide)  # that multiple's count: float16's bits of |x|
    signs = (bits[small] >> (8 * x.itemsize - 16)).astype(np.uint16) & np.uint16(0x8000)
    out.view(np.uint16)[small] = counts.astype(np.uint16) | signs
    return out.reshape(x.shape)


def _mostly_normal(x: np.ndarray) -> bool:
    """Whether at most `_FEW` of `_SAMPLE` elements spread through `x` are small: nonzero and below 2**-14 in
    magnitude (a zero costs `astype` nothing: it is exact)."""
    flat = x.reshape(-1)
    sample = np.abs(flat[:: flat.size // _SAMPLE][:_SAMPLE])
    return np.count_nonzero((sample < 2.0**-14) & (sample > 0)) <= _FEW
