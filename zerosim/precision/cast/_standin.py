"""A NumPy array dressed as a CuPy array, so the device path is checked without a GPU.

The numpy stand-in (_namespace.py `numpy_standin`) hands these out instead of plain ndarrays. Each one holds
an ndarray and behaves as CuPy's arrays do where code written for NumPy would go wrong on a GPU:

- it is not an `np.ndarray` and has no `__array_namespace__` (CuPy 14 has none);
- `np.asarray(a)` raises TypeError, as CuPy's `__array__` does ("Implicit conversion to a NumPy array is not
  allowed"): a host copy is `a.get()`;
- a ufunc or NumPy function that meets a stand-in array and a host ndarray raises TypeError, as CuPy does
  ("Unsupported type <class 'numpy.ndarray'>"); NumPy scalars and Python numbers are fine;
- reductions give 0-d arrays, not NumPy scalars (`float(a.sum())` works, as on CuPy).

Everything else is NumPy's arithmetic on the held array, so the bits are NumPy's. Found on an H100, and
caught here since: an engine that checked its batch with `np.asarray(x)`, a cast dispatched on
`__array_namespace__`, a model that made its buffers with `x.__array_namespace__()`.
"""

from __future__ import annotations


import numpy as np
from numpy.lib.mixins import NDArrayOperatorsMixin

from zerosim._dataclass import dataclass

_HOST_MIXED = "Unsupported type <class 'numpy.ndarray'>: a host array met a device array (numpy-standin, as CuPy)"


class StandinArray(NDArrayOperatorsMixin):
    """An ndarray held as if on a device; see the module docstring for what it refuses."""

    __slots__ = ("_a",)

    def __init__(self, a: np.ndarray):
        self._a = a

    # -- what CuPy refuses -------------------------------------------------------------------------
    def __array__(self, dtype=None, copy=None):
        raise TypeError("Implicit conversion to a NumPy array is not allowed. Please use `.get()` to construct a "
                        "NumPy array explicitly. (numpy-standin, as CuPy)")

    def get(self) -> np.ndarray:
        """A host copy (CuPy's `ndarray.get`)."""
        return self._a.copy()

    # -- NumPy's arithmetic, device in, device out ---------------------------------------------------
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if "out" in kwargs:
            kwargs["out"] = tuple(unwrap(o) for o in kwargs["out"])
        result = getattr(ufunc, method)(*(unwrap(i) for i in inputs), **kwargs)
        return wrap(result)

    def __array_function__(self, func, types, args, kwargs):
        return wrap(func(*unwrap(args), **unwrap(kwargs)))

    def __getattr__(self, name):
        if name.startswith("__"):  # __array_interface__, __array_struct__, __array_namespace__: CuPy has none of them
            raise AttributeError(name)
        thing = getattr(self._a, name)
        if callable(thing):
            return lambda *args, **kwargs: wrap(thing(*unwrap(args), **unwrap(kwargs)))
        return wrap(thing) if isinstance(thing, np.ndarray) else thing

    def __getitem__(self, key):
        return wrap(self._a[unwrap(key)])

    def __setitem__(self, key, value):
        self._a[unwrap(key)] = value._a if isinstance(value, StandinArray) else value  # CuPy takes host values here

    def __len__(self) -> int:
        return len(self._a)

    def __iter__(self):
        return (wrap(x) for x in self._a)

    def __bool__(self) -> bool:
        return bool(self._a)

    def __float__(self) -> float:
        return float(self._a)

    def __int__(self) -> int:
        return int(self._a)

    def __index__(self) -> int:
        return int(self._a.__index__())

    def __repr__(self) -> str:
        return f"standin({self._a!r})"

    @property
    def T(self):
        return wrap(self._a.T)

    @property
    def flags(self):
        """CuPy's flags: contiguity and ownership only (no `writeable`: a device array is always writable)."""
        f = self._a.flags
        return _Flags(f.c_contiguous, f.f_contiguous, f.owndata)

    @property
    def xp_module(self):
        """The module that makes more arrays like this one (models/meta/_model.py `like`); CuPy's arrays are found by
        their module's name instead."""
        from zerosim.precision.cast._arrays import numpy_standin

        return numpy_standin().xp


@dataclass(frozen=True)
class _Flags:
    c_contiguous: bool
    f_contiguous: bool
    owndata: bool


def unwrap(x):
    """The held ndarray of a stand-in array (through lists, tuples, dicts); a host ndarray refused; else `x`."""
    if isinstance(x, StandinArray):
        return x._a
    if isinstance(x, np.ndarray):
        raise TypeError(_HOST_MIXED)
    if isinstance(x, (list, tuple)):
        return type(x)(unwrap(i) for i in x)
    if isinstance(x, dict):
        return {k: unwrap(v) for k, v in x.items()}
    return x


def wrap(x):
    """A result as the device gives it: arrays and NumPy scalars become stand-in arrays (0-d for scalars)."""
    if isinstance(x, np.ndarray):
        return StandinArray(x)
    if isinstance(x, np.generic):  # CuPy's reductions give 0-d arrays
        return StandinArray(np.asarray(x))
    if isinstance(x, tuple):
        return tuple(wrap(i) for i in x)
    if isinstance(x, list):
        return [wrap(i) for i in x]
    return x
