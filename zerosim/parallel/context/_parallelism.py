"""ContextParallel: every rank holds 1/C of every sequence; attention's keys and values travel the CP group.

Letters: N ranks, C the CP degree, p a rank's position in its CP group (`ParallelDims.groups("cp")`: C consecutive
ranks beside TP's innermost ones), L_r = L / C. The engine is given the CP rank's model (`ContextParallel.model`,
_model.py) and this parallelism; it then reduces and shards its gradients over dp × cp (torchtitan's "fsdp" mesh:
DataMesh.of(..., cp=C)), and `batches` hands each rank its tokens of its data-parallel rank's sequences (_split.py).
At the step's points (parallel/_contract.py) it runs, over the CP groups (collectives: every send in the trace):

    before a unit, forward     the embedding (GPT) and the Llama's QKV unit: their input beside the tokens'
                               positions (Located)
                               ring, hop j: the K/V hop j attends to (own at j = 0; else the one that arrived),
                               and, for j < C−1, that K/V sent on to p + 1 (`send_recv`, one message of K and V:
                               Transformer Engine's p2p_comm_buffers[i], torch.cat((k.view(-1), v.view(-1)))) —
                               posted before hop j computes, as TE posts step i+1's receive before step i's
                               attention; hop j+1 waits for it
                               allgather: K, then V, all-gathered (TE's gather_along_first_dim, twice)
    before a unit, backward    ring, hop j (C−1 down to 0): one message to p − 1 (TE's backward ring: send_dst =
                               rank − 1) carrying the K/V held now (for p − 1's next hop; not at j = 0) and the dK/dV
                               summed so far for the K/V p − 1 holds (not at j = C−1) — TE's [kv, dkv] buffers;
                               the hop waits for it
                               allgather: K and V all-gathered again (TE gathers them again in backward)
    after a unit, backward     allgather: dK, then dV, reduce-scattered to their owners (16-bit, the ring's
                               order: TE's reduce_scatter_along_first_dim)

Each hop is told its block (_blocks.py) — which pieces of Q meet which of the held K/V — so the units (_units.py)
never ask which rank they run on. Nothing is kept between steps; what a hop's K/V costs in memory while in flight
(TE's p2p_comm_buffers) is transport, as the ring's FIFOs are (collectives/_ring.py).

`cp = 1` is no context parallelism: the model itself, no hook does anything, every bit and call as without it.
"""

from __future__ import annotations

import numpy as np

from zerosim.cluster import Handle
from zerosim.collectives import all_gather, reduce_scatter, send_recv
from zerosim.models.meta import like
from zerosim.parallel._contract import Parallelism
from zerosim.parallel.context._blocks import gathered_reach, ring_block
from zerosim.parallel.context._meta import MetaContextParallelModel
from zerosim.parallel.context._model import ContextParallelModel, check_cp, check_style
from zerosim.parallel.context._records import Located
from zerosim.parallel.context._split import check_length, check_split, positions, shard
from zerosim.parallel.context._core import Gathered, Hop, rows_of


