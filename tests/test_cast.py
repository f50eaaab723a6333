"""cast() against independent yardsticks: every 16-bit (and 8-bit) pattern decoded by hand, NumPy /
ml_dtypes for float32 inputs, and an exact round-to-nearest-even reference on Python rationals for
float64 inputs (where ml_dtypes itself rounds twice).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zerosim.precision import cast

# -- the exact reference -------------------------------------------------------------------------


@dataclass(frozen=True)
class Spec:
    """A format's facts, written out here rather than read from zerosim."""

    p: int  # precision: stored fraction bits + the implicit 1
    emin: int  # exponent of the smallest normal number (subnormals share its spacing)
    max: Fraction  # largest finite value
    has_inf: bool  # False: overflow (and +-inf) become NaN
    dtype: np.dtype
    max_bits: int  # bit pattern of +max: where the finite positive patterns end


SPECS = {
    # fp32: 1.(23 ones) * 2**127, pattern 0x7F7FFFFF
    "fp32": Spec(24, -126, (2 - Fraction(1, 2**23)) * 2**127, True, np.dtype(np.float32), 0x7F7FFFFF),
    # fp16: 65504 = 1.(10 ones) * 2**15, pattern 0 11110 1111111111
    "fp16": Spec(11, -14, Fraction(65504), True, np.dtype(np.float16), 0x7BFF),
    # bf16: 1.(7 ones) * 2**127, pattern 0 11111110 1111111
    "bf16": Spec(8, -126, (2 - Fraction(1, 2**7)) * 2**127, True, np.dtype(ml_dtypes.bfloat16), 0x7F7F),
    # E4M3FN: 448 = 1.110b * 2**8, pattern 0 1111 110 (0 1111 111 is NaN)
    "fp8_e4m3": Spec(4, -6, Fraction(448), False, np.dtype(ml_dtypes.float8_e4m3fn), 0x7E),
    # E5M2: 57344 = 1.11b * 2**15, pattern 0 11110 11
    "fp8_e5m2": Spec(3, -14, Fraction(57344), True, np.dtype(ml_dtypes.float8_e5m2), 0x7B),
}
NARROW = ["fp16", "bf16", "fp8_e4m3", "fp8_e5m2"]
UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def floor_log2(a: Fraction) -> int:
    """e with 2**e <= a < 2**(e+1), for a > 0."""
    e = a.numerator.bit_length() - a.denominator.bit_length()  # 2**(e-1) < a < 2**(e+1)
    return e if a >= Fraction(2) ** e else e - 1


def round_exact(x, spec: Spec) -> float:
    """x (float or Fraction) rounded to nearest, ties to even, in one step; as an exact Python float."""
    if isinstance(x, float) and math.isnan(x):
        return math.nan
    if isinstance(x, float) and math.isinf(x):
        return x if spec.has_inf else math.nan
    q = Fraction(x)
    sign = -1.0 if (q < 0 or (q == 0 and math.copysign(1.0, float(x)) < 0)) else 1.0
    a = abs(q)
    if a == 0:
        return math.copysign(0.0, sign)
    quantum = Fraction(2) ** (max(floor_log2(a), spec.emin) - (spec.p - 1))  # spacing in a's binade
    n, rem = divmod(a, quantum)
    if rem > quantum / 2 or (rem == quantum / 2 and n % 2 == 1):
        n += 1
    r = n * quantum
    if r > spec.max:  # rounded past the largest finite number (IEEE: ties at the top go up to overflow)
        return math.copysign(math.inf, sign) if spec.has_inf else math.nan
    return math.copysign(float(r), sign)


