"""Issue 56: the portable arithmetic's special values, the same bits on every machine (zerosim/precision/arithmetic/).

- a power's exact ties round to even: base ** x is often exactly rational, and 2**-150 (half float32's smallest
  subnormal) went to that subnormal instead of +0, because a 70-digit decimal evaluation cannot tell a tie;
- tanh and sin, the odd functions the portable kernels offer, keep the sign of zero (C99 Annex F, F.10.1.6 and
  F.10.2.6: sin(±0) and tanh(±0) return ±0); they returned +0 for -0;
- every NaN they return is the format's one canonical NaN (precision/arithmetic/_nan.py), whatever NaN came in and
  whatever SIMD routine NumPy dispatched to.

The references are independent of the code under test: exact rationals (fractions) converted by NumPy's own
float64 -> float32 rounding, mpmath at 1000 bits, and IEEE's bits written out.
"""

import dataclasses
import os
import subprocess
import sys
from fractions import Fraction

import ml_dtypes
import mpmath
import numpy as np
import pytest
from helpers import HANG_TIMEOUT, bits

from zerosim.precision import arithmetic as cr
from zerosim.precision.arithmetic import ARITHMETICS, exact_matmul, exact_sum_f32

pytestmark = pytest.mark.pinned  # bits every machine must give: .ci/pinned reruns these under other SIMD builds

F = Fraction
# (base, x, the exact value of base ** x): each worked by hand; the want is that value rounded by NumPy
EXACT_POWERS = [
    (2.0, -150.0, F(1, 2**150)),  # half the smallest subnormal 2**-149: a tie between +0 and it -> even: +0
    (0.5, 150.0, F(1, 2**150)),  # the same tie from the other side of 1
    (4.0, -75.0, F(1, 2**150)),  # the same tie, k = 2
    (2.0**-10, 15.0, F(1, 2**150)),  # the same tie, a base below 1
    (2.0**-75, 2.0, F(1, 2**150)),  # the same tie, a tiny base squared
    (2.0, -149.0, F(1, 2**149)),  # the smallest subnormal itself: exact, no tie
    (3 * 2.0**-10, 15.0, F(3**15, 2**150)),  # 3**15 = 14348907 halves of 2**-149: a tie between 7174453 (odd) and
    #                                          7174454 (even) times 2**-149 -> 7174454 * 2**-149
    (11.0, 7.0, F(11**7)),  # 19487171, 25 significant bits, odd: between 19487170 and 19487172 -> 19487172 (even)
    (11 * 2.0**-20, 7.0, F(11**7, 2**140)),  # the same tie in the normal range: 19487172 * 2**-140
    (3.0, 16.0, F(3**16)),  # 43046721, 26 bits: 43046720.25 * 4 is no tie -> 43046720
    ((1 + 2.0**-24) ** 2, 0.5, 1 + F(1, 2**24)),  # a square root on the midpoint of 1 and 1 + 2**-23 -> 1 (even)
    ((1 + 3 * 2.0**-24) ** 2, 0.5, 1 + F(3, 2**24)),  # the midpoint of 1 + 2**-23 and 1 + 2**-22 -> 1 + 2**-22
    ((1 + 2.0**-8) ** 2, 1.5, F(257**3, 2**24)),  # (257/256)**3 = 16974593 / 2**24, 25 bits: -> 16974592 / 2**24
    (2.0, 127.0, F(2**127)),  # the largest power of two float32 holds
    (2.0, 128.0, F(2**128)),  # past the overflow threshold: inf
    (10000.0, 0.25, F(10)),  # 10000 = 5**4 * 2**4: its fourth root is 10 (rotary's theta, i / d_h = 1/4)
]
FORMATS = {"fp32": np.float32, "bf16": ml_dtypes.bfloat16, "fp16": np.float16}


