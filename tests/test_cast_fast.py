"""The fast cast against its naive twin, bit for bit (NaN payloads included).

`cast` rounds through float32 and repairs suspected midpoints (round to nearest), and rounds
stochastically with an integer carry (zerosim/precision/cast/_stochastic.py). `cast_reference` is the
first implementation, kept as it was: round to odd everywhere, neighbours found one by one. Its
correctness is checked on its own in tests/test_cast.py (exact rationals, every bit pattern). Here
the two must agree exactly where a fast path goes wrong first: on every midpoint between two
neighbours of each narrow format and one float64 ulp either side of it, at subnormals, at the
overflow threshold, on NaN, inf and -0, on random bit patterns, and for stochastic rounding on the
uniforms that sit exactly at, and one ulp either side of, the probability of rounding up.
"""

from __future__ import annotations

import math
import warnings

import ml_dtypes
import numpy as np
import pytest
from helpers import bits  # the tests' shared helpers (tests/helpers.py)
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from zerosim.precision import MixedPrecision, cast
from zerosim.precision.cast import cast_reference, counter_uniforms
from zerosim.precision.cast._stochastic import BLOCK

DTYPES = {  # written out here, not read from zerosim
    "fp32": np.dtype(np.float32),
    "fp16": np.dtype(np.float16),
    "bf16": np.dtype(ml_dtypes.bfloat16),
    "fp8_e4m3": np.dtype(ml_dtypes.float8_e4m3fn),
    "fp8_e5m2": np.dtype(ml_dtypes.float8_e5m2),
}
NARROW = ["fp16", "bf16", "fp8_e4m3", "fp8_e5m2"]
UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def assert_same_bits(got: np.ndarray, want: np.ndarray, inputs) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype, got.shape, want.shape)
    diff = np.flatnonzero(bits(got).reshape(-1) != bits(want).reshape(-1))
    if diff.size:
        x = np.asarray(inputs).reshape(-1)
        first = [
            (repr(x[i]), hex(int(bits(got).reshape(-1)[i])), hex(int(bits(want).reshape(-1)[i]))) for i in diff[:5]
        ]
        raise AssertionError(f"{diff.size} of {got.size} differ; first (input, fast, naive): {first}")


# -- every neighbour pair of a narrow format ----------------------------------------------------


def neighbours(name: str) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi) float64: every finite non-negative number of the format and the one above it; above
    the largest finite number, the overflow threshold's other side (max + its spacing), as IEEE
    rounding sees it. ml_dtypes' widening is exact (every pattern is checked in tests/test_cast.py)."""
    dtype = DTYPES[name]
    patterns = np.arange(2 ** (8 * dtype.itemsize - 1), dtype=np.int64).astype(UINT[dtype.itemsize])
    with np.errstate(invalid="ignore"):
        values = patterns.view(dtype).astype(np.float64)
    finite = values[np.isfinite(values)]  # ascending: positive patterns order like their values
    hi = np.append(finite[1:], 2 * finite[-1] - finite[-2])  # max and its predecessor share a binade
    return finite, hi


