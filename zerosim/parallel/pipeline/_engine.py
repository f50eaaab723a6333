"""PipelineEngine: a model cut into stages over the pipeline ranks, trained through a schedule's table, each stage's
ranks a data-parallel job of their own.

Letters: N ranks, P = pp, T = tp, D = N / (P·T) data-parallel ranks a stage, V virtual stages a rank, S = P·V
stages, M micro-batches a step (Megatron's num_microbatches: every data-parallel rank's gradient accumulation).

    ParallelDims(N, pp=P, tp=T)      the mesh: pp outermost (torchtitan's order), so pipeline rank p holds the N/P
                                     ranks [p·N/P, (p+1)·N/P): a block of nodes, and the stages talk across nodes
    split(model, P, V)               which units each stage holds (_stages.py); rank p holds stages p, p+P, ...
    a ZeroEngine per pipeline rank   its stages' units (`StageModel`) on its N/P ranks (`StageCluster`, _views.py):
                                     ZeRO shards each stage over its D data-parallel ranks (beside TP: over the D
                                     ranks with its TP coordinate), exactly as the data-parallel step shards a model
    the table (_table.py)            run action by action: a forward is that stage's ZeroEngine running the stage's
                                     forward ops on a micro-batch (the data on stage 0, else the activation
                                     received), its output sent to the next stage (_communication.py); a backward
                                     runs the stage's backward ops from the gradient received (the loss's, on the
                                     last stage) and sends the input's gradient back
    the step's end                   each ZeroEngine's own: its reduction, checks, optimizer and refresh

Why not one `Parallelism` of the data-parallel step: the contract (parallel/_contract.py) acts between the units of
one micro-batch that every rank runs at once; a pipeline runs different units on different ranks at the same time,
micro-batches out of order (1F1B: F0 F1 B0 F2 B1 ...), and stages of different sizes, so it drives the data-parallel
step's phases itself (`ZeroEngine.stepping`, `computing`, `passes`, `run`, `reduce`, `finish`) and speaks to the
contract only where the step asks: its degree (`degrees = {"pp": P}`, so the data-parallel groups lie inside a
stage) and each rank's first weights (`initial_params`). docs/explanation/adding-a-parallelism.md says so.

What is refused, where the framework refuses (each message quotes it): DeepSpeed's pipeline engine with ZeRO-2 or
ZeRO-3 (`deepspeed-*` recipes: runtime/pipe/engine.py, PipelineEngine.__init__, 0.19.8 line 77); 1F1B with fewer
micro-batches than stages, the interleaved and zero-bubble schedules' rounds (torch, _schedules.py); a split that
does not divide (_stages.py). What zerosim does not model yet is refused too, saying so: a loss scaler that skips
steps, clipping (their decisions span every stage: DeepSpeed and Megatron all-reduce them over the pipeline group),
DDP's and DeepSpeed ZeRO-1's buckets of parameters with virtual stages, processes (MPI). ZeRO-3's gathers and
reduce-scatters run per micro-batch, as zerosim's stage 3 runs; torchtitan's FSDP2 under torch's pipelining instead
keeps the stage's parameters gathered over the step and reduce-scatters once after the last backward (torch 2.13
pipelining/stage.py `backward_maybe_with_nosync`): the strategy `no_reshard_no_sync` (parallel/data/_plan.py), which a
stage runs like any plan and which analysis/costs picks for ZeRO-3 with FSDP's schedule (_beside.py). At stages 0/1 a
`reduce_bucket_size` (Megatron's overlap_grad_reduce: CommSchedule.megatron) reduces each chunk's buckets in its last
micro-batch's backward. Sequence parallelism runs inside each stage: its norms' gradients summed over the TP group on
the stage's own flat vector (`_TensorStage.end_of_backward`).

On the meta backend one rank a stage may stand for its stage (`Cluster(N, backend="meta", hosted=...)`): its ledger is
every rank's of that stage, and its sends are recorded for every rank it stands for (a CP ring's inside the stage,
collectives/_send_recv.py; the activations and gradients handed between stages, collectives/_p2p.py), as a run that
hosts every rank records them (tests/test_pipeline_representative.py). Hosting one rank a stage or every rank, a
stage's ring collectives (ZeRO's, TP's) are counted in closed form on the stage's own ranks (`Trace.call_ranks`,
cluster/_closed.py): every rank's bytes, by collective, tier and step, are those the NumPy backend's rings send
(tests/test_pipeline_closed_form.py).
"""

