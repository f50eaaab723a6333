"""Collectives on the meta backend: the same checks, results of the right shape, and the trace of
what the ring *would* send — computed in O(N) per call, since there is no data to move.

The ring itself (ring.py) would loop over N-1 steps for each of N ranks; at N = 1024 that is a
million Python iterations per collective, which is why data-less arrays take this path.
"""

from __future__ import annotations

from zerosim.collectives.checks import check_counts, require_same
from zerosim.collectives.ops import get_op
from zerosim.collectives.shards import ShardLayout, chunk_bounds
from zerosim.precision import get_format


def _meta_inputs(cluster, tensors, what: str) -> tuple:
    """The meta backend's input check: one flat array per local rank, one format; (lengths, format)."""
    if not isinstance(tensors, (list, tuple)) or len(tensors) != cluster.local_size:
        raise ValueError(f"{what} takes a list with one array per local rank ({cluster.local_size})")
    if any(len(t.shape) != 1 for t in tensors):
        raise ValueError(f"{what}: collectives cut flat buffers, so flatten first")
    dtypes = {t.dtype for t in tensors}
    if len(dtypes) != 1:
        raise ValueError(f"{what}: every rank must pass the same dtype, got {sorted(map(str, dtypes))}")
    return [t.shape[0] for t in tensors], get_format(dtypes.pop())


def _meta_ring(cluster, call: int, sizes: list, wire, lag: int) -> None:
    """Trace what the ring would send over chunks of `sizes`, without running it (no data to move).

    At ring step k rank r sends chunk (r - lag - k) mod N: lag 1 for reduce-scatter, 0 for all-gather
    (see ring.py's docstring). Over the N−1 steps rank r sends every chunk but (r - lag + 1) mod N:
    reduce-scatter never sends chunk r (it receives its final sum), all-gather never sends shard r+1
    (the last to reach it). "hop" granularity records the same events as the ring, O(N²); "call"
    one event per rank with that total, O(N).
    NOTE: the ring's working buffers ("comm") are the simulator's own, not the engine's (NCCL's are
    fixed-size), so the meta path does not put them in the ledgers.
    """
    n, trace = cluster.world_size, cluster.trace
    if n == 1:
        return  # the ring sends nothing
    if trace.granularity == "hop":
        for k in range(n - 1):
            for rank in cluster.ranks:
                c = (rank.index - lag - k) % n
                trace.hop(call, k, rank.index, (rank.index + 1) % n, c, sizes[c], wire.itemsize, wire.name)
        return
    total = sum(sizes)
    for rank in cluster.ranks:
        trace.hop(call, -1, rank.index, -1, -1, total - sizes[(rank.index - lag + 1) % n], wire.itemsize, wire.name)


def meta_reduce_scatter(cluster, tensors, op, wire, tag, counts, _name) -> list:
    """`reduce_scatter` on the meta backend: the same checks, trace and result shapes, no ring."""
    what, n = _name.replace("_", "-"), cluster.world_size
    reduce_op = get_op(op)
    lengths, fmt = _meta_inputs(cluster, tensors, what)
    require_same(lengths, what, "length")
    wire_fmt = get_format(wire) if wire is not None else fmt
    layout = ShardLayout(lengths[0], n)
    if counts is not None:
        counts = check_counts(counts, n, what)
        if sum(counts) != layout.length:
            raise ValueError(f"{what}: counts {counts} add up to {sum(counts)}, but the buffers hold {layout.length} elements")
    bounds = chunk_bounds(layout, counts)
    sizes = [stop - start for start, stop in bounds]
    call = cluster.trace.begin(_name, op, n, sum(sizes), wire_fmt.name, tag)
    _meta_ring(cluster, call, sizes, wire_fmt, lag=1)
    cluster.trace.end(call)
    keep = counts if counts is not None else layout.real_sizes()
    made = {k: reduce_op.post(cluster.backend.empty((k,), wire_fmt.dtype), n) for k in set(keep)}  # no data: ranks share
    return [made[keep[r.index]] for r in cluster.ranks]


def meta_all_gather(cluster, shards, wire, tag, counts, _name) -> list:
    """`all_gather` on the meta backend. With `counts`, lengths come from counts: under the "meta"
    lockstep one rank's shard stands in for every rank's (see `zerosim.zero.lockstep`)."""
    what, n = _name.replace("_", "-"), cluster.world_size
    sizes, fmt = _meta_inputs(cluster, shards, what)
    wire_fmt = get_format(wire) if wire is not None else fmt
    if counts is not None:
        counts = check_counts(counts, n, what)
        bounds, length = chunk_bounds(None, counts), sum(counts)
    else:
        try:
            layout = ShardLayout.from_shard_sizes(sizes)
        except ValueError as e:
            raise ValueError(f"{what}: {e}") from None
        bounds, length = chunk_bounds(layout, None), layout.length
    chunk = [stop - start for start, stop in bounds]
    call = cluster.trace.begin(_name, "gather", n, sum(chunk), wire_fmt.name, tag)
    _meta_ring(cluster, call, chunk, wire_fmt, lag=0)
    cluster.trace.end(call)
    return [cluster.backend.empty((length,), wire_fmt.dtype)] * cluster.local_size  # no data: ranks may share it