def boundary_values(name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(x, lo, hi) float64, both signs: the numbers themselves, the midpoints, one float64 ulp either
    side of both, and midpoints nudged by 2**-30 (below float32's resolution) and 2**-20 (within it)."""
    lo, hi = neighbours(name)
    mid = (lo + hi) / 2  # exact: a narrow format's midpoint needs at most 13 bits
    xs, los, his = [], [], []
    for x in (lo, np.nextafter(lo, np.inf), mid, np.nextafter(mid, -np.inf), np.nextafter(mid, np.inf),
              mid * (1 + 2.0**-30), mid * (1 - 2.0**-30), mid * (1 + 2.0**-20), mid * (1 - 2.0**-20)):
        xs.append(x)
        los.append(lo)
        his.append(hi)
    x, lo, hi = np.concatenate(xs), np.concatenate(los), np.concatenate(his)
    return np.concatenate([x, -x]), np.concatenate([lo, -lo]), np.concatenate([hi, -hi])


SPECIALS = np.concatenate(
    [
        np.array(
            [
                0.0,
                -0.0,
                np.inf,
                -np.inf,
                np.nan,
                -np.nan,
                5e-324,
                -5e-324,
                2.2250738585072014e-308,
                1.7976931348623157e308,
                -1.7976931348623157e308,
                3.4028235677973366e38,
                3.4028235677973362e38 * 1.0000001,
                2.0**-149,
                2.0**-150,
                2.0**-150 * (1 + 2.0**-40),
                2.0**-126,
                2.0**-127 * 3,
                1e-45,
                65520.0,
                464.0,
                61440.0,
            ]
        ),
        # NaN payloads: quiet and signalling, both signs, payload bits high and low
        np.array(
            [
                0x7FF8000000000001,
                0x7FF0000000000001,
                0xFFF0000000000001,
                0x7FF4000000000000,
                0x7FFFFFFFFFFFFFFF,
                0x7FF0000020000000,
                0xFFF8000000000000,
                0x7FF0000000002000,
            ],
            dtype=np.uint64,
        ).view(np.float64),
    ]
)


def random_float64(n: int, seed: int) -> np.ndarray:
    """Every kind of float64: random bit patterns (any exponent, NaN payloads) and normal draws."""
    rng = np.random.default_rng(seed)
    return np.concatenate([rng.integers(0, 2**64, n, dtype=np.uint64).view(np.float64), rng.standard_normal(n)])


@pytest.mark.parametrize("name", NARROW)
def test_nearest_matches_twin_at_every_midpoint_and_ulp_around_it(name):
    x, _, _ = boundary_values(name)
    x = np.concatenate([x, SPECIALS])
    for saturate in (False, True):
        with np.errstate(over="ignore", invalid="ignore"):
            assert_same_bits(cast(x, name, saturate=saturate), cast_reference(x, name, saturate=saturate), x)


@pytest.mark.parametrize("name", NARROW)
def test_nearest_from_float32_and_narrow_inputs_matches_twin(name):
    """float32 (and 16-bit) inputs, including float32 midpoints and one float32 ulp either side."""
    x64, _, _ = boundary_values(name)
    with np.errstate(over="ignore", invalid="ignore"):
        x32 = x64.astype(np.float32)
        x32 = np.concatenate([x32, np.nextafter(x32, np.float32(np.inf)), np.nextafter(x32, np.float32(-np.inf)),
                              SPECIALS.astype(np.float32)])
        for x in (x32, x32.astype(np.float16), x32.astype(ml_dtypes.bfloat16)):
            assert_same_bits(cast(x, name), cast_reference(x, name), x)


@pytest.mark.parametrize("name", list(DTYPES) + ["fp64"])
def test_nearest_matches_twin_on_random_bit_patterns(name):
    x = np.concatenate([random_float64(50_000, 1), SPECIALS])
    with np.errstate(over="ignore", invalid="ignore"):
        for a in (x, x.astype(np.float32)):
            assert_same_bits(cast(a, name), cast_reference(a, name), a)
            assert_same_bits(cast(a, name, saturate=True), cast_reference(a, name, saturate=True), a)


def test_design_example_through_the_fast_path():
    """The design page's example: float64 1 + 2**-8 + 2**-40 is bf16 1.0078125 (ml_dtypes, rounding twice, says
    1.0); docs/explanation/design.md."""
    x = np.full(3, 1 + 2**-8 + 2**-40)
    assert cast(x, "bf16").astype(np.float64).tolist() == [1.0078125] * 3
    assert x.astype(ml_dtypes.bfloat16).astype(np.float64).tolist() == [1.0] * 3


@pytest.mark.parametrize("shape_case", ["scalar", "0d", "3d", "transposed", "strided", "empty"])
@pytest.mark.parametrize("rounding", ["nearest", "stochastic"])
def test_shapes_and_layouts_match_twin(shape_case, rounding):
    base = random_float64(3000, 2)[:6000].reshape(20, 300)
    x = {"scalar": float(base[0, 5]), "0d": np.float64(1 + 2**-8 + 2**-40), "3d": base.reshape(4, 5, 300),
         "transposed": base.T, "strided": base[::3, ::7], "empty": np.zeros((0, 4))}[shape_case]
    kw = {}
    if rounding == "stochastic":
        kw["uniforms"] = np.random.default_rng(3).random(np.shape(x))
    with np.errstate(over="ignore", invalid="ignore"):
        for name in ("bf16", "fp8_e4m3", "fp16"):
            got, want = cast(x, name, rounding, **kw), cast_reference(x, name, rounding, **kw)
            assert_same_bits(got, want, x)


@pytest.mark.parametrize("rounding", ["nearest", "stochastic"])
@pytest.mark.parametrize("name", list(DTYPES))
def test_overflow_and_nan_are_answers_not_warnings(name, rounding):
    """Overflow to inf/NaN and NaN in, NaN out are each format's defined answers: no RuntimeWarning."""
    x = np.array([1e39, -1e300, 7e4, 500.0, np.inf, -np.inf, np.nan, 1e-300])
    x32 = np.array([3.4e38, -3e38, 7e4, 500.0, np.inf, -np.inf, np.nan, 1e-40], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for a in (x, x32):
            for saturate in (False, True):
                cast(a, name, rounding, rng=np.random.default_rng(0), saturate=saturate)


# Hypothesis: arrays of any float64 at all, and arrays crowded around one format's midpoints.
any_float64_arrays = hnp.arrays(np.float64, st.integers(1, 64), elements=st.floats(allow_nan=True, allow_infinity=True))


@settings(max_examples=max(100, settings.default.max_examples))
@given(any_float64_arrays, st.sampled_from(list(DTYPES)), st.booleans())
def test_nearest_matches_twin_property(x, name, saturate):
    with np.errstate(over="ignore", invalid="ignore"):
        assert_same_bits(cast(x, name, saturate=saturate), cast_reference(x, name, saturate=saturate), x)


# -- stochastic rounding --------------------------------------------------------------------------


def uniforms_at_the_threshold(x: np.ndarray, lo: np.ndarray, hi: np.ndarray, seed: int) -> np.ndarray:
    """For each x between neighbours lo and hi, a uniform at p = (|x| - lo) / (hi - lo) (where the
    decision flips: up iff u < p), one float64 ulp below or above it, or a random one, in turn."""
    with np.errstate(invalid="ignore", divide="ignore"):
        p = np.where(hi != lo, (np.abs(x) - np.abs(lo)) / np.abs(hi - lo), 0.0)  # exact: dyadic, Sterbenz
    p = np.clip(np.nan_to_num(p), 0.0, np.nextafter(1.0, 0.0))
    below, above = np.nextafter(p, 0.0), np.minimum(np.nextafter(p, 1.0), np.nextafter(1.0, 0.0))
    pick = np.arange(x.size) % 4
    return np.choose(pick, [p, below, above, np.random.default_rng(seed).random(x.size)])


@pytest.mark.parametrize("name", NARROW)
def test_stochastic_matches_twin_at_the_rounding_threshold(name):
    x, lo, hi = boundary_values(name)
    u = uniforms_at_the_threshold(x, lo, hi, seed=4)
    x, u = np.concatenate([x, SPECIALS]), np.concatenate([u, np.full(SPECIALS.size, 0.5)])
    with np.errstate(over="ignore", invalid="ignore"):
        for a in (x, x.astype(np.float32)):  # float64 and float32 working formats
            got = cast(a, name, "stochastic", uniforms=u)
            assert_same_bits(got, cast_reference(a, name, "stochastic", uniforms=u), a)


@pytest.mark.parametrize("source", ["fp64", "fp32"])
def test_stochastic_to_fp32_and_same_format_matches_twin(source):
    """fp32 from float64 (29 dropped bits) at float32's own thresholds; fp32 from float32 (none)."""
    rng = np.random.default_rng(5)
    lo = np.concatenate([rng.integers(0, 0x7F7FFFFF, 20_000, dtype=np.uint32), np.arange(0, 300, dtype=np.uint32),
                         np.arange(0x007FFF00, 0x00800100, dtype=np.uint32), np.array([0x7F7FFFFF], np.uint32)])
    lo64 = lo.view(np.float32).astype(np.float64)
    hi64 = np.where(lo == 0x7F7FFFFF, 2.0**128, (lo + np.uint32(1)).view(np.float32).astype(np.float64))
    frac = rng.choice([0.0, 0.5, 2.0**-29, 1 - 2.0**-29, 0.25], lo.size)
    x = lo64 + frac * (hi64 - lo64)  # exact: at most 30 significant bits
    x, lo64, hi64 = np.concatenate([x, -x]), np.concatenate([lo64, -lo64]), np.concatenate([hi64, -hi64])
    u = uniforms_at_the_threshold(x, lo64, hi64, seed=6)
    x, u = np.concatenate([x, SPECIALS]), np.concatenate([u, np.full(SPECIALS.size, 0.25)])
    with np.errstate(over="ignore", invalid="ignore"):
        a = x if source == "fp64" else x.astype(np.float32)
        assert_same_bits(
            cast(a, "fp32", "stochastic", uniforms=u), cast_reference(a, "fp32", "stochastic", uniforms=u), a
        )


@pytest.mark.parametrize("name", list(DTYPES) + ["fp64"])
def test_stochastic_matches_twin_on_random_bit_patterns_and_rng_draws(name):
    x = np.concatenate([random_float64(20_000, 7), SPECIALS])
    with np.errstate(over="ignore", invalid="ignore"):
        for a in (x, x.astype(np.float32), x.astype(np.float16)):
            got = cast(a, name, "stochastic", rng=np.random.default_rng(8))
            want = cast_reference(a, name, "stochastic", rng=np.random.default_rng(8))  # the same draws
            assert_same_bits(got, want, a)


@pytest.mark.parametrize("bad", [-1e-300, -2.0**-20, -0.5, 1.0, 1.5, np.inf, -np.inf, np.nan])
def test_stochastic_with_uniforms_outside_unit_interval_matches_twin(bad):
    """cast documents u in [0, 1); whatever the caller passes, both twins give the same bits."""
    x = np.concatenate([random_float64(500, 9), SPECIALS])
    u = np.random.default_rng(10).random(x.size)
    u[::7] = bad
    with np.errstate(over="ignore", invalid="ignore"):
        for name in ("bf16", "fp32", "fp8_e5m2"):
            for a in (x, x.astype(np.float32)):
                got = cast(a, name, "stochastic", uniforms=u)
                assert_same_bits(got, cast_reference(a, name, "stochastic", uniforms=u), a)


@pytest.mark.slow
def test_stochastic_across_blocks_matches_twin():
    """Longer than several blocks: a NaN, a subnormal and a value beyond max in the last block only,
    and a bad uniform only in the third block, after two blocks are done."""
    n = 3 * BLOCK + 11
    x = np.random.default_rng(11).standard_normal(n)
    x[-3:] = [np.nan, 1e-40, 1e39]
    u = np.random.default_rng(12).random(n)
    with np.errstate(over="ignore", invalid="ignore"):
        for a in (x, x.astype(np.float32)):
            assert_same_bits(
                cast(a, "bf16", "stochastic", uniforms=u), cast_reference(a, "bf16", "stochastic", uniforms=u), a
            )
            v = u.copy()
            v[2 * BLOCK + 5] = 1.0
            assert_same_bits(
                cast(a, "bf16", "stochastic", uniforms=v), cast_reference(a, "bf16", "stochastic", uniforms=v), a
            )


def test_engine_weight_rounding_matches_twin():
    """The engines' path: fp32 weights into bf16 with counter-based uniforms (MixedPrecision.round_weights)."""
    policy = MixedPrecision(compute="bf16", master=None, rounding="stochastic", seed=13)
    w = np.random.default_rng(14).standard_normal(BLOCK + 1000).astype(np.float32)
    u = counter_uniforms(13, 5, 300, w.shape[0])
    assert_same_bits(policy.round_weights(w, step=5, start=300), cast_reference(w, "bf16", "stochastic", uniforms=u), w)


@pytest.mark.slow
@settings(max_examples=max(100, settings.default.max_examples))
@given(any_float64_arrays, st.sampled_from(list(DTYPES)), st.data())
def test_stochastic_matches_twin_property(x, name, data):
    u = data.draw(hnp.arrays(np.float64, x.shape, elements=st.floats(0.0, 1.0, exclude_max=True)))
    with np.errstate(over="ignore", invalid="ignore"):
        for a in (x, x.astype(np.float32)):
            assert_same_bits(
                cast(a, name, "stochastic", uniforms=u), cast_reference(a, name, "stochastic", uniforms=u), a
            )


# -- counter-based uniforms -----------------------------------------------------------------------


def splitmix64(state: int) -> tuple[int, int]:
    """One step of SplitMix64 on Python integers, as in Vigna's splitmix64.c: (new state, output)."""
    state = (state + 0x9E3779B97F4A7C15) % 2**64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) % 2**64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) % 2**64
    return state, z ^ (z >> 31)


def test_splitmix64_twin_gives_the_published_first_output():
    assert splitmix64(0)[1] == 0xE220A8397B1DCDAF  # the first output from seed 0, as published


@pytest.mark.parametrize("seed, step, start, count", [
    (0, 0, 0, 5),  # seed 0, step 0: element e is SplitMix64's output number e + 1 from state 0
    (7, 3, 1000, 2 * 2**14 + 5),  # more than one block
    (2**70, -5, 2**64 - 20, 40),  # huge seed, negative step, counters wrapping past 2**64
    (1, 2, 3, 0),
    (1, 2, 3, -2),  # an empty range, as np.arange gives
])
def test_counter_uniforms_are_splitmix64_outputs(seed, step, start, count):
    got = counter_uniforms(seed, step, start, count)
    assert got.dtype == np.float64 and got.shape == (max(count, 0),)
    base = (seed * 0x9E3779B97F4A7C15 + step * 0xD1B54A32D192ED03) % 2**64
    idx = np.r_[0 : min(count, 40), max(count - 40, 0) : max(count, 0)]  # both ends of long ranges
    for i in idx:
        _, z = splitmix64((base + start + int(i)) % 2**64)
        assert got[i] == (z >> 11) * 2.0**-53, (i, got[i])  # the top 53 bits, exact in float64


def test_counter_uniforms_do_not_depend_on_sharding():
    whole = counter_uniforms(21, 4, 0, 100_000)
    cuts = [0, 1, 16_383, 16_384, 40_000, 99_999, 100_000]
    parts = [counter_uniforms(21, 4, a, b - a) for a, b in zip(cuts, cuts[1:])]
    assert np.array_equal(np.concatenate(parts).view(np.uint64), whole.view(np.uint64))
    assert 0.0 <= whole.min() and whole.max() < 1.0
    assert abs(whole.mean() - 0.5) < 6 * math.sqrt(1 / 12 / whole.size)  # 6 sigma of a uniform's mean
