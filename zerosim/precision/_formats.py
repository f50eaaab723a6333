"""Floating-point formats by name: the facts a learner looks up, and the numpy dtype that holds them.

Every format here is binary floating point with a sign bit, `exponent_bits` of biased exponent and
`mantissa_bits` of stored fraction (the leading 1 is implicit), so it has `mantissa_bits + 1` bits of
precision. The two fp8 formats are the OCP / NVIDIA ones that ml_dtypes implements:

- ``fp8_e4m3`` is *E4M3FN*: no infinities, a single NaN pattern per sign, max 448. Overflow on a
  cast gives NaN (the format has nothing else to give) unless the caller asks to saturate.
- ``fp8_e5m2`` is IEEE-like: infinities exist, max 57344, overflow rounds to inf.

NumPy has no bf16 or fp8: their dtypes are ml_dtypes', read from it when a format's `dtype` is first asked for (the
three at once, `_ml_dtypes`). Importing ml_dtypes costs 4-5 ms of CPU, a twelfth of `import numpy` (2026-11-26,
benchmarks/imports.py), and an fp32 or fp16 run never needs it; a bf16 or fp8 one imports it at its first cast (or
first look at such a format's dtype, finfo or hash). Nothing else changes: the record's fields, equality, hash and
repr are the same, and every dtype lookup below finds ml_dtypes' formats once they are read (no array can hold one
before ml_dtypes is imported; `get_format` reads them on a miss).
"""

from __future__ import annotations

from dataclasses import field, replace
from functools import lru_cache

import numpy as np

from zerosim._dataclass import dataclass


@dataclass(frozen=True)
class Format:
    """One floating-point format: its bit layout, its extremes and the numpy dtype that stores it."""

    name: str
    bits: int
    exponent_bits: int
    mantissa_bits: int  # stored fraction bits; precision p = mantissa_bits + 1
    dtype: np.dtype
    has_inf: bool  # False for fp8_e4m3 (E4M3FN): overflow becomes NaN, not inf
    # as a compute format, the kernels its arithmetic runs on (precision/arithmetic/): "portable" or "native". How
    # the arithmetic runs, not what the format is: formats that differ only in it compare (and hash) equal
    arithmetic: str = field(default="portable", compare=False, repr=False)

    def __post_init__(self):
        if self.dtype is _LATER:  # one of ml_dtypes' formats: `dtype` is read by __getattr__ when first asked for
            del self.__dict__["dtype"]

    def __getattr__(self, name: str):
        """Only for a format made with its dtype `_LATER`, before its `dtype` is first read (module docstring)."""
        if name != "dtype" or "name" not in self.__dict__ or self.name not in _ML_DTYPES:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return _ml_dtypes()[self.name]

    @property
    def finfo(self):
        import ml_dtypes  # module docstring: its finfo covers numpy's own float types too

        return ml_dtypes.finfo(self.dtype)

    @property
    def precision(self) -> int:
        """Significand bits including the implicit leading one (p)."""
        return self.mantissa_bits + 1

    @property
    def eps(self) -> float:
        """Distance from 1.0 to the next larger number: 2**-mantissa_bits."""
        return 2.0 ** -self.mantissa_bits

    @property
    def unit_roundoff(self) -> float:
        """u = eps / 2: the largest relative error of one round-to-nearest."""
        return self.eps / 2

    @property
    def max(self) -> float:
        return float(self.finfo.max)

    @property
    def smallest_normal(self) -> float:
        return float(self.finfo.smallest_normal)

    @property
    def smallest_subnormal(self) -> float:
        return float(self.finfo.smallest_subnormal)

    @property
    def min_exponent(self) -> int:
        """Exponent of the smallest normal number: smallest_normal == 2**min_exponent."""
        return int(np.log2(self.smallest_normal))

    @property
    def itemsize(self) -> int:
        return self.bits // 8

    @property
    def uint_dtype(self) -> np.dtype:
        """Unsigned integer dtype of the same width, for bit-pattern views."""
        return np.dtype(f"uint{self.bits}")

    def with_arithmetic(self, arithmetic: str) -> "Format":
        """This format computing on the kernels `arithmetic` names (itself when it already does)."""
        return self if arithmetic == self.arithmetic else _with_arithmetic(self, arithmetic)

    def __str__(self) -> str:
        return self.name


@lru_cache(maxsize=None)
def _with_arithmetic(fmt: Format, arithmetic: str) -> Format:
    """`fmt` on other kernels, made once: every rank asks for its policy's compute format every step (a dataclass
    `replace` costs 15 µs). The key's Format compares without its arithmetic, which the result does not depend on."""
    return replace(fmt, arithmetic=arithmetic)


