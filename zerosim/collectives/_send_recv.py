"""Send/receive around a ring: every member of a group sends its buffer `shift` places on and receives the buffer of
the member `shift` places back, all at once.

    out = send_recv(cluster, [kv0, kv1, kv2, kv3], group=cp)        # position p gets position p-1's buffer

Letters: N ranks, g ranks a group, p a rank's position in it. One step of a ring, not a reduction: nothing is added,
nothing is rounded (the buffer travels in its own format). This is what a ring of point-to-point messages does:
Transformer Engine's `flash_attn_p2p_communicate` (an isend to `send_dst`, an irecv from `recv_src`, its neighbours
on the CP ring; transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py, 2.18) and torch's
`permute_tensor` in `_AllToAllRotater.exchange_buffers` (torch/distributed/tensor/experimental/_context_parallel/
_attention.py, 2.13: destination (p + 1) mod g). NCCL runs such a step as grouped ncclSend/ncclRecv pairs. The
trace records one call over the groups (world_size g) and one hop per rank: p to (p + shift) mod g, every element.
On the meta backend a process hosting a representative records the sends of the ranks it stands for too: every rank
the call takes part on (a pipeline stage's, inside its `Trace.within` block; else the world's), as one record of
sends alike (`Trace.hops_alike`, as point-to-point's `send_pairs` records them), which the trace shows as the hops one
by one would be (a 405B step on 512 GPUs, a CP ring of 8 in each pipeline stage: thousands of calls, each for the
64 ranks of its stage).

Any shape and format; every rank passes the same shape and dtype (both ends know what arrives, as a receive buffer
does). `naive_send_recv` is the naive twin: the same permutation by indexing, in one place.
"""

from __future__ import annotations

import math

import numpy as np

from zerosim.collectives._checks import check_group, check_inputs, require_same
from zerosim.collectives._staging import Collected


def send_recv(cluster, tensors, group=None, shift: int = 1, tag: str = "") -> list:
    """Position p of each group sends its array to position (p + shift) mod g and receives position (p - shift) mod
    g's: one array per local rank, with `.handle`. `shift` -1 turns the ring the other way (Transformer Engine's
    backward: `send_dst` is rank - 1)."""
    group = check_group(cluster, group, "send/recv")
    if isinstance(shift, bool) or not isinstance(shift, (int, np.integer)):
        raise ValueError(f"send/recv: shift must be an integer (places along the ring), got {shift!r}")
    arrays = check_inputs(cluster, tensors, "send/recv", flat=False)
    meta = cluster.backend.all_meta([(tuple(a.shape), fmt.name) for (_, a, fmt) in arrays])
    require_same([m[0] for m in meta], "send/recv", "shape")
    require_same([m[1] for m in meta], "send/recv", "dtype")
    fmt, shape, n = arrays[0][2], tuple(arrays[0][1].shape), group.size
    count = math.prod(shape)
    call = cluster.trace.begin("send_recv", "copy", n, count, fmt.name, tag, group)
    me = [rank.index for rank in cluster.ranks]
    to, back = group.shifted(shift), group.shifted(-shift)
    dst, src = [to[r] for r in me], [back[r] for r in me]
    sends = [a for (_, a, _) in arrays]
    if shift % n == 0:  # a ring of one, or a whole turn: every buffer stays where it is
        out = [a.copy() for a in sends]
    else:
        for i, r in enumerate(me):
            cluster.trace.hop(call, 0, r, dst[i], -1, count, fmt.itemsize, fmt.name, sends[i])
        if not cluster.backend.holds_values:  # the meta backend: what arrives, by shape (its peers are not here) ...
            out = [cluster.backend.empty(shape, a.dtype) for a in sends]
            stood_for = tuple(sorted(set(_taking_part(cluster)) - set(me)))  # ... and their sends, as its own
            if stood_for:  # one record for all, each rank's send to its peer (Trace.hops_alike, as send_pairs's)
                cluster.trace.hops_alike(call, stood_for, tuple(to[r] for r in stood_for), count, fmt.itemsize,
                                         fmt.name)
        else:
            received = cluster.backend.exchange(sends, dst, src, recv_like=[(count, fmt.dtype)] * len(me))
            out = [x.copy() for x in received]  # the receive buffer is the receiver's own
    cluster.trace.end(call)
    return Collected([o.reshape(shape) for o in out], cluster.trace.handle(call))


def _taking_part(cluster):
    """The ranks the call takes part on: those of the `Trace.within` block it is made in (a pipeline stage's own:
    another stage's ranks run their own ring at their own times), else every rank of the world."""
    ranks = cluster.trace.scope_ranks(cluster.trace.scope)
    return range(cluster.world_size) if ranks is None else ranks


def naive_send_recv(tensors, groups=None, shift: int = 1) -> list:
    """Naive twin: rank `groups[j][(p + shift) % g]` ends with `tensors[groups[j][p]]` (groups: lists of ranks in
    ring order; None: one group of every rank, in rank order)."""
    groups = [list(range(len(tensors)))] if groups is None else [list(g) for g in groups]
    out = [None] * len(tensors)
    for g in groups:
        for p, r in enumerate(g):
            out[g[(p + shift) % len(g)]] = np.array(tensors[r], copy=True)
    return out