def numpy_rounds(value: Fraction) -> np.float32:
    """The exact value rounded to float32 by NumPy: through float64, where every value above is exact."""
    assert Fraction(float(value)) == value
    with np.errstate(over="ignore"):
        return np.float32(float(value))


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("base, x, exact", EXACT_POWERS)
def test_exact_powers_and_their_ties_round_to_even(base, x, exact, fmt):
    assert Fraction(base) ** Fraction(x) == exact  # the row's arithmetic, checked
    xs = np.array([x], FORMATS[fmt])
    if float(xs[0]) != x:
        pytest.skip(f"{x} is not a {fmt} number")
    got = cr.power(base, xs)
    assert got.dtype == np.float32 and bits(got) == bits(np.float32([numpy_rounds(exact)]))


def test_powers_round_as_mpmath_does():
    """Bases with exact powers (powers of two, odd numbers times them, squares), rotary's thetas and random ones,
    to integer, half, quarter and random float32 exponents: against mpmath at 1000 bits, rounded by NumPy."""
    rng = np.random.default_rng(56)
    bases = [2.0**j for j in range(-12, 13, 3)] + [o * 2.0**j for o in (3, 5, 7, 9, 11, 25, 27, 49, 81, 121, 125)
                                                   for j in (-8, 0, 5)]
    bases += [(1 + k * 2.0**-12) ** 2 for k in (1, 3, 5)] + [10000.0, 500000.0] + list(rng.uniform(0.01, 20, 12))
    exponents = np.concatenate([np.arange(-40, 41), np.arange(-16, 17) / 2, np.arange(-8, 9) / 4,
                                rng.uniform(-30, 30, 40)]).astype(np.float32)
    got = np.stack([cr.power(float(b), exponents) for b in bases])
    mpmath.mp.prec = 1000
    want = np.empty_like(got)
    for i, b in enumerate(bases):
        for j, e in enumerate(exponents):
            v = mpmath.power(mpmath.mpf(float(b)), mpmath.mpf(float(e)))
            with np.errstate(over="ignore", under="ignore"):
                want[i, j] = np.float32(float(v))  # 1000 bits -> float64 -> float32: double rounding is wrong only
                # within 2**-53 of a float32 midpoint, and there only if not on it; none of these is
    assert np.array_equal(bits(got), bits(want))


# the odd functions among the portable kernels: every elementwise function an Arithmetic record holds, by parity
PARITY = {"exp": None, "log": None, "tanh": "odd", "sin": "odd", "cos": "even", "power": None}


def test_the_parity_table_names_every_function_the_arithmetic_offers():
    fields = {f.name for f in dataclasses.fields(ARITHMETICS["portable"])} - {"name", "matmul", "prepare", "rows_apart"}
    assert fields == set(PARITY)


@pytest.mark.parametrize("fmt", [*FORMATS, "fp64"])
@pytest.mark.parametrize("name", [n for n, p in PARITY.items() if p == "odd"])
def test_odd_functions_keep_the_sign_of_zero(name, fmt):
    dtype = FORMATS.get(fmt, np.float64)
    got = getattr(ARITHMETICS["portable"], name)(np.array([-0.0, 0.0], dtype))
    want = np.array([-0.0, 0.0], np.float64 if fmt == "fp64" else np.float32)  # C99 F.10.1.6, F.10.2.6: ±0
    assert got.dtype == want.dtype and np.array_equal(bits(got), bits(want))


# NaN inputs of every sign and payload, quiet and signalling, and the finite or infinite inputs that make a NaN
NAN_BITS = {"fp32": ([0x7FC00000, 0xFFC00000, 0x7FC00001, 0xFFFFFFFF, 0x7F800001, 0xFF800001], np.uint32),
            "bf16": ([0x7FC0, 0xFFC0, 0x7FC1, 0x7F81, 0xFFFF], np.uint16),
            "fp16": ([0x7E00, 0xFE00, 0x7E01, 0x7C01, 0xFFFF], np.uint16),
            "fp64": ([0x7FF8000000000000, 0xFFF8000000000000, 0x7FF8000020000000, 0x7FF0000000000001], np.uint64)}
