"""Broadcast: a chain root -> root+1 -> ... -> root-1, each link carrying the whole buffer once."""

from __future__ import annotations

import math

import numpy as np

from zerosim.collectives._checks import check_group, check_inputs, require_same
from zerosim.collectives._staging import Collected


def broadcast(cluster, tensors, root: int, tag: str = "", group=None) -> list:
    """Chain broadcast of rank `root`'s array: every rank gets a copy. Non-root arrays give only shape
    and dtype (they are the receive buffers, as in NCCL); they must match the root's.

    Over `group` (a `zerosim.cluster.Groups`) every group broadcasts at once from the member at *position*
    `root` of its ring, along the ring's order (on the world, position = rank)."""
    group = check_group(cluster, group, "broadcast")
    n = group.size
    if isinstance(root, bool) or not isinstance(root, (int, np.integer)) or not 0 <= root < n:
        raise ValueError(f"broadcast: root must be a {'rank' if group.is_world else 'position'} in 0..{n - 1}, "
                         f"got {root!r}")
    arrays = check_inputs(cluster, tensors, "broadcast", flat=False)
    meta = cluster.backend.all_meta([(a.shape, fmt.name) for (_, a, fmt) in arrays])
    require_same([m[0] for m in meta], "broadcast", "shape")
    require_same([m[1] for m in meta], "broadcast", "dtype")
    fmt = arrays[0][2]
    shape = arrays[0][1].shape
    count = math.prod(shape)
    call = cluster.trace.begin("broadcast", "copy", n, count, fmt.name, tag, group)
    me = [rank.index for rank in cluster.ranks]
    at = [group.position(r) for r in me]
    ns = cluster.backend.xp  # where the arrays live (numpy, cupy)
    out = [a.reshape(-1).copy() if p == root else ns.empty(count, fmt) for p, (_, a, _) in zip(at, arrays)]
    for k in range(n - 1):
        src, dst = (root + k) % n, (root + k + 1) % n  # positions: every group's chain takes this step at once
        sends = [out[i] if p == src else None for i, p in enumerate(at)]
        send_to = [group.next(r) if p == src else None for r, p in zip(me, at)]
        recv_from = [group.prev(r) if p == dst else None for r, p in zip(me, at)]
        for i, (r, p) in enumerate(zip(me, at)):
            if p == src:
                cluster.trace.hop(call, k, r, group.next(r), -1, count, fmt.itemsize, fmt.name, out[i])
        recv_like = [(count, fmt.dtype) if p == dst else None for p in at]
        received = cluster.backend.exchange(sends, send_to, recv_from, recv_like=recv_like)
        for i, p in enumerate(at):
            if p == dst:
                out[i][...] = received[i]
    cluster.trace.end(call)
    return Collected([o.reshape(shape) for o in out], cluster.trace.handle(call))
