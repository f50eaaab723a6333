"""Naive twins of the ring collectives: gather everything in one place, then reduce.

They share no code with _ring.py beyond the operator definitions, so a test that the two agree
checks the ring's chunk bookkeeping. Two orders are offered:

- ``order="ring"``: each chunk summed in NCCL's ring order ``((x[c+1] + x[c+2]) + ...) + x[c]``
  with a rounding to the wire dtype after every add; must equal the ring bit for bit.
- ``order="float64"``: everything summed exactly-ish in float64 (no intermediate rounding), the
  yardstick for error bounds.
- ``order="ring-native"``: the ring's order, each add done natively in the wire dtype by NumPy (as fast
  as NumPy can add in that order; the speed yardstick of benchmarks/engine.py). The same bits as
  ``"ring"`` (a test checks): an add of two wire values rounded once either way.
"""

from __future__ import annotations

import numpy as np

from zerosim.collectives._ops import get_op, saturates
from zerosim.collectives._shards import ShardLayout
from zerosim.precision import cast, format_of, get_format


def naive_reduce(tensors, op: str = "sum", wire=None, order: str = "ring", chunks=None,
                 direction: int = 1) -> np.ndarray:
    """The full reduction of `tensors` (one flat array per rank, all N ranks), in the stated order.

    `chunks`: which rank's chunk each element belongs to, as (c, start, stop) triples covering the
    array — the sum of chunk c starts at rank c+1 and ends at rank c. Default: the N equal shards of
    `ShardLayout` (zerosim's reduce-scatter); NCCL's ring all-reduce has its own map
    (`nccl_ring_allreduce_chunks`), and so has gloo's (`gloo_ring`). `direction` -1 walks the ring the
    other way round, as gloo does: chunk c starts at rank c-1 and ends at rank c."""
    n = len(tensors)
    reduce_op = get_op(op)
    is_max = reduce_op.name == "max"
    wire_fmt = get_format(wire) if wire is not None else format_of(tensors[0])
    xs = [reduce_op.pre(np.asarray(t), n, wire_fmt) for t in tensors]
    layout = ShardLayout(xs[0].shape[0], n)
    if chunks is None:
        chunks = [(c, *layout.real_bounds(c)) for c in range(n)]
    if order == "float64":
        stacked = np.stack([x.astype(np.float64) for x in xs])
        total = stacked.max(axis=0) if is_max else stacked.sum(axis=0)
        return reduce_op.post(total, n) if reduce_op.name == "avg" else total
    if direction not in (1, -1):
        raise ValueError(f"direction must be 1 (NCCL's ring) or -1 (gloo's), got {direction!r}")
    if order == "ring-native":
        return reduce_op.post(_ring_native(xs, layout, reduce_op, wire_fmt, chunks, direction), n)
    if order != "ring":
        raise ValueError(f"unknown order {order!r}; choose 'ring', 'ring-native' or 'float64'")
    out = np.empty(layout.length, dtype=wire_fmt.dtype)
    for c, start, stop in chunks:
        if start == stop:
            continue
        acc = xs[(c + direction) % n][start:stop]
        for k in range(2, n + 1):  # ranks c+2, ..., c+N (= c): the path the partial sum travels (d = 1)
            own = xs[(c + k * direction) % n][start:stop].astype(np.float64)
            both = np.maximum(acc.astype(np.float64), own) if is_max else acc.astype(np.float64) + own
            # exact sum of two wire values, rounded once; fp8 sums saturate (NCCL: _ops.py)
            acc = cast(both, wire_fmt, saturate=not is_max and saturates(wire_fmt))
        out[start:stop] = acc
    return reduce_op.post(out, n)


def _ring_native(xs: list, layout, reduce_op, wire_fmt, chunks, d: int = 1) -> np.ndarray:
    """Chunk c = ((x[c+1] + x[c+2]) + ...) + x[c], NumPy ops in the wire dtype, into one (L,) array."""
    n = len(xs)
    combine = reduce_op.combiner(wire_fmt)
    out = np.empty(layout.length, dtype=wire_fmt.dtype)
    for c, start, stop in chunks:
        if start == stop:
            continue
        acc = out[start:stop]
        if n == 1:
            acc[...] = xs[0][start:stop]
            continue
        combine(xs[(c + d) % n][start:stop], xs[(c + 2 * d) % n][start:stop], out=acc)
        for k in range(3, n + 1):
            combine(acc, xs[(c + k * d) % n][start:stop], out=acc)
    return out


def naive_reduce_scatter(tensors, op: str = "sum", wire=None, order: str = "ring") -> list:
    """Naive twin of `reduce_scatter`: the full reduction, then cut into each rank's real shard."""
    full = naive_reduce(tensors, op, wire, order)
    layout = ShardLayout(full.shape[0], len(tensors))
    return [full[slice(*layout.real_bounds(r))] for r in range(len(tensors))]


def naive_all_gather(shards) -> list:
    """Naive twin of `all_gather`: concatenate, hand everyone a copy."""
    full = np.concatenate([np.asarray(s) for s in shards])
    return [full.copy() for _ in shards]


def naive_all_reduce(tensors, op: str = "sum", wire=None, order: str = "ring") -> list:
    """Naive twin of `all_reduce`: the full reduction in the stated order, a copy for every rank."""
    full = naive_reduce([np.asarray(t).reshape(-1) for t in tensors], op, wire, order)
    return [full.reshape(np.shape(tensors[0])).copy() for _ in tensors]
