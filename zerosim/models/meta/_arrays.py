"""The arrays a meta model makes: in the namespace of the arrays it was handed (data-less on the meta backend), so
models never import a backend; weights that take no memory.
"""

from __future__ import annotations

import numpy as np

from zerosim.models._spaces import space_of


def like(x, shape, dtype):
    """A new array of `shape` and `dtype` from the array namespace of `x` (the array API standard's
    `__array_namespace__`): data-less when x is the meta backend's. The backend hands its arrays to the model
    (the micro-batch, dy) and the model makes more of the same kind, so models never import a backend.
    CuPy's arrays have no `__array_namespace__` (CuPy 14): their module is the namespace."""
    return space_of(x).empty(shape, dtype=dtype)


def source_arrays(ranks, empty):
    """(how many micro-batches, the constructor to make them with): from a Cluster (its backend's `empty`), or from
    a count and the `empty` given (e.g. `cluster.backend.empty` of the meta backend)."""
    if hasattr(ranks, "local_size"):
        return ranks.local_size, ranks.backend.empty
    if empty is None:
        raise ValueError("a meta model's micro-batches are data-less arrays: pass the cluster (model.batches(cluster)) "
                         "or the backend's constructor (empty=cluster.backend.empty)")
    return int(ranks), empty


def zeros_without_memory(count: int) -> np.ndarray:
    """(count,) fp32 zeros that take no memory: a read-only broadcast of one element (a meta model's weights)."""
    return np.broadcast_to(np.zeros((), np.float32), (count,))
