"""The meta backend: arrays with a shape and a dtype and no data, so accounting runs at any scale.

    cluster = Cluster(1024, backend="meta", trace="call")    # 1024 ranks, nothing allocated

Every buffer a rank holds is still born through its `MemoryLedger` (which reads only shape and
dtype), and every collective still appends its trace events (computed from the chunk sizes, in
O(N) per call: see `zerosim.collectives._ring`), so the same engines fill the ledgers and the trace
for a 175B-parameter model on 1024 ranks without allocating a byte of it.

A `MetaArray` answers what the engines and collectives ask of an array without reading values:
shape, dtype, nbytes, slicing, reshape, astype, copy, arithmetic (the result's shape and dtype,
as numpy would give them) and assignment (a no-op). Anything that needs values — `np.asarray`,
`float()`, `bool()`, printing the numbers — raises `MetaDataError`, so a code path that would
silently compute on nothing fails loudly instead.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numpy.lib.mixins import NDArrayOperatorsMixin

from zerosim.precision.cast import NUMPY


class MetaDataError(TypeError):
    """Something asked a MetaArray for values it does not have."""


def _shape_of(shape) -> tuple:
    if isinstance(shape, (int, np.integer)):
        return (int(shape),)
    return tuple(int(n) for n in shape)


def _index_shape(shape: tuple, key) -> tuple:
    """The shape numpy gives `x[key]` for x of `shape`, found without data."""
    if type(key) is slice and len(shape) == 1:  # the hot path: a window of a flat buffer
        return (len(range(*key.indices(shape[0]))),)
    if isinstance(key, MetaArray):
        raise MetaDataError("indexing with a MetaArray needs its values (a boolean mask or indices)")
    # A zero-stride view of one byte has every shape for free; numpy does the index arithmetic.
    return np.broadcast_to(np.empty((), np.int8), shape)[key].shape


def _stand_in(x):
    """A zero-length array of x's dtype for an array operand (a scalar stays): for dtype resolution."""
    return np.empty((0,), x.dtype) if isinstance(x, MetaArray) or (isinstance(x, np.ndarray) and x.ndim) else x


