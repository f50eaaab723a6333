"""Context parallelism's communication: the K/V's sends round the ring, the all-gather and its reduce-scatter, on
the records that cross between the attention core's units (_records.py) — apart from the arithmetic (_core.py).

Letters: C the CP degree, p a rank's position in its CP group, j the hop. Each function takes every local rank's
record (and its position p) and returns the records as the next unit reads them, with the handle of what it sent:

    forward_hop     hop j's K/V (own at j = 0, else the one that arrived) and hop j's block (_blocks.py); for
                    j < C−1 that K/V sent on to p + 1 in one message (Transformer Engine's p2p_comm_buffers[i],
                    torch.cat((k.view(-1), v.view(-1)))), posted before hop j computes — TE posts step i+1's receive
                    before step i's attention — so hop j+1 waits for it, not hop j (`ahead`)
    backward_hop    one message to p − 1 (TE's backward ring: send_dst = rank − 1): the K/V held now (p − 1's next
                    hop's; not at j = 0) and the dK/dV summed so far for the K/V p − 1 holds (not at j = C−1) — TE's
                    [kv, dkv] buffers; the hop waits for it
    gather          K, then V, all-gathered and put in sequence order (TE's gather_along_first_dim, twice; again in
                    backward), with the all-gather's reach
    scatter_dkv     dK, then dV, reduce-scattered to their owners in the compute format, the ring's order (TE's
                    reduce_scatter_along_first_dim)

and for torch's own (torch 2.13.0, _context_parallel/_attention.py; _torch_core.py):

    gather_kv       every rank's K and V (each query head's copy: repeat_kv ran before SDPA) in one all-gather of
                    torch.cat((k.flatten(), v.flatten())) (`_AllGatherRotater`: one all_gather_single, in forward and
                    again in backward), posted before step 0 computes: step 1 waits for it
    torch_step      step i's K/V, chunk (p − i) mod C of the gathered, and its block
    pass_dkv        the fp32 dK, dV sum one step made, in one message to p + 1 (`_AllToAllRotater`:
                    permute_tensor), which p + 1 waits for after its next step computes

Every send is a collective (zerosim.collectives) over the CP groups, in the trace with its handle and the purpose
"context parallel" (what the timeline's exposure report reads it by). What a K/V costs
in memory while in flight (TE's p2p_comm_buffers) is transport, as the ring's FIFOs are (collectives/_ring.py).
"""

from __future__ import annotations


import numpy as np

from zerosim._dataclass import dataclass
from zerosim.cluster import Handle
from zerosim.collectives import all_gather, reduce_scatter, send_recv
from zerosim.models.meta import like
from zerosim.parallel.context._blocks import gathered_reach, ring_block
from zerosim.parallel.context._core import rows_of
from zerosim.models.llama import repeat_kv
from zerosim.parallel.context._split import positions
from zerosim.parallel.context._torch_core import step_of

PURPOSE = "context parallel"  # every call this file makes, as the trace labels it (cluster/_events.py PURPOSES)

@dataclass(frozen=True)
class Layout:
    """What the communication needs of a CP job: its degree, how sequences are cut, whether attention is causal."""

    cp: int
    split: str
    causal: bool


def forward_hop(cluster, group, states: list, where: list, unit, how: Layout, ahead):
    """(states, the handle hop j waits for, the handle hop j+1 will wait for): see the module docstring."""
    j, C = unit.hop, how.cp
    waited = ahead if j else Handle()
    held = [s.kv if j == 0 else s.incoming for s in states]
    incoming, ahead = [None] * len(states), Handle()
    if j < C - 1:
        with cluster.trace.about(purpose=PURPOSE):
            got = send_recv(cluster, [_pack(kv) for kv in held], group=group, shift=1,
                            tag=f"{unit.name}: K, V to the next rank")
        incoming, ahead = [_unpack(m, kv) for m, kv in zip(got, held)], got.handle
    out = []
    for s, kv, nxt, c in zip(states, held, incoming, where):
        block = ring_block(how.split, how.causal, C, c, j)
        out.append(s.but(held=kv, incoming=nxt, block=block, work=_work(s.q, kv[0], block, unit.pieces)))
    return out, waited, ahead


