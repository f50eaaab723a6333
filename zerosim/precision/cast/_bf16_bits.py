"""bf16 through uint16 bit operations, for array modules that have no bfloat16 dtype (CuPy).

A bf16 number is the top 16 bits of the float32 with the same value, so on such a module a bf16 buffer
lives as uint16 (the same two bytes) and every operation widens, works in float32, and rounds back:

    widen:  float32 bits = bf16 bits << 16                        (exact)
    round:  bf16 bits = (u + 0x7FFF + ((u >> 16) & 1)) >> 16       u: the float32's bits; ties to even

The rounding adds just under half a bf16 ulp (plus one where the kept part is odd, so a tie goes to the
even neighbour) and truncates; a carry out of the fraction steps the exponent, up to inf, as rounding
does. NaN: ml_dtypes (which zerosim's numpy path uses) keeps only the sign and gives the canonical quiet NaN
(0x7FC0 or 0xFFC0, whatever the payload); so does this. Checked against ml_dtypes on
every bf16 bit pattern and every float32 high half with many low halves (tests/test_array_namespace.py).

An add is what ml_dtypes does for bf16 (`bfloat16(float(a) + float(b))`): the float32 sum rounded to bf16.
It is computed in float64 and rounded to float32 through the bits (_subnormals.py), because a bf16 below
2**-126 is a float32 subnormal and CuPy's float32 arithmetic flushes those to zero. The float64 route
gives the float32 sum's bits exactly: two bf16s up to 44 binades apart add exactly in float64's 53
bits; farther apart, the float64 sum lies within 2**-53 of the exact one, far from any float32 midpoint,
so rounding it to float32 rounds the exact sum. Comparisons (maximum) likewise widen to float64.
Every function takes the array module `xp` (numpy or cupy); nothing here touches ml_dtypes' arithmetic.
"""

from __future__ import annotations

from zerosim.precision.cast._subnormals import f32_to_f64, f64_to_f32

_ROUND = 0x7FFF  # just under half a bf16 ulp, in the float32's low 16 bits
_NAN = 0x7FC0  # bf16's canonical quiet NaN, the sign apart
_SIGN = 0x8000


def widen(bits, xp):
    """(shape) uint16 bf16 bits -> (shape) float32, exactly."""
    return xp.left_shift(bits.astype(xp.uint32), xp.uint32(16)).view(xp.float32)


def round_float32(x, xp):
    """(shape) float32 -> (shape) uint16 bf16 bits, rounded to nearest, ties to even (NaN stays NaN, quiet)."""
    u = x.view(xp.uint32)
    odd = xp.bitwise_and(xp.right_shift(u, xp.uint32(16)), xp.uint32(1))
    rounded = xp.right_shift(u + xp.uint32(_ROUND) + odd, xp.uint32(16)).astype(xp.uint16)
    sign = xp.bitwise_and(xp.right_shift(u, xp.uint32(16)).astype(xp.uint16), xp.uint16(_SIGN))
    return xp.where(xp.isnan(x), xp.bitwise_or(sign, xp.uint16(_NAN)), rounded)  # NaN: its sign, the canonical NaN


def add(a, b, xp, out=None):
    """a + b for bf16 bit arrays: the float32 sum rounded to bf16 (ml_dtypes' bf16 add), into `out` if given."""
    total = round_float32(f64_to_f32(_wide64(a, xp) + _wide64(b, xp), xp), xp)
    if out is None:
        return total
    out[...] = total
    return out


def maximum(a, b, xp, out=None):
    """Elementwise maximum of bf16 bit arrays as ml_dtypes' ufunc picks it (`isnan(a) || a > b ? a : b`: a NaN
    wins, and of two equal numbers, +0 and -0 included, the second), into `out` if given."""
    wa, wb = _wide64(a, xp), _wide64(b, xp)  # float32 comparisons would see every subnormal as zero (CuPy)
    pick_a = (wa > wb) | xp.isnan(wa)
    pick = xp.where(pick_a, a, b)
    if out is None:
        return pick
    out[...] = pick
    return out


def _wide64(bits, xp):
    """(shape) uint16 bf16 bits -> (shape) float64, exactly (subnormals kept where float32 work flushes them)."""
    return f32_to_f64(widen(bits, xp), xp)
