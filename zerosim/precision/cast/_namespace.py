"""`cast` on another array module (CuPy, or the NumPy stand-in): the naive twin's steps, written with `xp`.

zerosim/precision/cast/_reference.py defines the bits (round to odd into float32, then to nearest; the
two neighbours and p_up for stochastic rounding); this file takes the same steps with the namespace's
module and its bf16-as-uint16 storage (_bf16_bits.py), so a device rounds on the device. It must give
`cast`'s bits for every input: tests/test_array_namespace.py checks every 16-bit pattern, float32 high
halves with many low halves, float64 ties and stochastic draws against `cast`, through the stand-in.

Formats: fp64, fp32, fp16, bf16 (fp8 has no storage on such a module: `ArrayNamespace.storage` refuses it).
"""

from __future__ import annotations

import numpy as np

from zerosim.precision._formats import get_format
from zerosim.precision.cast import _bf16_bits as bf16_bits
from zerosim.precision.cast._inputs import ROUNDINGS
from zerosim.precision.cast._subnormals import f32_to_f64, f64_to_f32

FP64 = get_format("fp64")


def cast_on(ns, x, fmt, rounding: str = "nearest", uniforms=None, saturate: bool = False):
    """`x` (an array of namespace `ns`) rounded into `fmt`: the same bits as `zerosim.precision.cast._cast`."""
    f, src = get_format(fmt), ns.format_of(x)
    ns.storage(f)  # a clear error for a format this namespace cannot hold (fp8 on CuPy)
    if rounding not in ROUNDINGS:
        raise ValueError(f"unknown rounding {rounding!r}; choose one of {ROUNDINGS}")
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):  # inf/NaN: the formats' defined answers
        if rounding == "stochastic":
            if uniforms is None:
                raise ValueError("stochastic rounding on a device namespace needs uniforms=... (counter_uniforms)")
            u = uniforms if not isinstance(uniforms, np.ndarray) or ns.is_numpy else ns.xp.asarray(uniforms)
            if tuple(u.shape) != tuple(x.shape):
                raise ValueError(f"uniforms must have the shape of x, {tuple(x.shape)}; got {tuple(u.shape)}")
            out = stochastic(ns, x, src, f, u.astype(ns.xp.float64, copy=False))
        else:
            out = nearest(ns, x, src, f)
        return saturated(ns, x, src, out, f) if saturate else out


def round_to_odd_float32(x, xp):
    """float64 -> float32 toward zero with the last bit set where anything was dropped (the sticky bit):
    `float64_to_float32_round_to_odd`, with a one-step decrement of the magnitude's bits for its nextafter."""
    y = f64_to_f32(x, xp)  # to nearest even (subnormals kept: _subnormals.py)
    back = f32_to_f64(y, xp)
    inexact = (back != x) & xp.isfinite(x)
    went_up = inexact & (xp.abs(back) > xp.abs(x))  # nearest went away from zero: step back toward it
    bits = y.view(xp.uint32) - went_up.astype(xp.uint32)
    return xp.bitwise_or(bits, inexact.astype(xp.uint32)).view(xp.float32)


def nearest(ns, a, src, f):
    """`a` (of format `src`) rounded to nearest, ties to even, once, into `f`: `nearest_reference`'s steps."""
    xp = ns.xp
    if src == f:
        return a.copy()
    if f.name == "fp64":
        return ns.widen(a, src, bits=64)
    if src.name == "fp64" and f.bits < 32:
        x = round_to_odd_float32(a, xp)  # the sticky bit makes the next rounding the only one
    elif src.bits < 32:
        x = ns.widen(a, src)  # exact
    else:
        x = a  # float32 -> narrower, or float64 -> float32: one rounding either way
    if x.dtype == xp.float64:
        x = f64_to_f32(x, xp)  # the one rounding (x is round-to-odd's float32 if f is narrower still)
    if f.name in ns.bit_formats:
        return bf16_bits.round_float32(x, xp)
    return x.astype(ns.storage(f), copy=False)


def _bits(ns, a, f):
    """The unsigned bit pattern of an array of format f (a view)."""
    return a if f.name in ns.bit_formats else a.view(f.uint_dtype)


def _from_bits(ns, bits, f):
    return bits if f.name in ns.bit_formats else bits.view(ns.storage(f))


def stochastic(ns, a, src, f, u):
    """`stochastic_reference`'s steps: the neighbours lo <= |x| <= hi in f, up where u < (|x| - lo) / (hi - lo)."""
    xp = ns.xp
    x64 = ns.widen(a, src, bits=64)
    mag = xp.abs(x64)
    near = nearest(ns, mag, FP64, f)  # |x| rounded to nearest, in f
    near64 = ns.widen(near, f, bits=64)
    bits = _bits(ns, near, f).astype(xp.int64)
    step_down, step_up = near64 > mag, near64 < mag
    other_bits = xp.where(step_down, bits - 1, xp.where(step_up, bits + 1, bits))
    other = ns.widen(_from_bits(ns, other_bits.astype(f.uint_dtype), f), f, bits=64)
    lo = xp.where(step_down, other, near64)
    hi = xp.where(step_down, near64, other)
    gap = hi - lo
    p_up = xp.where(gap > 0, (mag - lo) / xp.where(gap > 0, gap, 1.0), 0.0)
    rounded = xp.where(u < p_up, hi, lo)
    beyond = ~xp.isfinite(mag) | (mag > f.max)  # no next value beyond the largest finite: nearest's answer
    rounded = xp.where(beyond, near64, rounded)
    return nearest(ns, xp.copysign(rounded, x64), FP64, f)  # exact: every value is representable already


def saturated(ns, a, src, out, f):
    """`out` with every element where |a| > f.max clamped to +-f.max (NaN stays NaN): `saturate_reference`."""
    xp = ns.xp
    wide = ns.widen(a, src, bits=64)
    over = xp.abs(wide) > f.max
    if bool(over.any()):
        out = nearest(ns, xp.where(over, xp.copysign(f.max, wide), ns.widen(out, f, bits=64)), FP64, f)
    return out
