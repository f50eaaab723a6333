"""The naive twin of `cast`: zerosim's first implementation, kept unchanged as the yardstick.

It is slow (from float64 several times ml_dtypes' astype, and its stochastic rounding tens of times
its own round to nearest: `python benchmarks/casts.py --reference` measures both), but each step
reads as the definition. `cast` (the clever twin) must give the same bits for every input, and
tests/test_cast_fast.py checks that it does. `cast` also hands this twin the few elements its fast
formulas do not cover (see zerosim/precision/cast/_stochastic.py).

Round to nearest: float64 inputs first round *to odd* into float32, which keeps a sticky bit for
everything dropped; rounding to odd with p' >= p + 2 bits and then to nearest with p bits equals one
correct rounding (Boldo & Melquiond, "When double rounding is odd", 2005). float32 has p' = 24, every
narrower target p <= 11.

Stochastic rounding: find the two neighbours lo <= |x| <= hi in the target format, round up with
probability (|x| - lo) / (hi - lo).
"""

from __future__ import annotations

import numpy as np

from zerosim.precision._formats import Format
from zerosim.precision.cast._inputs import CastKernels, cast_with


def float64_to_float32_round_to_odd(x: np.ndarray) -> np.ndarray:
    """float64 -> float32, rounding toward zero and setting the last bit when anything was dropped."""
    y = x.astype(np.float32)  # round to nearest even
    back = y.astype(np.float64)
    inexact = (back != x) & np.isfinite(x)
    if not inexact.any():
        return y
    # Truncate: where nearest went away from zero (in magnitude), step one float32 back toward zero.
    went_up = inexact & (np.abs(back) > np.abs(x))
    y = np.where(went_up, np.nextafter(y, np.float32(0)), y)
    # Make the last significand bit 1 (the sticky bit) where the result was inexact.
    bits = y.view(np.uint32) | np.where(inexact, np.uint32(1), np.uint32(0))
    return bits.view(np.float32)


def nearest_reference(x: np.ndarray, f: Format) -> np.ndarray:
    """`x` (an array of one of our formats) rounded to nearest, ties to even, once, into format `f`."""
    if x.dtype == f.dtype:
        return x.copy()
    if f.name == "fp64":
        return x.astype(np.float64)
    if x.dtype == np.float64 and f.bits < 32:
        x = float64_to_float32_round_to_odd(x)
    elif x.dtype != np.float32 and x.dtype != np.float64:
        x = x.astype(np.float32)  # every 16- and 8-bit format widens to float32 exactly
    with np.errstate(over="ignore", invalid="ignore"):  # overflow to inf/NaN is the format's defined answer
        return x.astype(f.dtype)


def stochastic_reference(x: np.ndarray, f: Format, u: np.ndarray) -> np.ndarray:
    """`x` rounded stochastically into format `f`, up (in magnitude) where u < (|x| - lo) / (hi - lo).

    u: float64 uniforms in [0, 1), one per element of x.
    """
    x64 = x.astype(np.float64)
    mag = np.abs(x64)
    near = nearest_reference(mag, f)  # |x| rounded to nearest, in the target format
    near64 = near.astype(np.float64)
    bits = near.view(f.uint_dtype).astype(np.int64)
    # The two representable neighbours lo <= |x| <= hi, found by stepping the bit pattern by one.
    step_down = near64 > mag
    step_up = near64 < mag
    other_bits = np.where(step_down, bits - 1, np.where(step_up, bits + 1, bits))
    other = other_bits.astype(f.uint_dtype).view(f.dtype).astype(np.float64)
    lo = np.where(step_down, other, near64)
    hi = np.where(step_down, near64, other)
    gap = hi - lo
    with np.errstate(invalid="ignore", divide="ignore"):
        p_up = np.where(gap > 0, (mag - lo) / gap, 0.0)
    rounded = np.where(u < p_up, hi, lo)  # u: uniforms in [0, 1), one per element
    # Beyond the largest finite number there is no "next" value: keep round-to-nearest's answer.
    beyond = ~np.isfinite(mag) | (mag > f.max)
    rounded = np.where(beyond, near64, rounded)
    return nearest_reference(np.copysign(rounded, x64), f)  # exact: every value is already representable


def saturate_reference(a: np.ndarray, out: np.ndarray, f: Format) -> np.ndarray:
    """`out` (a rounded into f) with every element where |a| > f.max clamped to ±f.max (NaN stays NaN)."""
    wide = a.astype(np.float64)
    over = np.abs(wide) > f.max
    if over.any():
        out = np.where(over, np.copysign(f.max, wide), out.astype(np.float64)).astype(f.dtype)
    return out


REFERENCE_KERNELS = CastKernels(nearest_reference, stochastic_reference, saturate_reference)


def cast_reference(x, fmt, rounding: str = "nearest", rng: np.random.Generator | None = None, saturate: bool = False,
                   uniforms: np.ndarray | None = None) -> np.ndarray:
    """The slow, obviously-correct twin of `zerosim.precision.cast._cast`: the same arguments, the same bits."""
    return cast_with(REFERENCE_KERNELS, x, fmt, rounding, rng, saturate, uniforms)
