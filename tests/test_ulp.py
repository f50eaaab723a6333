"""ulp (spacing above |x|) and lost_update (w + delta rounds back to w), against numpy.spacing,
neighbouring bit patterns, hand-worked rows, and an exact rational reference."""

from __future__ import annotations

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zerosim.precision import lost_update, ulp

DTYPES = {
    "fp16": np.float16,
    "bf16": ml_dtypes.bfloat16,
    "fp8_e4m3": ml_dtypes.float8_e4m3fn,
    "fp8_e5m2": ml_dtypes.float8_e5m2,
}
UINT = {1: np.uint8, 2: np.uint16}


def positive_finite_values(name: str) -> np.ndarray:
    """Every finite value of an 8/16-bit format with the sign bit clear, ascending, as float64."""
    dtype = np.dtype(DTYPES[name])
    bits = np.arange(2 ** (8 * dtype.itemsize - 1), dtype=np.int64).astype(UINT[dtype.itemsize])
    with np.errstate(invalid="ignore"):
        v = bits.view(dtype).astype(np.float64)
    return v[np.isfinite(v)]  # positive patterns ascend with their values, so this is sorted


# -- seed 000's example, as table rows ---------------------------------------------------------

SEED_000_ROWS = [
    # w,   delta, format, spacing at w, lost?
    (1.0, 1e-5, "fp16", 2.0**-10, True),  # 1e-5 < half of 2**-10 (~4.9e-4): 1.0 + 1e-5 is 1.0 in fp16
    (1.0, 1e-5, "fp32", 2.0**-23, False),  # 1e-5 > half of 2**-23 (~6e-8): fp32 keeps the update
    (1.0, 1e-5, "bf16", 2.0**-7, True),  # bf16 is coarser still
]


@pytest.mark.parametrize("w, delta, name, spacing, lost", SEED_000_ROWS)
def test_seed_000_lost_update(w, delta, name, spacing, lost):
    assert float(ulp(w, name)) == spacing
    assert bool(lost_update(w, delta, name)) is lost


def test_seed_000_with_numpy_itself():
    """The same story told by NumPy alone, so the rows above are not only zerosim's word."""
    assert np.float16(1.0) + np.float16(1e-5) == np.float16(1.0)
    assert np.float32(1.0) + np.float32(1e-5) != np.float32(1.0)
    assert np.spacing(np.float16(1.0)) == 2.0**-10 and np.spacing(np.float32(1.0)) == 2.0**-23


# -- ulp against numpy.spacing (fp16 / fp32 / fp64) --------------------------------------------------


def test_ulp_equals_numpy_spacing_for_every_positive_fp16():
    v = positive_finite_values("fp16")[:-1]  # not max: numpy.spacing(65504) is inf (the next pattern is inf)
    np.testing.assert_array_equal(
        ulp(v.astype(np.float16), "fp16"), np.spacing(v.astype(np.float16)).astype(np.float64)
    )
    assert float(ulp(np.float16(65504), "fp16")) == 32.0  # [2**15, 2**16) has spacing 2**(15-10)


@pytest.mark.parametrize(
    "dtype, uint, top", [(np.float32, np.uint32, 0x7F7FFFFF), (np.float64, np.uint64, 0x7FEFFFFFFFFFFFFF)]
)
def test_ulp_equals_numpy_spacing_fp32_fp64(dtype, uint, top):
    """200,000 random positive finite patterns (every binade, subnormals included), plus edges."""
    rng = np.random.default_rng(5)
    bits = rng.integers(0, top, 200_000, dtype=np.uint64).astype(uint)  # below `top`: max has spacing inf in numpy
    x = np.concatenate(
        [
            bits.view(dtype),
            np.array([0.0, 1.0, 2.0, np.finfo(dtype).tiny, np.finfo(dtype).smallest_subnormal], dtype=dtype),
        ]
    )
    name = "fp32" if dtype == np.float32 else "fp64"
    np.testing.assert_array_equal(ulp(x, name), np.spacing(x).astype(np.float64))
    np.testing.assert_array_equal(ulp(-x, name), np.spacing(x).astype(np.float64))  # spacing ignores the sign


