"""The format table, checked against values derived by hand from each format's bit layout.

A format with E exponent bits and M stored fraction bits has bias B = 2**(E-1) - 1, so
    smallest normal     = 2**(1 - B)
    smallest subnormal  = 2**(1 - B - M)
    eps                 = 2**-M                      (gap above 1.0)
    max                 = (2 - 2**-M) * 2**(2**E - 2 - B)   for IEEE-like formats (top exponent = inf/NaN)
E4M3FN (fp8_e4m3) keeps the top exponent for finite numbers and only S.1111.111 is NaN, so its max is
1.110b * 2**(15 - 7) = 448.
"""

import ml_dtypes
import numpy as np
import pytest

from zerosim.precision import FORMATS, Format, format_of, get_format

# name, bits, exponent_bits, mantissa_bits, has_inf, max, smallest_normal, smallest_subnormal, dtype
FORMAT_TABLE = [
    # fp64: E=11, M=52, B=1023
    ("fp64", 64, 11, 52, True, (2 - 2.0**-52) * 2.0**1023, 2.0**-1022, 2.0**-1074, np.float64),
    # fp32: E=8, M=23, B=127
    ("fp32", 32, 8, 23, True, (2 - 2.0**-23) * 2.0**127, 2.0**-126, 2.0**-149, np.float32),
    # fp16: E=5, M=10, B=15; max = 1.1111111111b * 2**15 = 65504
    ("fp16", 16, 5, 10, True, 65504.0, 2.0**-14, 2.0**-24, np.float16),
    # bf16: fp32's exponent (E=8, B=127) with M=7: same range as fp32, subnormals down to 2**-133
    ("bf16", 16, 8, 7, True, (2 - 2.0**-7) * 2.0**127, 2.0**-126, 2.0**-133, ml_dtypes.bfloat16),
    # fp8_e4m3 (E4M3FN): E=4, M=3, B=7; no inf, max 448 = 1.75 * 2**8
    ("fp8_e4m3", 8, 4, 3, False, 448.0, 2.0**-6, 2.0**-9, ml_dtypes.float8_e4m3fn),
    # fp8_e5m2: E=5, M=2, B=15; IEEE-like, max 57344 = 1.75 * 2**15
    ("fp8_e5m2", 8, 5, 2, True, 57344.0, 2.0**-14, 2.0**-16, ml_dtypes.float8_e5m2),
]


def test_table_names_every_format():
    assert sorted(row[0] for row in FORMAT_TABLE) == sorted(FORMATS)


@pytest.mark.parametrize("name, bits, e_bits, m_bits, has_inf, fmax, normal, subnormal, dtype", FORMAT_TABLE)
def test_format_facts_match_hand_derived_table(name, bits, e_bits, m_bits, has_inf, fmax, normal, subnormal, dtype):
    f = get_format(name)
    assert f.name == name and str(f) == name
    assert (f.bits, f.exponent_bits, f.mantissa_bits, f.has_inf) == (bits, e_bits, m_bits, has_inf)
    assert f.bits == 1 + f.exponent_bits + f.mantissa_bits  # sign + exponent + fraction
    assert f.dtype == np.dtype(dtype)
    assert f.itemsize == np.dtype(dtype).itemsize == bits // 8
    assert f.uint_dtype == np.dtype(f"uint{bits}")
    assert f.precision == m_bits + 1
    assert f.eps == 2.0**-m_bits
    assert f.unit_roundoff == 2.0 ** -(m_bits + 1)
    assert f.max == fmax
    assert f.smallest_normal == normal
    assert f.smallest_subnormal == subnormal
    assert 2.0**f.min_exponent == normal


SMALL_FORMATS = [row for row in FORMAT_TABLE if row[1] <= 16]  # few enough bit patterns to list them all


@pytest.mark.parametrize("name, bits, e_bits, m_bits, has_inf, fmax, normal, subnormal, dtype", SMALL_FORMATS)
def test_max_is_the_largest_finite_bit_pattern(name, bits, e_bits, m_bits, has_inf, fmax, normal, subnormal, dtype):
    """Widen every positive bit pattern of the 8/16-bit formats: the largest finite one is `max`."""
    f = get_format(name)
    with np.errstate(invalid="ignore"):  # NaN patterns widen to NaN, which is what we want here
        values = np.arange(2 ** (bits - 1), dtype=f.uint_dtype).view(f.dtype).astype(np.float64)  # sign bit 0
    finite = values[np.isfinite(values)]
    assert finite.max() == fmax
    assert finite[finite > 0].min() == subnormal
    assert np.isinf(values).any() == has_inf


@pytest.mark.parametrize(
    "alias, name",
    [
        ("float64", "fp64"), ("double", "fp64"), ("FP64", "fp64"),
        ("float32", "fp32"), ("single", "fp32"), ("float", "fp32"),
        ("float16", "fp16"), ("half", "fp16"),
        ("bfloat16", "bf16"), ("BF16", "bf16"),
        ("float8_e4m3fn", "fp8_e4m3"), ("e4m3", "fp8_e4m3"),
        ("float8_e5m2", "fp8_e5m2"), ("e5m2", "fp8_e5m2"),
    ],
)
def test_aliases_resolve_to_canonical_format(alias, name):
    assert get_format(alias) is FORMATS[name]


@pytest.mark.parametrize("name, bits, e_bits, m_bits, has_inf, fmax, normal, subnormal, dtype", FORMAT_TABLE)
def test_dtype_and_format_objects_resolve(name, bits, e_bits, m_bits, has_inf, fmax, normal, subnormal, dtype):
    f = FORMATS[name]
    assert get_format(dtype) is f  # a scalar type
    assert get_format(np.dtype(dtype)) is f  # a dtype
    assert get_format(f) is f  # a Format passes through
    assert format_of(np.zeros(3, dtype=dtype)) is f


@pytest.mark.bad_input("formats and casts")
@pytest.mark.parametrize("bad", ["fp12", "float128", "int8", ""])
def test_unknown_format_name_is_a_clear_value_error(bad):
    with pytest.raises(ValueError, match="unknown floating-point format"):
        get_format(bad)


@pytest.mark.bad_input("formats and casts")
@pytest.mark.parametrize("dtype", [np.int32, np.uint16, np.complex64, np.bool_])
def test_non_float_dtype_is_a_value_error_naming_it(dtype):
    with pytest.raises(ValueError, match=str(np.dtype(dtype))):
        get_format(np.dtype(dtype))
    with pytest.raises(ValueError, match="not one of zerosim's formats"):
        format_of(np.zeros(2, dtype=dtype))


@pytest.mark.bad_input("formats and casts")
def test_unreadable_format_object_is_a_type_error():
    with pytest.raises(TypeError, match="cannot read a floating-point format"):
        get_format(object())


def test_format_is_frozen():
    f = get_format("fp16")
    assert isinstance(f, Format)
    with pytest.raises(AttributeError):
        f.mantissa_bits = 3
