"""Spacing between neighbouring numbers of a format, and the lost-update test built on it.

A weight w stops learning from an update delta when w + delta rounds back to w: that happens once
|delta| is below half the spacing (ulp) at w. Seed 000's example: near 1.0 the fp16 spacing is
2**-10 ~ 9.8e-4, so 1.0 + 1e-5 is 1.0 in fp16, while fp32's spacing 2**-23 ~ 1.2e-7 keeps it.
"""

from __future__ import annotations

import numpy as np

from zerosim.precision._formats import get_format
from zerosim.precision.cast import cast, to_float64


def ulp(x, fmt) -> np.ndarray:
    """Spacing of `fmt` at each value of `x` (as float64): the gap from |x| to the next larger number.

    Like `numpy.spacing`, this is the gap *above* |x|, so at a power of two it is the wider of the two
    gaps. Below the smallest normal number the spacing is the smallest subnormal, as in the format.
    """
    f = get_format(fmt)
    mag = np.abs(to_float64(x))
    with np.errstate(divide="ignore"):
        _, exp = np.frexp(mag)  # mag = m * 2**exp with 0.5 <= m < 1, so the binade is 2**(exp-1)
    binade = np.where(mag == 0, f.min_exponent, np.maximum(exp - 1, f.min_exponent))
    spacing = np.ldexp(1.0, binade - f.mantissa_bits)
    return np.where(np.isfinite(mag), spacing, np.nan)


def _sum_round_to_odd(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a + b in float64, rounded to odd: exact when representable, else the odd neighbour of the sum.

    TwoSum (Knuth) gives the exact error e of s = fl(a + b); when e != 0 the exact sum lies strictly
    between s and its neighbour toward e, and round-to-odd keeps whichever of the two is odd. That
    sticky bit makes the later rounding to a <= 24-bit format a single correct rounding (see _cast.py).
    """
    with np.errstate(invalid="ignore", over="ignore"):
        s = a + b
        bb = s - a
        e = (a - (s - bb)) + (b - bb)
    inexact = (e != 0) & np.isfinite(s)
    even = (s.view(np.uint64) & np.uint64(1)) == 0
    toward = np.where(e > 0, np.inf, -np.inf)
    return np.where(inexact & even, np.nextafter(s, toward), s)


def lost_update(w, delta, fmt) -> np.ndarray:
    """Mask of the entries where adding a nonzero `delta` to `w` in format `fmt` leaves `w` unchanged.

    The sum is rounded once to `fmt`, as a hardware add would: it is formed exactly (float64 plus
    the TwoSum error term, kept as a sticky bit), so an update just above half an ulp is kept even
    when float64 alone would have rounded it onto the midpoint.
    """
    w64, d64 = np.broadcast_arrays(to_float64(w), to_float64(delta))
    f = get_format(fmt)
    w_fmt = to_float64(cast(w64, f))
    exactish = w_fmt + d64 if f.bits == 64 else _sum_round_to_odd(w_fmt, d64)  # fp64: the plain sum is the rounding
    after = to_float64(cast(exactish, f))
    return (after == w_fmt) & (d64 != 0)