MAKES_NAN = {"exp": [], "log": [-1.0, -np.inf, -1e-3], "tanh": [], "sin": [np.inf, -np.inf], "cos": [np.inf, -np.inf]}
CANONICAL = {np.float32: 0x7FC00000, np.float64: 0x7FF8000000000000}  # sign clear, quiet bit, payload 0


def nans(fmt: str) -> np.ndarray:
    raw, dtype = NAN_BITS[fmt]
    return np.array(raw, dtype).view(FORMATS.get(fmt, np.float64))


@pytest.mark.parametrize("fmt", list(NAN_BITS))
@pytest.mark.parametrize("name", list(MAKES_NAN))
def test_every_nan_out_is_the_canonical_one(name, fmt):
    x = np.concatenate([nans(fmt), np.array(MAKES_NAN[name], np.float64).astype(nans(fmt).dtype)])
    with np.errstate(invalid="ignore", divide="ignore"):
        got = getattr(cr, name)(x)
    out = np.float64 if fmt == "fp64" else np.float32
    assert got.dtype == out and np.all(bits(got) == CANONICAL[out]), [hex(b) for b in bits(got)]


def test_a_power_of_nan_is_the_canonical_nan():
    with np.errstate(invalid="ignore"):  # NumPy's float64 power warns of the NaN it was given
        assert np.all(bits(cr.power(2.0, nans("fp32"))) == CANONICAL[np.float32])
        assert np.all(bits(cr.power(2.0, nans("fp64"))) == CANONICAL[np.float64])


def test_products_and_sums_with_nan_or_inf_give_the_canonical_nan():
    a = np.array([[1.0, 2.0], [0.0, 1.0], [3.0, 1.0]], np.float32)
    a[0, 0] = nans("fp32")[1]  # a negative NaN with the sign bit set
    b = np.array([[np.inf, 1.0], [1.0, 1.0]], np.float32)  # row 1: 0 * inf + 1 * 1 -> NaN; row 2: inf
    with np.errstate(invalid="ignore"):  # the float64 GEMM warns of the NaN it makes
        got = exact_matmul(a, b)
    assert bits(got[0]).tolist() == [CANONICAL[np.float32]] * 2 and bits(got[1])[0] == CANONICAL[np.float32]
    assert np.isinf(got[2, 0]) and got[2, 1] == 4.0
    assert bits(np.float32([exact_sum_f32([1.0, float(nans("fp32")[1])])]))[0] == CANONICAL[np.float32]


SCRIPT = """
import numpy as np
from zerosim.precision import arithmetic as cr
x = np.array([-1.0, np.inf, -np.inf, -2.5, 0.5], np.float32)
x = np.concatenate([x, np.uint32([0x7FC00000, 0xFFC00000, 0x7FC00001, 0x7F800001]).view(np.float32)])
with np.errstate(all="ignore"):
    out = [f(v) for f in (cr.exp, cr.log, cr.tanh, cr.sin, cr.cos) for v in (x, x.astype(np.float64))]
print(" ".join(o.view(f"u{o.dtype.itemsize}").tobytes().hex() for o in out))
"""


@pytest.mark.slow  # two interpreters, one with NumPy's SIMD dispatch narrowed to its baseline
def test_nan_bits_do_not_follow_numpys_simd_dispatch():
    """NumPy 2.4's float64 log(-1) is 0xFFF8... under its AVX-512 routine and 0x7FF8... at the SSE baseline here;
    the portable kernels' outputs are the same bits either way (.ci/pinned also reruns every pinned test so)."""
    from numpy._core import _multiarray_umath as umath

    narrowed = " ".join(t for t in umath.__cpu_dispatch__ if umath.__cpu_features__.get(t))
    if not narrowed:
        pytest.skip("this NumPy dispatches to nothing above its baseline here")
    runs = [subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=HANG_TIMEOUT,
                           env={**os.environ, **extra}, check=True).stdout
            for extra in ({}, {"NPY_DISABLE_CPU_FEATURES": narrowed})]
    assert runs[0] == runs[1]
