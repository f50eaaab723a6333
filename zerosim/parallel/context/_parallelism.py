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
                               summed so far for the K/V p − 1 holds (not at j = C−1) — TE's [kv, dkv] buffers —
                               posted before hop j computes; hop j waits for nothing new (its K/V came with the
                               message before)
                               allgather: K and V all-gathered again (TE gathers them again in backward); the core
                               waits for them
    after a unit, backward     ring: hop j's message, which the next unit waits for (hop j − 1, or the QKV end
                               after hop 0), as Transformer Engine 2.18 overlaps it: context_parallel.py,
                               `AttnFuncWithCPAndKVP2P.backward`, step i: "wait until KV is received" (the previous
                               step's requests), `flash_attn_p2p_communicate` of [kv, dkv], the step's flash backward
                               beside it, then "wait until dKV is received" before the dkv correction adds into the
                               received buffer. The hop's dK/dV add rides in its compute here, timed with the
                               block's attention backward; its bits are the same, in the same order
                               allgather: dK, then dV, reduce-scattered to their owners (16-bit, the ring's
                               order: TE's reduce_scatter_along_first_dim, a synchronous call): the next unit
                               waits for them

torch's own (style "torch", _torch_core.py: torch 2.13.0's context_parallel on its default path, as torchtitan runs
it): before step 0 (forward, its recompute, and backward) every rank's K/V, at every query head, in one all-gather
that step 1 waits for; after each backward step its fp32 dK/dV sum sent to p + 1, waited for after the next step's
attention (torch's `next_buffer` follows the op), the last (the rank's own) before the QKV end.

The sends themselves are _communication.py's. Each hop is told its block (_blocks.py) — which pieces of Q meet which
of the held K/V — so the units (_core.py) never ask which rank they run on. Nothing is kept between steps.

`cp = 1` is no context parallelism: the model itself, no hook does anything, every bit and call as without it.
"""

from __future__ import annotations

import numpy as np

from zerosim.cluster import Handle
from zerosim.models.meta import like
from zerosim.parallel._contract import Parallelism
from zerosim.parallel.context import _communication as comm
from zerosim.parallel.context._blocks import busiest_position
from zerosim.parallel.context._core import Gathered, Hop
from zerosim.parallel.context._meta import MetaContextParallelModel
from zerosim.parallel.context._model import ContextParallelModel, check_cp, check_style
from zerosim.parallel.context._records import Located
from zerosim.parallel.context._split import check_length, check_split, positions, shard
from zerosim.parallel.context._torch_core import TorchHop, finish, step_of


class ContextParallel(Parallelism):
    """Context parallelism of degree `cp` over `model` (a GPT or a Llama with attention="flash"): `style` "ring"
    (Transformer Engine's p2p, Megatron-Core's default cp_comm_type), "allgather" (the Llama 3 paper's, TE's
    all_gather) or "torch" (torch's own context_parallel, torchtitan's); `split` "zigzag" (load-balanced: TE's,
    torch's head-tail) or "contiguous"; `causal` False: attention without its mask.

        cp = ContextParallel(GPT(vocab=64, d_model=32, n_heads=4, n_layers=2, seq_len=16, attention="flash"), cp=2)
        engine = ZeroEngine(cp.model, Cluster(4), 3, Adam(), "bf16-mixed", parallelisms=(cp,))
        engine.step(cp.batches(engine.dims, [(x0, t0), (x1, t1)]))      # one (x, target) per data-parallel rank
    """

    name = comm.PURPOSE
    # on the meta backend every micro-step makes its calls again alike (its hops' sends, or its K, V all-gathers), and
    # none once a step: the planner writes a step's second micro-step from its first (analysis/planner/_repeat.py)
    micro_steps_alike = True

    def __init__(self, model, cp: int, style: str = "ring", split: str = "zigzag", causal: bool = True,
                 tensor=None):
        self.cp, self.style, self.split = check_cp(cp), check_style(style), check_split(split)
        self.causal = bool(causal)
        self.tensor = tensor if tensor is not None and tensor.local is not None else None
        whole = getattr(model, "gpt", None)  # a meta twin's real model (MetaGPT.gpt, MetaLlama.gpt)
        self.meta = whole is not None
        if self.tensor is not None and (tensor.full is not (whole if self.meta else model)):
            raise ValueError("tensor= must be the TensorParallel of this same model")
        self.full = whole if self.meta else model
        cut = None if self.tensor is None else self.tensor.local
        self.local = None if self.cp == 1 and self.causal else ContextParallelModel(self.full, self.cp, style, split,
                                                                                     causal, cut)
        if self.local is None:
            self.model = model if self.tensor is None else self.tensor.model
        else:
            self.model = (MetaContextParallelModel(self.local, model.loss if self.tensor is None else
                                                   self.tensor.model.loss, self.tensor is not None and
                                                   getattr(model, "tied_head", False)) if self.meta else self.local)
        self.degrees = {"cp": self.cp}
        # beside sequence parallelism each rank's L / C tokens are cut again over its TP group (the length checks)
        self._sequence_tp = self.tensor.tp if self.tensor is not None and self.tensor.sequence_parallel else 1
        self.layout = comm.Layout(self.cp, self.split, self.causal)
        self._ahead = Handle()  # the K/V send of the next hop, posted before this hop's compute
        self._behind = Handle()  # backward: the hop's message, sent before its compute, waited for after it

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
                check_length(x.shape[1], self.split, self.cp, self._sequence_tp)
                return shard(x, self.split, self.cp, p), shard(t, self.split, self.cp, p)
            return [cut(b, p) for b in batch]

        return [cut(per_data_rank[dp.position(r)], cps.position(r)) for r in range(dims.world_size)]

    def position_of(self, cluster, dims):
        """rank -> its position in its CP group (`dims.groups("cp")`), as this run computes it. On the meta backend's
        representative rank (one rank hosted for all N, which the timeline's rank 0 reports) that is the position whose
        attention costs the most (_blocks.py `busiest_position`: the last under a contiguous causal split, which is
        the slowest at every hop, so the step is every rank's to the bit; under zigzag the positions' pairs are
        equal, their merges and copies of keys not, and no position is the slowest at every hop: the first stands
        for all, its step within the ranks' per-hop differences of theirs). The bytes and the memory are every
        position's alike."""
        if _representative(cluster):
            busiest = busiest_position(self.split, self.causal, self.cp)
            return lambda rank: busiest
        return dims.groups("cp").position

    # -- the step's points --------------------------------------------------------------------------------------
    def before_unit(self, ctx, passes, ops) -> Handle:
        op = ops[0]
        if self.local is None or not op.computes or op.kind == "loss":
            return Handle()
        unit, group = self.local.layers[op.layer], ctx.mesh.dims.groups("cp")
        where = [self.position_of(ctx.cluster, ctx.mesh.dims)(rank.index) for rank in ctx.ranks]
        if isinstance(unit, TorchHop):
            return self._torch_step(ctx, passes, op, unit, where, group)
        if op.kind == "backward":
            if isinstance(unit, Hop):  # sent now, waited for by the next unit (after_unit): TE's overlap
                grads, self._behind = comm.backward_hop(ctx.cluster, group, [p.dy for p in passes], where, unit,
                                                        self.layout)
                handle = Handle()
            elif isinstance(unit, Gathered):
                grads, handle = comm.gather(ctx.cluster, group, [p.dy for p in passes], where, unit, self.layout,
                                            "backward")
            else:
                return Handle()
            for p, g in zip(passes, grads):
                p.dy = g
            return handle
        if op.layer in self.local.positioned and not op.from_checkpoint:
            for p, c in zip(passes, where):
                L = p.a.shape[1] * self.cp
                at = (like(getattr(p.a, "value", p.a), (L // self.cp,), np.int64) if self.meta else  # (TP's Bundle)
                      positions(L, self.split, self.cp, c))
                p.a = Located(p.a, at)
        states = [p.a for p in passes]
        if isinstance(unit, Hop):
            states, handle, self._ahead = comm.forward_hop(ctx.cluster, group, states, where, unit, self.layout,
                                                           self._ahead)
        elif isinstance(unit, Gathered):
            states, handle = comm.gather(ctx.cluster, group, states, where, unit, self.layout, "forward")
        else:
            return Handle()
        for p, state in zip(passes, states):
            p.a = state
        return handle

    def _torch_step(self, ctx, passes, op, unit, where, group) -> Handle:
        """torch's ring (_torch_core.py): at step 0 every rank's K/V all-gathered (forward, and again in backward),
        which step 1 waits for; each step its K/V from them and its block."""
        kind = "backward" if op.kind == "backward" else "forward"  # a recompute is the forward again
        attr = "dy" if kind == "backward" else "a"
        step, records = step_of(unit.hop, unit.hops, kind), [getattr(p, attr) for p in passes]
        waited = Handle()
        if step == 0:
            every, self._ahead = comm.gather_kv(ctx.cluster, group, records, unit, kind)
            records = [r.but(gathered=g) for r, g in zip(records, every)]
        elif step == 1:
            waited, self._ahead = self._ahead, Handle()
        for p, r in zip(passes, comm.torch_step(records, where, unit, self.layout, kind)):
            setattr(p, attr, r)
        return waited

    def after_unit(self, ctx, passes, ops) -> Handle:
        op = ops[0]
        unit = None if self.local is None or op.kind != "backward" else self.local.layers[op.layer]
        if isinstance(unit, TorchHop):  # the step's fp32 dK, dV sum sent on; the one sent a step ago waited for now
            grads, sent = comm.pass_dkv(ctx.cluster, ctx.mesh.dims.groups("cp"), [p.dy for p in passes], unit)
            handle, self._behind = self._behind, sent
            last = step_of(unit.hop, unit.hops, "backward") == unit.hops - 1
            if last:  # what arrived is the rank's own: rounded, and repeat_kv's backward (the QKV end waits)
                handle, self._behind = handle + sent, Handle()
                grads = [finish(g, unit.n_rep, p.fmt) for g, p in zip(grads, passes)]
            for p, g in zip(passes, grads):
                p.dy = g
            return handle
        if isinstance(unit, Hop):  # the message this hop's before_unit sent: the next unit waits for it
            handle, self._behind = self._behind, Handle()
            return handle
        if not isinstance(unit, Gathered):
            return Handle()
        grads, handle = comm.scatter_dkv(ctx.cluster, ctx.mesh.dims.groups("cp"), [p.dy for p in passes], unit,
                                         self.layout)
        for p, g in zip(passes, grads):
            p.dy = g
        return handle


def _representative(cluster) -> bool:
    """The meta backend's representative rank: one rank hosted, with no values, for the whole world."""
    return cluster.local_size < cluster.world_size and not cluster.backend.holds_values
