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
shows the rounding (Ziv's strategy, `_power_settled`). Those exact evaluations are in _exact_values.py, imported by the
first suspect: decimal and fractions are no cost of importing the engine. float64 inputs (zerosim's fp64 yardstick)
go to NumPy's float64 functions as they are. Every NaN returned is the format's one canonical NaN (_nan.py).
"""

from __future__ import annotations

import math

import numpy as np

from zerosim.precision.arithmetic._nan import canonical_nans
from zerosim.precision.arithmetic._round_once import certain_f32, f32_of_fraction, widen64
from zerosim.precision.cast import has_values, namespace_of

_FLOAT64_ERROR = 2.0**-43  # relative: 512 float64 ulps, far beyond any libm's or NumPy's SIMD functions' error
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
    from decimal import Decimal  # a suspect's, about one element in 2**19: not a cost of importing the engine
    from fractions import Fraction

    out_h, x_h = ns.to_host(out), ns.to_host(x64)
    for index in zip(*np.nonzero(ns.to_host(suspects))):
        out_h[index] = f32_of_fraction(Fraction(exact(Decimal(float(x_h[index])))))
    return canonical_nans(ns.from_host(out_h), ns)


def exp(x):
    return rounded(np.exp, _exactly("exp"), x)


def log(x):
    return rounded(np.log, _exactly("log"), x)


def tanh(x):
    return rounded(np.tanh, _exactly("tanh"), x)


def sin(x):
    return rounded(np.sin, _exactly("sin"), x)


def cos(x):
    return rounded(np.cos, _exactly("cos"), x)


def power(base: float, x):
    """base ** x (base > 0 a Python float, x an array), correctly rounded to float32 for float32 x (and any format of
    32 bits or fewer), ties to even where base ** x is exactly a float32 midpoint."""
    if not (isinstance(base, (int, float, np.floating)) and not isinstance(base, bool) and math.isfinite(base)
            and base > 0):
        raise ValueError(f"power's base must be a finite number > 0, got {base!r}")
    base = float(base)
    return rounded(lambda e: np.power(np.float64(base), e), lambda e: _exact_values().power(base, e), x)


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
    from fractions import Fraction  # a suspect's (as in rounded)

    return f32_of_fraction(Fraction(_exact_values().power_exactly(base, Fraction(int(n)))))


def _exact_values():
    """_exact_values.py, imported by the first suspect (it holds decimal and fractions: 1.4 ms of importing the
    engine, for about one element in 2**19 of these functions' arguments; tests/test_import_graph.py)."""
    from zerosim.precision.arithmetic import _exact_values

    return _exact_values


def _exactly(name: str):
    """The exact evaluation `name` of _exact_values.py (of a Decimal), as `rounded` calls it for a suspect."""
    return lambda d: getattr(_exact_values(), name)(d)