def backward_hop(cluster, group, grads: list, where: list, unit, how: Layout):
    """(grads, the handle the hop waits for): see the module docstring."""
    j, C = unit.hop, how.cp
    held = [g.held if j == C - 1 else g.incoming for g in grads]
    # the first hop's dK/dV buffer: TE's torch.empty; zeros here (whatever it holds, a first write copies over it)
    handle, incoming, dkv = Handle(), [None] * len(grads), [tuple(_zeros(a) for a in kv) for kv in held]
    if C > 1:  # TE's backward step C−1−j: [kv] at j = C−1, [kv, dkv] between, [dkv] at j = 0
        parts = [(kv if j > 0 else ()) + (g.dkv if j < C - 1 else ()) for g, kv in zip(grads, held)]
        what = " and ".join(x for x, on in (("K, V", j > 0), ("dK, dV", j < C - 1)) if on)
        with cluster.trace.about(purpose=PURPOSE):
            got = send_recv(cluster, [_pack(x) for x in parts], group=group, shift=-1,
                            tag=f"{unit.name}: {what} to the previous rank (backward)")
        handle = got.handle
        received = [_unpack(m, x) for m, x in zip(got, parts)]
        incoming = [r[:2] if j > 0 else None for r in received]
        dkv = [r[-2:] if j < C - 1 else d for r, d in zip(received, dkv)]
    out = []
    for g, kv, nxt, d, c in zip(grads, held, incoming, dkv, where):
        block = ring_block(how.split, how.causal, C, c, j)
        out.append(g.but(held=kv, incoming=nxt, dkv=d, block=block, work=_work(g.q, kv[0], block, unit.pieces)))
    return out, handle


