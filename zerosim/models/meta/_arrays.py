"""The arrays a meta model makes: in the namespace of the arrays it was handed (data-less on the meta backend), so
models never import a backend; weights with no data (MetaArray, precision/cast/_meta_array.py: the one data-less
tensor).
"""

from __future__ import annotations

import functools

import numpy as np

from zerosim.models._spaces import space_of
from zerosim.precision.cast import MetaArray


def like(x, shape, dtype):
    """A new array of `shape` and `dtype` from the array namespace of `x` (the array API standard's
    `__array_namespace__`): data-less when x is the meta backend's. The backend hands its arrays to the model
    (the micro-batch, dy) and the model makes more of the same kind, so models never import a backend.
    CuPy's arrays have no `__array_namespace__` (CuPy 14): their module is the namespace."""
    if type(x) is MetaArray:  # what its namespace's `empty` makes, without asking for it (every op makes several)
        return data_less(shape, dtype)
    return space_of(x).empty(shape, dtype=dtype)


def data_less(shape, dtype) -> MetaArray:
    """A new `MetaArray(shape, dtype)`, its shape and dtype checked once per pair asked (`template`): a 70B plan's
    twins ask for ~50,000 arrays of a few hundred shapes (every unit of every micro-step its outputs and saved
    tensors)."""
    a = template(shape, dtype)
    return _fresh(a.shape, a.dtype)


def template(shape, dtype) -> MetaArray:
    """A `MetaArray(shape, dtype)` to read a checked shape and dtype from, made once per pair and shared: never handed
    on as an array (`data_less` makes those). A shape that is not hashable (a list) is checked each time."""
    try:
        return _checked(shape, dtype)
    except TypeError:  # unhashable: no cache; MetaArray checks it (and raises what it raises)
        return MetaArray(shape, dtype)


@functools.lru_cache(maxsize=4096)
def _checked(shape, dtype) -> MetaArray:
    return MetaArray(shape, dtype)


_fresh = MetaArray._of  # a new data-less array of a shape and dtype checked already


def source_arrays(ranks, empty):
    """(how many micro-batches, the constructor to make them with): from a Cluster (its backend's `empty`), or from
    a count and the `empty` given (e.g. `cluster.backend.empty` of the meta backend)."""
    if hasattr(ranks, "local_size"):
        return ranks.local_size, ranks.backend.empty
    if empty is None:
        raise ValueError("a meta model's micro-batches are data-less arrays: pass the cluster (model.batches(cluster)) "
                         "or the backend's constructor (empty=cluster.backend.empty)")
    return int(ranks), empty


def weights_without_data(count: int) -> MetaArray:
    """(count,) fp32 weights with no data: a meta model's initial weights (it has no values to draw; the engine reads
    their shape and dtype, and the meta backend holds them as they are)."""
    return MetaArray((count,), np.float32)
