"""Where rank arrays live and how their formats are stored: NumPy on the host, CuPy on a GPU, or a stand-in.

An `ArrayNamespace` is an array module (`xp`: numpy, cupy, or the checking stand-in below) plus the
formats it has no dtype for, which it stores as unsigned bits of the same width (CuPy has float16 but
no bfloat16: bf16 lives there as uint16, _bf16_bits.py). A backend names its namespace (`backend.xp`); the
ring, the casts and the reductions take theirs from it, so on a CuPy backend rank arrays, casts and
per-hop rounding run on the device, and on NumPy nothing changes (`NUMPY` hands every call to the code
that ran before namespaces existed).

`numpy_standin()` is NumPy pretending to be CuPy: bf16 stored as uint16, and every array function
refuses ml_dtypes' arrays and dtypes. The normal test suite runs the device path through it, bit for bit
against the NumPy path (tests/test_array_namespace.py), so that path is exercised without a GPU.
"""

from __future__ import annotations

import functools
import sys
from dataclasses import field

import numpy as np

from zerosim._dataclass import dataclass
from zerosim.precision._formats import Format, get_format


@dataclass(frozen=True)
class ArrayNamespace:
    """An array module and the formats it stores as bits. `xp` is the module itself (numpy, cupy, ...)."""

    name: str
    xp: object = field(repr=False)
    bit_formats: frozenset = frozenset()  # format names with no dtype in xp: stored as f.uint_dtype ("bf16")

    @property
    def is_numpy(self) -> bool:
        """True for plain NumPy with ml_dtypes: every format has its own dtype, the original code paths run."""
        return self.xp is np and not self.bit_formats

    def storage(self, fmt) -> np.dtype:
        """The dtype a buffer of `fmt` has in this namespace (bf16 -> uint16 where bf16 is stored as bits)."""
        f = get_format(fmt)
        if f.name in self.bit_formats:
            return f.uint_dtype
        if f.dtype.kind != "f" and not self.is_numpy:
            raise NotImplementedError(f"{f.name} has no dtype in {self.name} and is not stored as bits there; "
                                      "use the numpy backend for it")
        return f.dtype

    def dtype_of(self, dtype) -> np.dtype:
        """A dtype as stored here: a float format's storage, anything else (uint8, int64, bool) unchanged."""
        dtype = np.dtype(dtype)
        return self.storage(dtype) if _is_format(dtype) else dtype

    def format_of(self, array) -> Format:
        """The format an array of this namespace stands for (uint16 means bf16 where bf16 is stored as bits)."""
        dtype = np.dtype(array.dtype)
        for name in self.bit_formats:
            if get_format(name).uint_dtype == dtype:
                return get_format(name)
        return get_format(dtype)

    def empty(self, shape, fmt):
        """An uninitialised buffer of `fmt` (or any other dtype) in this namespace."""
        return self.xp.empty(shape, dtype=self.dtype_of(fmt if not isinstance(fmt, Format) else fmt.dtype))

    def zeros(self, shape, fmt):
        return self.xp.zeros(shape, dtype=self.dtype_of(fmt if not isinstance(fmt, Format) else fmt.dtype))

    def from_host(self, host):
        """A host numpy array of one of zerosim's formats as this namespace's array (bits where stored as bits)."""
        host = np.asarray(host)
        if self.is_numpy:
            return host
        if _is_format(host.dtype) and get_format(host.dtype).name in self.bit_formats:
            host = host.view(get_format(host.dtype).uint_dtype)
        return self.xp.asarray(np.ascontiguousarray(host))

    def to_host(self, array, fmt=None) -> np.ndarray:
        """A host numpy array in its format's own dtype (bits viewed back as bf16)."""
        if self.is_numpy:
            return np.asarray(array)
        host = array.get() if hasattr(array, "get") and not isinstance(array, np.ndarray) else np.asarray(array)
        f = get_format(fmt) if fmt is not None else (self.format_of(array) if _is_bits(self, array) else None)
        return host.view(f.dtype) if f is not None and f.name in self.bit_formats else host

    def widen(self, array, fmt=None, bits: int = 32):
        """(shape) array of `fmt` -> float32 (bits=32, exact for 16- and 8-bit formats) or float64 (exact)."""
        xp, f = self.xp, get_format(fmt) if fmt is not None else self.format_of(array)
        wide = xp.float32 if bits == 32 else xp.float64
        if f.name == "bf16" and "bf16" in self.bit_formats:
            array = _bf16_bits().widen(array, xp)  # float32, subnormals as bits
        if bits == 64 and array.dtype == xp.float32:
            from zerosim.precision.cast._subnormals import f32_to_f64

            return f32_to_f64(array, xp)  # exact for subnormals too, where float32 work flushes them (CuPy)
        return array.astype(wide, copy=False)

    def count_nonfinite(self, array) -> int:
        """NaN and inf elements of an array of this namespace, counted where it lives (a host array: on the host)."""
        if isinstance(array, np.ndarray) and not self.is_numpy and self.xp is not np:
            return NUMPY.count_nonfinite(array)
        if np.dtype(array.dtype).kind in "iub" and not (self.bit_formats and _is_bits(self, array)):
            return 0
        w = self.widen(array) if np.dtype(array.dtype).kind != "f" else array  # fp32 holds bf16 and fp8 exactly
        return int(w.size - int(self.xp.count_nonzero(self.xp.isfinite(w))))

    def cast(self, x, fmt, rounding: str = "nearest", uniforms=None, saturate: bool = False, rng=None):
        """`x` (an array of this namespace) rounded once into `fmt`, as `zerosim.precision.cast._cast` rounds it."""
        if self.is_numpy:
            from zerosim.precision.cast._cast import cast

            return cast(x, fmt, rounding=rounding, rng=rng, saturate=saturate, uniforms=uniforms)
        from zerosim.precision.cast._namespace import cast_on

        return cast_on(self, x, fmt, rounding, uniforms, saturate)

    def add(self, a, b, out=None):
        """a + b rounded once to their format (ml_dtypes' bf16 add, for bits)."""
        if self.format_of(a).name in self.bit_formats:
            return _bf16_bits().add(a, b, self.xp, out=out)
        return self.xp.add(a, b, out=out)

    def maximum(self, a, b, out=None):
        if self.format_of(a).name in self.bit_formats:
            return _bf16_bits().maximum(a, b, self.xp, out=out)
        return self.xp.maximum(a, b, out=out)


