"""Rounding to float32 once and correctly from a float64 value known only to within an error bound.

The machine-independent kernels (_exact_matmul.py, _correctly_rounded.py) share this step. A float64 value y that
the machine computed in its own way lies within err of the exact value s. Rounding to nearest is monotone, so
where y - err and y + err round to the same float32 (the same bits: -0 and +0 are told apart), s rounds to it as
well, and so does y: `certain_f32` returns y rounded and a mask of the rest ("suspects": s lies within err of a
float32 rounding boundary, or the bound could not tell), which the caller settles exactly (few: about
2·err/ulp of the elements). `f32_of_fraction` rounds an exact rational once, by integer arithmetic.

On a device (CuPy) float32 arithmetic may flush subnormals, so widening and narrowing go by the bits there
(precision/cast/_subnormals.py); on NumPy they are plain IEEE conversions.
"""

from __future__ import annotations

import numpy as np


# y ± err rounds as well: by at most half an ulp of |y| + err; err also gets |y|·2**-51 (a full ulp and then some)
_ROUNDING_OF_Y = 2.0**-51
_F32_FRACTION_BITS, _F32_MIN_EXPONENT, _F32_MAX_EXPONENT = 23, -126, 128


def widen64(x, ns):
    """float64 of `x` (any format of 32 bits or fewer), exactly."""
    return x.astype(np.float64) if ns.is_numpy else ns.widen(x, bits=64)


def narrow32(x, ns):
    """float64 `x` rounded once to nearest-even float32, subnormals included."""
    if ns.is_numpy:
        return x.astype(np.float32)
    from zerosim.precision.cast import f64_to_f32  # a device's (subnormals by their bits): not the engine's import

    return f64_to_f32(x, ns.xp)


def certain_f32(y, err, ns):
    """(y rounded to float32, suspects): for float64 y within err (>= 0) of an exact value s, the float32 where
    that is s rounded once too, and a bool mask where it may not be (an exact y on a float32 midpoint among them:
    the caller knows whether it is exact). NaN and ±inf in y are never
    suspects: they come from NaN or inf inputs, and every correct evaluation gives them too. Nor is a y with err 0
    (only a zero y can have it: the caller says it is exact, as tanh(-0) = -0 is): y ± 0 would round to -0 and +0
    (IEEE's -0 + +0 is +0) and look unsure, and the exact evaluation would lose the sign of zero."""
    with np.errstate(invalid="ignore", over="ignore"):  # past float32's range: inf, as the exact value rounds there
        err = err + np.abs(y) * _ROUNDING_OF_Y
        low, high, rounded = narrow32(y - err, ns), narrow32(y + err, ns), narrow32(y, ns)
    return rounded, (low.view(np.uint32) != high.view(np.uint32)) & np.isfinite(y) & (err > 0)


def f32_of_fraction(x: Fraction) -> np.float32:  # noqa: F821 (imported below, where a tie needs it)
    """The rational x rounded once to nearest-even float32 (+0 for 0; ±inf past the overflow threshold)."""
    from fractions import Fraction  # a rare tie's: not a cost of importing the engine (tests/test_import_graph.py)

    if x == 0:
        return np.float32(0.0)
    m = abs(x)
    e = m.numerator.bit_length() - m.denominator.bit_length()  # 2**e <= m < 2**(e + 1) once corrected below
    if Fraction(2) ** e > m:
        e -= 1
    quantum = Fraction(2) ** (max(e, _F32_MIN_EXPONENT) - _F32_FRACTION_BITS)
    value = round(m / quantum) * quantum  # Fraction's round: half to even
    out = np.float32(np.inf) if value >= Fraction(2) ** _F32_MAX_EXPONENT else np.float32(float(value))  # exact
    return out if x > 0 else -out