class ContextParallel(Parallelism):
    """Context parallelism of degree `cp` over `model` (a GPT or a Llama with attention="flash"): `style` "ring"
    (Transformer Engine's p2p, Megatron-Core's default cp_comm_type) or "allgather" (the Llama 3 paper's, TE's
    all_gather); `split` "zigzag" (load-balanced: TE's, torch's head-tail) or "contiguous"; `causal` False: attention
    without its mask.

        cp = ContextParallel(GPT(vocab=64, d_model=32, n_heads=4, n_layers=2, seq_len=16, attention="flash"), cp=2)
        engine = ZeroEngine(cp.model, Cluster(4), 3, Adam(), "bf16-mixed", parallelisms=(cp,))
        engine.step(cp.batches(engine.dims, [(x0, t0), (x1, t1)]))      # one (x, target) per data-parallel rank
    """

    name = "context parallel"

    def __init__(self, model, cp: int, style: str = "ring", split: str = "zigzag", causal: bool = True,
                 tensor=None):
        self.cp, self.style, self.split = check_cp(cp), check_style(style), check_split(split)
        self.causal = bool(causal)
        self.tensor = tensor if tensor is not None and tensor.local is not None else None
        if self.tensor is not None and self.tensor.sequence_parallel:
            raise NotImplementedError("context parallelism beside tensor parallelism's sequence parallelism is not "
                                      "modelled yet: build TensorParallel(..., sequence_parallel=False)")
        if self.tensor is not None and (tensor.full is not model):
            raise ValueError("tensor= must be the TensorParallel of this same model")
        whole = getattr(model, "gpt", None)  # a meta twin's real model (MetaGPT.gpt, MetaLlama.gpt)
        self.meta = whole is not None
        if self.meta and self.tensor is not None:
            raise NotImplementedError("the meta backend's twin of context beside tensor parallelism is not modelled "
                                      "yet")
        self.full = whole if self.meta else model
        cut = None if self.tensor is None else self.tensor.local
        self.local = None if self.cp == 1 and self.causal else ContextParallelModel(self.full, self.cp, style, split,
                                                                                     causal, cut)
        if self.local is None:
            self.model = model if self.tensor is None else self.tensor.model
        else:
            self.model = MetaContextParallelModel(self.local, model.loss) if self.meta else self.local
        self.degrees = {"cp": self.cp}
        self._ahead = Handle()  # the K/V send of the next hop, posted before this hop's compute

    @property
    def parallelisms(self) -> tuple:
        """What the engine runs, in order: tensor parallelism's operators first (its f before a unit, its vocabulary
        shift), then this one's (which hands the unit its input beside the tokens' positions)."""
        return (self,) if self.tensor is None else (self.tensor, self)

    # -- before the step ----------------------------------------------------------------------------------------
    def batches(self, dims, per_data_rank: list) -> list:
        """Every rank's micro-batch(es) from the data-parallel ranks' (x, target) (B, L) (or lists of K): position p
        of a CP group gets its tokens of its group's sequences (_split.py). A length that does not split is refused
        before anything runs."""
        dp, cps = dims.groups("dp"), dims.groups("cp")
        if len(per_data_rank) != dp.size:
            raise ValueError(f"{dp.size} data-parallel ranks train on a batch each (dp = N / (cp · tp)), got "
                             f"{len(per_data_rank)} batches")

        def cut(batch, p):
            if len(batch) == 2 and not isinstance(batch[0], (list, tuple)):
                x, t = np.asarray(batch[0]), np.asarray(batch[1])
                if x.ndim != 2:
                    raise ValueError(f"token ids must be (batch, length), got shape {x.shape}")
                check_length(x.shape[1], self.split, self.cp)
                return shard(x, self.split, self.cp, p), shard(t, self.split, self.cp, p)
            return [cut(b, p) for b in batch]

        return [cut(per_data_rank[dp.position(r)], cps.position(r)) for r in range(dims.world_size)]

    # -- the step's points --------------------------------------------------------------------------------------
    def before_unit(self, ctx, passes, ops) -> Handle:
        op = ops[0]
        if self.local is None or not op.computes or op.kind == "loss":
            return Handle()
        unit, group = self.local.layers[op.layer], ctx.mesh.dims.groups("cp")
        where = [group.position(rank.index) for rank in ctx.ranks]
        if op.kind == "backward":
            if isinstance(unit, Hop):
                return self._hop_backward(ctx, passes, unit, group, where)
            if isinstance(unit, Gathered):
                return self._gather(ctx, passes, "dy", unit, group, where, "backward")
            return Handle()
        if op.layer in self.local.positioned and not op.from_checkpoint:
            for p, c in zip(passes, where):
                L = p.a.shape[1] * self.cp
                at = like(p.a, (L // self.cp,), np.int64) if self.meta else positions(L, self.split, self.cp, c)
                p.a = Located(p.a, at)
        if isinstance(unit, Hop):
            return self._hop_forward(ctx, passes, unit, group, where)
        if isinstance(unit, Gathered):
            return self._gather(ctx, passes, "a", unit, group, where, "forward")
        return Handle()

    def after_unit(self, ctx, passes, ops) -> Handle:
        op = ops[0]
        unit = None if self.local is None or op.kind != "backward" else self.local.layers[op.layer]
        if not isinstance(unit, Gathered):
            return Handle()
        group, handle, owned = ctx.mesh.dims.groups("cp"), Handle(), []
        for i, name in enumerate(("dK", "dV")):  # TE: reduce_scatter_along_first_dim(dk), then (dv)
            sends = [_rank_order(p.dy.dkv[i], self.split, self.cp) for p in passes]
            got = reduce_scatter(ctx.cluster, sends, group=group, tag=f"{unit.name}: {name} reduce-scatter")
            handle += got.handle
            owned.append([g.reshape(p.dy.held[i].shape) for g, p in zip(got, passes)])  # (B, G, L_r, d_h)
        for p, dk, dv in zip(passes, *owned):
            p.dy = p.dy.but(dk=dk, dv=dv, dkv=None)
        return handle

    # -- the ring ------------------------------------------------------------------------------------------------
    def _hop_forward(self, ctx, passes, unit, group, where) -> Handle:
        j, C = unit.hop, self.cp
        waited, self._ahead = (self._ahead if j else Handle()), Handle()
        held = [p.a.kv if j == 0 else p.a.incoming for p in passes]
        incoming = [None] * len(passes)
        if j < C - 1:  # hop j+1's K/V, posted now (TE: the receive for step i+1 before step i's attention)
            got = send_recv(ctx.cluster, [_pack(kv) for kv in held], group=group, shift=1,
                            tag=f"{unit.name}: K, V to the next rank")
            incoming = [_unpack(m, kv) for m, kv in zip(got, held)]
            self._ahead = got.handle
        for p, kv, nxt, c in zip(passes, held, incoming, where):
            block = ring_block(self.split, self.causal, C, c, j)
            p.a = p.a.but(held=kv, incoming=nxt, block=block, work=_work(p.a.q, kv[0], block, unit.pieces))
        return waited

    def _hop_backward(self, ctx, passes, unit, group, where) -> Handle:
        j, C = unit.hop, self.cp
        held = [p.dy.held if j == C - 1 else p.dy.incoming for p in passes]
        # the first hop's dK/dV buffer: TE's torch.empty; zeros here (whatever it holds, a first write copies over it)
        handle, incoming, dkv = Handle(), [None] * len(passes), [tuple(_zeros(a) for a in kv) for kv in held]
        if C > 1:  # TE's backward step C−1−j: [kv] at j = C−1, [kv, dkv] between, [dkv] at j = 0
            parts = [(kv if j > 0 else ()) + (p.dy.dkv if j < C - 1 else ()) for p, kv in zip(passes, held)]
            what = " and ".join(x for x, on in (("K, V", j > 0), ("dK, dV", j < C - 1)) if on)
            got = send_recv(ctx.cluster, [_pack(x) for x in parts], group=group, shift=-1,
                            tag=f"{unit.name}: {what} to the previous rank (backward)")
            handle = got.handle
            received = [_unpack(m, x) for m, x in zip(got, parts)]
            incoming = [r[:2] if j > 0 else None for r in received]
            dkv = [r[-2:] if j < C - 1 else d for r, d in zip(received, dkv)]
        for p, kv, nxt, d, c in zip(passes, held, incoming, dkv, where):
            block = ring_block(self.split, self.causal, C, c, j)
            p.dy = p.dy.but(held=kv, incoming=nxt, dkv=d, block=block, work=_work(p.dy.q, kv[0], block, unit.pieces))
        return handle

    # -- the all-gather -------------------------------------------------------------------------------------------
    def _gather(self, ctx, passes, slot: str, unit, group, where, direction: str) -> Handle:
        states = [getattr(p, slot) for p in passes]
        own = [s.kv if direction == "forward" else s.held for s in states]
        handle, gathered = Handle(), []
        for i, name in enumerate(("K", "V")):  # TE: gather_along_first_dim(k), then (v)
            got = all_gather(ctx.cluster, [kv[i].reshape(-1) for kv in own], group=group,
                             tag=f"{unit.name}: {name} all-gather ({direction})")
            handle += got.handle
            gathered.append([_sequence_order(g, kv[i], self.split, self.cp) for g, kv in zip(got, own)])
        for p, s, k, v, c in zip(passes, states, *gathered, where):
            length = k.shape[-2]
            reach = gathered_reach(self.split, self.causal, self.cp, c, length)
            work = tuple((s.q.shape[0], s.q.shape[1], length // (len(reach) * self.cp), r.stop, s.q.shape[3])
                         for r in reach)
            setattr(p, slot, s.but(gathered=(k, v), block=reach, work=work))
        return handle


def _work(q, k, block, pieces: int) -> tuple:
    """(B, H, queries, keys, d_h) of a hop's block (0 queries and keys: a skipped hop)."""
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
