"""Point to point between any pairs of ranks: each rank sends one array to one peer and receives one from another, in
one call (torch's `batch_isend_irecv`, NCCL's grouped ncclSend / ncclRecv). `send_recv` (_send_recv.py) is its case
of a whole ring, every member to the next; here any rank may send or not, to any other (a pipeline stage's ranks to
the next stage's).

    out = send_pairs(cluster, tensors, send_to, recv_from, tag="activations")
        tensors[i], send_to[i]    what local rank i sends and the rank it goes to (None, None: it sends nothing)
        recv_from[i]              the rank local rank i receives from (None: nothing)
        out[i]                    the array it received (None where it receives nothing); out.handle the call

Every send must be received and every receive sent, between two different ranks, with the sender's shape and dtype:
checked on every rank from every rank's description (the backend's metadata exchange) before any data moves. The
receiver gets its own copy (a GPU's receive buffer is its own memory). The trace records one call ("send_recv", op
"pairs", a ring of 2: one hop) and one event per send with its source, destination, elements, bytes, dtype and link
tier; the call's tier is the slowest its sends cross. It knows nothing of pipelines: a pipeline stage hands its
activation on with it (parallel/pipeline/_communication.py), and so could anything else that pairs ranks.

On the meta backend a process hosting a representative records the sends of the ranks it stands for too (`_stood_for`):
inside a `Trace.within` block (a pipeline's send takes part on its two stages' blocks of ranks) each range holding a
sender hosted here stands for its ranks not hosted, each sending what the range's first hosted sender sends, to the
rank as far from that sender's peer as it is from the sender (a stage's ranks each to the next stage's rank at its
place). Outside such a block no rank is stood for: nothing says whom a rank not hosted would pair with.

`naive_send_pairs` is its twin: every rank's array in one list, each receiver's copy read from it by index.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from zerosim.cluster import INTER, INTRA, hop_tier
from zerosim.collectives._checks import check_inputs
from zerosim.collectives._staging import Collected


def send_pairs(cluster, tensors, send_to, recv_from, tag: str = "") -> Collected:
    """Point-to-point sends and receives over every local rank, one call (see the module docstring)."""
    n = cluster.local_size
    for name, given in (("tensors", tensors), ("send_to", send_to), ("recv_from", recv_from)):
        if not isinstance(given, (list, tuple)) or len(given) != n:
            raise ValueError(f"send-pairs: {name} must be a list with one entry per local rank ({n}), got {given!r}")
    me = [rank.index for rank in cluster.ranks]
    sending = [i for i, t in enumerate(tensors) if t is not None]
    checked = check_inputs(_Senders(cluster, sending), [tensors[i] for i in sending], "send-pairs", flat=False)
    arrays = {i: (a, fmt) for i, (_, a, fmt) in zip(sending, checked)}
    described = [(me[i], _peer(send_to[i], cluster, "send_to", me[i]) if i in arrays else _none(send_to[i], me[i]),
                  _peer(recv_from[i], cluster, "recv_from", me[i]),
                  (tuple(arrays[i][0].shape), arrays[i][0].dtype, arrays[i][1].name) if i in arrays else None)
                 for i in range(n)]
    everyone = [d for part in cluster.backend.all_meta([described]) for d in part]  # every rank's, on every rank
    _check_pairs(everyone)
    like = {src: what for src, _, _, what in everyone if what is not None}  # sender -> (shape, dtype, format)
    stood_for = () if cluster.backend.holds_values or cluster.trace.scope is None else _stood_for(
        cluster.trace.scope, tuple(me), tuple((me[i], send_to[i]) for i in arrays), cluster.gpus_per_node)
    tiers = {cluster.tier(src, dst) for src, dst, _, _ in everyone if dst is not None}
    for _, _, _, crossed in stood_for:
        tiers |= crossed
    largest = max((_elements(shape) for shape, _, _ in like.values()), default=0)
    wire = next(iter(like.values()))[2] if like else ""
    call = cluster.trace.begin("send_recv", "pairs", 2, largest, wire, tag, tier=INTER if INTER in tiers else INTRA)
    sends = [arrays[i][0].reshape(-1) if i in arrays else None for i in range(n)]
    for i, (a, fmt) in arrays.items():
        cluster.trace.hop(call, 0, me[i], send_to[i], -1, _elements(a.shape), fmt.itemsize, fmt.name, sends[i])
    for sender, ranks, peers, _ in stood_for:  # the meta backend: the ranks a sender stands for send alike
        a, fmt = arrays[me.index(sender)]
        cluster.trace.hops_alike(call, ranks, peers, _elements(a.shape), fmt.itemsize, fmt.name)
    recv_like = [None if src is None else (_elements(like[src][0]), like[src][1]) for src in recv_from]
    received = cluster.backend.exchange(sends, [send_to[i] if i in arrays else None for i in range(n)],
                                        list(recv_from), recv_like=recv_like)
    cluster.trace.end(call)
    out = []
    for src, got in zip(recv_from, received):
        if src is None:
            out.append(None)
        elif getattr(got, "is_meta", False) or not cluster.backend.xp.is_numpy:
            out.append(got.reshape(like[src][0]))
        else:  # the sender's array itself where sends are references: the receiver's own copy
            out.append(np.array(got).reshape(like[src][0]))
    return Collected(out, cluster.trace.handle(call))


@functools.lru_cache(maxsize=256)
def _stood_for(scope: tuple, hosted: tuple, senders: tuple, gpus_per_node) -> tuple:
    """((sender, ranks, their peers, {the tiers they cross}), ...): the sends of the ranks not `hosted` here
    that a sender of `senders` ((rank, peer), ...) stands for (see the module docstring), in rank order: inside the
    `Trace.within` block's ranges `scope` (a pipeline's two stages'), each range's ranks not hosted send as its first
    hosted sender does, `peer - sender` ranks on. A pipeline's step makes thousands of these calls over a few pairs of
    stages, each range ~64 ranks at the planner's sizes: found once."""
    out, hosted = [], set(hosted)
    for lo, hi in scope:
        first = min((pair for pair in senders if lo <= pair[0] < hi), default=None)
        if first is None:
            continue
        shift = first[1] - first[0]
        ranks = tuple(r for r in range(lo, hi) if r not in hosted)
        if not ranks:  # the range is hosted whole
            continue
        peers = tuple(r + shift for r in ranks)
        out.append((first[0], ranks, peers, frozenset(map(hop_tier, ranks, peers, [gpus_per_node] * len(ranks)))))
    return tuple(out)


