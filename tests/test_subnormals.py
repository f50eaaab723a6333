"""zerosim/precision/cast/_subnormals.py: float32 <-> float64 through the bits give NumPy's (IEEE) conversions for
every float32 subnormal and zero pattern, and for float64 values at and around every kind of float32
rounding boundary in the subnormal range (ties to even, the step up into the normals, below half the
smallest subnormal). On a GPU the same functions run where CuPy's float32 conversions flush (tests/gpu)."""

import numpy as np

from tests.helpers import bits
from zerosim.precision.cast import f32_to_f64, f64_to_f32


def test_every_float32_subnormal_widens_exactly():
    mags = np.arange(0, 1 << 23, dtype=np.uint32)  # every subnormal (and zero) magnitude
    for sign in (0, 1 << 31):
        x = (mags | np.uint32(sign)).view(np.float32)
        assert np.array_equal(bits(f32_to_f64(x, np)), bits(x.astype(np.float64)))


def test_normals_inf_and_nan_widen_as_astype():
    rng = np.random.default_rng(0)
    u = rng.integers(0x00800000, 0x100000000, 200_000, dtype=np.uint64).astype(np.uint32)  # exponent >= 1
    x = u.view(np.float32)
    with np.errstate(invalid="ignore"):  # signalling NaN patterns are quieted by the cast, as on any IEEE machine
        got, want = f32_to_f64(x, np), x.astype(np.float64)
    keep = ~np.isnan(want)
    assert np.array_equal(bits(got)[keep], bits(want)[keep]) and np.isnan(got[~keep]).all()


def test_float64_rounds_into_the_float32_subnormals_as_ieee():
    k = np.arange(0, (1 << 23) + 2, 997, dtype=np.float64)  # subnormal bit patterns, and the first normals
    tiny = 2.0**-149
    offsets = np.array([0.0, 0.25, 0.5, 0.5 - 2**-30, 0.5 + 2**-30, 0.75])  # in units of the smallest subnormal
    x = ((k[:, None] + offsets[None, :]) * tiny).reshape(-1)  # exact in float64: k < 2**24, offsets short
    x = np.concatenate([x, -x, [2.0**-150, 2.0**-151, 3 * 2.0**-151, 2.0**-126 - 2.0**-151, 1e-300, 0.0, -0.0]])
    assert np.array_equal(bits(f64_to_f32(x, np)), bits(x.astype(np.float32)))


def test_float64_normals_inf_and_nan_round_as_astype():
    rng = np.random.default_rng(1)
    x = rng.standard_normal(200_000) * np.exp2(rng.integers(-160, 140, 200_000))
    x[:4] = [np.inf, -np.inf, np.nan, 3.4028235677973366e38]  # the largest float64 that rounds to FLT_MAX
    with np.errstate(over="ignore"):
        want = x.astype(np.float32)
        got = f64_to_f32(x, np)
    keep = ~np.isnan(want)
    assert np.array_equal(bits(got)[keep], bits(want)[keep]) and np.isnan(got[~keep]).all()
