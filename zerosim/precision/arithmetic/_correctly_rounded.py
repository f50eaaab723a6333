"""exp, log, tanh, sin, cos and a power for float32 arrays, correctly rounded: the same bits on every machine.

Why NumPy's own depend on the machine: its float32 (and float64) exp, log, tanh, sin, cos and power have SIMD
versions chosen at run time (AVX2, AVX-512, NEON, none), each accurate to an ulp or so, and they differ in the
last bit. Measured on one AVX-512 machine against NumPy 2.4 with its SIMD dispatch narrowed to the SSE4.2 baseline
(NPY_DISABLE_CPU_FEATURES): float32 exp, log, tanh, sin, cos and x**3 all change bits (benchmarks/portable_numbers.py).

Here: evaluate in float64 with the machine's function (any libm or SIMD version is within a few float64 ulps of
the exact value; `_FLOAT64_ERROR` allows 512), round to float32 where that error cannot change the rounding
(_round_once.py `certain_f32`), and settle the rest, about one element in 2**19, with Python's decimal module at
60 significant digits (about 199 bits) on the host. A float32 argument's exact function value never lies that close
to a float32 rounding boundary unless it is one of the exact cases (exp(0) = 1, log(1) = 0, tanh(0) = sin(0) = 0,
cos(0) = 1), which every float64 function returns exactly: searches over every float32 argument of these functions
(the literature's "hardest-to-round" cases) need well under 100 bits. float64 inputs (zerosim's fp64 yardstick) go
to NumPy's float64 functions as they are.
"""

from __future__ import annotations

import decimal
from decimal import Decimal
from fractions import Fraction

import numpy as np

from zerosim.precision.arithmetic._round_once import certain_f32, f32_of_fraction, widen64
from zerosim.precision.cast import has_values, namespace_of

_FLOAT64_ERROR = 2.0**-43  # relative: 512 float64 ulps, far beyond any libm's or NumPy's SIMD functions' error
_DIGITS = 60  # significant decimal digits of the decimal evaluation of a suspect


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
    if x.dtype == np.float64 or not has_values(x):
        return function64(x)
    ns = namespace_of(x)
    x64 = widen64(x, ns)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):  # the function's own inf and NaN
        y = function64(x64)
        out, suspects = certain_f32(y, np.abs(y) * _FLOAT64_ERROR, ns)
    if not bool(suspects.any()):
        return out
    out_h, x_h = ns.to_host(out), ns.to_host(x64)
    for index in zip(*np.nonzero(ns.to_host(suspects))):
        out_h[index] = f32_of_fraction(Fraction(exact(Decimal(float(x_h[index])))))
    return ns.from_host(out_h)


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
    """base ** x (base > 0 a Python float, x an array), correctly rounded to float32 for float32 x."""
    b = Decimal(float(base))

    def exact(e: Decimal) -> Decimal:
        with decimal.localcontext(_with_digits(10)):
            return (e * b.ln()).exp()

    return rounded(lambda e: np.power(np.float64(base), e), exact, x)
