"""The meta backend: every rank holds MetaArrays (a shape and a dtype, no data: precision/cast/_meta_array.py), so
accounting runs at any scale.

    cluster = Cluster(1024, backend="meta", trace="call")    # 1024 ranks, nothing allocated

Every buffer a rank holds is still born through its `MemoryLedger` (which reads only shape and
dtype), and every collective still appends its trace events (computed from the chunk sizes, in
O(N) per call: see `zerosim.collectives._ring`), so the same engines fill the ledgers and the trace
for a 175B-parameter model on 1024 ranks without allocating a byte of it.

A `MetaArray` answers what the engines and collectives ask of an array without reading values, and raises
`MetaDataError` for anything that needs them; this backend answers the collectives' data movement from the sizes.
"""

from __future__ import annotations

import functools

import numpy as np

from zerosim.precision.cast import META_NAMESPACE, NUMPY, MetaArray, MetaDataError  # noqa: F401 (their old home)


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
