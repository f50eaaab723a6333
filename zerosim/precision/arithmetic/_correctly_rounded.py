"""exp, log, tanh, sin, cos and a power for float32 arrays, correctly rounded: the same bits on every machine.

Why NumPy's own depend on the machine: its float32 (and float64) exp, log, tanh, sin, cos and power have SIMD
versions chosen at run time (AVX2, AVX-512, NEON, none), each accurate to an ulp or so, and they differ in the
last bit. Measured on one AVX-512 machine against NumPy 2.4 with its SIMD dispatch narrowed to the SSE4.2 baseline
(NPY_DISABLE_CPU_FEATURES): float32 exp, log, tanh, sin, cos and x**3 all change bits (benchmarks/portable_numbers.py).

Here: evaluate in float64 with the machine's function (any libm or SIMD version is within a few float64 ulps of
the exact value; `_FLOAT64_ERROR` allows 512), round to float32 where that error cannot change the rounding
(_round_once.py `certain_f32`), and settle the rest, about one element in 2**19, with Python's decimal module at
60 significant digits (about 199 bits) on the host. A float32 argument's exact function value never lies that close
to a float32 rounding boundary unless it is one of the exact cases (exp(0) = 1, log(1) = 0, tanh(±0) = sin(±0) =
±0, cos(0) = 1), which every float64 function returns exactly (a zero with its sign: certain_f32 takes an exact
zero as it is): searches over every float32 argument of these functions (the literature's "hardest-to-round" cases)
need well under 100 bits. A power is another matter: base**x is often exactly rational (2**-150, 11**7, 2.25**0.5),
and then it may lie exactly on a float32 midpoint, where no finite number of digits decides the rounding (60 digits
gave 2**-150, half the smallest subnormal, as that subnormal instead of +0, ties to even). So a power's suspect is
first tried as an exact rational (`_rational_power`), rounded once by integer arithmetic; the rest are irrational or
have more digits than any float32 boundary, and are evaluated in decimal to ever more digits until an error bound
shows the rounding (Ziv's strategy, `_power_settled`). float64 inputs (zerosim's fp64 yardstick) go to NumPy's
float64 functions as they are. Every NaN returned is the format's one canonical NaN (_nan.py).
"""

from __future__ import annotations

import decimal
import math
from decimal import Decimal
from fractions import Fraction

import numpy as np

from zerosim.precision.arithmetic._nan import canonical_nans
from zerosim.precision.arithmetic._round_once import certain_f32, f32_of_fraction, widen64
from zerosim.precision.cast import has_values, namespace_of

_FLOAT64_ERROR = 2.0**-43  # relative: 512 float64 ulps, far beyond any libm's or NumPy's SIMD functions' error
_DIGITS = 60  # significant decimal digits of the decimal evaluation of a suspect
# A rational power whose odd part or power of two needs more bits than this is computed no further as a rational: a
# float32 boundary has at most 25 significant bits and a binary exponent within ±300, so such a power is none
_EXACT_BITS = 4096
_MOST_DIGITS = 1 << 16  # Ziv's loop doubles the digits up to this; it ends far sooner for any value not a boundary


def _with_digits(extra: int = 0):
    """A decimal context of _DIGITS (+ extra) digits, exponent range wide enough for any float64."""
    return decimal.Context(prec=_DIGITS + extra, Emax=10**6, Emin=-(10**6))


def _exp(x: Decimal) -> Decimal:
    with decimal.localcontext(_with_digits()):
        return x.exp()


def _log(x: Decimal) -> Decimal:
    with decimal.localcontext(_with_digits()):
        return x.ln()


def _tanh(x: Decimal) -> Decimal:
    # (e^2x - 1)/(e^2x + 1) cancels near 0: as many more digits as x has leading zeros
    with decimal.localcontext(_with_digits(max(0, -x.adjusted()) + 5)):
        t = (2 * x).exp()
        return (t - 1) / (t + 1)


def _pi(digits: int) -> Decimal:
    """π to `digits` digits (the decimal module documentation's recipe)."""
    with decimal.localcontext(_with_digits(digits - _DIGITS + 2)):
        lasts, t, s, n, na, d, da = 0, Decimal(3), 3, 1, 0, 0, 24
        while s != lasts:
            lasts = s
            n, na = n + na, na + 8
            d, da = d + da, da + 32
            t = (t * n) / d
            s += t
        return +s


def _taylor(x: Decimal, first: int) -> Decimal:
    """Σ (-1)^k x^(2k+first) / (2k+first)!: cos for first = 0, sin for first = 1 (small |x| after reduction)."""
    term = x if first else Decimal(1)
    total, k, last = term, first, None
    while total != last:
        last = total
        term = -term * x * x / ((k + 1) * (k + 2))
        total, k = total + term, k + 2
    return total


def _trig(x: Decimal, first: int) -> Decimal:
    extra = max(0, x.adjusted()) + 5  # digits lost reducing a large |x| by 2π
    with decimal.localcontext(_with_digits(extra)):
        two_pi = 2 * _pi(_DIGITS + extra + 5)
        r = x - two_pi * (x / two_pi).to_integral_value()  # |r| <= π
        return _taylor(r, first)


def _sin(x: Decimal) -> Decimal:
    return _trig(x, 1)


def _cos(x: Decimal) -> Decimal:
    return _trig(x, 0)


