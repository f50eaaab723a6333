"""All-to-all: every rank cuts its buffer into g equal chunks and sends chunk k to the k-th member of its group.

    out = all_to_all(cluster, [x0, x1, ...], groups=((0, 1), (2, 3)))   # two groups of 2 at once

Letters: N ranks, g ranks a group, L elements a rank (a multiple of g). Member j of a group ends with chunk j of
every member's buffer, in member order (torch.distributed.all_to_all_single with equal splits; NCCL runs it as
grouped point-to-point sends, src/collectives.cc: ncclAllToAll is not a ring). `groups` lists disjoint groups that
cover the world and run at once (a `zerosim.cluster.Groups`, or lists of ranks), each on its own communicator
(DeepSpeed's qgZ runs every node's intra-node all-to-all together, then every across-node one:
runtime/comm/coalesced_collectives.py, all_to_all_quant_reduce); None: one group, the world. The trace records
the call over the groups, world_size g (cluster/_trace.py: `Call.group`). Each rank sends (g−1)/g of its buffer, one
message to each peer: at step k = 1..g−1 member p sends chunk (p + k) mod g to member (p + k) mod g
(`cluster.backend.exchange`), and keeps chunk p.

The payload may be any dtype with an item size: floats, and the integer payloads of quantized collectives
(int8, int4 packed two to a byte; the trace names them, _wire.py). The naive twin (`naive_all_to_all`) slices
everything in one place.
"""

from __future__ import annotations

import numpy as np

from zerosim.cluster import Groups
from zerosim.collectives._staging import Collected
from zerosim.collectives._wire import wire_of


def check_groups(groups, n: int, what: str = "all-to-all") -> tuple:
    """`groups` as a tuple of equal-sized tuples of ranks that cover 0..N-1 once (None: the world; a
    `zerosim.cluster.Groups`: its members)."""
    if groups is None:
        return (tuple(range(n)),)
    if isinstance(groups, Groups):
        if groups.world_size != n:
            raise ValueError(f"{what}: groups {groups.name!r} cover {groups.world_size} ranks, the cluster has {n}")
        return groups.members
    try:
        groups = tuple(tuple(int(r) for r in g) for g in groups)
    except (TypeError, ValueError):
        raise ValueError(f"{what}: groups must be lists of rank numbers, got {groups!r}") from None
    flat = sorted(r for g in groups for r in g)
    if flat != list(range(n)) or len({len(g) for g in groups}) != 1:
        raise ValueError(f"{what}: groups must be equal-sized and cover ranks 0..{n - 1} once each, got "
                         f"{[list(g) for g in groups]}")
    return groups


def all_to_all(cluster, tensors, groups=None, tag: str = "", wire: str | None = None) -> list:
    """One all-to-all per group, all groups at once: see the module docstring. Returns one (L,) array per local
    rank, with `.handle`; `wire` names the payload in the trace ("int4x2" for packed int4; default the dtype's)."""
    n = cluster.world_size
    groups_in, groups = groups, check_groups(groups, n)
    g = len(groups[0])
    if not isinstance(tensors, (list, tuple)) or len(tensors) != cluster.local_size:
        raise ValueError(f"all-to-all takes a list of {cluster.local_size} array(s), one per local rank")
    arrays = [t if hasattr(t, "dtype") and hasattr(t, "shape") else np.asarray(t) for t in tensors]
    for rank, a in zip(cluster.ranks, arrays):
        if a.ndim != 1:
            raise ValueError(f"all-to-all: rank {rank.index} passed shape {a.shape}; flatten first")
    first = arrays[0].dtype  # its name made once: NumPy's `str(dtype)` is Python code (~6 µs a call for float16)
    name = str(first)
    meta = cluster.backend.all_meta([(a.shape[0], name if a.dtype is first else str(a.dtype)) for a in arrays])
    if len({m for m in meta}) != 1:
        raise ValueError(f"all-to-all: every rank must pass the same length and dtype, got {sorted(set(meta))}")
    length = meta[0][0]
    if length % g:
        raise ValueError(f"all-to-all: {length} elements do not cut into {g} equal chunks (one per group member)")
    w = wire_of(arrays[0].dtype, wire)
    c = length // g
    # world_size is the group's size, as for every collective over groups (cluster/_trace.py: Call.group)
    named = groups_in if isinstance(groups_in, Groups) else Groups("all-to-all", groups)
    call = cluster.trace.begin("all_to_all", "copy", g, length, w.name, tag, group=named)
    where = {r: (gi, grp.index(r)) for gi, grp in enumerate(groups) for r in grp}
    if not cluster.backend.holds_values:
        out = [cluster.backend.empty((length,), a.dtype) for a in arrays]
    elif cluster.local_size == n:
        out = _shuffle(arrays, groups, c)
    else:
        out = _exchange(cluster, arrays, groups, where, c, w, call)
    for rank in cluster.ranks:  # every rank sends g−1 chunks of c
        gi, p = where[rank.index]
        for k in range(1, g):
            dst = groups[gi][(p + k) % g]
            cluster.trace.hop(call, k - 1, rank.index, dst, (p + k) % g, c, w.itemsize, w.name)
    cluster.trace.end(call)
    return Collected(out, cluster.trace.handle(call))


def _shuffle(arrays, groups, c: int) -> list:
    """Every rank here: member j's output is chunk j of each member, in member order."""
    out = [None] * len(arrays)
    for grp in groups:
        for j, r in enumerate(grp):
            out[r] = np.concatenate([arrays[s][j * c : (j + 1) * c] for s in grp])
    return out


def _exchange(cluster, arrays, groups, where, c: int, w, call) -> list:
    """Ranks in other processes: g−1 rounds of point-to-point messages through the backend."""
    me = [rank.index for rank in cluster.ranks]
    out = [np.empty(a.shape[0], a.dtype) for a in arrays]
    for i, r in enumerate(me):
        _, p = where[r]
        out[i][p * c : (p + 1) * c] = arrays[i][p * c : (p + 1) * c]
    g = len(groups[0])
    for k in range(1, g):
        sends, send_to, recv_from, like = [], [], [], []
        for i, r in enumerate(me):
            gi, p = where[r]
            grp = groups[gi]
            sends.append(arrays[i][((p + k) % g) * c : ((p + k) % g + 1) * c])
            send_to.append(grp[(p + k) % g])
            recv_from.append(grp[(p - k) % g])
            like.append((c, arrays[i].dtype))
        got = cluster.backend.exchange(sends, send_to, recv_from, recv_like=like)
        for i, r in enumerate(me):
            gi, p = where[r]
            q = (p - k) % g  # the member it came from: its chunk p lands at slot q
            out[i][q * c : (q + 1) * c] = got[i]
    return out


def naive_all_to_all(tensors, groups=None) -> list:
    """Naive twin: for every rank, gather its group's buffers and take chunk j of each (j: its place in the group)."""
    n = len(tensors)
    groups = check_groups(groups, n)
    out = [None] * n
    for grp in groups:
        g = len(grp)
        for j, r in enumerate(grp):
            pieces = [np.array_split(np.asarray(tensors[s]), g)[j] for s in grp]
            out[r] = np.concatenate(pieces)
    return out
