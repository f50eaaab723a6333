"""The ring, hop by hop, in NCCL's order: its two phases, each written as the steps a rank takes.

Letters: N ranks on a ring (rank r sends to r+1 and receives from r-1, mod N); the staged buffer is cut
into N chunks by `bounds` (equal padded chunks, or a ZeRO unit's counts: _shards.py).

    reduce-scatter, N-1 steps. At step k rank r sends the partial sum of chunk (r-1-k) mod N and adds
    its own copy of chunk (r-2-k) mod N to what it received. The partial sum for chunk c therefore
    starts at rank c+1 and walks the ring, ending at rank c, which owns it:

        chunk c = ((x[c+1] + x[c+2]) + ...) + x[c]          every + rounded to the wire dtype

    all-gather, N-1 steps: at step k rank r forwards shard (r-k) mod N to rank r+1.

Over a `Groups` (_calls.py's `group=`) every group runs this ring at once over its own members: "rank r" below
reads "the rank at position p of its group", r+1 its next member, and N the group's size n.

Each rank sends exactly (N-1)/N of the buffer per phase. The phases move data only through
`cluster.backend.exchange` (a reference in the simulator, point-to-point messages under MPI), record
every send in the trace, and know nothing of checks, staging or ZeRO (_calls.py does those). _fast.py is
their in-process twin: the same additions in the same order, without a Python step per hop.
"""

from __future__ import annotations

import numpy as np


def ring_of(cluster, group) -> tuple:
    """(n, each local rank's position p on its ring, the rank it sends to, the rank it receives from): the world's
    ring (p = r) when `group` is None, else each local rank's group's."""
    me = [rank.index for rank in cluster.ranks]
    if group is None:
        n = cluster.world_size
        return n, me, [(r + 1) % n for r in me], [(r - 1) % n for r in me]
    return group.size, [group.position(r) for r in me], [group.next(r) for r in me], [group.prev(r) for r in me]


def reduce_scatter_phase(cluster, staged, op, wire, bounds, call, out=None, group=None):
    """The reduce-scatter phase over chunks `bounds`; returns each local rank's result chunk (wire dtype),
    written into `out[i]` when given, and the working buffers to free (none: the FIFOs are transport memory)."""
    n, me, send_to, recv_from = ring_of(cluster, group)
    ns = cluster.backend.xp  # where the arrays live and add (numpy, cupy)
    ranks = [rank.index for rank in cluster.ranks]
    size = [stop - start for (start, stop) in bounds]
    own = [[x[a:b] for (a, b) in bounds] for x in staged]  # own[i][c]: rank i's own copy of chunk c (views)
    results = out or [ns.empty(size[p], wire) for p in me]  # (size[p],) wire dtype: position p's chunk p
    if n == 1:
        for i in range(len(me)):
            results[i][...] = own[i][0]
        return results, []
    # Two partial-sum buffers per rank, used in turn, big enough for any chunk (none needed for N = 2:
    # the one step adds straight into the result). NOTE: transport memory, like NCCL's fixed per-peer
    # FIFO buffers, allocated once and reused: it grows with no tensor and sits in no rank's ledger.
    acc = [[_fifo(cluster, i, j, max(size), wire.dtype) for j in range(2)] for i in range(len(me))] if n > 2 else None
    hops = cluster.trace.granularity == "hop"
    combine = op.combiner(wire, ns)
    for k in range(n - 1):
        sends = []
        for i, p in enumerate(me):
            c = (p - 1 - k) % n  # the partial sum of chunk c leaves position p at step k
            sends.append(own[i][c] if k == 0 else acc[i][(k - 1) % 2][: size[c]])
            if hops:
                cluster.trace.hop(call, k, ranks[i], send_to[i], c, size[c], wire.itemsize, wire.name, sends[-1])
        recv_like = [(size[(p - 2 - k) % n], wire.dtype) for p in me]  # both ends know what arrives
        received = cluster.backend.exchange(sends, send_to, recv_from, recv_like=recv_like)
        for i, p in enumerate(me):
            c = (p - 2 - k) % n  # ... and arrives at position p one step later, which adds its own copy
            target = results[i] if k == n - 2 else acc[i][k % 2][: size[c]]
            combine(received[i], own[i][c], out=target)  # partial + own, one rounding
    if not hops:  # one summary per rank: over the N-1 steps position p sent every chunk but its own (p)
        for r, p in zip(ranks, me):
            cluster.trace.hop(call, -1, r, -1, -1, sum(size) - size[p], wire.itemsize, wire.name)
    return results, []


def all_gather_phase(cluster, shards, bounds, total: int, wire, call, out=None, group=None):
    """The all-gather phase; shard c fills [bounds[c]) of every rank's (total,) wire-dtype output (`out[i]` when
    given)."""
    n, me, send_to, recv_from = ring_of(cluster, group)
    ns = cluster.backend.xp  # where the arrays live and add (numpy, cupy)
    ranks = [rank.index for rank in cluster.ranks]
    full = out or [ns.empty(total, wire) for _ in me]  # (total,) wire dtype, the output
    part = [[f[a:b] for (a, b) in bounds] for f in full]  # part[i][c]: shard c's place in rank i's output (views)
    for i, p in enumerate(me):
        part[i][p][...] = shards[i]
    hops = cluster.trace.granularity == "hop"
    for k in range(n - 1):
        sends = []
        for i, p in enumerate(me):
            c = (p - k) % n
            sends.append(part[i][c])
            if hops:
                cluster.trace.hop(call, k, ranks[i], send_to[i], c, bounds[c][1] - bounds[c][0], wire.itemsize,
                                  wire.name, sends[-1])
        recv_like = [(bounds[(p - 1 - k) % n][1] - bounds[(p - 1 - k) % n][0], wire.dtype) for p in me]
        received = cluster.backend.exchange(sends, send_to, recv_from, recv_like=recv_like)
        for i, p in enumerate(me):
            part[i][(p - 1 - k) % n][...] = received[i]
    if not hops and n > 1:  # one summary per rank: position p forwarded every shard but p+1's (the last to reach it)
        for r, p in zip(ranks, me):
            c = (p + 1) % n
            cluster.trace.hop(call, -1, r, -1, -1, total - (bounds[c][1] - bounds[c][0]), wire.itemsize, wire.name)
    return full


def _fifo(cluster, i: int, j: int, count: int, dtype) -> np.ndarray:
    """Local rank i's j-th ring working buffer as (count,) of dtype (its storage in the backend's namespace),
    grown when a call needs more."""
    ns = cluster.backend.xp
    key, nbytes = (i, j), count * np.dtype(dtype).itemsize
    buf = cluster.fifo.get(key)
    if buf is None or buf.nbytes < nbytes:
        buf = cluster.fifo[key] = ns.empty(max(nbytes, 1), np.uint8)
    return buf[:nbytes].view(ns.dtype_of(dtype))
