"""Broadcast: a chain root -> root+1 -> ... -> root-1, each link carrying the whole buffer once."""

from __future__ import annotations

import math

import numpy as np

from zerosim.collectives.checks import check_inputs, require_same
from zerosim.collectives.staging import Collected


def broadcast(cluster, tensors, root: int, tag: str = "") -> list:
    """Chain broadcast of rank `root`'s array: every rank gets a copy. Non-root arrays give only shape
    and dtype (they are the receive buffers, as in NCCL); they must match the root's."""
    n = cluster.world_size
    if isinstance(root, bool) or not isinstance(root, (int, np.integer)) or not 0 <= root < n:
        raise ValueError(f"broadcast: root must be a rank in 0..{n - 1}, got {root!r}")
    arrays = check_inputs(cluster, tensors, "broadcast", flat=False)
    meta = cluster.backend.all_meta([(a.shape, fmt.name) for (_, a, fmt) in arrays])
    require_same([m[0] for m in meta], "broadcast", "shape")
    require_same([m[1] for m in meta], "broadcast", "dtype")
    fmt = arrays[0][2]
    shape = arrays[0][1].shape
    count = math.prod(shape)
    call = cluster.trace.begin("broadcast", "copy", n, count, fmt.name, tag)
    me = [rank.index for rank in cluster.ranks]
    out = [a.reshape(-1).copy() if r == root else cluster.backend.xp.empty(count, fmt) for (r, a, _) in arrays]
    for k in range(n - 1):
        src, dst = (root + k) % n, (root + k + 1) % n
        sends = [out[i] if r == src else None for i, r in enumerate(me)]
        send_to = [dst if r == src else None for r in me]
        recv_from = [src if r == dst else None for r in me]
        if src in me:
            cluster.trace.hop(call, k, src, dst, -1, count, fmt.itemsize, fmt.name, out[me.index(src)])
        recv_like = [(count, fmt.dtype) if r == dst else None for r in me]
        received = cluster.backend.exchange(sends, send_to, recv_from, recv_like=recv_like)
        for i, r in enumerate(me):
            if r == dst:
                out[i][...] = received[i]
    cluster.trace.end(call)
    return Collected([o.reshape(shape) for o in out], cluster.trace.handle(call))