def _bf16_bits():
    """_bf16_bits.py: bf16 as uint16 bits, a device namespace's alone (NumPy has ml_dtypes' bf16)."""
    from zerosim.precision.cast import _bf16_bits

    return _bf16_bits


NUMPY = ArrayNamespace("numpy", np)


def _is_bits(ns: ArrayNamespace, array) -> bool:
    return any(get_format(name).uint_dtype == array.dtype for name in ns.bit_formats)


def _is_format(dtype) -> bool:
    try:
        get_format(np.dtype(dtype))
    except (TypeError, ValueError):
        return False
    return True


def device_namespace(module, name: str | None = None) -> ArrayNamespace:
    """The namespace of an array module without bfloat16 (CuPy): bf16 stored as uint16; no fp8."""
    return ArrayNamespace(name or getattr(module, "__name__", "device"), module, frozenset({"bf16"}))


def namespace_of(array) -> ArrayNamespace:
    """The namespace an array belongs to: NUMPY for numpy arrays (and data-less meta arrays), else its
    module's (the array API standard's `__array_namespace__`, or the module that defines its type)."""
    if isinstance(array, np.ndarray) or getattr(array, "is_meta", False) or np.isscalar(array):
        return NUMPY
    # no stand-in array exists before its module defines the class (it may be importing on another thread)
    standin = getattr(sys.modules.get("zerosim.precision.cast._standin"), "StandinArray", ())
    if isinstance(array, standin):
        return numpy_standin()
    module = type(array).__module__.split(".")[0]
    if module == "cupy":
        import cupy  # only reached with a CuPy array in hand

        return _cupy_namespace(cupy)
    return NUMPY


@functools.lru_cache(maxsize=1)
def _cupy_namespace(cupy) -> ArrayNamespace:
    return device_namespace(cupy, "cupy")


class _StrictNumpy:
    """numpy as CuPy looks to the code: every function refuses ml_dtypes arrays and dtypes (bf16, fp8) and host
    ndarrays (only `asarray`/`array` take them), and hands out `StandinArray`s, which refuse implicit host
    conversion (_standin.py)."""

    __name__ = "numpy-standin"
    _FROM_HOST = frozenset({"asarray", "array", "ascontiguousarray"})

    def __getattr__(self, name):
        from zerosim.precision.cast import _standin as standin_array  # the stand-in's: not the engine's import

        StandinArray = standin_array.StandinArray
        thing = getattr(np, name)
        if not callable(thing) or isinstance(thing, type) and not issubclass(thing, np.generic):
            return thing
        if isinstance(thing, type):  # np.float32(...), np.uint16(...): scalar types pass through
            return thing
        takes_host = name in self._FROM_HOST

        @functools.wraps(thing)
        def strict(*args, **kwargs):
            for a in list(args) + list(kwargs.values()):
                _refuse_ml_dtypes(a, name)
            if takes_host:
                args = tuple(a.get() if isinstance(a, StandinArray) else a for a in args)
            else:
                args, kwargs = standin_array.unwrap(args), standin_array.unwrap(kwargs)
            return standin_array.wrap(thing(*args, **kwargs))

        return strict


def _refuse_ml_dtypes(a, where: str) -> None:
    dtype = None if isinstance(a, type) else getattr(a, "dtype", None)  # np.float32 itself: the type, below
    if dtype is None and isinstance(a, (type, np.dtype, str)):
        try:
            dtype = np.dtype(a)
        except TypeError:
            return
    if dtype is not None and np.dtype(dtype).kind == "V":  # ml_dtypes' formats are numpy "void"-kind dtypes
        raise TypeError(f"numpy-standin.{where}: an ml_dtypes array or dtype ({np.dtype(dtype)}) reached the device "
                        "path; bf16 must travel as uint16 bits there")


@functools.lru_cache(maxsize=1)
def numpy_standin() -> ArrayNamespace:
    """NumPy standing in for CuPy: bf16 stored as uint16 and ml_dtypes refused by every function."""
    return device_namespace(_StrictNumpy(), "numpy-standin")
