"""The ring's in-process twin: every rank in this process, a send is a reference, so skip the hops.

The same additions in the same order as _ring.py, chunk by chunk —
chunk c = ((x[c+1] + x[c+2]) + ...) + x[c], each add rounded to the wire dtype — without a Python
step per hop (N·(N-1) of them per call). Bit for bit the ring's (tests/test_collectives_ring.py checks);
only the per-hop events are not recorded, so _calls.py uses it only when the trace keeps one summary per
call and no values (`phases`). Over a `Groups` every group is summed the same way over its own members, in
its ring order (position p plays rank r).

At "hop" granularity the phase is recorded as one record of its sends (`Trace.ring_hops`), from which the trace
derives the ring's events, hop by hop, when they are read: the same events the ring appends one by one.
"""

from __future__ import annotations

from zerosim.cluster import Groups


def _members(cluster, group) -> tuple:
    """Every ring's ranks in ring order: the world's one, or each group's."""
    return (tuple(range(cluster.world_size)),) if group is None else group.members


def _record_hops(cluster, call: int, sizes: list, wire, lag: int, group) -> bool:
    """At "hop" granularity, record the phase's sends as one record (lag 1: reduce-scatter, 0: all-gather); returns
    False at "call" granularity, where the phase records each rank's summary itself."""
    if cluster.trace.granularity != "hop":
        return False
    ranks, positions, sends_to = (group if group is not None else Groups.world(cluster.world_size)).ring_order
    cluster.trace.ring_hops(call, tuple(sizes), wire.itemsize, wire.name, lag, ranks, positions, sends_to)
    return True


def reduce_scatter_phase(cluster, staged, op, wire, bounds, call, out=None, group=None):
    """ring.reduce_scatter_phase's results, chunk by chunk: staged[r] is rank r's (padded) input, in rank order."""
    ns = cluster.backend.xp  # where the arrays live and add (numpy, cupy)
    combine = op.combiner(wire, ns)
    results = [None] * cluster.world_size
    sizes = [stop - start for start, stop in bounds]
    summaries = not _record_hops(cluster, call, sizes, wire, 1, group)
    for ring in _members(cluster, group):
        n = len(ring)
        for c, (a, b) in enumerate(bounds):
            acc = out[ring[c]] if out else ns.empty(b - a, wire)  # (size[c],) wire: position c's result
            if n == 1:
                acc[...] = staged[ring[0]][a:b]
            elif b > a:  # an empty chunk (counts of 0: a ZeRO layer window outside rank c's shard) adds nothing
                combine(staged[ring[(c + 1) % n]][a:b], staged[ring[(c + 2) % n]][a:b], out=acc)
                for k in range(3, n + 1):  # the partial sum travels on: positions c+3, ..., c+N (= c)
                    combine(acc, staged[ring[(c + k) % n]][a:b], out=acc)
            results[ring[c]] = acc
        if n > 1 and summaries:
            for p, r in enumerate(ring):  # what position p sent over the N-1 steps: every chunk but its own
                cluster.trace.hop(call, -1, r, -1, -1, sum(sizes) - sizes[p], wire.itemsize, wire.name)
    return results, []


def all_gather_phase(cluster, shards, bounds, total: int, wire, call, out=None, group=None):
    """ring.all_gather_phase's result: the shards joined in ring order, copied once per rank."""
    full, ns = [None] * cluster.world_size, cluster.backend.xp
    summaries = not _record_hops(cluster, call, [b - a for a, b in bounds], wire, 0, group)
    for ring in _members(cluster, group):
        n = len(ring)
        joined = out[ring[0]] if out else ns.empty(total, wire)  # (total,) wire dtype
        for (a, b), r in zip(bounds, ring):
            joined[a:b] = shards[r]
        if n > 1 and summaries:
            for p, r in enumerate(ring):  # position p forwarded every shard but p+1's, the last to reach it
                c = (p + 1) % n
                cluster.trace.hop(call, -1, r, -1, -1, total - (bounds[c][1] - bounds[c][0]), wire.itemsize,
                                  wire.name)
        full[ring[0]] = joined
        for r in ring[1:]:
            if out:
                out[r][...] = joined
                full[r] = out[r]
            else:
                full[r] = joined.copy()
    return full
