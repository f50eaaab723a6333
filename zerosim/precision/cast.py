"""Casting between formats the way hardware does it: one rounding, to nearest, ties to even.

NOTE: ml_dtypes converts float64 to bfloat16 and fp8 *through float32*, rounding twice. Double
rounding is wrong near ties: 1 + 2**-8 + 2**-40 is just above the midpoint between bf16's 1.0 and
1.0078125, so it must round up, but float32 first rounds it to exactly the midpoint 1 + 2**-8, and
the second rounding then ties to even, down to 1.0. We avoid that with the classic fix: the first
step (float64 -> float32) rounds *to odd*, which keeps a sticky bit for everything it drops. Rounding
to odd with p' >= p + 2 bits followed by round-to-nearest to p bits equals one correct rounding
(Boldo & Melquiond, "When double rounding is odd", 2005); float32 has p' = 24 and every target below
it has p <= 11.

Stochastic rounding rounds |x| up to the next representable number with probability equal to the
distance from the number below, divided by the gap: its expectation is x itself.
"""

from __future__ import annotations

import numpy as np

from zerosim.precision.formats import Format, get_format

ROUNDINGS = ("nearest", "stochastic")


def _as_float_array(x) -> np.ndarray:
    """`x` as an array of one of our formats' dtypes; integers widen to float64 (exact below 2**53)."""
    a = np.asarray(x)
    if a.dtype.kind in "biu":
        return a.astype(np.float64)
    get_format(a.dtype)  # raises a clear error for object, complex, string, ... dtypes
    return a


def _float64_to_float32_round_to_odd(x: np.ndarray) -> np.ndarray:
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


def _nearest(x: np.ndarray, f: Format) -> np.ndarray:
    if x.dtype == f.dtype:
        return x.copy()
    if f.name == "fp64":
        return x.astype(np.float64)
    if x.dtype == np.float64 and f.bits < 32:
        x = _float64_to_float32_round_to_odd(x)
    elif x.dtype != np.float32 and x.dtype != np.float64:
        x = x.astype(np.float32)  # every 16- and 8-bit format widens to float32 exactly
    with np.errstate(over="ignore", invalid="ignore"):  # overflow to inf/NaN is the format's defined answer
        return x.astype(f.dtype)


def _stochastic(x: np.ndarray, f: Format, u: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    mag = np.abs(x64)
    near = _nearest(mag, f)  # |x| rounded to nearest, in the target format
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
    return _nearest(np.copysign(rounded, x64), f)  # exact: every value is already representable


def cast(x, fmt, rounding: str = "nearest", rng: np.random.Generator | None = None, saturate: bool = False,
         uniforms: np.ndarray | None = None) -> np.ndarray:
    """Round `x` to format `fmt` and return an array of that format's dtype.

    Args:
        x: array-like of any float dtype (numpy or ml_dtypes) or integers; Python floats are float64.
        fmt: a format name (``"fp64" "fp32" "fp16" "bf16" "fp8_e4m3" "fp8_e5m2"``), dtype or `Format`.
        rounding: ``"nearest"`` (round to nearest, ties to even; one rounding even from float64) or
            ``"stochastic"`` (unbiased; needs `rng`).
        rng: a `numpy.random.Generator`, required for stochastic rounding so runs are reproducible...
        uniforms: ...or the uniform [0, 1) draws themselves, one per element (the engines pass
            `counter_uniforms`, which depend on an element's index, not on how the buffer is sharded).
        saturate: clamp finite values beyond the format's max to ±max (and ±inf to ±max), as NVIDIA's
            ``cvt.satfinite`` does for fp8. Without it overflow follows the format: inf where the
            format has inf, NaN for ``fp8_e4m3`` (E4M3FN has no inf).

    >>> float(cast(1 + 2**-8 + 2**-40, "bf16"))
    1.0078125
    """
    f = get_format(fmt)
    if rounding not in ROUNDINGS:
        raise ValueError(f"unknown rounding {rounding!r}; choose one of {ROUNDINGS}")
    if not has_values(x):
        return x.astype(f.dtype)  # the meta backend's data-less array: nothing to round, only the dtype changes
    a = _as_float_array(x)
    if rounding == "stochastic":
        if uniforms is not None:
            u = np.asarray(uniforms, dtype=np.float64)
            if u.shape != a.shape:
                raise ValueError(f"uniforms must have the shape of x, {a.shape}; got {u.shape}")
        elif isinstance(rng, np.random.Generator):
            u = rng.random(a.shape)
        else:
            raise ValueError("stochastic rounding needs rng=numpy.random.default_rng(seed) (or uniforms=...), so runs can be repeated")
        out = _stochastic(a, f, u)
    else:
        out = _nearest(a, f)
    if saturate:
        wide = a.astype(np.float64)
        over = np.abs(wide) > f.max
        if over.any():
            out = np.where(over, np.copysign(f.max, wide), out.astype(np.float64)).astype(f.dtype)
    return out


def has_values(x) -> bool:
    """False for the meta backend's arrays (shape and dtype, no data): nothing to round or to check for NaN."""
    return not getattr(x, "is_meta", False)


def to_float64(x) -> np.ndarray:
    """Widen any supported float array to float64 (always exact)."""
    a = _as_float_array(x)
    return a.astype(np.float64)
