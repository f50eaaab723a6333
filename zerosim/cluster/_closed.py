"""A ring phase in closed form: every rank's bytes from the chunk sizes alone (the meta backend's representative ranks).

Letters: N ranks in all, n on each ring (a group's size), c_k the elements of chunk k, w the bytes per element.

Over the n−1 steps of a ring phase the rank at position p of its ring sends every chunk but one: chunk (p − lag + 1)
mod n (lag 1: a reduce-scatter never sends chunk p, whose sum it keeps; lag 0: an all-gather never forwards shard p+1,
the last to reach it; collectives/_ring.py). So rank r sends

    base − w · c_{(p(r) − lag + 1) mod n},   base = w · Σ_k c_k

and only the ranks whose skipped chunk is not empty send less than `base`. With the chunk sizes run-length encoded
(`RunCounts`: a flat range's counts are zeros, a head, whole shards, a tail, zeros) those ranks come as a few ranges
of positions, so a question about every rank costs O(runs) in Python and O(those ranks) in NumPy: no (N,) vector per
call. `Trace` keeps `(sizes, w, lag)` per call and asks here.
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


def sent_by_every_rank(sizes, itemsize: int, lag: int, group, world_size: int) -> np.ndarray:
    """(N,) int64: the bytes each rank sent."""
    sent = np.full(world_size, base_bytes(sizes, itemsize), dtype=np.int64)
    for ranks, less in shortfalls(sizes, itemsize, lag, group, world_size):
        sent[ranks] -= less
    return sent


def sent_by_one_rank(sizes, itemsize: int, lag: int, group, rank: int) -> int:
    """The bytes `rank` sent: base less its skipped chunk, in O(runs)."""
    n = len(sizes)
    p = rank if group is None else group.position(rank)
    return base_bytes(sizes, itemsize) - sizes[(p - lag + 1) % n] * itemsize


def bytes_by_tier(sizes, itemsize: int, lag: int, group, world_size: int, gpus_per_node: int | None) -> tuple:
    """(intra-node bytes, inter-node bytes) all ranks sent: each rank's send to its ring's next rank crosses a node
    or not (`Groups.send_tiers`)."""
    from zerosim.cluster._mesh import Groups

    ring = group if group is not None else Groups.world(world_size)
    crosses, across = ring.send_tiers(gpus_per_node), ring.crossing_count(gpus_per_node)
    base = base_bytes(sizes, itemsize)
    inter, intra = base * across, base * (world_size - across)  # then less what each short rank did not send
    for ranks, less in shortfalls(sizes, itemsize, lag, group, world_size):
        short = crosses[ranks]
        inter -= int((short * less).sum())  # less: one number for the ranks, or one per rank
        intra -= int((~short * less).sum())
    return int(intra), int(inter)


def volume(sizes, itemsize: int, group) -> int:
    """Bytes all ranks sent: every ring's n−1 senders of each chunk, the rings side by side."""
    rings = group.count if group is not None else 1
    return rings * (len(sizes) - 1) * base_bytes(sizes, itemsize)
