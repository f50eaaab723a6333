"""float32 and float64 into float16 by precision/cast/_fp16.py `to_fp16` (its small elements by an addition, the rest
by NumPy's `astype`) against NumPy's `astype` itself and against a float64 reference that shares nothing with either:
below 2**-14 a float16 is a whole number of 2**-24, so its bits are rint(|x| * 2**24) (an exact product, rounded to
nearest even by `np.rint`) with x's sign. Every float32 of the binades where the rounding decides something, float64
values on every tie below 2**-14, and arrays that mix them with normal values, zeros, inf and NaN payloads."""

from __future__ import annotations

import numpy as np
import pytest

from zerosim.precision import cast
from zerosim.precision.cast._fp16 import _by_bits, _mostly_normal, to_fp16


def reference_bits(x) -> np.ndarray:
    """float16 bits of values below 2**-14 in magnitude (any float dtype), from float64 arithmetic alone."""
    x64 = np.asarray(x, np.float64)
    count = np.rint(np.abs(x64) * 2.0**24).astype(np.uint16)  # 0 ... 1024 (1024: 2**-14, float16's smallest normal)
    return count | np.where(np.signbit(x64), np.uint16(0x8000), np.uint16(0))


def binade(exponent: int) -> np.ndarray:
    """Every positive float32 in [2**exponent, 2**(exponent + 1)), and their negatives: 2 * 2**23 values."""
    bits = np.arange(2**23, dtype=np.uint32) | np.uint32((exponent + 127) << 23)
    return np.concatenate([bits, bits | np.uint32(0x80000000)]).view(np.float32)


def bits16(h) -> np.ndarray:
    return np.asarray(h).view(np.uint16)


@pytest.mark.parametrize("exponent", [-15, -25])
def test_every_float32_of_a_binade_that_rounds_to_a_subnormal_or_up_to_the_smallest_normal(exponent):
    # -15: [2**-15, 2**-14): float16's largest subnormals, ties between them, and rounding up to 2**-14 (bits 0x400)
    # -25: [2**-25, 2**-24): 2**-25 itself ties to 0 (even), everything above it rounds up to 2**-24 (bits 1)
    x = binade(exponent)
    assert not _mostly_normal(x)  # the path that adds, not astype's
    got = bits16(to_fp16(x))
    np.testing.assert_array_equal(got, reference_bits(x))
    np.testing.assert_array_equal(got[::61], bits16(x[::61].astype(np.float16)))  # astype's slow: every 61st


def test_float32_samples_of_every_binade_below_the_normals_and_the_subnormals():
    rng = np.random.default_rng(16)
    exponents = np.repeat(np.arange(-126, -14), 1024)  # every binade of float32's normals below 2**-14
    mantissas = rng.integers(0, 2**23, len(exponents), dtype=np.uint32)
    parts = [(mantissas | ((exponents + 127).astype(np.uint32) << 23) | (mantissas & 1) << 31).view(np.float32)]
    subnormal = np.arange(1, 2**23, 4999, dtype=np.uint32)  # float32 subnormals: all round to 0
    x = np.concatenate(parts + [subnormal.view(np.float32), (subnormal | np.uint32(0x80000000)).view(np.float32)])
    assert not _mostly_normal(x)
    got = bits16(to_fp16(x))
    np.testing.assert_array_equal(got, reference_bits(x))
    np.testing.assert_array_equal(got, bits16(x.astype(np.float16)))


def test_float64_on_and_beside_every_tie_below_the_smallest_normal():
    k = np.arange(1024, dtype=np.float64)
    ties = (k + 0.5) * 2.0**-24  # exactly halfway: to the even count
    x = np.concatenate([ties, np.nextafter(ties, 0), np.nextafter(ties, 1), k * 2.0**-24, 2.0**-14 - 2.0**-70 * k])
    x = np.concatenate([x, -x])
    got = bits16(to_fp16(x))
    np.testing.assert_array_equal(got, reference_bits(x))
    np.testing.assert_array_equal(got, bits16(x.astype(np.float16)))
    # a hand table: (value, float16 bits), each decided by ties to even or by the nearest count
    table = [(0.5 * 2.0**-24, 0x0000),  # halfway between 0 and 1 count: to 0, the even one
             (1.5 * 2.0**-24, 0x0002),  # halfway between 1 and 2: to 2
             (2.5 * 2.0**-24, 0x0002),  # halfway between 2 and 3: to 2
             (np.nextafter(0.5 * 2.0**-24, 1), 0x0001),  # just above the first tie: up to 1
             (1023.5 * 2.0**-24, 0x0400),  # halfway between the largest subnormal and 2**-14: to 1024, the even
             (-1022.5 * 2.0**-24, 0x83FE),  # a negative tie: to 1022, the sign kept
             (-0.0, 0x8000)]  # -0 stays -0
    values = np.array([v for v, _ in table] * 100)  # long enough to take the adding path (`_SAMPLE_FROM`)
    assert not _mostly_normal(values)
    np.testing.assert_array_equal(bits16(to_fp16(values)), np.array([b for _, b in table] * 100, np.uint16))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_arrays_that_mix_small_normal_zero_inf_nan_and_overflow_keep_astypes_bits(dtype):
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((3, 50, 40)) * 2.0 ** rng.integers(-30, 20, (3, 50, 40))).astype(dtype)
    flat = x.reshape(-1)
    flat[::7] = 0.0
    flat[1::11] = -0.0
    flat[2::13] = np.inf
    flat[3::17] = -np.inf
    flat[4::19] = 70000.0  # past float16's range: inf
    nans = {np.float32: [0x7FC00001, 0xFFA12345, 0x7F800001], np.float64: [0x7FF8000000000123, 0xFFF4000000000000]}
    flat[5::23] = np.resize(np.array(nans[dtype], np.uint32 if dtype == np.float32 else np.uint64).view(dtype),
                            len(flat[5::23]))
    assert not _mostly_normal(x)
    with np.errstate(over="ignore", invalid="ignore"):
        want = x.astype(np.float16)
        got = to_fp16(x)
        transposed = to_fp16(x.transpose(2, 0, 1))  # not contiguous
    assert got.shape == x.shape and got.dtype == np.float16
    np.testing.assert_array_equal(bits16(got), bits16(want))
    np.testing.assert_array_equal(bits16(transposed), bits16(want.transpose(2, 0, 1)))
    assert transposed.strides == want.transpose(2, 0, 1).strides  # astype's layout kept (order "K")
    small = (np.abs(x) < 2.0**-14) & ~np.isnan(x)
    np.testing.assert_array_equal(bits16(got)[small], reference_bits(x[small]))


