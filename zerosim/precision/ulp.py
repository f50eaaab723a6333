"""Spacing between neighbouring numbers of a format, and the lost-update test built on it.

A weight w stops learning from an update delta when w + delta rounds back to w: that happens once
|delta| is below half the spacing (ulp) at w. Seed 000's example: near 1.0 the fp16 spacing is
2**-10 ~ 9.8e-4, so 1.0 + 1e-5 is 1.0 in fp16, while fp32's spacing 2**-23 ~ 1.2e-7 keeps it.
"""

from __future__ import annotations

import numpy as np

from zerosim.precision.cast import cast, to_float64
from zerosim.precision.formats import get_format


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


def lost_update(w, delta, fmt) -> np.ndarray:
    """Mask of the entries where adding a nonzero `delta` to `w` in format `fmt` leaves `w` unchanged.

    The sum is formed in float64 and rounded once to `fmt`, as an FMA-free hardware add would: the
    float64 sum of two values of 32 bits or fewer is exact unless their exponents are more than 29
    apart, and then the dropped part lies far below half an ulp of `fmt` and cannot change the result.
    """
    w64, d64 = to_float64(w), to_float64(delta)
    if w64.shape != d64.shape and not (w64.ndim == 0 or d64.ndim == 0):
        np.broadcast_shapes(w64.shape, d64.shape)  # raises a clear shape error if they cannot pair up
    w_fmt = to_float64(cast(w64, fmt))
    after = to_float64(cast(w_fmt + d64, fmt))
    return (after == w_fmt) & (d64 != 0)
