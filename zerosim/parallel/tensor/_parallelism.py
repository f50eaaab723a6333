"""TensorParallel: Megatron's tensor (and sequence) parallelism beside ZeRO, through the step's contract.

Letters: N ranks, T the TP degree, dp = N / T the data-parallel degree. The engine is given the TP rank's model
(`TensorParallel.model`, _model.py) and this parallelism; it then cuts its data-parallel groups from what TP leaves
(`degrees = {"tp": T}`: parallel/data/multinode/_groups.py), so ZeRO shards each TP rank's slice over the dp ranks
that hold the same slice, and every rank starts from its slice of the whole model (`initial_params`). At the step's
points it runs what _plan.py places around each unit:

    before a unit     forward: the entry operator's forward (f: identity, or SP's all-gather, keeping the shard);
                      the embedding's token ids shifted to the rank's vocabulary
                      backward: the exit operators' backward sides (g: identity, or SP's all-gather), and SP's
                      gather of the kept shard
                      the loss: the vocabulary-parallel statistics, three all-reduces (_cross_entropy.py)
    after a unit      forward: the exit operators' forward (g: all-reduce, or SP's reduce-scatter)
                      backward: the entry's backward (f: all-reduce, or SP's reduce-scatter)
    end of backward   SP: the sum over the TP group of the sequence-parallel parameters' gradients

Each returns the handles of its collectives, which the next compute names: TP's collectives sit on the critical path
(nothing overlaps them, as in Megatron without tp_comm_overlap and torchtitan without async TP). Everything it keeps
(SP's input shards) is born in the rank's ledger as activations.

`async_tp=True` is the bound of what overlapping them can give: the activations' collectives are still made (the
same calls, bytes and bits) but no compute waits for them, so the timeline runs them beside the GEMMs they feed —
what torchtitan's async TP (enable_async_tensor_parallel: torch's micro-pipelined all-gather / reduce-scatter
matmuls, torch/distributed/_symmetric_memory) and Megatron's --tp-comm-overlap (Transformer Engine's userbuffers)
approach by cutting each GEMM into pieces. It is an upper bound: the pieces' own latency and the contention for
NVLink and SMs are left out, as the timeline leaves them out everywhere.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from zerosim.cluster import Handle
from zerosim.parallel._contract import Parallelism
from zerosim.parallel.tensor import _communication as comm
from zerosim.parallel.tensor._bundle import Bundle
from zerosim.parallel.tensor._cross_entropy import VocabTarget, row_max, row_sums
from zerosim.parallel.tensor._meta import meta_twin
from zerosim.parallel.tensor._model import DEFAULT_LAYOUT, LAYOUTS, TensorParallelModel
from zerosim.parallel.tensor._plan import (
    COPY,
    GATHER,
    REDUCE,
    SCATTER_REDUCE,
    SPLIT,
    pack,
    packed_length,
    packed_pieces,
    placement,
    sequence_parallel_windows,
    shard_name,
    unpack,
)
from zerosim.parallel.tensor._slicing import local_flat, whole_flat

SHORT = {COPY: "f", REDUCE: "g", GATHER: "f (SP all-gather)", SCATTER_REDUCE: "g (SP reduce-scatter)",
         SPLIT: "SP scatter"}  # what the trace's tags call Megatron's operators


class TensorParallel(Parallelism):
    """Tensor parallelism of degree `tp` over `model` (a GPT or a Llama; or its MetaGPT / MetaLlama twin for the
    meta backend), with Megatron's sequence parallelism when `sequence_parallel`. `params`: the whole model's
    (P,) initial weights (default `model.init_params()`), cut into each rank's slice. `layout`: what a rank keeps
    for backward (_model.py LAYOUTS): "megatron" (the column GEMMs' input shard, gathered again) or "torchtitan"
    (torch DTensor's gathered input; on the meta backend with a twin's kernels="eager", every tensor torch's eager
    autograd saves, _eager.py). The layout moves memory and calls, never a bit: the same gathered input feeds the
    weight gradient either way.

        tp = TensorParallel(GPT(vocab=64, d_model=32, n_heads=4, n_layers=2, seq_len=16), tp=2)
        engine = ZeroEngine(tp.model, Cluster(4, gpus_per_node=2), 3, Adam(), "bf16-mixed", parallelisms=(tp,))
    """

    name = comm.PURPOSE
    # on the meta backend every micro-step makes its calls again alike, and the step's end only SP's grads: the
    # planner writes a step's second micro-step from its first (analysis/planner/_repeat.py)
    micro_steps_alike, step_end_tags = True, (comm.SP_GRADS,)

    def __init__(self, model, tp: int, sequence_parallel: bool = False, params=None, async_tp: bool = False,
                 layout: str = DEFAULT_LAYOUT):
        whole = getattr(model, "gpt", None)  # a meta twin's real model (MetaGPT.gpt, MetaLlama.gpt)
        self.meta = whole is not None
        self.full = whole if self.meta else model
        # tp = 1 is no tensor parallelism: the model itself, no hook does anything, every bit and call as without
        # it (Megatron's operators return their input on one rank; it turns sequence parallelism off then:
        # layers.py, ColumnParallelLinear: "`sequence_parallel` is set to `True`, but tensor model parallel size
        # is 1")
        if isinstance(tp, bool) or not isinstance(tp, (int, np.integer)) or tp < 1:
            raise ValueError(f"tp must be a positive integer (the GPUs of a TP group), got {tp!r}")
        self.tp = int(tp)
        for name, value in (("sequence_parallel", sequence_parallel), ("async_tp", async_tp)):
            if not isinstance(value, (bool, np.bool_)):  # bool("no") is True: a string is refused, not read as yes
                raise ValueError(f"{name} must be True or False, got {value!r}")
        self.sequence_parallel = bool(sequence_parallel) and self.tp != 1
        if layout not in LAYOUTS:
            raise ValueError(
                f"layout must be one of {tuple(LAYOUTS)} (what a TP rank keeps for backward: Megatron's "
                f"sequence shard, or torch DTensor's gathered input as torchtitan runs it), got {layout!r}"
            )
        self.layout = LAYOUTS[layout]
        self.local = None if self.tp == 1 else TensorParallelModel(self.full, tp, self.sequence_parallel, layout)
        self.model = model if self.local is None else (
            meta_twin(self.local, getattr(model, "tied_head", False), getattr(model, "kernels", "fused"),
                      getattr(getattr(model, "loss", None), "variant", None)) if self.meta else self.local)
        self.degrees = {"tp": self.tp}
        self.async_tp = bool(async_tp)  # the activations' collectives overlap compute (module docstring)
        if self.meta and params is not None:
            raise ValueError("a meta model has no values: give no params")
        # the whole model's initial (P,) weights; tp = 1 keeps only given ones (else the engine's own)
        self._whole = np.asarray(params) if params is not None else (
            None if self.meta or self.local is None else self.full.init_params())
        if self._whole is not None and self._whole.shape != (self.full.num_params,):
            raise ValueError(f"params must be the whole model's ({self.full.num_params},) vector, got "
                             f"{self._whole.shape}")
        self._slices = {}

    # -- before the step is built ---------------------------------------------------------------------
    @property
    def active(self) -> bool:
        return self.local is not None  # tp = 1: no tensor parallelism, nothing to refuse beside

    def initial_params(self, dims, rank: int):
        if self.meta or self.local is None:
            return self._whole  # tp = 1: the given weights on every rank, or None: the engine's own
        position = dims.groups("tp").position(rank)
        if position not in self._slices:
            self._slices[position] = local_flat(self.local, self._whole, self.full, position)
        return self._slices[position]

    def whole_params(self, ctx, held=None, buffer: str = "params"):
        """The whole model's (P,) weights joined from every TP rank's slice: `ctx` is the engine's frozen Context
        (`engine.ctx`), `held` each local rank's `buffer` as the engine holds it — its 16-bit params (the default),
        or its fp32 master region with buffer="master" (`engine.master_shards()`). Simulator only: every rank in
        this process."""
        cluster, layout, plan = ctx.cluster, ctx.layout, ctx.plan
        held = [r.params.array for r in cluster.ranks] if held is None else held
        if cluster.local_size != cluster.world_size:
            raise RuntimeError("joining the whole model needs every rank in this process (numpy backend)")
        tp, sharded = ctx.mesh.dims.groups("tp"), plan.shards(buffer)
        parts = []
        for position in range(self.tp):  # one shard group of each TP position holds its slice's shards once
            group = next(g for g in ctx.mesh.shard.members if tp.position(g[0]) == position)
            whole = np.concatenate([held[r] for r in group]) if sharded else held[group[0]]
            parts.append(np.array(layout.unarrange(whole)))
        return parts[0] if self.local is None else whole_flat(self.local, parts, self.full)

    # -- the step's points ----------------------------------------------------------------------------
    def batches(self, dims, per_data_rank: list) -> list:
        """Every rank's micro-batch(es) from the data-parallel ranks' (`dims`: the engine's `ParallelDims`): the T ranks
        of a TP group train on the same batch (Megatron broadcasts it over the group: tensor_parallel/data.py,
        `broadcast_data`)."""
        dp = dims.groups("dp")
        if len(per_data_rank) != dp.size:
            raise ValueError(f"{dp.size} data-parallel ranks train on a batch each (dp = N / tp), got "
                             f"{len(per_data_rank)} batches")
        return [per_data_rank[dp.position(r)] for r in range(dims.world_size)]

    def before_unit(self, ctx, passes, ops) -> Handle:
        if self.local is None:
            return Handle()
        op = ops[0]
        if op.kind == "loss":
            return self._loss_statistics(ctx, passes)
        if not op.computes:
            return Handle()
        unit = _unit(self.local, passes, op)
        place, group = placement(unit, self.sequence_parallel, self.layout.keeps_shard), ctx.mesh.dims.groups("tp")
        if op.kind == "backward":
            handle = Handle()
            for name in reversed(place.exit):
                handle += self._side(ctx, passes, "dy", unit, name, "backward", place.both_parts and name == SPLIT)
            if place.keeps_shard:
                handle += self._gather_kept(ctx, passes, unit, group)
            return handle
        if op.from_checkpoint:  # the activation is the checkpoint, saved after this hook ran in forward
            return Handle()
        if unit.role == "vocab":  # Megatron's masked_input = input_ - vocab_start_index
            _check_one_batch(ctx, passes, group)
            for p, rank in zip(passes, ctx.ranks):
                p.a = p.a - group.position(rank.index) * unit.vocab
        if place.entry is None:
            return Handle()
        if place.keeps_shard and op.save:  # the shard this unit's backward gathers again
            for p, rank in zip(passes, ctx.ranks):
                rank.ledger.adopt(p.saved.tag + shard_name(unit), _value(p.a), "activations")  # tag: the micro-batch
        return self._side(ctx, passes, "a", unit, place.entry, "forward")

    def after_unit(self, ctx, passes, ops) -> Handle:
        if self.local is None:
            return Handle()
        op = ops[0]
        if not op.computes or op.kind == "loss":
            return Handle()
        unit = _unit(self.local, passes, op)
        place = placement(unit, self.sequence_parallel, self.layout.keeps_shard)
        if op.kind == "backward":
            return self._side(ctx, passes, "dy", unit, place.entry, "backward") if place.entry else Handle()
        handle = Handle()
        for name in place.exit:
            handle += self._side(ctx, passes, "a", unit, name, "forward", place.both_parts and name == SPLIT)
        return handle

    def end_of_backward(self, ctx, reduced, model=None) -> Handle:
        """Sequence parallelism: each rank's gradients of the norms and row-parallel biases came from its L/T
        tokens; their sum over the TP group, in one coalesced all-reduce (Megatron's
        `_allreduce_non_tensor_model_parallel_grads`), each rank sending the part its region holds (_plan.py).
        `model`: the units the ranks' flat vector holds (a pipeline stage's), default the whole TP rank's."""
        if not self.sequence_parallel:
            return Handle()
        layout, windows = ctx.layout, sequence_parallel_windows(self.local if model is None else model)
        whole = len(reduced[0]) == layout.padded  # stage 0 holds the whole reduced buffer
        size = packed_length(layout, windows, whole)
        sends, places = [], []
        for rank, region in zip(ctx.ranks, reduced):
            pieces = packed_pieces(layout, rank.index, windows, whole)
            sends.append(pack(region, pieces, size))
            places.append(pieces)
        summed, handle = comm.all_reduce_sequence_parallel_grads(ctx.cluster, ctx.mesh.dims.groups("tp"), sends,
                                                                 comm.SP_GRADS)
        for region, pieces, total in zip(reduced, places, summed):
            unpack(total, pieces, region)
        return handle

    # -- helpers --------------------------------------------------------------------------------------
    def _side(self, ctx, passes, slot: str, unit, name: str, direction: str, both: bool = False) -> Handle:
        """One side of operator `name` on every local rank's activation (`slot` "a") or gradient ("dy")."""
        conj = comm.CONJUGATES[name]
        side = getattr(conj, direction)
        if side == "identity":
            return Handle()
        group = ctx.mesh.dims.groups("tp")
        tag = f"{unit.name} {SHORT[name]}" + (" backward" if direction == "backward" else "")
        xs = [getattr(p, slot) for p in passes]
        if not isinstance(xs[0], Bundle):
            ys, handle = comm.run_side(side, ctx.cluster, group, xs, tag)
            for p, y in zip(passes, ys):
                setattr(p, slot, y)
            return Handle() if self.async_tp else handle
        values, handle = comm.run_side(side, ctx.cluster, group, [x.value for x in xs], tag)
        residuals = [x.residual for x in xs]
        if both:  # the residual is cut too; backward, it is the add's very gradient: gathered once, shared
            if direction == "backward" and all(x.residual is x.value for x in xs):
                residuals = values
            else:
                residuals, more = comm.run_side(side, ctx.cluster, group, residuals, tag + " (positions)")
                handle += more
        for p, x, r, v in zip(passes, xs, residuals, values):
            setattr(p, slot, x.with_parts(r, v))
        return Handle() if self.async_tp else handle

    def _gather_kept(self, ctx, passes, unit, group) -> Handle:
        """SP: all-gather the input shard the unit's forward kept, hand it to the backward in `dy.input`, free it."""
        names = [p.saved.tag + shard_name(unit) for p in passes]  # the micro-batch's (a pipeline holds several)
        shards = [rank.ledger.get(name).array for rank, name in zip(ctx.ranks, names)]
        again = f"{unit.name} input again (SP all-gather)"
        full, handle = comm.run_side("all-gather", ctx.cluster, group, shards, again)
        for p, rank, h, name in zip(passes, ctx.ranks, full, names):
            rank.ledger.free(name)
            p.dy = replace(p.dy, input=h) if isinstance(p.dy, Bundle) else Bundle(None, p.dy, h)
        return handle

    def _loss_statistics(self, ctx, passes) -> Handle:
        """The vocabulary-parallel loss's max, predicted logit and sum of exponentials, all-reduced over the TP group;
        each rank's pass then reads a `VocabTarget` in place of its labels."""
        group = ctx.mesh.dims.groups("tp")
        vocab_r = self.local.layers[-1].vocab
        labels = [p.target - group.position(rank.index) * vocab_r for p, rank in zip(passes, ctx.ranks)]
        maxes, handle = comm.all_reduce_statistic(ctx.cluster, group, [row_max(p.a) for p in passes], "max",
                                                  "loss: logits max")
        fmt = ctx.policy.compute_format
        sums = [row_sums(p.a, lab, m, fmt) for p, lab, m in zip(passes, labels, maxes)]
        predicted, more = comm.all_reduce_statistic(ctx.cluster, group, [s[0] for s in sums], "sum",
                                                    "loss: predicted logits")
        handle += more
        exp_sums, more = comm.all_reduce_statistic(ctx.cluster, group, [s[1] for s in sums], "sum",
                                                   "loss: sum of exp")
        for p, lab, m, pr, s in zip(passes, labels, maxes, predicted, exp_sums):
            p.target = VocabTarget(lab, m, pr, s)
        return handle + more


def _unit(local, passes, op):
    """The unit `op` runs: of the model the engine runs (`Pass.model`), which is this TP rank's model, another
    parallelism's cut of its units (context parallelism cuts the attention region in two: parallel/context/), or the
    data-less twin of either (its real unit, `.unit`)."""
    unit = (passes[0].model if passes else local).layers[op.layer]
    return getattr(unit, "unit", unit)


def _value(a):
    return a.value if isinstance(a, Bundle) else a


def _check_one_batch(ctx, passes, group) -> None:
    """The ranks of a TP group compute one micro-batch together: refuse, naming them, ranks of one group handed
    different token ids or targets (where this process holds the whole group and the values)."""
    here = {rank.index: p for rank, p in zip(ctx.ranks, passes)}
    for members in group.members:
        held = [here[r] for r in members if r in here]
        if len(held) < 2 or getattr(held[0].a, "is_meta", False):
            continue
        for r, p in zip(members[1:], held[1:]):
            if not (np.array_equal(p.a, held[0].a) and np.array_equal(p.target, held[0].target)):
                raise ValueError(f"ranks {members[0]} and {r} form a TP group and compute one micro-batch together, "
                                 "but were handed different ones: give every rank its data-parallel rank's batch "
                                 "(TensorParallel.batches)")