@pytest.mark.parametrize("name", list(DTYPES))
def test_ulp_is_the_gap_to_the_next_pattern(name):
    """For every positive finite value of the narrow formats, ulp is the distance to the next value up."""
    v = positive_finite_values(name)
    np.testing.assert_array_equal(ulp(v[:-1].astype(DTYPES[name]), name), np.diff(v))
    assert float(ulp(v[-1], name)) == v[-1] - v[-2]  # max shares a binade with its predecessor


BF16_ULP_ROWS = [
    # x,         ulp in bf16 (7 stored fraction bits: spacing 2**(e - 7) in [2**e, 2**(e+1)))
    (1.0, 2.0**-7),  # [1, 2)
    (1.5, 2.0**-7),  # same binade
    (0.75, 2.0**-8),  # [0.5, 1)
    (256.0, 2.0),  # [2**8, 2**9): 2**(8-7)
    (-256.0, 2.0),  # the sign does not matter
    (3.0e38, 2.0**120),  # [2**127, 2**128)
    (2.0**-126, 2.0**-133),  # smallest normal: the spacing is the smallest subnormal 2**(-126-7)
    (2.0**-130, 2.0**-133),  # a subnormal: subnormals are evenly spaced
    (0.0, 2.0**-133),  # like numpy.spacing(0): the smallest subnormal
]


@pytest.mark.parametrize("x, spacing", BF16_ULP_ROWS)
def test_bf16_ulp_rows(x, spacing):
    assert float(ulp(x, "bf16")) == spacing


def test_ulp_of_inf_and_nan_is_nan_and_shape_is_kept():
    out = ulp(np.array([[np.inf, -np.inf], [np.nan, 1.0]]), "fp16")
    assert out.shape == (2, 2)
    assert np.isnan(out[0]).all() and np.isnan(out[1, 0]) and out[1, 1] == 2.0**-10


# -- lost_update ------------------------------------------------------------------------------------

LOST_ROWS = [
    # w,     delta,               format, lost?
    (256.0, 1.0, "bf16", True),  # spacing at 256 is 2: 257 is the midpoint, ties to even 256 (mantissa 0)
    (256.0, 1.5, "bf16", False),  # 257.5 is past the midpoint: 258
    (258.0, 1.0, "bf16", False),  # 259 is a midpoint too, but 258 is odd: ties go up to 260
    (1.0, 2.0**-8, "bf16", True),  # half of bf16's 2**-7 spacing: a tie, back to 1.0
    (1.0, 1.5 * 2.0**-8, "bf16", False),  # past half: 1 + 2**-7
    (1.0, -(2.0**-9), "bf16", True),  # below 1 the spacing halves (2**-8); 1 - 2**-9 ties to 1.0 (even)
    (1.0, -1.5 * 2.0**-9, "bf16", False),  # past that midpoint: 1 - 2**-8
    (2048.0, 1.0, "fp16", True),  # fp16 spacing at 2048 is 2: 2049 ties to 2048
    (1.0, 0.0, "fp16", False),  # a zero delta is no update at all, so it cannot be lost
    (0.0, 1e-30, "fp32", False),  # 1e-30 is a normal fp32 number (smallest normal ~1.2e-38): kept
    (0.0, 1e-30, "fp16", True),  # ... but is below half of fp16's smallest subnormal 2**-24
    (448.0, 16.0, "fp8_e4m3", True),  # E4M3 spacing at 448 is 32: 464 ties to 448
]


@pytest.mark.parametrize("w, delta, name, lost", LOST_ROWS)
def test_lost_update_rows(w, delta, name, lost):
    assert bool(lost_update(w, delta, name)) is lost