from __future__ import annotations

from contextlib import ExitStack, nullcontext as _nothing
from dataclasses import replace

from zerosim.cluster import Cluster, Groups, Handle
from zerosim.models import split_backward
from zerosim.parallel._contract import Parallelism, Parallelisms
from zerosim.parallel._dims import ParallelDims
from zerosim.parallel.data import GradientRecipe, ZeroEngine, get_comm_schedule, get_plan, skips_steps
from zerosim.parallel.pipeline._communication import hand_on
from zerosim.parallel.pipeline._repeat import REPLAY, Records, applies, make_of
from zerosim.parallel.pipeline._schedules import DEFAULT_SCHEDULE, make_table
from zerosim.parallel.pipeline._stages import StageModel, split
from zerosim.parallel.pipeline._table import BACKWARD, FORWARD, INPUT, WEIGHT
from zerosim.parallel.pipeline._views import StageCluster
from zerosim.precision import get_precision

_WRITTEN_AGAIN = "written again"  # a micro-batch's passes where its forward was written from a record (_repeat.py)
DEEPSPEED_REFUSES = "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism"  # pipe/engine.py, PipelineEngine


class PipelineEngine:
    """Train `model` (an MLP, a GPT, a Llama; or their meta twins) cut into `pp` stages on `cluster`, through
    `schedule`'s table, with ZeRO `stage` over each stage's data-parallel ranks (see the module docstring).

    Args:
        model, cluster, stage, optimizer, precision: as for `ZeroEngine` (the whole model; all of the cluster's N
            ranks: N = pp · tp · data-parallel ranks).
        pp: P, the pipeline ranks (`ParallelDims.pp`).
        schedule: a name of SCHEDULES ("gpipe", "1f1b" (default, torchtitan's), "interleaved-1f1b", "zero-bubble").
        micro_batches: M micro-batches per data-parallel rank per step (Megatron's num_microbatches); default P.
        virtual_stages: V stages a rank (the schedule's default: 1, or 2 for the interleaved ones).
        split: "torchtitan" (default) or "megatron": where the layers are cut (_stages.py); `layers` instead gives
            the layers of each of the P·V stages.
        tensor: a `zerosim.parallel.tensor.TensorParallel` of `model`: tensor parallelism inside every stage.
        context: a `zerosim.parallel.context.ContextParallel` of `model` (of its data-less twin: the meta backend):
            context parallelism inside every stage, each stage's activations a sequence shard (L / C tokens), its
            ring (or all-gather) over the stage's CP groups, its gradients reduced over dp × cp (`_ContextStage`).
        params: the whole model's (P,) initial weights (default `model.init_params()`; with `tensor`, its own).
        checkpoint, comm, recipe, shard_group: each stage's ZeroEngine's.
        repeat: on the meta backend, write micro-batches 2 .. M - 2's actions again from micro-batch 1's instead of
            running them (_repeat.py: the same events, peaks and bytes); False runs every action.
        records_from: a PipelineEngine of the same job but for its micro-batches a step, after its one step: its
            records stand for this engine's first step's (`Records`' `carried`: none recorded anew).
        time_only: this run is read for its trace alone (its time: the planner's second point on a pipeline's line):
            where `records_from` kept a record of every action of its make, of its special ones and of each stage's
            step end, the first step writes them all again and runs none (_repeat.py); its ledgers are then not the
            run's (no buffer is made), nor its losses' values, and it takes no later step (its stages never ran).
    """

    def __init__(self, model, cluster, stage, optimizer, precision="fp16-mixed", *, pp: int, schedule: str =
                 DEFAULT_SCHEDULE, micro_batches: int | None = None, virtual_stages: int | None = None,
                 split_rule: str = "torchtitan", layers=None, tensor=None, params=None, checkpoint=None, comm=None,
                 recipe=None, shard_group=None, repeat: bool = True, context=None, records_from=None,
                 time_only: bool = False):
        if not isinstance(cluster, Cluster):
            raise TypeError(f"cluster must be a zerosim Cluster (e.g. Cluster(4)), got {cluster!r}")
        if records_from is not None and not isinstance(records_from, PipelineEngine):
            raise TypeError(f"records_from must be a PipelineEngine that ran one step, got {records_from!r}")
        tp = 1 if tensor is None else tensor.tp
        cp = 1 if context is None else context.cp
        self.dims = ParallelDims(cluster.world_size, pp=pp, tp=tp, cp=cp)  # every degree checked once, there
        self.table = make_table(schedule, self.dims.pp, pp if micro_batches is None else micro_batches,
                                virtual_stages)
        self.tensor = tensor if tensor is not None and tensor.local is not None else None
        self.context = context if context is not None and context.local is not None else None
        whole = model if self.tensor is None else self.tensor.model  # the TP rank's model (its units, its slice)
        if self.context is not None:  # the CP rank's (of the TP rank's, beside TP): its attention cut at the ring
            whole = self.context.model
        self.model, self.cluster, self.optimizer = model, cluster, optimizer
        P, M = self.dims.pp, self.table.micro_batches
        if P > 1:
            _check(cluster, stage, precision, recipe, comm, self.table, self.tensor, self.context)
        self.split = split(whole, P, self.table.virtual, split_rule, layers)
        initial = None if self.tensor is not None else (model.init_params() if params is None else params)
        self.stage_models, self.engines = [StageModel(whole, self.split, 0)], []
        if P == 1:  # no pipeline: the data-parallel step itself (`step`), call for call and bit for bit
            self.engines.append(ZeroEngine(whole, cluster, stage, optimizer, precision, checkpoint=checkpoint,
                                           params=initial, accumulation_steps=M, comm=comm, recipe=recipe,
                                           shard_group=shard_group,
                                           parallelisms=(() if tensor is None else (tensor,)) if self.context is None
                                           else self.context.parallelisms))
            return
        self.stage_models = []
        blocks = Groups.blocks(cluster.world_size, cluster.world_size // P, "stage")  # pp outermost: a block a stage
        self._blocks = [(members[0], members[-1] + 1) for members in blocks.members]  # ranks [lo, hi) of each stage
        for p in range(P):
            part = StageModel(whole, self.split, p)
            view = StageCluster(cluster, blocks.members[p], blocks)
            members = (_Stage(self.dims, part, self.tensor),) + (() if self.tensor is None else
                                                                (_TensorStage(self.tensor, part),)) + (
                () if self.context is None else (_ContextStage(self.context, part),))
            self.stage_models.append(part)
            self.engines.append(ZeroEngine(part, view, stage, optimizer, precision, checkpoint=checkpoint,
                                           params=None if initial is None else part.cut(initial),
                                           accumulation_steps=M, comm=comm, recipe=recipe, shard_group=shard_group,
                                           parallelisms=members))
        self._ops = [_chunk_ops(e.ops, part, self.table.stages) for e, part in zip(self.engines, self.stage_models)]
        self._names = [tuple(u.name for u in part.layers) for part in self.stage_models]
        on = bool(repeat) and applies(cluster)  # the meta backend: actions alike written again (_repeat.py)
        self._records = Records(on, self.table.order(), [make_of(p, e.layout) for p, e in zip(self.stage_models,
                                self.engines)], P, M, _Special(self.engines),
                                None if records_from is None else records_from._records, time_only) if on \
            else Records(False)

    @property
    def parallelisms(self) -> Parallelisms:
        """The parallelisms beside data parallelism inside each stage, as the data-parallel step runs them
        (`ZeroEngine.parallelisms`: TP's first, then CP's, ContextParallel.parallelisms): what a report reads of them
        (analysis/costs `positions_of`: the CP position whose blocks each hop's attention is timed by)."""
        if self.context is not None:
            return Parallelisms(self.context.parallelisms)
        return Parallelisms(() if self.tensor is None else (self.tensor,))

    @property
    def timed_model(self):
        """The model whose layers a report times this engine's computes by: every stage's whole (the TP or CP rank's
        twin beside them), of which `layer_units` says where each rank's layers lie."""
        return self.stage_models[0].whole

    def layer_units(self) -> list:
        """For each rank, the index in `timed_model`'s layers of each of its own layers (a rank's events name its
        stage model's layers: its chunks' units, in order; StageModel.units); None for every rank of one stage, whose
        layers are the whole's."""
        units = [None] * self.cluster.world_size
        for (lo, hi), part in zip(self._blocks if self.dims.pp > 1 else (), self.stage_models):
            units[lo:hi] = [part.units] * (hi - lo)
        return units

    # -- the step ---------------------------------------------------------------------------------------
    def step(self, batches) -> list:
        """One step: `batches[d]` is data-parallel rank d's M micro-batches [(x, target), ...] (every rank of its
        pipeline and TP group reads them: the first stage the inputs, the last the targets). Returns each data-
        parallel rank's loss, the mean over its micro-batches (as the last stage computed them)."""
        if self.dims.pp > 1 and self._records.written:  # its first step was written from records: nothing ran
            raise RuntimeError("this engine's step was written from another run's records (time_only): its stages "
                               "never ran, so it takes no later step; build an engine without time_only to train on")
        micro = self._check_batches(batches)
        if self.dims.pp == 1:  # one stage: every schedule runs the micro-steps in order (F0 B0 F1 B1 ... for 1F1B;
            # GPipe's F0 F1 .. B0 B1 .. accumulates in the same order, so no bit differs): the data-parallel step's
            dp, tp = self.dims.groups("dp"), self.dims.groups("tp")
            made = self.engines[0].step([micro[dp.position(r.index)] for r in self.cluster.ranks])
            return [made[r.index] for r in self.cluster.ranks if tp.position(r.index) == 0]
        passes, inbox, losses = {}, {}, {}
        last = [Handle() for _ in self.engines]
        self._records.clear()  # each step records its own (its first micro-batch waits for the last refresh)
        within = self.cluster.trace.within  # each stage's calls among its own ranks, at its own times
        with ExitStack() as stepping:  # each stage's step frame: its boundaries, its transients freed at the end
            steps = [stepping.enter_context(e.stepping()) for e in self.engines]
            with ExitStack() as computing:  # its labels, silent overflow, carried state: until the reductions
                for e, i in zip(self.engines, steps):
                    computing.enter_context(e.computing(i))
                for a in self.table.order():
                    with within(self._blocks[a.rank]):
                        self._act(a, micro, passes, inbox, losses, last)
                reduced = []
                for r, (h, block) in enumerate(zip(last, self._blocks)):
                    with within(block):
                        reduced.append(self._step_end("reduce", r, h))
            for r, (red, block) in enumerate(zip(reduced, self._blocks)):
                with within(block):
                    self._step_end("finish", r, red)  # each stage's optimizer and refresh, as ZeroEngine.step ends
        return self._mean_losses(losses)

    def _act(self, a, micro, passes: dict, inbox: dict, losses: dict, last: list) -> None:
        """Run action `a` of the table on its stage's ranks: its ZeroEngine runs the chunk's ops of that kind on the
        micro-batch's passes, waiting for what arrived; a forward's output and a backward's input gradient go on.
        On the meta backend an action alike one run before is written again from its record (_repeat.py)."""
        r, c, k = a.rank, a.stage // self.dims.pp, a.micro
        engine, ranks = self.engines[r], self.engines[r].cluster.ranks
        names, what = self._names[r], self._records.what(a)
        if a.kind == FORWARD:
            ins, needs = self._inputs(a, micro, inbox)
            if what == REPLAY:
                again = self._records.find(a)
                again.replay(k, needs, ranks, names, self.cluster.trace)
                passes[(a.stage, k)] = _WRITTEN_AGAIN
                out, made = again.handed_on(ranks), again.losses
            else:
                with self._records.record(a, self.cluster.trace, ranks, names, needs) or _nothing() as rec:
                    work = passes[(a.stage, k)] = engine.passes(ins, f"micro {k} stage {a.stage}: ")
                    engine.run(k, work, self._ops[r][c][FORWARD], needs)
                out, made = {rk.index: p.a for rk, p in zip(ranks, work)}, [p.loss for p in work]
                if rec is not None:
                    rec.sent, rec.losses = out, made
            if not self.table.is_last(a.stage):
                self._send(a, out, inbox, +1)
            else:
                losses[k] = made
            return
        work, needs = passes[(a.stage, k)], Handle()
        if a.kind != WEIGHT and not self.table.is_last(a.stage):  # the gradient from the next stage
            got, needs = inbox.pop((a.stage, "grad", k))
        if what == REPLAY:
            again = self._records.find(a)
            last[r] = again.replay(k, needs, ranks, names, self.cluster.trace) or last[r]
            sent = again.handed_on(ranks)
        else:
            if a.kind != WEIGHT and not self.table.is_last(a.stage):
                for rk, p in zip(ranks, work):
                    p.dy = got[rk.index]
            with self._records.record(a, self.cluster.trace, ranks, names, needs) or _nothing() as rec:
                made = engine.run(k, work, self._ops[r][c][a.kind], needs)
            last[r] = made or last[r]
            sent = {rk.index: p.dy for rk, p in zip(ranks, work)}
            if rec is not None:
                rec.sent = sent
                rec.returned(made)
        if a.kind != WEIGHT and not self.table.is_first(a.stage):
            self._send(a, sent, inbox, -1)
        if a.kind != INPUT:
            del passes[(a.stage, k)]

    def _step_end(self, part: str, r: int, waited):
        """Pipeline rank r's ZeroEngine's `reduce(waited)` (the last gradient reduction's handle) or `finish(waited)`
        (what `reduce` returned), run, or written again from the run whose records this one carries (_repeat.py
        `Records.written`: then `reduce` returns the handle its record's `finish` waited for, in place of a Reduced)."""
        engine, records = self.engines[r], self._records
        ranks, names, trace = engine.cluster.ranks, self._names[r], self.cluster.trace
        if records.written:
            return records.ended(part, r).replay(self.table.micro_batches - 1, waited, ranks, names, trace)
        after = waited if part == "reduce" else waited.waits
        with records.end(part, r, trace, ranks, names, after) or _nothing() as rec:
            made = engine.reduce(waited) if part == "reduce" else engine.finish(waited)
        if rec is not None and part == "reduce":
            rec.returned(made.waits)
        return made

    # -- helpers ----------------------------------------------------------------------------------------
    def _inputs(self, a, micro, inbox) -> tuple:
        """Each local rank of the action's engine: its (x, target) for the forward, and the handle it waits for."""
        engine = self.engines[a.rank]
        last = self.table.is_last(a.stage)
        dp = self.dims.groups("dp")
        if self.table.is_first(a.stage):
            xs = [micro[dp.position(rk.index)][a.micro][0] for rk in engine.cluster.ranks]
            needs = Handle()
        else:
            got, needs = inbox.pop((a.stage, "act", a.micro))
            xs = [got[rk.index] for rk in engine.cluster.ranks]
        targets = [micro[dp.position(rk.index)][a.micro][1] if last else None for rk in engine.cluster.ranks]
        return list(zip(xs, targets)), needs

    def _send(self, a, held: dict, inbox: dict, direction: int) -> None:
        """The activations (direction +1) or input gradients (-1) of action `a` from every rank of its stage to
        the neighbouring stage's ranks with the same data- and tensor-parallel coordinates."""
        pp = self.dims.groups("pp")
        to = a.stage + direction
        peers = {r: pp.group_of(r)[to % self.dims.pp] for r in held}
        what = "act" if direction > 0 else "grad"
        with self.cluster.trace.about(micro=a.micro, purpose="send activations" if direction > 0 else
                                      "send gradients", layers=()), \
                self.cluster.trace.within(self._blocks[a.rank], self._blocks[to % self.dims.pp]):
            got, handle = hand_on(self.cluster, held, peers, f"stage {a.stage} -> {to} micro-batch {a.micro} "
                                  f"{'activation' if direction > 0 else 'gradient'}")
        inbox[(to, what, a.micro)] = (got, handle)

    def _check_batches(self, batches) -> list:
        dp, M = self.dims.dp, self.table.micro_batches
        if not isinstance(batches, (list, tuple)) or len(batches) != dp or any(
                not isinstance(b, (list, tuple)) or len(b) != M for b in batches):
            raise ValueError(f"step takes the micro-batches of each of the {dp} data-parallel rank(s): a list of {dp} "
                             f"lists of {M} (x, target) pairs (micro_batches={M})")
        first = self.stage_models[0]
        for d, mine in enumerate(batches):
            for k, (x, target) in enumerate(mine):
                try:
                    first.check_batch(x, target)
                except ValueError as e:
                    raise ValueError(f"data-parallel rank {d}, micro-batch {k}: {e}") from None
        return [list(b) for b in batches]

    def _mean_losses(self, losses: dict) -> list:
        """Each data-parallel rank's mean loss over its micro-batches, from the last stage's ranks (TP position 0)."""
        import numpy as np

        last = self.engines[self.table.rank_of(self.table.stages - 1)].cluster.ranks
        dp, tp = self.dims.groups("dp"), self.dims.groups("tp")
        out = [None] * self.dims.dp
        for i, rk in enumerate(last):
            if tp.position(rk.index) == 0:
                per = [losses[k][i] for k in range(self.table.micro_batches)]
                out[dp.position(rk.index)] = float(per[0]) if len(per) == 1 else float(
                    np.mean(np.asarray(per, dtype=np.float64)))
        return out

    # -- looking inside ---------------------------------------------------------------------------------
    def full_params(self):
        """The whole model's (P,) 16-bit params, joined from the stages (simulator only; without TP)."""
        return self._join("params")

    def full_master(self):
        """The whole model's (P,) fp32 masters, joined from the stages (simulator only; without TP)."""
        return self._join("master")

    def _join(self, what: str):
        import numpy as np

        if self.tensor is not None:
            raise ValueError("with tensor parallelism, join each TP position's slice (engine.engines[p])")
        parts = [e.full_params() if what == "params" else e.full_master() for e in self.engines]
        out = np.zeros(self.model.num_params, parts[0].dtype)
        for part, mine in zip(self.stage_models, parts):
            part.join(out, mine)
        return out


class _Special:
    """Whether micro-batch k is special on pipeline rank r (`ZeroEngine.special_micro_step`), for the records' plan:
    the stage engines alone, not the PipelineEngine (a lambda over `self` made a cycle, so a finished meta run of
    ~10^5 objects waited for the cyclic collector)."""

    def __init__(self, engines: list):
        self.engines = engines

    def __call__(self, r: int, k: int) -> bool:
        return self.engines[r].special_micro_step(k)


def _chunk_ops(ops, part: StageModel, stages: int) -> list:
    """Per chunk c of a rank: {kind: the ops of its forward (and the loss, on the last stage), backward, backward-input
    and backward-weight on the chunk's units}, cut from its ZeroEngine's schedule of one micro-step (`ops`,
    models/_schedule.py): the ops before the loss, then the recompute and backward ops after it."""
    loss = next(i for i, op in enumerate(ops) if op.kind == "loss")
    out = []
    for j, (lo, hi) in zip(part.stage_ids, part.chunks):
        mine = [op for op in ops[:loss] if lo <= op.layer < hi] + ([ops[loss]] if j == stages - 1 else [])
        back = tuple(op for op in ops[loss + 1:] if lo <= op.layer < hi)
        inputs, weights = split_backward(part, back)  # the zero-bubble schedule's backward-input and -weight
        out.append({FORWARD: tuple(mine), BACKWARD: back, INPUT: inputs, WEIGHT: weights})
    return out


class _Stage(Parallelism):
    """The pipeline on one stage's ZeroEngine, through the step's contract: its degree (so the data-parallel groups
    lie inside the stage) and, beside TP, each rank's first weights (its TP slice's units of this stage)."""

    name = "pipeline"

    def __init__(self, dims, part: StageModel, tensor):
        self.degrees, self.part, self.tensor = {"pp": dims.pp}, part, tensor

    def initial_params(self, dims, rank: int):
        whole = None if self.tensor is None else self.tensor.initial_params(dims, rank)
        return None if whole is None else self.part.cut(whole)  # None: a meta model's, which hold no values


class _InsideStage(Parallelism):
    """A parallelism inside one stage (TP, CP): its points, each op as it sees one (`_sees`). A zero-bubble
    backward-input is a backward to it (the activations' gradients cross its operators, or travel its ring); a
    backward-weight moves no activation, so nothing of it runs."""

    def __init__(self, inner, part: StageModel, degrees: dict):
        self.inner, self.part, self.degrees = inner, part, degrees
        self._seen = {}  # a stage's op -> the op the inner parallelism sees (ops are frozen records: made once)

    def _sees(self, op):
        return replace(op, kind="backward") if op.kind == "backward-input" else op

    def _as_seen(self, ops) -> list:
        out = []
        for op in ops:
            if op not in self._seen:
                self._seen[op] = self._sees(op)
            out.append(self._seen[op])
        return out

    def before_unit(self, ctx, passes, ops) -> Handle:
        if ops[0].kind == "backward-weight":
            return Handle()
        return self.inner.before_unit(ctx, passes, self._as_seen(ops))

    def after_unit(self, ctx, passes, ops) -> Handle:
        if ops[0].kind == "backward-weight":
            return Handle()
        return self.inner.after_unit(ctx, passes, self._as_seen(ops))


class _TensorStage(_InsideStage):
    """Tensor parallelism inside one stage: the TP parallelism's points (it reads each unit from the stage's model the
    passes run, parallel/tensor/_parallelism.py `_unit`)."""

    name = "tensor parallel"

    def __init__(self, tensor, part: StageModel):
        super().__init__(tensor, part, {"tp": tensor.tp})
        self.tensor = tensor

    def end_of_backward(self, ctx, reduced) -> Handle:  # sequence parallelism: the stage's norms summed over TP
        return self.tensor.end_of_backward(ctx, reduced, self.part)


class _ContextStage(_InsideStage):
    """Context parallelism inside one stage: the CP parallelism's points (parallel/context/_parallelism.py), each op
    told its unit's index in the whole CP rank's model (`StageModel.units`), which the parallelism reads its unit and
    its positioned units by. A stage ends between layers (_stages.py), so a unit's ring (its hops, the K/V sent ahead
    of each) starts and ends in one stage's action; the ring's dK/dV travel with the activations' gradients."""

    name = "context parallel"

    def __init__(self, context, part: StageModel):
        super().__init__(context, part, {"cp": context.cp})
        self.context = context

    def _sees(self, op):
        kind = "backward" if op.kind == "backward-input" else op.kind
        return replace(op, layer=self.part.units[op.layer], kind=kind)


def refused_beside(stage, precision, recipe=None, comm=None) -> str | None:
    """Whose code refuses ZeRO `stage` beside a pipeline with `recipe` (a name, a GradientRecipe or None: the policy's
    for `precision`) and `comm` (a CommSchedule, a name or None), in words ("DeepSpeed's schedule"), or None where it
    runs: DeepSpeed's pipeline engine asserts the stage is below gradients, so DeepSpeed's recipes and DeepSpeed's
    schedule (its ZeRO optimizer) run at stages 0/1 only."""
    comm = get_comm_schedule(comm) if isinstance(comm, str) else comm
    name = GradientRecipe.of(get_precision(precision), recipe).reduction  # the recipe given, or the policy's
    if not get_plan(stage).shards("grads"):  # DeepSpeed: `< ZeroStageEnum.gradients` asserted
        return None
    if name.startswith("deepspeed"):
        return f"DeepSpeed's recipe {name!r}"
    return "DeepSpeed's schedule" if getattr(comm, "framework", None) == "deepspeed" else None


def check_beside(stage, precision, recipe=None, comm=None, virtual: int = 1, who: str | None = None) -> None:
    """What a pipeline refuses beside it at ZeRO `stage` (0-3) with `precision`, `recipe` (a recipe's name, a
    GradientRecipe or None: the policy's), `comm` (a CommSchedule or None) and `virtual` stages a rank, a ValueError
    quoting who refuses it (`who`: how the caller names the stage, e.g. the command line's flags):

      DeepSpeed's recipes ("deepspeed-*") or DeepSpeed's schedule (CommSchedule.deepspeed) at stages 2 and 3: its
          pipeline engine asserts the stage is below gradients (`refused_beside`)
      a loss scaler that skips steps: the overflow decision spans every stage (Megatron all-reduces found_inf over the
          pipeline group too); not modelled yet
      DDP's and DeepSpeed ZeRO-1's buckets of parameters at stages 0/1 with virtual stages: a bucket would span the
          chunks' backwards; not modelled yet (buckets of units, zerosim's and Megatron's, run: each chunk's own)
    """
    plan = get_plan(stage)
    name = GradientRecipe.of(get_precision(precision), recipe).reduction  # the recipe given, or the policy's
    whose = refused_beside(stage, precision, recipe, comm)
    if whose is not None:
        who = f"{whose} at stage {plan.stage} beside pipeline parallelism" if who is None else f"{who} with {whose}"
        raise ValueError(f"{who}: DeepSpeed refuses it: '{DEEPSPEED_REFUSES}' (DeepSpeed 0.19.8 "
                         "runtime/pipe/engine.py, PipelineEngine.__init__, line 77); Megatron's distributed "
                         "optimizer (stage 1) and torchtitan's FSDP (stage 3 with FSDP's schedule: --comm fsdp, "
                         "CommSchedule.fsdp()) run beside it")
    if skips_steps(get_precision(precision).make_scaler()):
        raise ValueError("a loss scaler that skips steps beside pipeline parallelism: the overflow decision spans "
                         "every stage (Megatron all-reduces found_inf over the pipeline group too); not modelled yet: "
                         "use a static loss scale (or bf16)")
    comm = get_comm_schedule(comm) if isinstance(comm, str) else comm
    bucketed = comm is not None and getattr(comm, "reduce_bucket_size", None) is not None or name == "ddp"
    by_parameter = GradientRecipe.of(get_precision(precision), recipe).rules.collective == "bucket all-reduce" \
        or name == "ddp"  # DDP's and DeepSpeed ZeRO-1's buckets, decided over the whole model (_buckets.py)
    if virtual > 1 and bucketed and by_parameter and not plan.reduces_per_unit:
        raise ValueError(f"reduction buckets of recipe {name!r} at stages 0/1 with virtual stages: its buckets of "
                         "parameters would span the chunks' backwards; not modelled yet (zerosim's and Megatron's "
                         "buckets of units run: each chunk's own in its last backward)")


def _check(cluster, stage, precision, recipe, comm, table, tensor, context=None) -> None:
    """What the pipeline refuses, before anything is made (the module docstring says why each)."""
    if cluster.local_size != cluster.world_size and cluster.backend.holds_values:
        raise NotImplementedError("the pipeline runs every rank in this process (the numpy backend; the meta backend "
                                  "may host a representative a stage); under processes (MPI) it is not modelled yet")
    blocks = Groups.blocks(cluster.world_size, cluster.world_size // table.pp, "stage")
    here = {r.index for r in cluster.ranks}
    empty = [s for s, members in enumerate(blocks.members) if not here & set(members)]
    if empty:
        raise ValueError(f"pipeline stage {empty[0]}'s ranks {blocks.members[empty[0]][0]}.."
                         f"{blocks.members[empty[0]][-1]} are not hosted: on the meta backend host one a stage "
                         "(Cluster(N, backend='meta', hosted=ParallelDims(N, pp=P, ...).groups('pp').group_of(0)))")
    check_beside(stage, precision, recipe, comm, table.virtual)
    if context is not None and not context.meta:
        raise NotImplementedError("context parallelism beside pipeline parallelism runs on the meta backend (memory "
                                  "and time, a data-less twin: ContextParallel(MetaGPT(...) or MetaLlama(...), cp)); "
                                  "on real numbers each rank's micro-batches would be its sequence shard: not "
                                  "modelled yet")
