"""MetaArray: a tensor with no data — a shape and a dtype — the one way zerosim models one.

The meta backend (backends/_meta.py) holds these for every rank, so accounting runs at any scale; a meta model
(models/meta/) starts from weights that are one (`init_params`), and the costs measure on them
(analysis/costs/_measured.py). It lives here, beside the other array namespaces (_arrays.py), so that each of them
reaches it through a face without knowing the backend.

A `MetaArray` answers what the engines and collectives ask of an array without reading values:
shape, dtype, nbytes, slicing, reshape, astype, copy, arithmetic (the result's shape and dtype,
as numpy would give them) and assignment (a no-op). Anything that needs values — `np.asarray`,
`float()`, `bool()`, printing the numbers — raises `MetaDataError`, so a code path that would
silently compute on nothing fails loudly instead. A data-less array's namespace (the array API standard's
`__array_namespace__`) is META_NAMESPACE: code that makes arrays like its inputs makes data-less ones from them.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.lib.mixins import NDArrayOperatorsMixin


class MetaDataError(TypeError):
    """Something asked a MetaArray for values it does not have."""


def _shape_of(shape) -> tuple:
    if isinstance(shape, (int, np.integer)):
        return (int(shape),)
    return tuple(map(int, shape))


def _index_shape(shape: tuple, key) -> tuple:
    """The shape numpy gives `x[key]` for x of `shape`, found without data."""
    if type(key) is slice and len(shape) == 1:  # the hot path: a window of a flat buffer
        return (len(range(*key.indices(shape[0]))),)
    if key is Ellipsis:  # `out[...] = r`, a collective writing its result into a given buffer: the whole array
        return shape
    if isinstance(key, MetaArray):
        raise MetaDataError("indexing with a MetaArray needs its values (a boolean mask or indices)")
    # A zero-stride view of one byte has every shape for free; numpy does the index arithmetic.
    return np.broadcast_to(np.empty((), np.int8), shape)[key].shape


def _stand_in(x):
    """A zero-length array of x's dtype for an array operand (a scalar stays): for dtype resolution."""
    return np.empty((0,), x.dtype) if isinstance(x, MetaArray) or (isinstance(x, np.ndarray) and x.ndim) else x