_LATER = object()  # a format's dtype, to be read from ml_dtypes when first asked for (module docstring)
_ML_DTYPES = {"bf16": "bfloat16", "fp8_e4m3": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2"}  # format: ml_dtypes' name

FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        Format("fp64", 64, 11, 52, np.dtype(np.float64), True),
        Format("fp32", 32, 8, 23, np.dtype(np.float32), True),
        Format("fp16", 16, 5, 10, np.dtype(np.float16), True),
        Format("bf16", 16, 8, 7, _LATER, True),
        Format("fp8_e4m3", 8, 4, 3, _LATER, False),
        Format("fp8_e5m2", 8, 5, 2, _LATER, True),
    )
}

# dtype -> Format (dtypes hash by value); ml_dtypes' formats join it when read (_ml_dtypes). Read from outside as
# FORMAT_BY_DTYPE (`__getattr__` below), it holds them all; inside, `known_format` looks a dtype up in it as it stands
_BY_DTYPE = {f.dtype: f for f in FORMATS.values() if f.name not in _ML_DTYPES}
known_format = _BY_DTYPE.get  # (dtype) -> Format, or None for a dtype no format read so far has: a hot path's look-up


def __getattr__(name: str):
    """FORMAT_BY_DTYPE, {dtype: Format} for every format, ml_dtypes' read first where they were not yet (PEP 562: a
    reader of the public table finds bf16 and fp8 in it, as before their dtypes were read lazily)."""
    if name == "FORMAT_BY_DTYPE":
        _ml_dtypes()
        return _BY_DTYPE
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@lru_cache(maxsize=None)
def _ml_dtypes() -> dict:
    """{format name: dtype} of ml_dtypes' formats, read once: each of FORMATS' own records takes its dtype (as if it
    had been made with it) and joins the dtype table (FORMAT_BY_DTYPE)."""
    import ml_dtypes

    dtypes = {name: np.dtype(getattr(ml_dtypes, kind)) for name, kind in _ML_DTYPES.items()}
    for name, dtype in dtypes.items():
        object.__setattr__(FORMATS[name], "dtype", dtype)
        _BY_DTYPE[dtype] = FORMATS[name]
    return dtypes


def is_ml_dtype(dtype: np.dtype) -> bool:
    """True for the dtype of one of ml_dtypes' formats (bf16, fp8); reads ml_dtypes only for a void-kind dtype, which
    theirs are (NumPy's own formats never import it)."""
    return dtype.kind == "V" and dtype in _ml_dtypes().values()


# Names people type for the same thing; they resolve to the canonical names above.
_ALIASES = {
    "float64": "fp64", "double": "fp64",
    "float32": "fp32", "float": "fp32", "single": "fp32",
    "float16": "fp16", "half": "fp16",
    "bfloat16": "bf16",
    "float8_e4m3fn": "fp8_e4m3", "e4m3": "fp8_e4m3",
    "float8_e5m2": "fp8_e5m2", "e5m2": "fp8_e5m2",
}


def get_format(fmt: "str | Format | np.dtype | type") -> Format:
    """Resolve a format name, alias, numpy dtype or `Format` to its `Format`.

    >>> get_format("bf16").max
    3.3895313892515355e+38
    """
    if type(fmt) is Format or isinstance(fmt, Format):  # the hot path first: a Format already
        return fmt
    if isinstance(fmt, str):
        key = fmt.lower()
        key = _ALIASES.get(key, key)
        if key in FORMATS:
            return FORMATS[key]
        raise ValueError(f"unknown floating-point format {fmt!r}; known formats: {', '.join(FORMATS)}")
    found = _BY_DTYPE.get(fmt) if isinstance(fmt, np.dtype) else None
    if found is not None:  # the hot path (collectives and casts resolve an array's dtype per call)
        return found
    try:
        dtype = np.dtype(fmt)
    except TypeError:
        raise TypeError(f"cannot read a floating-point format from {fmt!r}") from None
    for f in FORMATS.values():
        if f.dtype == dtype:
            return f
    raise ValueError(f"dtype {dtype} is not one of zerosim's formats ({', '.join(FORMATS)})")


def format_of(array: np.ndarray) -> Format:
    """The `Format` of an array's dtype (a clear error for integer or unknown dtypes); reads only the
    dtype, so data-less (meta) arrays answer too."""
    return get_format(array.dtype if hasattr(array, "dtype") else np.asarray(array).dtype)
