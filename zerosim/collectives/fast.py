"""The ring's in-process twin: every rank in this process, a send is a reference, so skip the hops.

The same additions in the same order as ring.py, chunk by chunk —
chunk c = ((x[c+1] + x[c+2]) + ...) + x[c], each add rounded to the wire dtype — without a Python
step per hop (N·(N-1) of them per call). Bit for bit the ring's (tests/test_collectives_ring.py checks);
only the per-hop events are not recorded, so calls.py uses it only when the trace keeps one summary per
call and no values (`phases`).
"""

from __future__ import annotations


def reduce_scatter_phase(cluster, staged, op, wire, bounds, call, out=None):
    """ring.reduce_scatter_phase's results, chunk by chunk: staged[r] is rank r's (padded) input, in rank order."""
    n, ns = cluster.world_size, cluster.backend.xp  # ns: where the arrays live and add (numpy, cupy)
    combine = op.combiner(wire, ns)
    results = []
    for c, (a, b) in enumerate(bounds):
        acc = out[c] if out else ns.empty(b - a, wire)  # (size[c],) wire dtype: rank c's result
        if n == 1:
            acc[...] = staged[0][a:b]
        elif b > a:  # an empty chunk (counts of 0: a ZeRO layer window outside rank c's shard) adds nothing
            combine(staged[(c + 1) % n][a:b], staged[(c + 2) % n][a:b], out=acc)
            for k in range(3, n + 1):  # the partial sum travels on: ranks c+3, ..., c+N (= c)
                combine(acc, staged[(c + k) % n][a:b], out=acc)
        results.append(acc)
    if n > 1:
        sizes = [stop - start for start, stop in bounds]
        for r in range(n):  # what rank r sent over the N-1 steps: every chunk but its own
            cluster.trace.hop(call, -1, r, -1, -1, sum(sizes) - sizes[r], wire.itemsize, wire.name)
    return results, []


def all_gather_phase(cluster, shards, bounds, total: int, wire, call, out=None):
    """ring.all_gather_phase's result: the shards joined in rank order, copied once per rank."""
    n = cluster.world_size
    joined = out[0] if out else cluster.backend.xp.empty(total, wire)  # (total,) wire dtype
    for (a, b), shard in zip(bounds, shards):
        joined[a:b] = shard
    if n > 1:
        for r in range(n):  # rank r forwarded every shard but r+1's, the last to reach it
            c = (r + 1) % n
            cluster.trace.hop(call, -1, r, -1, -1, total - (bounds[c][1] - bounds[c][0]), wire.itemsize, wire.name)
    if out:
        for o in out[1:]:
            o[...] = joined
        return out
    return [joined] + [joined.copy() for _ in range(n - 1)]
