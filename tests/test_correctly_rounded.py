"""exp, log, tanh, sin, cos and power of float32 arrays, correctly rounded: against 80-digit decimal values.

The reference evaluates each function with Python's decimal module at 80 significant digits (20 more than the
module's repair uses) and rounds the rational it gets once to float32 by integer arithmetic (`f32_of_fraction`,
itself checked against hand values below). Where every element agrees, the float32 result is the
correctly rounded one, so it cannot depend on which libm or SIMD build computed the float64 value.
"""

import decimal
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest
from helpers import bits

from zerosim.precision import arithmetic as cr
from zerosim.precision.arithmetic import f32_of_fraction

pytestmark = pytest.mark.pinned  # bits that must be the same on every machine: .ci/pinned runs them everywhere

CONTEXT = decimal.Context(prec=80, Emax=10**6, Emin=-(10**6))


PI = Decimal("3.14159265358979323846264338327950288419716939937510582097494459230781640628620899862803")  # 86 digits


def d_trig(x: Decimal, first: int) -> Decimal:
    with decimal.localcontext(CONTEXT):
        two_pi = 2 * PI
        r = x - two_pi * (x / two_pi).to_integral_value()
        term = r if first else Decimal(1)
        total, k = term, first
        while abs(term) > Decimal(10) ** -90:
            term = -term * r * r / ((k + 1) * (k + 2))
            total, k = total + term, k + 2
        return total


def d_tanh(x: Decimal) -> Decimal:
    with decimal.localcontext(decimal.Context(prec=80 + max(0, -x.adjusted()), Emax=10**6, Emin=-(10**6))):
        t = (2 * x).exp()
        return (t - 1) / (t + 1)


REFERENCE = {  # name -> the function's exact value at a Decimal argument, to 80 digits
    "exp": lambda x: x.exp(CONTEXT),
    "log": lambda x: x.ln(CONTEXT),
    "tanh": d_tanh,
    "sin": lambda x: d_trig(x, 1),
    "cos": lambda x: d_trig(x, 0),
}
DOMAIN = {"exp": (-100, 88), "log": (1e-30, 1e30), "tanh": (-10, 10), "sin": (-200, 200), "cos": (-200, 200)}


def reference(name, x: np.ndarray) -> np.ndarray:
    return np.array([f32_of_fraction(Fraction(REFERENCE[name](Decimal(float(v))))) for v in x], np.float32)


def arguments(name, rng, n=3000) -> np.ndarray:
    lo, hi = DOMAIN[name]
    if name == "log":
        return np.exp(rng.uniform(np.log(lo), np.log(hi), n)).astype(np.float32)
    x = rng.uniform(lo, hi, n)
    x[: n // 3] *= 2.0 ** rng.integers(-40, 0, n // 3)  # small arguments, where relative accuracy matters
    return x.astype(np.float32)


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_random_arguments_round_as_the_80_digit_values_do(name):
    x = arguments(name, np.random.default_rng(sorted(REFERENCE).index(name)))
    assert np.array_equal(bits(getattr(cr, name)(x)), bits(reference(name, x)))


def test_a_float64_value_on_the_wrong_side_of_a_midpoint_is_repaired():
    # what makes the result machine-independent: any float64 evaluation within the allowed error (2**-43) gives the
    # same float32. v·(1 + 2**-24) for v = 2**e·(1 + k·2**-23) lies 2**(e-47)·k above the float32 midpoint between v
    # and the next float32 (k = 0: exactly on it, a tie); an evaluation 2**-44 low puts every k = 1..7 below it
    k, e = np.meshgrid(np.arange(8), np.arange(-3, 4))
    v = np.ldexp(1 + k * 2.0**-23, e).astype(np.float32).ravel()
    low = cr.rounded(lambda x: x * (1 + 2.0**-24) * (1 - 2.0**-44), lambda d: d * (1 + Decimal(2) ** -24), v)
    naive = (v.astype(np.float64) * (1 + 2.0**-24) * (1 - 2.0**-44)).astype(np.float32)
    want = np.where(k.ravel() == 0, v, np.nextafter(v, np.float32(np.inf)))  # up; the ties (k = 0) to even: v
    assert np.array_equal(bits(low), bits(want))
    assert np.array_equal(naive, v)  # the float64 value alone rounds every one of them down


def test_power_rounds_as_the_80_digit_value_does():
    exponents = (np.arange(0, 64, 2) / np.float32(64)).astype(np.float32)  # rotary's (2i / d_h), d_h = 64
    got = cr.power(10000.0, exponents)
    with decimal.localcontext(CONTEXT):
        want = [f32_of_fraction(Fraction((Decimal(float(e)) * Decimal(10000).ln()).exp())) for e in exponents]
    assert np.array_equal(bits(got), bits(np.array(want, np.float32)))


EXACT_CASES = [  # the exact values every float64 function returns exactly, and IEEE's special values
    ("exp", 0.0, 1.0), ("log", 1.0, 0.0), ("tanh", 0.0, 0.0), ("sin", 0.0, 0.0), ("cos", 0.0, 1.0),
    ("exp", -np.inf, 0.0), ("exp", np.inf, np.inf), ("log", 0.0, -np.inf), ("tanh", np.inf, 1.0),
    ("exp", 100.0, np.inf),  # e**100 is a finite float64 that overflows float32
    ("exp", -104.0, 0.0),  # below half float32's smallest subnormal
]


@pytest.mark.parametrize("name, x, want", EXACT_CASES)
def test_exact_cases_and_special_values(name, x, want):
    got = getattr(cr, name)(np.array([x], np.float32))
    assert got.dtype == np.float32 and bits(got) == bits(np.float32([want]))


def test_nan_stays_nan_and_float64_passes_to_numpy():
    assert np.isnan(cr.exp(np.array([np.nan], np.float32))[0])
    x = np.array([0.5, 1.5])
    assert cr.exp(x).dtype == np.float64 and np.array_equal(cr.exp(x), np.exp(x))


F32_ROUNDING = [  # f32_of_fraction against values worked by hand
    (Fraction(1) + Fraction(1, 2**24), 1.0),  # the midpoint of 1 and 1 + 2**-23: ties to even, down
    (Fraction(1) + Fraction(3, 2**24), 1 + 2.0**-22),  # the midpoint of 1 + 2**-23 and 1 + 2**-22: up, to even
    (Fraction(1) + Fraction(1, 2**24) + Fraction(1, 2**80), 1 + 2.0**-23),  # just above a midpoint: up
    (Fraction(-1, 3), float(np.float32(-1 / 3))),  # float32 rounds -1/3 the same way (a non-tie)
    (Fraction(1, 2**150), 0.0),  # half the smallest subnormal: ties to even, to +0
    (Fraction(3, 2**151), 2.0**-149),  # three quarters of it: up to it
    (Fraction(2**128 - 2**103), np.inf),  # the overflow threshold: ties to even, to 2**128, which is inf
]


@pytest.mark.parametrize("x, want", F32_ROUNDING)
def test_f32_of_fraction_against_hand_values(x, want):
    assert bits(np.float32([f32_of_fraction(x)])) == bits(np.float32([want]))