def rounded(function64, exact, x):
    """`function64` (a NumPy float64 function) of float32 `x`, correctly rounded to float32 through `exact`."""
    if not has_values(x):
        return function64(x)
    ns = namespace_of(x)
    if x.dtype == np.float64:
        return canonical_nans(function64(x), ns)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):  # the function's own inf and NaN
        x64 = widen64(x, ns)  # (a signalling NaN comes out quiet, as any arithmetic leaves it)
        y = function64(x64)
        out, suspects = certain_f32(y, np.abs(y) * _FLOAT64_ERROR, ns)
    if not bool(suspects.any()):
        return canonical_nans(out, ns)
    out_h, x_h = ns.to_host(out), ns.to_host(x64)
    for index in zip(*np.nonzero(ns.to_host(suspects))):
        out_h[index] = f32_of_fraction(Fraction(exact(Decimal(float(x_h[index])))))
    return canonical_nans(ns.from_host(out_h), ns)


def exp(x):
    return rounded(np.exp, _exp, x)


def log(x):
    return rounded(np.log, _log, x)


def tanh(x):
    return rounded(np.tanh, _tanh, x)


def sin(x):
    return rounded(np.sin, _sin, x)


def cos(x):
    return rounded(np.cos, _cos, x)


def power(base: float, x):
    """base ** x (base > 0 a Python float, x an array), correctly rounded to float32 for float32 x (and any format of
    32 bits or fewer), ties to even where base ** x is exactly a float32 midpoint."""
    if not (isinstance(base, (int, float, np.floating)) and not isinstance(base, bool) and math.isfinite(base)
            and base > 0):
        raise ValueError(f"power's base must be a finite number > 0, got {base!r}")
    base = float(base)
    return rounded(lambda e: np.power(np.float64(base), e), lambda e: _power_exactly(base, Fraction(e)), x)


def power_of_int(base: float, n: int) -> np.float32:
    """base ** n (base > 0 a float, n a Python integer of any size) correctly rounded to float32, ties to even: a
    C++ `std::pow(float, size_t)` rounded to a float where its double is within half an ulp (a double rounding
    differs only within 2**-53 of a float32 midpoint, and never on one)."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"power_of_int's exponent must be an integer, got {n!r}")
    base = float(base)
    with np.errstate(over="ignore", under="ignore"):
        try:
            y = np.float64(math.pow(base, int(n)))
        except OverflowError:
            y = np.float64(np.inf)
        out, suspect = certain_f32(np.array([y]), np.array([abs(y) * _FLOAT64_ERROR]), namespace_of(np.array([y])))
    if not suspect[0]:
        return out[0]
    return f32_of_fraction(Fraction(_power_exactly(base, Fraction(int(n)))))


def _power_exactly(base: float, x: Fraction):
    """base ** x as a number f32_of_fraction rounds correctly: the exact rational where it is one (and small enough
    to be a float32 boundary), else a decimal value shown to round as the exact one does."""
    exact = _rational_power(Fraction(base), x)
    return exact if exact is not None else _power_settled(base, x)


def _rational_power(b: Fraction, x: Fraction) -> Fraction | None:
    """b ** x exactly for a binary float b > 0 and a binary float x, where that is rational and has at most
    _EXACT_BITS bits; else None.

    With x = p/q in lowest terms (q a power of two) and b = m·2**k (m odd), b ** x = (m**p · 2**(k·p)) ** (1/q) is
    rational exactly when every prime's exponent in m**p · 2**(k·p) is a multiple of q: q divides k (p is odd when
    q > 1) and m is a q-th power u**q. Then b ** x = u**p · 2**(k·p/q)."""
    p, q = x.numerator, x.denominator
    odd = b.numerator >> ((b.numerator & -b.numerator).bit_length() - 1)
    k = (b.numerator.bit_length() - odd.bit_length()) - (b.denominator.bit_length() - 1)
    if k % q:
        return None
    u = odd
    while q > 1 and u > 1:  # the q-th root of an odd number, q = 2**s: s square roots, each exact or none
        r = math.isqrt(u)
        if r * r != u:
            return None
        u, q = r, q // 2
    if u > 1 and q > 1:
        return None
    twos = k // x.denominator * p
    if abs(p) * u.bit_length() + abs(twos) > _EXACT_BITS:
        return None  # too many bits to be a float32 boundary: the decimal evaluation settles it
    return Fraction(u) ** p * Fraction(2) ** twos


def _power_settled(base: float, x: Fraction) -> Decimal:
    """An irrational (or many-bit) base ** x to as many digits as it takes: exp(x·ln base) with decimal's
    correctly rounded ln and exp at d digits is within |result|·(|x·ln base| + 1)·10**(2-d) of the exact value
    (the argument's two roundings, magnified by exp, and exp's own; a factor 10 to spare); once both ends of that
    interval round to the same float32, so does the exact value (rounding is monotone)."""
    b, digits = Decimal(base), _DIGITS + 10
    while digits <= _MOST_DIGITS:
        with decimal.localcontext(_with_digits(digits - _DIGITS)):
            t = Decimal(x.numerator) * b.ln() / Decimal(x.denominator)
            value = t.exp()
            err = value * (abs(t) + 1) * Decimal(10) ** (2 - digits)
            low, high = Fraction(value - err), Fraction(value + err)
        if f32_of_fraction(low) == f32_of_fraction(high):  # value > err > 0: no zeros of two signs here
            return value
        digits *= 2
    raise ArithmeticError(f"{base!r} ** {float(x)!r}: its float32 rounding was not settled with {_MOST_DIGITS} digits")