def gather(cluster, group, states: list, where: list, unit, how: Layout, direction: str):
    """(states with every rank's K, V in sequence order and the reach of each piece, the handle): see above."""
    own = [s.kv if direction == "forward" else s.held for s in states]
    handle, gathered = Handle(), []
    for i, name in enumerate(("K", "V")):  # TE: gather_along_first_dim(k), then (v)
        with cluster.trace.about(purpose=PURPOSE):
            got = all_gather(cluster, [kv[i].reshape(-1) for kv in own], group=group,
                             tag=f"{unit.name}: {name} all-gather ({direction})")
        handle += got.handle
        gathered.append([_sequence_order(g, kv[i], how.split, how.cp) for g, kv in zip(got, own)])
    out = []
    for s, k, v, c in zip(states, *gathered, where):
        length = k.shape[-2]
        reach = gathered_reach(how.split, how.causal, how.cp, c, length)
        work = tuple((s.q.shape[0], s.q.shape[1], length // (len(reach) * how.cp), r.stop, s.q.shape[3])
                     for r in reach)
        out.append(s.but(gathered=(k, v), block=reach, work=work))
    return out, handle


def scatter_dkv(cluster, group, grads: list, unit, how: Layout):
    """(grads with each rank's own dK, dV, the handle): the whole sequence's dK, dV reduce-scattered."""
    handle, owned = Handle(), []
    for i, name in enumerate(("dK", "dV")):  # TE: reduce_scatter_along_first_dim(dk), then (dv)
        sends = [_rank_order(g.dkv[i], how.split, how.cp) for g in grads]
        with cluster.trace.about(purpose=PURPOSE):
            got = reduce_scatter(cluster, sends, group=group, tag=f"{unit.name}: {name} reduce-scatter")
        handle += got.handle
        owned.append([m.reshape(g.held[i].shape) for m, g in zip(got, grads)])  # (B, G, L_r, d_h)
    return [g.but(dk=dk, dv=dv, dkv=None) for g, dk, dv in zip(grads, *owned)], handle


def gather_kv(cluster, group, states: list, unit, direction: str):
    """(per rank the C positions' (K, V) in position order, the handle): torch's one all-gather of the K/V each rank
    hands SDPA (forward: its own, repeated to every query head; backward: those the output end kept, already so)."""
    own = [_repeated(s.kv, unit.n_rep) if direction == "forward" else s.held for s in states]
    if unit.hops == 1:
        return [(kv,) for kv in own], Handle()
    with cluster.trace.about(purpose=PURPOSE):
        got = all_gather(cluster, [_pack(kv) for kv in own], group=group,
                         tag=f"{unit.name}: K, V all-gather ({direction})")
    size = sum(int(np.prod(a.shape)) for a in own[0])
    every = [tuple(_unpack(_piece(m, c, size), kv) for c in range(unit.hops)) for m, kv in zip(got, own)]
    return every, got.handle


def torch_step(states: list, where: list, unit, how: Layout, kind: str) -> list:
    """The records with step i's K/V (position (p − i) mod C's, from `gathered`) and block (the ring's: torch's
    `_is_causal_behavior` and load-balanced halves are the same blocks, _blocks.py)."""
    i, C, out = step_of(unit.hop, unit.hops, kind), how.cp, []
    for s, c in zip(states, where):
        held = s.gathered[(c - i) % C]
        block = ring_block(how.split, how.causal, C, c, i)
        out.append(s.but(held=held, block=block, work=_work(s.q, held[0], block, unit.pieces)))
    return out


def pass_dkv(cluster, group, grads: list, unit) -> tuple:
    """(grads with the fp32 dK, dV sum that arrived from p − 1, the handle): each rank's sum sent to p + 1."""
    if unit.hops == 1:
        return grads, Handle()
    with cluster.trace.about(purpose=PURPOSE):
        got = send_recv(cluster, [_pack(g.dkv) for g in grads], group=group, shift=1,
                        tag=f"{unit.name}: dK, dV (fp32) to the next rank (backward)")
    return [g.but(dkv=_unpack(m, g.dkv)) for m, g in zip(got, grads)], got.handle


def _repeated(kv: tuple, n_rep: int) -> tuple:
    return tuple(repeat_kv(a, n_rep) for a in kv)


def _piece(message, c: int, size: int):
    """Position c's part of an all-gathered message of `size` elements a position."""
    if getattr(message, "is_meta", False):
        return like(message, (size,), message.dtype)
    return message[c * size:(c + 1) * size]


def _work(q, k, block, pieces: int) -> tuple:
    """(B, H, queries, keys, d_h) of a hop's block (0 queries and keys: a skipped hop): what its FLOPs follow from."""
    B, H, L, dh = q.shape
    if block is None:
        return (B, H, 0, 0, dh)
    qr, kr = rows_of(block.q, pieces, L), rows_of(block.k, pieces, k.shape[-2])
    return (B, H, qr.stop - qr.start, kr.stop - kr.start, dh)


def _zeros(a):
    return like(a, a.shape, a.dtype) if getattr(a, "is_meta", False) else np.zeros_like(a)


def _pack(arrays: tuple):
    """One flat message of the arrays, one after another (TE's torch.cat of the flattened k and v)."""
    arrays = [a for a in arrays if a is not None]
    if getattr(arrays[0], "is_meta", False):
        return like(arrays[0], (sum(int(np.prod(a.shape)) for a in arrays),), arrays[0].dtype)
    return np.concatenate([a.reshape(-1) for a in arrays])


def _unpack(message, like_these: tuple) -> tuple:
    """The arrays back from a message, shaped as `like_these` (what was sent: every rank sends the same shapes)."""
    out, at = [], 0
    for a in like_these:
        n = int(np.prod(a.shape))
        out.append(like(message, a.shape, a.dtype) if getattr(message, "is_meta", False)
                   else message[at:at + n].reshape(a.shape))
        at += n
    return tuple(out)


def _sequence_order(gathered, own, split: str, cp: int):
    """(B, G, L, d_h) from an all-gather's (C·B·G·L_r·d_h,) in CP position order: each position's tokens placed at
    their sequence positions (TE: index_select by get_seq_chunk_ids_for_reordering_before_attn)."""
    B, G, Lr, dh = own.shape
    if getattr(gathered, "is_meta", False):
        return like(gathered, (B, G, Lr * cp, dh), own.dtype)
    per = gathered.reshape(cp, B, G, Lr, dh)
    out = np.empty((B, G, Lr * cp, dh), own.dtype)
    for p in range(cp):
        out[:, :, positions(Lr * cp, split, cp, p)] = per[p]
    return out


def _rank_order(whole, split: str, cp: int):
    """(C·B·G·L_r·d_h,) of a whole-sequence (B, G, L, d_h): position p's tokens, then p+1's (TE: index_select by
    get_seq_chunk_ids_for_reordering_after_attn before the reduce-scatter), so the ring's chunk p is p's own."""
    B, G, L, dh = whole.shape
    if getattr(whole, "is_meta", False):
        return like(whole, (B * G * L * dh,), whole.dtype)
    return np.concatenate([whole[:, :, positions(L, split, cp, p)].reshape(-1) for p in range(cp)])