class MetaArray(NDArrayOperatorsMixin):
    """shape and dtype, no data. Ops give a MetaArray of the shape and dtype numpy would give."""

    __slots__ = ("shape", "dtype")
    is_meta = True

    def __array_namespace__(self, api_version=None):
        """The array namespace new arrays "like this one" come from (the array API standard's hook): data-less ones.
        Code that makes arrays from its inputs' namespace (the meta models) never imports this backend."""
        return META_NAMESPACE

    def __init__(self, shape, dtype):
        # a step makes thousands of these: `tuple(map(int, ...))` is the same shape as `_shape_of`'s, made faster
        self.shape = tuple(map(int, shape)) if type(shape) is tuple else _shape_of(shape)
        self.dtype = dtype if isinstance(dtype, np.dtype) else np.dtype(dtype)

    @classmethod
    def _of(cls, shape: tuple, dtype: np.dtype) -> "MetaArray":
        """One made from a shape of Python ints and a np.dtype already checked (another MetaArray's, or numpy's):
        the views, reshapes and copies a step makes, without checking them again."""
        a = object.__new__(cls)
        a.shape, a.dtype = shape, dtype
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
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

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
        shape = _shape_of(shape[0] if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)) else shape)
        if -1 in shape:
            known = math.prod(n for n in shape if n != -1)
            shape = tuple(self.size // known if n == -1 and known else n for n in shape)
        if math.prod(shape) != self.size:
            raise ValueError(f"cannot reshape MetaArray of size {self.size} into shape {shape}")
        return MetaArray(shape, self.dtype)

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


class MetaBackend:
    """All N ranks in this process, holding MetaArrays; implements `zerosim.backends._base.Backend`.

    The collectives run their usual checks and staging on these arrays (no data: nothing is copied),
    and this backend answers the data movement itself (`reduce_scatter_phase`, `all_gather_phase`):
    it records in the trace what the ring would send, computed from the chunk sizes in O(N) per call
    instead of running the ring's N−1 steps for each of N ranks (a million Python iterations per
    collective at N = 1024).
    """

    name = "meta"
    HOSTED = ("representative", "all")
    holds_values = False
    xp = NUMPY  # its arrays are data-less, shaped and typed as numpy's would be

    def __init__(self, world_size: int, hosted: str | tuple = "representative"):
        chosen = hosted if isinstance(hosted, str) else tuple(hosted)
        if isinstance(chosen, str) and chosen not in self.HOSTED or not isinstance(chosen, str) and (
                not chosen or any(isinstance(r, bool) or not isinstance(r, (int, np.integer)) for r in chosen)
                or sorted(set(chosen)) != list(chosen) or not 0 <= chosen[0] <= chosen[-1] < world_size):
            raise ValueError(f"hosted must be one of {self.HOSTED}, or the ranks it hosts in increasing order, got "
                             f"{hosted!r}")
        self.world_size, self.hosted = world_size, chosen
        # "representative": one rank (0) stands for all. Every rank of a ZeRO engine allocates the same buffers
        # (same shapes: shards are padded to equal size) and its bytes on the wire follow in closed form from
        # the chunk sizes, so one rank's ledger and the trace's summaries answer for every rank in O(layers)
        # (tests/test_meta_backend.py checks this against "all" on a sweep of shapes). "all": every rank, O(N·layers).
        # A tuple of ranks: those (a pipeline's stages each have one representative: parallel/pipeline).
        self.local_ranks = [0] if chosen == "representative" else list(range(world_size)) if chosen == "all" else \
            [int(r) for r in chosen]

    def empty(self, shape, dtype) -> MetaArray:
        return MetaArray(shape, dtype)

    def exchange(self, sends, send_to, recv_from, recv_like=None) -> list:
        """What each rank receives: a MetaArray like the one its peer sent (used by broadcast, and point to point);
        ranks by their numbers, the local ranks in `local_ranks`' order."""
        here = self.local_ranks
        outbox = {(src, dst): a for src, a, dst in zip(here, sends, send_to) if dst is not None}
        return [None if src is None else outbox[(src, dst)].copy() for dst, src in zip(here, recv_from)]

    def all_meta(self, items) -> list:
        return list(items)

    def to_numpy(self, array):
        raise MetaDataError(f"the meta backend holds no data ({array!r})")

    def count_nonfinite(self, array) -> int:
        """No values, so none of them is NaN or inf (a data-less array cannot overflow)."""
        return 0

    def all_finite(self, array) -> bool:
        return True

    def read_scalar(self, array, default: float) -> float:
        """No values to read: `default` (no overflow found, a norm that clips nothing)."""
        return default

    def evaluate(self, fn, array, default):
        """No values to compute on: `default`."""
        return default

    def asarray(self, array, dtype) -> MetaArray:
        """A data-less array of `array`'s shape in `dtype`: nothing is read or allocated."""
        return MetaArray(np.shape(array), dtype)

    def available_bytes(self) -> None:
        """No limit: a MetaArray allocates nothing, so any size can be accounted."""
        return None

    # -- the collectives' data movement, answered from sizes alone -------------------------------------
    def reduce_scatter_phase(self, cluster, staged, op, wire, bounds, call, out=None, group=None) -> tuple:
        """Trace what the ring's reduce-scatter sends over chunks `bounds`; each rank's (chunk,) result. Over a
        `Groups`, every group's ring (rank r at its position p takes chunk p)."""
        sizes = _sizes(bounds)
        _trace_ring(cluster, call, sizes, wire, 1, group)
        made = {}  # no data: ranks with equal chunk sizes may share one array
        at = [r.index if group is None else group.position(r.index) for r in cluster.ranks]
        return [made.setdefault(sizes[p], MetaArray((sizes[p],), wire.dtype)) for p in at], []

    def all_gather_phase(self, cluster, shards, bounds, total, wire, call, out=None, group=None) -> list:
        """Trace what the ring's all-gather sends; every rank's (total,) result."""
        _trace_ring(cluster, call, _sizes(bounds), wire, 0, group)
        return [MetaArray((total,), wire.dtype)] * cluster.local_size


def _sizes(bounds) -> tuple:
    """Chunk sizes of `bounds` — the counts themselves for a `RunBounds` (cluster/_runs.py: O(1) at any N), cached
    when they are the collectives' own cached tuple (no import of theirs here)."""
    if hasattr(bounds, "counts"):
        return bounds.counts
    if isinstance(bounds, tuple):
        return _sizes_cached(bounds)
    return tuple(stop - start for start, stop in bounds)


@functools.lru_cache(maxsize=4096)
def _sizes_cached(bounds: tuple) -> tuple:
    return tuple(stop - start for start, stop in bounds)


def _trace_ring(cluster, call: int, sizes: list, wire, lag: int, group=None) -> None:
    """Record what the ring would send over chunks of `sizes`, without running it.

    At ring step k the rank at position p sends chunk (p - lag - k) mod n: lag 1 for reduce-scatter, 0 for
    all-gather (zerosim/collectives/_ring.py; p = r and n = N on the world's ring, else the rank's place in its
    group's). Over the n−1 steps position p sends every chunk but (p - lag + 1) mod n: reduce-scatter never
    sends chunk p (it receives its final sum), all-gather never sends shard p+1 (the last to reach it). "hop"
    granularity records the same events as the ring, O(N·n); "call" one event per rank with that total, O(N).
    NOTE: the ring's partial-sum buffers ("comm") are the simulator's own working memory, not the
    engine's (NCCL's are fixed-size FIFOs), so no ledger sees them here.
    """
    n, trace = len(sizes), cluster.trace
    if n == 1:
        return  # the ring sends nothing
    if cluster.local_size < cluster.world_size:  # representative ranks: every ring's bytes, in closed form
        trace.ring_summary(call, sizes, wire.itemsize, lag)
        return
    ranks = [rank.index for rank in cluster.ranks]
    at = ranks if group is None else [group.position(r) for r in ranks]
    to = [(r + 1) % n for r in ranks] if group is None else [group.next(r) for r in ranks]
    if trace.granularity == "hop":  # one record; the trace derives the sends, in the ring's order, when read
        trace.ring_hops(call, tuple(sizes), wire.itemsize, wire.name, lag, ranks, at, to)
        return
    total = sum(sizes)
    for r, p in zip(ranks, at):
        trace.hop(call, -1, r, -1, -1, total - sizes[(p - lag + 1) % n], wire.itemsize, wire.name)