def test_lost_update_broadcasts_a_scalar_delta():
    w = np.array([1.0, 16.0, 1024.0], dtype=np.float16)
    np.testing.assert_array_equal(lost_update(w, 0.25, "fp16"), [False, False, True])  # spacing at 1024 is 1


def floor_log2(a: Fraction) -> int:
    e = a.numerator.bit_length() - a.denominator.bit_length()
    return e if a >= Fraction(2) ** e else e - 1


# precision p and smallest-normal exponent of each format, by hand (see test_formats.py for the table)
P_EMIN = {"fp16": (11, -14), "bf16": (8, -126), "fp8_e4m3": (4, -6), "fp8_e5m2": (3, -14), "fp32": (24, -126)}


def round_exact(a: Fraction, name: str) -> Fraction:
    """Round a rational to nearest, ties to even (range limits are not needed for these inputs)."""
    if a == 0:
        return a
    p, emin = P_EMIN[name]
    quantum = Fraction(2) ** (max(floor_log2(abs(a)), emin) - (p - 1))
    n, rem = divmod(abs(a), quantum)
    if rem > quantum / 2 or (rem == quantum / 2 and n % 2 == 1):
        n += 1
    return n * quantum if a > 0 else -n * quantum


@st.composite
def update_near_half_ulp(draw):
    """(format, w, delta): w a format value, delta about half the spacing at w (either side, either
    sign), so lost and kept updates are both common. delta is a float32 nudged by a few float32 ulps,
    or a float64 nudged by a relative 2**-30 .. 2**-60, below what float32 (or w + delta in float64)
    can resolve next to a midpoint."""
    name = draw(st.sampled_from(["fp16", "bf16", "fp8_e4m3"]))
    v = positive_finite_values(name)
    v = v[(v > 0) & (v < v[-1] / 4)]  # stay clear of overflow
    w = float(v[draw(st.integers(0, len(v) - 1))])
    half = float(ulp(w, name)) / 2 * draw(st.sampled_from([0.5, 1.0, 1.0, 1.0, 2.0]))
    if draw(st.booleans()):
        d = np.float32(half)
        for _ in range(draw(st.integers(0, 3))):
            d = np.nextafter(d, np.float32(draw(st.sampled_from([0.0, np.inf]))))
    else:
        d = np.float64(half * (1 + draw(st.sampled_from([-1, 0, 1])) * 2.0 ** -draw(st.integers(30, 60))))
    sign_w, sign_d = draw(st.sampled_from([-1, 1])), draw(st.sampled_from([-1, 1]))
    return name, sign_w * w, sign_d * d


@pytest.mark.slow
@settings(max_examples=max(300, settings.default.max_examples))
@given(update_near_half_ulp())
def test_lost_update_matches_exact_reference(case):
    name, w, d = case
    after = round_exact(Fraction(w) + Fraction(float(d)), name)
    assert bool(lost_update(w, d, name)) is bool(after == Fraction(w) and d != 0)


def test_lost_update_rounds_once_for_float64_deltas():
    """Regression (found while writing these tests, fixed in 1872fff): w + delta used to be formed in
    float64 and then rounded to the format, two roundings when delta carries more than 32 bits.

    delta = 2**-11 + 2**-63 (a float64) added to 1.0 in fp16: the exact sum 1 + 2**-11 + 2**-63 is
    above the midpoint 1 + 2**-11 of fp16's 1.0 and 1 + 2**-10, so it rounds up and the update is
    kept. float64 cannot hold the 2**-63 next to 1, so w64 + d64 == 1 + 2**-11 exactly, the midpoint,
    and the second rounding ties to even: 1.0, reported "lost".
    """
    delta = 2.0**-11 + 2.0**-63
    exact = round_exact(1 + Fraction(delta), "fp16")
    assert exact == 1 + Fraction(1, 2**10)  # the reference keeps the update
    assert bool(lost_update(1.0, delta, "fp16")) is False
