"""A ring phase in closed form: every rank's bytes from the chunk sizes alone (the meta backend's representative ranks).

Letters: N ranks in all, n on each ring (a group's size), c_k the elements of chunk k, w the bytes per element.

Over the n−1 steps of a ring phase the rank at position p of its ring sends every chunk but one: chunk (p − lag + 1)
mod n (lag 1: a reduce-scatter never sends chunk p, whose sum it keeps; lag 0: an all-gather never forwards shard p+1,
the last to reach it; collectives/_ring.py). So rank r sends

    base − w · c_{(p(r) − lag + 1) mod n},   base = w · Σ_k c_k

and only the ranks whose skipped chunk is not empty send less than `base`. A call made inside `Trace.within` (a
pipeline stage's ZeRO or TP ring: `Trace.call_ranks`, its `scope`, ranges of ranks) runs on the rings of the scope's
ranks alone: a rank outside it sends nothing in that call, however many rings its group has beside it (an (N,)
vector a question: a pipeline's calls). With the chunk sizes run-length encoded (`RunCounts`: a flat range's counts
are zeros, a head, whole shards, a tail, zeros) those ranks come as a few ranges of positions, so a question about
every rank of a call outside any scope costs O(runs) in Python and O(those ranks) in NumPy: no (N,) vector per call.
`Trace` keeps `(sizes, w, lag)` per call, and `Trace.call_ranks` its scope, and asks here.
"""

from __future__ import annotations

import numpy as np

from zerosim.cluster._runs import RunCounts


def base_bytes(sizes, itemsize: int) -> int:
    """What a rank that skips an empty chunk sends: w · Σ c_k."""
    return (sizes.total if isinstance(sizes, RunCounts) else sum(sizes)) * itemsize


def busiest_bytes(sizes, itemsize: int) -> int:
    """The most any rank of the ring sends: w · (Σ c_k − min c_k)."""
    if isinstance(sizes, RunCounts):
        return (sizes.total - min(v for v, _ in sizes.runs)) * itemsize
    return (sum(sizes) - min(sizes)) * itemsize


def shortfalls(sizes, itemsize: int, lag: int, group, world_size: int) -> list:
    """[(ranks, bytes fewer than base)]: the ranks that send less than `base_bytes`, each by how much (ranks an
    int array, bytes a number or an array of the same length; a rank appears once). `group`: the Groups the call ran
    over (None: the world's one ring of N = n ranks)."""
    n = len(sizes)
    if isinstance(sizes, RunCounts):
        out = []
        for first, value, repeat in sizes.nonzero():  # chunks first .. first+repeat-1 hold `value` each
            positions = (np.arange(first, first + repeat) + lag - 1) % n  # the positions that skip them
            ranks = positions if group is None else group.members_array[:, positions].reshape(-1)
            out.append((ranks, value * itemsize))
        return out
    s = np.asarray(sizes, dtype=np.int64)
    position = np.arange(n) if group is None else group.positions
    return [(np.arange(world_size), s[(position - lag + 1) % n] * itemsize)]


def scope_ranks(scope) -> list | None:
    """The ranks of `scope` ((lo, hi) ranges: ranks lo..hi-1, as a `within` block took them: `Trace.scope`,
    `Trace.call_ranks`' value), in order; None: every rank."""
    return None if scope is None else [r for lo, hi in scope for r in range(lo, hi)]


def in_scope(scope, world_size: int) -> np.ndarray:
    """(N,) bool: True at the ranks of `scope` (`scope_ranks`)."""
    mask = np.zeros(world_size, dtype=bool)
    mask[scope_ranks(scope)] = True
    return mask


def sent_by_every_rank(sizes, itemsize: int, lag: int, group, world_size: int, scope=None) -> np.ndarray:
    """(N,) int64: the bytes each rank sent (0 outside `scope`, where it is not None)."""
    sent = np.full(world_size, base_bytes(sizes, itemsize), dtype=np.int64)
    for ranks, less in shortfalls(sizes, itemsize, lag, group, world_size):
        sent[ranks] -= less
    if scope is not None:
        sent[~in_scope(scope, world_size)] = 0
    return sent


def sent_by_one_rank(sizes, itemsize: int, lag: int, group, rank: int, scope=None) -> int:
    """The bytes `rank` sent: base less its skipped chunk, in O(runs); 0 outside `scope`, where it is not None."""
    if scope is not None and not any(lo <= rank < hi for lo, hi in scope):
        return 0
    n = len(sizes)
    p = rank if group is None else group.position(rank)
    return base_bytes(sizes, itemsize) - sizes[(p - lag + 1) % n] * itemsize


def bytes_by_tier(sizes, itemsize: int, lag: int, group, world_size: int, gpus_per_node: int | None,
                  scope=None) -> tuple:
    """(intra-node bytes, inter-node bytes) all ranks sent (those of `scope`, where it is not None): each rank's send
    to its ring's next rank crosses a node or not (`Groups.send_tiers`)."""
    from zerosim.cluster._mesh import Groups

    ring = group if group is not None else Groups.world(world_size)
    crosses = ring.send_tiers(gpus_per_node)
    if scope is not None:  # a stage's call: every rank's bytes, those outside it none (O(N), a pipeline's calls)
        sent = sent_by_every_rank(sizes, itemsize, lag, group, world_size, scope)
        inter = int(sent[crosses].sum())
        return int(sent.sum()) - inter, inter
    across = ring.crossing_count(gpus_per_node)
    base = base_bytes(sizes, itemsize)
    inter, intra = base * across, base * (world_size - across)  # then less what each short rank did not send
    for ranks, less in shortfalls(sizes, itemsize, lag, group, world_size):
        short = crosses[ranks]
        inter -= int((short * less).sum())  # less: one number for the ranks, or one per rank
        intra -= int((~short * less).sum())
    return int(intra), int(inter)


def volume(sizes, itemsize: int, lag: int, group, world_size: int, scope=None) -> int:
    """Bytes all ranks sent (those of `scope`, where it is not None): every ring's n−1 senders of each chunk, the
    rings side by side."""
    if scope is not None:
        return int(sent_by_every_rank(sizes, itemsize, lag, group, world_size, scope).sum())
    rings = group.count if group is not None else 1
    return rings * (len(sizes) - 1) * base_bytes(sizes, itemsize)
