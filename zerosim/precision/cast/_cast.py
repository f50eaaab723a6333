"""Casting between formats the way hardware does it: one rounding, to nearest, ties to even.

NOTE: ml_dtypes converts float64 to bfloat16 and fp8 *through float32*, rounding twice. Double
rounding is wrong near ties: 1 + 2**-8 + 2**-40 is just above the midpoint between bf16's 1.0 and
1.0078125, so it must round up, but float32 first rounds it to exactly the midpoint 1 + 2**-8, and
the second rounding then ties to even, down to 1.0.

This file is the fast twin; zerosim/precision/cast/_reference.py is the naive one (round to odd into
float32 everywhere), and tests/test_cast_fast.py checks that both give the same bits. The fast one
rounds through float32 to nearest as ml_dtypes does, and then repairs the only elements double
rounding can get wrong. Why only those: round-to-nearest is monotone, and every midpoint m between two
neighbours of a target format narrower than float32 is itself a float32 (it needs at most 12 bits and
lies within float32's exponent range; so is the overflow threshold, halfway from the largest number
to the next power of two). So if x < m then RN32(x) <= m, and RN32(x) = m only when x
rounds onto m; the same for x > m. Where RN32(x) is not a midpoint it lies between the same two
neighbours as x, on the same side of m, and the second rounding is the correct one. Where RN32(x) is
a midpoint (rare: about one element in 2**16 of random data), the naive twin rounds again.

Stochastic rounding lives in zerosim/precision/cast/_stochastic.py.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from zerosim.precision._formats import _ML_DTYPES, FORMATS, Format, get_format
from zerosim.precision.cast._inputs import ROUNDINGS, CastKernels, as_float_array, cast_with, has_values
from zerosim.precision.cast._reference import nearest_reference, saturate_reference

__all__ = ["ROUNDINGS", "cast", "has_values", "to_float64"]

_F32_FRACTION_BITS = 23
_FLOAT16 = np.dtype(np.float16)


def _midpoint_suspects(y: np.ndarray, f: Format) -> np.ndarray:
    """Where the float32 array `y` may be a midpoint of two neighbours in the narrower format `f`
    (bool, y's shape): every midpoint is flagged, and few other values are.

    NOTE: overwrites `y` (the caller's scratch): a fresh temporary costs more than the test itself.
    """
    bits = y.view(np.uint32)
    dropped = _F32_FRACTION_BITS - f.mantissa_bits  # float32 fraction bits f has no room for (normal range)
    low, half = np.uint32(2**dropped - 1), np.uint32(2 ** (dropped - 1))
    if f.min_exponent == get_format("fp32").min_exponent:  # bf16: its subnormals are float32's too
        # A midpoint keeps f's bits, then a 1, then zeros: 1.xxx1000...0 * 2**e (0.xxx1000...0 * 2**-126).
        return np.bitwise_and(bits, low, out=bits) == half
    suspects = (bits & low) == half  # the same, in f's normal range
    # Below f's smallest normal s (fp8: 2**-6, 2**-14) the quantum q stops shrinking, so the test above
    # misses midpoints there. s + |y| moves them into [s, 2s), whose quantum is q too, and is exact for
    # them (they are multiples of q/2): there the same test finds them. For |y| >= s it flags a random
    # value about once in 2**dropped: harmless, the naive twin rounds it right.
    np.abs(y, out=y)
    np.add(y, np.float32(f.smallest_normal), out=y)
    suspects |= np.bitwise_and(bits, low, out=bits) == half
    return suspects


def nearest_fast(a: np.ndarray, f: Format) -> np.ndarray:
    """`a` (an array of one of our formats) rounded to nearest, ties to even, once, into `f`; the same
    bits as `nearest_reference`."""
    if a.dtype != np.float64 or f.bits >= 32:
        return nearest_reference(a, f)  # one rounding already: a copy, a widening, or float32 -> narrower
    return _float64_to_narrow(a, f)


# Overflow to inf/NaN and NaN in, NaN out are the formats' defined answers, not floating-point errors.
@np.errstate(over="ignore", invalid="ignore")
def _float64_to_narrow(a: np.ndarray, f: Format) -> np.ndarray:
    """float64 `a` rounded to nearest, once, into a format `f` narrower than float32."""
    if f.name == "fp16":
        # NumPy converts float64 -> float16 directly with one rounding to nearest even
        # (numpy/_core/src/multiarray/lowlevel_strided_loops.c.src casts with npy_doublebits_to_halfbits,
        # numpy/_core/src/common/half_private.hpp FromDoubleBits; or the hardware's vcvtpd2ph).
        out = _fp16().to_fp16(a)  # astype's bits, its subnormals made faster (_fp16.py)
        # NOTE: it keeps a signalling NaN's payload as it is, where float32 first quiets it; the
        # naive twin goes through float32, and NaNs are rare: let it decide them, so every bit agrees.
        nan = np.isnan(a)
        if nan.any():
            out[nan] = nearest_reference(a[nan], f)
        return out
    y = a.astype(np.float32)  # round to nearest even: right wherever it is not a midpoint of f
    out = y.astype(f.dtype)
    suspects = _midpoint_suspects(y, f)  # y is scratch from here on
    if suspects.any():
        out[suspects] = nearest_reference(a[suspects], f)  # round to odd, then to nearest: once
    return out


def _fp16():
    """_fp16.py, imported by the first cast into fp16: an fp32 or bf16 run never loads it (`import zerosim`'s first
    names load the engine's modules only: tests/test_import_graph.py)."""
    if not _FP16:
        from zerosim.precision.cast import _fp16

        _FP16.append(_fp16)
    return _FP16[0]


_FP16 = []  # the module, once imported (`_fp16`: a look-up here costs a tenth of an import statement's)


def saturate_fast(a: np.ndarray, out: np.ndarray, f: Format) -> np.ndarray:
    """`out` (a rounded into f) with |a| > f.max clamped to ±f.max, as `saturate_reference`; two
    reductions first, since most arrays have nothing to clamp."""
    if a.size and a.dtype in (np.float32, np.float64):
        # fmax/fmin skip NaN, which never saturates; an all-NaN array gives NaN and falls through
        if float(np.fmax.reduce(a, axis=None)) <= f.max and float(np.fmin.reduce(a, axis=None)) >= -f.max:
            return out
    return saturate_reference(a, out, f)


def _stochastic_fast(a, f, u):
    """_stochastic.py's `stochastic_fast`, imported by the first stochastic cast: not a cost of importing the engine."""
    from zerosim.precision.cast._stochastic import stochastic_fast

    return stochastic_fast(a, f, u)


FAST_KERNELS = CastKernels(nearest_fast, _stochastic_fast, saturate_fast)


def _plain_casts(formats) -> dict:
    """{(from dtype, to dtype): how} among `formats` for the casts to nearest that are one NumPy `astype` — what
    `nearest_reference` does for them, without its checks, and with its warnings: "copy" (the same format), "astype"
    (a widening, exact, which `nearest_reference` makes as plainly: a signalling NaN warns there too), "quiet" (one
    rounding from fp32 into a narrower format, or fp64 into fp32, under the error state `nearest_reference` sets: an
    overflow, or a signalling NaN, is the format's defined answer). Every other pair (fp64 into a format narrower than
    fp32: double rounding to avoid; 16-bit to 16-bit) takes the general path (tests/test_cast_plain.py)."""
    table = {}
    for a in formats:
        for b in formats:
            if a is b:
                table[a.dtype, b.dtype] = "copy"
            elif b.bits > a.bits and b.bits >= 32:
                table[a.dtype, b.dtype] = "astype"  # fp32 holds every 16- and 8-bit value, fp64 every fp32 one
            elif a.name == "fp32" or (a.name, b.name) == ("fp64", "fp32"):
                table[a.dtype, b.dtype] = "quiet"
    return table


_PLAIN = _plain_casts([f for f in FORMATS.values() if f.name not in _ML_DTYPES])  # NumPy's own: no ml_dtypes read


@lru_cache(maxsize=None)
def _plain_ml() -> dict:
    """_PLAIN, joined by ml_dtypes' formats at the first cast from or to one of them (_formats.py reads their dtypes
    when first wanted: an fp32 run never imports ml_dtypes); later casts find them in _PLAIN itself."""
    _PLAIN.update(_plain_casts(list(FORMATS.values())))
    return _PLAIN


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
    if type(x) is np.ndarray and rounding == "nearest" and saturate is False:  # the hot path: one astype, no checks
        to = (fmt if type(fmt) is Format else get_format(fmt)).dtype
        how = _PLAIN.get((x.dtype, to))
        if how is None and (to.kind == "V" or x.dtype.kind == "V"):  # ml_dtypes' formats are void-kind dtypes
            how = _plain_ml().get((x.dtype, to))
        if how == "astype":
            return x.astype(to)
        if how == "copy":
            return x.copy()
        if how == "quiet":
            with np.errstate(over="ignore", invalid="ignore"):  # overflow to inf is the format's defined answer
                return _fp16().to_fp16(x) if to == _FLOAT16 else x.astype(to)
    return cast_with(FAST_KERNELS, x, fmt, rounding, rng, saturate, uniforms)


def to_float64(x) -> np.ndarray:
    """Widen any supported float array to float64 (always exact)."""
    return as_float_array(x).astype(np.float64)