def test_cast_into_fp16_takes_it_and_keeps_the_bits():
    x = binade(-20)[::64]  # small: the adding path
    np.testing.assert_array_equal(bits16(cast(x, "fp16")), reference_bits(x))
    np.testing.assert_array_equal(bits16(cast(x.astype(np.float64), "fp16")), reference_bits(x))


def test_other_dtypes_and_small_arrays_are_astypes_own():
    halves = np.arange(1, 1200, dtype=np.uint16).view(np.float16)  # float16 subnormals: astype's copy, not an addition
    assert not _mostly_normal(halves)
    np.testing.assert_array_equal(bits16(to_fp16(halves)), bits16(halves))
    tiny = binade(-20)[:100]  # small values, but few: astype takes them whole
    np.testing.assert_array_equal(bits16(to_fp16(tiny)), reference_bits(tiny))


@pytest.mark.parametrize("exponent", [-14, 0, 15, 16])
def test_every_float32_of_a_normal_binade_rounded_from_its_bits_is_astypes(exponent):
    # -14: [2**-14, 2**-13), float16's first normal binade (the exponent rebiased to 1); 0: [1, 2), ties at 2**-11
    # apart; 15: [2**15, 2**16), the last binade, from 65,520 on rounded up to inf; 16: [2**16, 2**17), all inf
    x = binade(exponent)
    with np.errstate(over="ignore"):
        want = bits16(x.astype(np.float16))
    np.testing.assert_array_equal(bits16(_by_bits(x)), want)
    np.testing.assert_array_equal(bits16(_by_bits(x.astype(np.float64))), want)  # float32's values are float64's too


def test_float64_ties_at_float16s_last_place_and_a_hand_table():
    rng = np.random.default_rng(64)
    exponents = np.repeat(np.arange(-14, 16), 256).astype(np.uint64) + np.uint64(1023)
    kept = rng.integers(0, 2**10, len(exponents), dtype=np.uint64) << np.uint64(42)  # a float16 mantissa
    ties = (exponents << np.uint64(52)) | kept | np.uint64(2**41)  # exactly half a float16 place above it
    bits = np.concatenate([ties, ties - np.uint64(1), ties + np.uint64(1)])
    x = np.concatenate([bits, bits | np.uint64(2**63)]).view(np.float64)
    np.testing.assert_array_equal(bits16(_by_bits(x)), bits16(x.astype(np.float16)))
    table = [(1.0 + 2.0**-11, 0x3C00),  # halfway between 1 and 1 + 2**-10: to 1, the even mantissa
             (1.0 + 3 * 2.0**-11, 0x3C02),  # halfway between 1 + 2**-10 and 1 + 2**-9: up, to the even one
             (float(np.nextafter(np.float32(1.0 + 2.0**-11), np.float32(2.0))), 0x3C01),  # just past the tie: up
             (-2.0, 0xC000),  # the sign kept, the exponent rebiased: (1 + 15) << 10
             (2.0**-14, 0x0400),  # float16's smallest normal
             (65504.0, 0x7BFF),  # its largest
             (65519.0, 0x7BFF),  # below the tie with 65,536: down
             (65520.0, 0x7C00),  # the tie: to the even mantissa, which carries into inf
             (1e6, 0x7C00),  # past the range: inf
             (-np.inf, 0xFC00),
             (-0.0, 0x8000)]
    values = np.array([v for v, _ in table])  # each a float32 too
    want = np.array([b for _, b in table], np.uint16)
    np.testing.assert_array_equal(bits16(_by_bits(values)), want)
    np.testing.assert_array_equal(bits16(_by_bits(values.astype(np.float32))), want)

