"""`cast`'s shortcut for the roundings that are one NumPy astype (precision/cast/_cast.py `_PLAIN`) against the
general path (the checks, then the fast kernels: tests/test_cast_fast.py checks those against the naive twin), on
every bit pattern of every 8- and 16-bit format and on float32/float64 values chosen to round, tie, overflow and be
NaN (signalling ones too): the same bits, and the same warnings (NumPy warns where a signalling NaN is widened, on
both paths alike; an overflow into a narrower format is its defined answer and warns on neither)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from zerosim.precision import FORMATS, cast
from zerosim.precision.cast._cast import _PLAIN, FAST_KERNELS
from zerosim.precision.cast._inputs import cast_with


def every_value(f) -> np.ndarray:
    """Every bit pattern of a narrow format; for fp32 and fp64, values that round, tie and overflow below them."""
    if f.bits <= 16:
        return np.arange(2**f.bits, dtype=np.uint64).astype(f.uint_dtype).view(f.dtype)
    rng = np.random.default_rng(f.bits)
    x = rng.standard_normal(20000) * 2.0 ** rng.integers(-140, 130, 20000)
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, 65504.0, 65520.0, 3.4e38, 1e39, 448.0, 464.0, 57344.0, 61440.0,
               1 + 2**-8, 1 + 2**-11, 2**-149, 2**-24, 2**-25]
    with np.errstate(over="ignore"):
        out = np.concatenate([x, special]).astype(f.dtype)
    signalling = {32: np.array([0x7FA00000, 0xFF800001], np.uint32), 64: np.array([0x7FF4000000000000], np.uint64)}
    return np.concatenate([out, signalling[f.bits].view(f.dtype)])


@pytest.mark.parametrize("pair", sorted(_PLAIN, key=str), ids=lambda p: f"{p[0]}->{p[1]}")
def test_a_plain_cast_gives_the_general_paths_bits_and_no_warning(pair):
    src = next(f for f in FORMATS.values() if f.dtype == pair[0])
    dst = next(f for f in FORMATS.values() if f.dtype == pair[1])
    x = every_value(src)
    with warnings.catch_warnings(record=True) as shortcut:
        warnings.simplefilter("always")
        got = cast(x, dst)
    with warnings.catch_warnings(record=True) as general:
        warnings.simplefilter("always")
        want = cast_with(FAST_KERNELS, x, dst, "nearest", None, False, None)
    assert got.dtype == want.dtype and np.array_equal(got.view(dst.uint_dtype), want.view(dst.uint_dtype))
    assert [str(w.message) for w in shortcut] == [str(w.message) for w in general]
    assert not any("overflow" in str(w.message) for w in shortcut)
    assert got is not x  # a new array, as the general path makes


def test_the_float64_roundings_narrower_than_float32_are_not_plain():
    # float64 -> bf16 through float32 rounds twice (precision/cast/_cast.py): those must keep the careful path
    for f in FORMATS.values():
        if f.bits < 32:
            assert (np.dtype(np.float64), f.dtype) not in _PLAIN
    assert float(cast(np.array([1 + 2**-8 + 2**-40]), "bf16")[0]) == 1.0078125


@pytest.mark.parametrize("name", ["bf16", "fp8_e4m3", "fp8_e5m2"])
def test_what_arithmetic_makes_rounds_into_ml_dtypes_without_a_warning(name):
    # models/layers/_basic.py `rounded` casts a float32 result of arithmetic straight into bf16/fp8: it must give
    # cast's bits and warn of nothing (NumPy warns of a signalling NaN only, which arithmetic never makes)
    from zerosim.models.layers._basic import rounded
    from zerosim.precision import get_format

    f = get_format(name)
    rng = np.random.default_rng(0)
    with np.errstate(over="ignore", invalid="ignore"):  # the inputs themselves: past float32's range, inf
        x = (rng.standard_normal(50000) * 2.0 ** rng.integers(-150, 129, 50000)).astype(np.float32)
        x = np.concatenate([x, np.float32([3e38]) * 10, np.float32([0.0]) * np.inf, np.float32([2**-149]) / 3])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = rounded(x, f)
    want = cast(x, f)
    assert np.array_equal(got.view(f.uint_dtype), want.view(f.uint_dtype))