def same_values(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Elementwise: equal as numbers with equal signs (so -0.0 != 0.0), or both NaN."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    both_nan = np.isnan(got) & np.isnan(want)
    return both_nan | ((got == want) & (np.signbit(got) == np.signbit(want)))


def same_bits(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Elementwise: identical bit patterns, or both NaN (NaN payloads are not compared)."""
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    u = UINT[got.dtype.itemsize]
    with np.errstate(invalid="ignore"):
        both_nan = np.isnan(got.astype(np.float32)) & np.isnan(want.astype(np.float32))
    return both_nan | (got.view(u) == want.view(u))


def assert_all(mask: np.ndarray, inputs, got, want=None):
    if not mask.all():
        bad = np.flatnonzero(~mask)[:5]
        detail = [(repr(np.asarray(inputs).reshape(-1)[i]), repr(np.asarray(got).reshape(-1)[i]),
                   None if want is None else repr(np.asarray(want).reshape(-1)[i])) for i in bad]
        raise AssertionError(f"{(~mask).sum()} mismatches; first (input, got, want): {detail}")


def test_reference_rounds_known_values():
    """The reference itself, on rows worked by hand, before anything is compared with it."""
    bf16, fp16, e4m3, e5m2 = SPECS["bf16"], SPECS["fp16"], SPECS["fp8_e4m3"], SPECS["fp8_e5m2"]
    assert round_exact(1 + 2**-8, bf16) == 1.0  # the midpoint of 1 and 1 + 2**-7: ties to even (1.0)
    assert round_exact(1 + 3 * 2**-8, bf16) == 1 + 2**-6  # midpoint of 1+2**-7 (odd) and 1+2**-6 (even)
    assert round_exact(1 + 2**-8 + 2**-40, bf16) == 1 + 2**-7  # above the midpoint: up
    assert round_exact(2.0**-25, fp16) == 0.0  # half the smallest subnormal 2**-24: ties to even (0)
    assert round_exact(3 * 2.0**-25, fp16) == 2.0**-23  # 1.5 subnormal spacings: ties to even (2 spacings)
    assert round_exact(65519.0, fp16) == 65504.0 and round_exact(65520.0, fp16) == math.inf  # top midpoint
    assert round_exact(464.0, e4m3) == 448.0  # midpoint of 448 (mantissa 110, even) and 480: down
    assert math.isnan(round_exact(464.0 + 2**-20, e4m3))  # above it: overflow, and E4M3FN has no inf
    assert round_exact(61440.0, e5m2) == math.inf  # midpoint of 57344 (mantissa 11, odd) and 2**16: up
    assert math.copysign(1.0, round_exact(-(2.0**-30), fp16)) == -1.0  # underflow keeps the sign


# -- widening: every bit pattern of the narrow formats, decoded by hand ---------------------------------

LAYOUT = {"fp16": (5, 10, False), "bf16": (8, 7, False), "fp8_e4m3": (4, 3, True), "fp8_e5m2": (5, 2, False)}


def decode(bits: np.ndarray, e_bits: int, m_bits: int, fn: bool) -> np.ndarray:
    """Sign, biased exponent and fraction fields -> float64 value, straight from the IEEE definition."""
    bits = bits.astype(np.int64)
    bias = 2 ** (e_bits - 1) - 1
    s = bits >> (e_bits + m_bits)
    e = (bits >> m_bits) & (2**e_bits - 1)
    m = bits & (2**m_bits - 1)
    mag = np.where(e == 0, np.ldexp(m.astype(np.float64), 1 - bias - m_bits),  # subnormal: 0.m * 2**(1-bias)
                   np.ldexp((m + 2**m_bits).astype(np.float64), e - bias - m_bits))  # normal: 1.m * 2**(e-bias)
    top = e == 2**e_bits - 1
    if fn:  # E4M3FN: the top exponent holds numbers; only the all-ones pattern is NaN
        mag = np.where(top & (m == 2**m_bits - 1), np.nan, mag)
    else:  # IEEE: top exponent is inf (fraction 0) or NaN
        mag = np.where(top, np.where(m == 0, np.inf, np.nan), mag)
    return np.where(s == 1, -mag, mag)


def all_patterns(name: str) -> np.ndarray:
    spec = SPECS[name]
    return np.arange(2 ** (8 * spec.dtype.itemsize), dtype=np.int64).astype(UINT[spec.dtype.itemsize])


@pytest.mark.parametrize("name", NARROW)
@pytest.mark.parametrize("wide", ["fp32", "fp64"])
def test_every_bit_pattern_widens_exactly_and_round_trips(name, wide):
    """All 65,536 fp16 / bf16 (and 256 fp8) patterns: widening gives the hand-decoded value, agrees
    with NumPy/ml_dtypes, and casting back gives the same bits (NaN stays NaN)."""
    spec = SPECS[name]
    bits = all_patterns(name)
    x = bits.view(spec.dtype)
    wide_dtype = np.float32 if wide == "fp32" else np.float64
    with np.errstate(invalid="ignore"):
        y = cast(x, wide)
        assert y.dtype == wide_dtype
        assert_all(same_values(y, decode(bits, *LAYOUT[name])), bits, y, decode(bits, *LAYOUT[name]))
        assert_all(same_bits(y, x.astype(wide_dtype)), bits, y)  # NumPy / ml_dtypes agree
        back = cast(y, name)
    assert back.dtype == spec.dtype
    assert_all(same_bits(back, x), bits, back)


# -- float32 inputs: NumPy / ml_dtypes, and the exact reference ----------------------------------------

F32_EDGES = np.array(
    [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 3.4028235e38, 1.0e-45, 1.1754944e-38,
     65504.0, 65519.0, 65520.0, 65536.0, 448.0, 464.0, 464.00003, 480.0, 57344.0, 61440.0, 61439.996,
     2.0**-24, 2.0**-25, 3 * 2.0**-25, 2.0**-133, 2.0**-134, 2.0**-9, 2.0**-10, 2.0**-16, 2.0**-17,
     1 + 2.0**-8, 1 + 3 * 2.0**-8, 1 + 2.0**-11, 1 + 2.0**-4, 1 + 2.0**-3],
    dtype=np.float32,
)
F32_EDGES = np.concatenate([F32_EDGES, -F32_EDGES])
F32_RANDOM_PATTERNS = 1 << 20  # a million random float32s: every exponent, mantissa patterns at random


@pytest.mark.parametrize("name", NARROW)
def test_float32_inputs_agree_with_numpy_and_ml_dtypes(name):
    rng = np.random.default_rng(20240611)
    x = np.concatenate([rng.integers(0, 2**32, F32_RANDOM_PATTERNS, dtype=np.uint32).view(np.float32), F32_EDGES])
    with np.errstate(over="ignore", invalid="ignore"):
        got, want = cast(x, name), x.astype(SPECS[name].dtype)
    assert got.dtype == want.dtype
    assert_all(same_bits(got, want), x, got, want)


def float32_in_range(rng, name: str, size: int) -> np.ndarray:
    """Random float32s whose exponents cover the format's range (subnormals, overflow) and a bit more."""
    spec = SPECS[name]
    emax = floor_log2(spec.max)
    e = rng.integers(max(spec.emin - spec.p - 3, -149), min(emax + 3, 127) + 1, size)  # within float32's range
    m = rng.integers(0, 2**23, size)
    # Half the draws keep a few top fraction bits and one low bit at a random place: near-midpoints, ties.
    few = rng.random(size) < 0.5
    m = np.where(few, (m & 0x7FC000) | (1 << rng.integers(0, 23, size)), m)
    sign = rng.choice([-1.0, 1.0], size)
    # 1.m * 2**e in float64 is exact; the cast to float32 is exact too except in float32's own
    # subnormal range (bf16's subnormals), where it rounds - still a float32 input, which is all we need.
    return (sign * np.ldexp(1 + m / 2.0**23, e)).astype(np.float32)


@pytest.mark.parametrize("name", NARROW)
def test_float32_inputs_match_exact_reference(name):
    """The same inputs through the reference: checks ml_dtypes' own float32 casts too."""
    x = np.concatenate([float32_in_range(np.random.default_rng(7), name, 4000), F32_EDGES])
    with np.errstate(over="ignore", invalid="ignore"):
        got = cast(x, name)
    want = np.array([round_exact(float(v), SPECS[name]) for v in x])
    assert_all(same_values(got, want), x, got, want)


# -- float64 inputs round once --------------------------------------------------------------------

ROUND_ONCE_ROWS = [
    # x,                      format,      one rounding,   via float32 (ml_dtypes)
    # 2**-40 lifts x above the midpoint of bf16's 1.0 and 1.0078125; float32 drops it, lands on the
    # midpoint, and the second rounding ties to even: 1.0. The example in docs/explanation/design.md.
    (1 + 2**-8 + 2**-40, "bf16", 1.0078125, 1.0),
    (-(1 + 2**-8 + 2**-40), "bf16", -1.0078125, -1.0),  # the same, negative
    (1 + 2**-8 - 2**-40, "bf16", 1.0, 1.0),  # just below the midpoint: both give 1.0
    # 2**-134 is the midpoint of 0 and bf16's smallest subnormal 2**-133; float32 holds 2**-134 but not
    # the extra 2**-160, so it ties to even (0) after float32; one rounding goes up to 2**-133.
    (2.0**-134 + 2.0**-160, "bf16", 2.0**-133, 0.0),
    # E4M3 spacing at 1 is 2**-3: midpoint 1 + 2**-4, plus a bit float32 cannot hold
    (1 + 2**-4 + 2**-40, "fp8_e4m3", 1.125, 1.0),
    # E5M2 spacing at 1 is 2**-2: midpoint 1 + 2**-3, plus a bit float32 cannot hold
    (1 + 2**-3 + 2**-40, "fp8_e5m2", 1.25, 1.0),
    # NumPy converts float64 -> float16 directly, one rounding: it agrees with us
    (1 + 2**-11 + 2**-40, "fp16", 1 + 2**-10, 1 + 2**-10),
]


@pytest.mark.parametrize("x, name, once, twice", ROUND_ONCE_ROWS)
def test_float64_rounds_once(x, name, once, twice):
    assert float(cast(x, name)) == once
    assert round_exact(x, SPECS[name]) == once
    assert float(np.float64(x).astype(SPECS[name].dtype)) == twice  # why cast() cannot just call astype


def test_design_example_bf16():
    assert float(cast(1 + 2**-8 + 2**-40, "bf16")) == 1.0078125
    assert float(np.array(1 + 2**-8 + 2**-40).astype(ml_dtypes.bfloat16)) == 1.0  # ml_dtypes rounds twice


def pattern_value(name: str, b: int) -> float:
    spec = SPECS[name]
    return float(np.array(b, dtype=UINT[spec.dtype.itemsize]).view(spec.dtype).astype(np.float64))


def upper_neighbour(name: str, b: int) -> float:
    """The value one pattern above b, continuing past max as if the exponent were unbounded."""
    if b < SPECS[name].max_bits:
        return pattern_value(name, b + 1)
    top = pattern_value(name, b)
    return top + (top - pattern_value(name, b - 1))  # max and its predecessor share a binade


@st.composite
def near_midpoints(draw, name: str) -> float:
    """float64s at, just above and just below the midpoint of two neighbours of `name` (incl. 0 and
    the smallest subnormal, and max and the overflow threshold)."""
    b = draw(st.integers(0, SPECS[name].max_bits))
    lo, hi = pattern_value(name, b), upper_neighbour(name, b)
    mid = (lo + hi) / 2  # exact in float64: the narrow formats have far fewer bits
    how = draw(st.sampled_from(["steps", "relative"]))
    if how == "steps":  # a few float64 ulps either side
        k = draw(st.integers(-3, 3))
        x = mid
        for _ in range(abs(k)):
            x = math.nextafter(x, math.copysign(math.inf, k))
    else:  # a relative nudge far below float32's resolution, or within it
        j = draw(st.integers(20, 60))
        x = mid * (1 + draw(st.sampled_from([-1, 1])) * 2.0**-j)
    return -x if draw(st.booleans()) else x


def float64_inputs(name: str):
    spec = SPECS[name]
    big = float(spec.max) * 4
    return st.one_of(
        st.floats(allow_nan=True, allow_infinity=True),  # anything at all
        st.floats(min_value=-big, max_value=big),  # the format's range and just past it
        st.floats(min_value=-float(spec.max) / 2**spec.p, max_value=float(spec.max) / 2**spec.p),
        near_midpoints(name),
    )


PROPERTY_EXAMPLES = max(300, settings.default.max_examples)  # each example is microseconds


@pytest.mark.slow
@pytest.mark.parametrize("name", NARROW + ["fp32"])
def test_float64_cast_matches_exact_reference_property(name):
    @settings(max_examples=PROPERTY_EXAMPLES)
    @given(float64_inputs(name))
    def check(x):
        with np.errstate(over="ignore", invalid="ignore"):
            got = cast(np.float64(x), name)
        assert got.dtype == SPECS[name].dtype
        assert same_values(got, round_exact(x, SPECS[name])), (x, got, round_exact(x, SPECS[name]))

    check()


@pytest.mark.parametrize("name", NARROW + ["fp32"])
def test_float64_cast_matches_exact_reference_bulk(name):
    """Thousands of float64s at once: random values over the format's range, and midpoints of every
    kind nudged by amounts float32 can and cannot see."""
    spec = SPECS[name]
    rng = np.random.default_rng(11)
    n = 3000
    b = rng.integers(0, spec.max_bits + 1, n)
    lo = np.array([pattern_value(name, int(v)) for v in b])
    hi = np.array([upper_neighbour(name, int(v)) for v in b])
    mid = (lo + hi) / 2
    nudge = rng.choice([0.0, 1.0, -1.0], n) * 2.0 ** -rng.integers(20, 60, n).astype(np.float64)
    near = mid * (1 + nudge)
    emax = floor_log2(spec.max)
    spread = np.ldexp(rng.random(n) + 0.5, rng.integers(spec.emin - spec.p - 3, emax + 3, n))
    x = np.concatenate([near, spread, -near[: n // 3], [0.0, -0.0, np.inf, -np.inf, np.nan, 1e300, -1e-300]])
    with np.errstate(over="ignore", invalid="ignore"):
        got = cast(x, name)
    want = np.array([round_exact(float(v), spec) for v in x])
    assert_all(same_values(got, want), x, got, want)


# -- overflow, saturation, integer inputs, shapes -------------------------------------------------

OVERFLOW_ROWS = [
    # format,      x,                    nearest,   saturate=True
    ("fp8_e4m3", 448.0, 448.0, 448.0),  # max itself
    ("fp8_e4m3", 464.0, 448.0, 448.0),  # midpoint to the would-be 480: ties to even (448 = 1.110b)
    ("fp8_e4m3", 470.0, math.nan, 448.0),  # past the midpoint: E4M3FN has no inf -> NaN
    ("fp8_e4m3", -1e6, math.nan, -448.0),
    ("fp8_e4m3", math.inf, math.nan, 448.0),  # no inf to keep; saturation clamps it
    ("fp8_e4m3", -math.inf, math.nan, -448.0),
    ("fp8_e5m2", 57344.0, 57344.0, 57344.0),  # max itself
    ("fp8_e5m2", 61439.0, 57344.0, 57344.0),  # below the midpoint 61440
    ("fp8_e5m2", 61440.0, math.inf, 57344.0),  # midpoint: ties to even = up (57344 = 1.11b is odd)
    ("fp8_e5m2", -1e6, -math.inf, -57344.0),
    ("fp8_e5m2", math.inf, math.inf, 57344.0),
    ("fp16", 65519.0, 65504.0, 65504.0),  # below the midpoint 65520
    ("fp16", 65520.0, math.inf, 65504.0),  # midpoint, 65504 is odd: up, to inf
    ("bf16", 1e39, math.inf, float((2 - Fraction(1, 128)) * 2**127)),
    ("fp8_e4m3", math.nan, math.nan, math.nan),  # NaN stays NaN even when saturating
]


@pytest.mark.parametrize("name, x, nearest, saturated", OVERFLOW_ROWS)
def test_overflow_per_format(name, x, nearest, saturated):
    with np.errstate(over="ignore", invalid="ignore"):
        assert same_values(cast(x, name), nearest)
        assert same_values(cast(x, name, saturate=True), saturated)
        assert same_values(cast(np.float32(x), name, saturate=True), saturated)


def test_integers_widen_exactly_then_round_once():
    assert cast([1, 2, 3], "fp16").dtype == np.float16
    assert float(cast(2**24 + 1, "fp32")) == 2.0**24  # midpoint of 2**24 and 2**24 + 2: ties to even
    assert float(cast(2**24 + 3, "fp32")) == 2.0**24 + 4  # midpoint of +2 (odd) and +4 (even)
    assert float(cast(2049, "fp16")) == 2048.0  # fp16 spacing at 2048 is 2; 2049 is a tie -> even
    assert float(cast(257, "bf16")) == 256.0  # bf16 spacing at 256 is 2; tie -> even


def test_shape_kept_and_input_untouched():
    x = np.arange(12, dtype=np.float64).reshape(3, 4) / 3
    before = x.copy()
    y = cast(x, "bf16")
    assert y.shape == (3, 4) and y.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(x, before)
    z = cast(x, "fp64")  # the same format: a copy, never the caller's array
    assert not np.shares_memory(z, x)
    np.testing.assert_array_equal(z, x)
    assert cast(np.float32(1.5), "fp16").shape == ()


@pytest.mark.bad_input("formats and casts")
@pytest.mark.parametrize("bad_fmt", ["fp12", "int8"])
def test_unknown_format_is_value_error(bad_fmt):
    with pytest.raises(ValueError, match="unknown floating-point format"):
        cast([1.0], bad_fmt)


@pytest.mark.bad_input("formats and casts")
def test_unknown_rounding_is_value_error():
    with pytest.raises(ValueError, match="unknown rounding 'truncate'"):
        cast([1.0], "fp16", rounding="truncate")


@pytest.mark.bad_input("formats and casts")
@pytest.mark.parametrize("x", [np.array(["a"]), np.array([1 + 2j]), np.array([object()], dtype=object)])
def test_non_float_input_is_clear_error(x):
    with pytest.raises((ValueError, TypeError), match="format"):
        cast(x, "fp16")


# -- stochastic rounding ------------------------------------------------------------------------

K = 20_000  # stochastic casts averaged per check
Z = 6.0  # |mean - x| <= Z * sigma: a false alarm has probability ~2e-9 per check (two-sided normal tail)
P_RANGE = (0.02, 0.98)  # keeps K*p and K*(1-p) >= 400, where the normal approximation of the binomial holds
SR_FORMATS = ["fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2"]


@st.composite
def between_neighbours(draw):
    """(format, lo, hi, x) with lo < x < hi adjacent finite numbers of the format, x a float64."""
    name = draw(st.sampled_from(SR_FORMATS))
    b = draw(st.integers(0, SPECS[name].max_bits - 1))
    lo, hi = pattern_value(name, b), pattern_value(name, b + 1)
    x = lo + draw(st.floats(*P_RANGE)) * (hi - lo)
    if draw(st.booleans()):
        lo, hi, x = -hi, -lo, -x
    return name, lo, hi, x


@settings(max_examples=max(60, settings.default.max_examples))
@given(between_neighbours(), st.integers(0, 2**32 - 1))
def test_stochastic_rounding_is_unbiased_and_lands_on_a_neighbour(case, seed):
    name, lo, hi, x = case
    out = cast(np.full(K, x), name, rounding="stochastic", rng=np.random.default_rng(seed))
    assert out.dtype == SPECS[name].dtype
    vals = out.astype(np.float64)
    assert np.isin(vals, [lo, hi]).all()  # always one of the two neighbours, never anything else
    gap = hi - lo
    p = (x - lo) / gap  # chance of rounding to hi; x - lo is exact (Sterbenz, or lo == 0)
    sigma = gap * math.sqrt(p * (1 - p) / K)  # standard deviation of the mean of K two-point draws
    mean = math.fsum(vals) / K
    assert abs(mean - x) <= Z * sigma, (name, lo, hi, x, mean, sigma)


def test_stochastic_rounding_of_representable_values_is_exact():
    bits = all_patterns("fp16")
    x = bits.view(np.float16)
    finite = np.isfinite(x)
    out = cast(x[finite].astype(np.float64), "fp16", rounding="stochastic", rng=np.random.default_rng(0))
    assert_all(same_bits(out, x[finite]), x[finite], out)


def test_stochastic_rounding_same_seed_same_result_and_seed_matters():
    x = np.random.default_rng(3).normal(size=10_000)
    a = cast(x, "bf16", rounding="stochastic", rng=np.random.default_rng(42))
    b = cast(x, "bf16", rounding="stochastic", rng=np.random.default_rng(42))
    c = cast(x, "bf16", rounding="stochastic", rng=np.random.default_rng(43))
    np.testing.assert_array_equal(a.view(np.uint16), b.view(np.uint16))
    # With another seed most values are identical but not all: each differs with probability
    # 2p(1-p) (~1/3 on average), so all 10,000 agreeing has probability far below 1e-100.
    assert (a.view(np.uint16) != c.view(np.uint16)).any()


@pytest.mark.parametrize("rng", [None, 42, np.random.RandomState(0)])
def test_stochastic_rounding_needs_a_generator(rng):
    with pytest.raises(ValueError, match="rng"):
        cast([1.1], "bf16", rounding="stochastic", rng=rng)


@pytest.mark.parametrize("name, e, n", [("fp16", 24, 1024), ("bf16", 133, 128), ("fp8_e4m3", 9, 8),
                                         ("fp8_e5m2", 16, 4)])  # spacing 2**-e, n subnormals (the normals' start)
def test_stochastic_rounding_into_the_subnormals_is_the_definition_in_exact_rationals(name, e, n):
    # SR by its definition, with nothing of zerosim's or NumPy's rounding: below the smallest normal n·2**-e a
    # format's values are the whole multiples k·2**-e, so |x|'s neighbours are lo = floor(|x|·2**e)·2**-e and
    # hi = lo + 2**-e (up to the smallest normal too); |x| rounds up iff u < (|x| − lo) / (hi − lo), in Fractions.
    # Inputs across the subnormals, below the smallest (down to zero or up to 2**-e) and just under the smallest
    # normal (up to it), each with uniforms at the threshold, an ulp either side, 0 and random ones; both signs,
    # float64 and float32 (exact: at most 20 significant bits, and float32's own subnormals reach 2**-149).
    from zerosim.precision import get_format

    f = get_format(name)
    assert f.smallest_subnormal == 2.0**-e and f.smallest_normal == n * 2.0**-e
    rng = np.random.default_rng(63)
    ks = np.unique(np.concatenate([np.arange(0, min(n, 16)), np.arange(max(n - 8, 0), n), rng.integers(0, n, 20)]))
    where = np.array([1 / 1024, 0.25, 0.5, 0.75, 1 - 1 / 1024])  # between lo and hi
    x64 = ((ks[:, None] + where[None, :]) * 2.0**-e).ravel()
    x64 = np.concatenate([x64, -x64])
    for x in (x64, x64.astype(np.float32)):
        assert np.array_equal(x.astype(np.float64), x64)
        exact = [Fraction(float(v)) for v in np.abs(x64)]
        p = [v * 2**e - int(v * 2**e) for v in exact]  # (|x| − lo) / (hi − lo): the spacing is 2**-e throughout
        thresholds = np.array([float(q) for q in p])  # exact: each p is k/1024, k/4
        for u in (thresholds, np.nextafter(thresholds, 0.0), np.nextafter(thresholds, 1.0), np.zeros(x.size),
                  rng.random(x.size)):
            got = cast(x, name, "stochastic", uniforms=u)
            k = [int(v * 2**e) + (Fraction(float(ui)) < q) for v, q, ui in zip(exact, p, u)]  # up iff u < p
            want = [Fraction(ki, 2**e) * (-1 if neg else 1) for ki, neg in zip(k, np.signbit(x64))]
            assert [Fraction(float(g)) for g in got.astype(np.float64)] == want
            assert np.array_equal(np.signbit(got.astype(np.float64)), np.signbit(x64))  # -0 where x < 0 rounds to 0