def _elements(shape: tuple) -> int:
    """An array's elements from its shape: int(np.prod(shape)) without NumPy's ~3 µs a call (a pipeline's step makes
    thousands of these calls, three counts each)."""
    return int(math.prod(shape))


def naive_send_pairs(tensors, send_to, recv_from) -> list:
    """The twin: `tensors[r]` is rank r's array (None: it sends nothing), sent to rank `send_to[r]`; rank r receives
    a copy of `tensors[recv_from[r]]` (None where it receives nothing)."""
    out = []
    for r, src in enumerate(recv_from):
        if src is None:
            out.append(None)
        elif send_to[src] != r or tensors[src] is None:
            sent = "nothing" if tensors[src] is None else f"to rank {send_to[src]}"
            raise ValueError(f"rank {r} receives from rank {src}, which sends {sent}")
        else:
            out.append(np.array(tensors[src]))
    return out


class _Senders:
    """The local ranks that send, as `check_inputs` reads a cluster: their arrays checked, nothing agreed (each
    sender's shape and dtype are its own)."""

    def __init__(self, cluster, indices):
        self.ranks = [cluster.ranks[i] for i in indices]
        self.local_size, self.backend, self.world_size = len(indices), cluster.backend, cluster.world_size


def _peer(value, cluster, name: str, me: int):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value < cluster.world_size:
        raise ValueError(f"send-pairs: rank {me}'s {name} must be a rank 0..{cluster.world_size - 1}, got {value!r}")
    if value == me:
        raise ValueError(f"send-pairs: rank {me} cannot {'send to' if name == 'send_to' else 'receive from'} itself")
    return int(value)


def _none(value, me: int):
    if value is not None:
        raise ValueError(f"send-pairs: rank {me} names send_to={value!r} but sends no array")
    return None


def _check_pairs(everyone: list) -> None:
    """Every send received by the rank it names, every receive sent by the rank it names: one message per pair."""
    sends = {src: dst for src, dst, _, _ in everyone if dst is not None}
    recvs = {dst: src for dst, _, src, _ in everyone if src is not None}
    for src, dst in sends.items():
        if recvs.get(dst) != src:
            raise ValueError(f"send-pairs: rank {src} sends to rank {dst}, which "
                             f"{'receives nothing' if dst not in recvs else f'receives from rank {recvs[dst]}'}")
    for dst, src in recvs.items():
        if sends.get(src) != dst:
            raise ValueError(f"send-pairs: rank {dst} receives from rank {src}, which "
                             f"{'sends nothing' if src not in sends else f'sends to rank {sends[src]}'}")