class MetaArray(NDArrayOperatorsMixin):
    """shape and dtype, no data. Ops give a MetaArray of the shape and dtype numpy would give."""

    # nbytes: the shape's product times the item size, made with the array (a step asks it of every buffer of every
    # op, ~7,000 times a meta micro-step of the 70B twin: a property's call each time)
    __slots__ = ("shape", "dtype", "nbytes")
    is_meta = True

    def __array_namespace__(self, api_version=None):
        """The array namespace new arrays "like this one" come from (the array API standard's hook): data-less ones.
        Code that makes arrays from its inputs' namespace (the meta models) never imports this backend."""
        return META_NAMESPACE

    def __init__(self, shape, dtype):
        # a step makes thousands of these: `tuple(map(int, ...))` is the same shape as `_shape_of`'s, made faster
        self.shape = tuple(map(int, shape)) if type(shape) is tuple else _shape_of(shape)
        self.dtype = dtype if isinstance(dtype, np.dtype) else np.dtype(dtype)
        self.nbytes = math.prod(self.shape) * self.dtype.itemsize

    @classmethod
    def _of(cls, shape: tuple, dtype: np.dtype) -> "MetaArray":
        """One made from a shape of Python ints and a np.dtype already checked (another MetaArray's, or numpy's):
        the views, reshapes and copies a step makes, without checking them again."""
        a = object.__new__(cls)
        a.shape, a.dtype, a.nbytes = shape, dtype, math.prod(shape) * dtype.itemsize
        return a

    # -- what an array says about itself ----------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def T(self) -> "MetaArray":
        return MetaArray._of(self.shape[::-1], self.dtype)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d MetaArray")
        return self.shape[0]

    def __repr__(self) -> str:
        return f"MetaArray(shape={self.shape}, dtype={self.dtype})"

    # -- views and copies (no data, so every one is just a new shape and dtype) ---------------------
    def __getitem__(self, key) -> "MetaArray":
        return MetaArray._of(_index_shape(self.shape, key), self.dtype)

    def __setitem__(self, key, value) -> None:
        """Assignment writes nothing; the target's shape must exist (numpy would raise otherwise)."""
        _index_shape(self.shape, key)

    def reshape(self, *shape, order: str = "C") -> "MetaArray":
        if shape == (self.shape,) or shape == self.shape:
            return MetaArray._of(self.shape, self.dtype)
        if shape == (-1,):  # flat (a collective's send buffer): the shape the general path below finds
            return MetaArray._of((self.size,), self.dtype)
        shape = _shape_of(shape[0] if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)) else shape)
        if -1 in shape:
            known = math.prod(n for n in shape if n != -1)
            shape = tuple(self.size // known if n == -1 and known else n for n in shape)
        if math.prod(shape) != self.size:
            raise ValueError(f"cannot reshape MetaArray of size {self.size} into shape {shape}")
        return MetaArray._of(shape, self.dtype)  # Python ints already (`_shape_of`), the dtype this one's

    def ravel(self) -> "MetaArray":
        return MetaArray._of((self.size,), self.dtype)

    flatten = ravel

    def astype(self, dtype, copy: bool = True) -> "MetaArray":
        return MetaArray(self.shape, dtype)

    def view(self, dtype) -> "MetaArray":
        dtype = np.dtype(dtype)
        if self.ndim != 1 and dtype.itemsize != self.dtype.itemsize:
            raise ValueError("a MetaArray view to another item size needs a 1-D array")
        return MetaArray((self.nbytes // dtype.itemsize,) if self.ndim == 1 else self.shape, dtype)

    def copy(self) -> "MetaArray":
        return MetaArray._of(self.shape, self.dtype)

    # -- arithmetic: the shape and dtype numpy would give, no values --------------------------------
    def __array_ufunc__(self, ufunc, method, *inputs, out=None, **kwargs):
        if method != "__call__":
            raise MetaDataError(f"numpy.{ufunc.__name__}.{method} on a MetaArray needs values")
        shape = np.broadcast_shapes(*[x.shape if isinstance(x, MetaArray) else np.shape(x) for x in inputs])
        if out is not None:  # in place: the output keeps its own shape and dtype
            return out if len(out) > 1 else out[0]
        # numpy's own dtype rules (weak Python scalars, ml_dtypes loops) on zero-length stand-ins
        result = ufunc(*[_stand_in(x) for x in inputs], **{k: v for k, v in kwargs.items() if k == "dtype"})
        made = tuple(MetaArray(shape, r.dtype) for r in (result if isinstance(result, tuple) else (result,)))
        return made if len(made) > 1 else made[0]

    def __array_function__(self, func, types, args, kwargs):
        handler = _FUNCTIONS.get(func)
        if handler is None:
            raise MetaDataError(f"numpy.{func.__name__} is not available on a MetaArray (it has no data)")
        return handler(*args, **kwargs)

    # -- values it does not have ----------------------------------------------------------------
    def __array__(self, dtype=None, copy=None):
        raise MetaDataError(f"{self!r} has no data to convert to a numpy array")

    def __bool__(self):
        raise MetaDataError(f"{self!r} has no values to test")

    def __float__(self):
        raise MetaDataError(f"{self!r} has no value")

    def tolist(self):
        raise MetaDataError(f"{self!r} has no values")


def _creation(shape, dtype=float, *args, like=None, **kwargs) -> MetaArray:
    return MetaArray(_shape_of(shape), dtype)


def _like(proto, dtype=None, *args, shape=None, **kwargs) -> MetaArray:
    return MetaArray(proto.shape if shape is None else _shape_of(shape), proto.dtype if dtype is None else dtype)


def _concatenate(arrays, axis=0, **kwargs) -> MetaArray:
    arrays = list(arrays)
    if axis != 0 or any(a.ndim != 1 for a in arrays):
        raise MetaDataError("MetaArray concatenate supports flat arrays along axis 0 only")
    dtype = np.result_type(*[a.dtype for a in arrays])
    return MetaArray((sum(a.shape[0] for a in arrays),), dtype)


# numpy functions a MetaArray answers (with `like=meta` for the creation functions: NEP 35).
_FUNCTIONS = {
    np.empty: _creation,
    np.zeros: _creation,
    np.ones: _creation,
    np.empty_like: _like,
    np.zeros_like: _like,
    np.ones_like: _like,
    np.concatenate: _concatenate,
    np.shape: lambda a: a.shape,
    np.ndim: lambda a: a.ndim,
    np.size: lambda a, axis=None: a.size if axis is None else a.shape[axis],
}


class _MetaNamespace:
    """The array namespace of MetaArrays: `empty` and `zeros` make data-less arrays (shape and dtype only)."""

    @staticmethod
    def empty(shape, dtype=np.float64) -> MetaArray:
        return MetaArray(shape, dtype)

    zeros = empty


META_NAMESPACE = _MetaNamespace()
