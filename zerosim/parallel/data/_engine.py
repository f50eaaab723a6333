"""ZeroEngine: one training step of ZeRO stage 0, 1, 2 or 3, driven layer by layer across all local ranks.

`step` below is the algorithm (seeds 000/003/004); at stage 3 it reads

    for each micro-step k of K (gradient accumulation):
        for each op of the schedule (forward, loss, recompute, backward; one layer at a time):
            gather(layer)          all-gather the layer's params, one call over every rank   (_fetch.py, _gather.py)
            compute                the layer's forward or backward on every rank              (_compute.py)
            release(layer)         free the gathered copy (unless prefetch keeps it)          (_fetch.py)
            reduce_scatter(grads)  as backward finishes a layer (in buckets)                  (_buckets.py, _reduce.py)
    all_reduce_overflow            any inf/NaN on any rank? a MAX all-reduce; the scaler decides  (_step_checks.py)
        skip: nothing changes but the loss scale; the step ends here
    average                        g32 = cast_fp32(reduced) / (N·K) / S, as the recipe says   (_update.py)
    all_reduce_norm                clipping: SUM all-reduce of the shards' squares, g *= coef (_step_checks.py)
    update                         each rank updates its region in fp32, casts it to 16 bits  (_update.py)

and the plan (_plan.py) says what the other stages do instead: stages 0/1 keep gradients whole and
reduce them once backward is done (`reduce_gradients`: stage 0 all-reduces, stage 1 reduce-scatters);
stages 1/2 `refresh` the 16-bit params with an all-gather after the update.

No threads and no callbacks: a collective is one call over every local rank (all N in the simulator,
one under MPI) and returns a handle that the work waiting for it names. Everything that happens is a
typed event in `cluster.trace.log` (cluster/_events.py), every buffer goes through a rank's ledger, and
a rank's state lives on its `Rank`. The helpers take a small frozen `Context` (_context.py), never the
engine. Letters: P parameters, N ranks, K micro-steps, s the shard, Ψ = N*s the padded flat length.
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np

from zerosim._collector import fewer_collections
from zerosim._dataclass import dataclass
from zerosim.cluster import Cluster, Handle, StepBoundary, check_fits, gb
from zerosim.models import passes_of, schedule
from zerosim.optim import Optimizer, OptimizerRun, check_stored
from zerosim.parallel._contract import Parallelisms
from zerosim.parallel.data import _clipping as clipping
# the features beside the default step by their lazy faces (zerosim/_lazy.py): each loads when an engine first asks
from zerosim.parallel.data import muon, recipes, zeropp
from zerosim.parallel.data._batches import micro_batches
from zerosim.parallel.data._buckets import grad_buckets
from zerosim.parallel.data._carried import carry
from zerosim.parallel.data._comm_schedule import get_comm_schedule
from zerosim.parallel.data._compute import compute, runs
from zerosim.parallel.data._context import Context
from zerosim.parallel.data._fetch import KeptForStep, ParamFetcher
from zerosim.parallel.data._hooks import Hooks
from zerosim.parallel.data._plan import get_plan
from zerosim.parallel.data._reduce import reduce_gradients
from zerosim.parallel.data._state import check_given, check_namespace, init_rank, master_of, state_bytes
from zerosim.parallel.data._step_checks import all_reduce_norm, all_reduce_overflow
from zerosim.parallel.data._update import average, update
from zerosim.parallel.data.layouts import layout_for
from zerosim.parallel.data.multinode import DataMesh, check_recipe, check_sub_mesh, default_recipe
from zerosim.parallel.data.recipes import GradientRecipe, registration
from zerosim.precision import cast, get_precision


class ZeroEngine:
    """Train `model` on `cluster` with ZeRO `stage` (0-3), `optimizer` and a mixed-precision policy.

    Args:
        model: a `zerosim.models.Model` (TinyNet, MLP, ...).
        cluster: a `zerosim.Cluster`.
        stage: 0 (plain data parallel), 1 (shard optimizer state), 2 (+ gradients), 3 (+ parameters); or a
            strategy for many nodes by name (plan.STRATEGIES: "hsdp", "hsdp_no_sync", "mics", "mics_hierarchical",
            "hpz", "no_reshard", "reshard_to_group", "full_shard" = 3), each stage 3 with groups.
        optimizer: a `zerosim.optim` optimizer (Adam, AdamW, SGD, Lion, Adan, Muon, MuonAdamW: Muon's
            `sharding` says how stages 1-3 bring its matrices together, parallel/data/muon).
        precision: a preset name ("fp16-mixed", "bf16-mixed", "fp32", "fp16-pure", "bf16-pure", ...)
            or a `MixedPrecision` (its `grad_accum` sets the accumulation format).
        checkpoint: recompute activations in backward instead of keeping them (seed 004); None (default): as the
            model says (`model.checkpointing`: a GPT built with a checkpoint strategy; False for the others).
        params: initial fp32 weights (P,); default `model.init_params()`.
        accumulation_steps: K micro-batches per local rank per step (gradient accumulation).
        comm: when and in what pieces it communicates: a `CommSchedule` (bucket sizes, prefetch, overlap,
            under DeepSpeed's and FSDP's names), "deepspeed", "fsdp", or None (seed 004's schedule: one
            collective per unit, no prefetch). It changes the trace and the memory peaks, never a result bit — except
            where the recipe all-reduces each bucket whole (`ddp`'s `bucket_cap_mb`, `deepspeed-zero12`'s buckets).
        clip_grad: clip the gradient to this global L2 norm before the optimizer (torch's clip_grad_norm_
            max_norm, computed over the shards: _step_checks.py), or None.
        clip_norm: how that norm is summed: "shards" (default: each rank's shard's sum of squares, all-reduced, as
            ZeRO does) or "torch" (stage 0: torch's clip_grad_norm_, per-tensor norms then the norm of the norms,
            on every rank's whole gradient; parallel/data/_clipping.py says what of it is reproduced).
        recipe: how gradients are reduced and averaged: a `GradientRecipe` or a recipe's name ("seeds",
            "ddp", "deepspeed-zero12", "deepspeed-zero3", "fsdp2"); default the one the policy names (HSDP's and
            MiCS's framework's when it names none: "fsdp2", "deepspeed-zero3").
        states: {local rank index: {"params": a, "master": a, "optim.<name>": a}}: start every local rank
            from these arrays, adopted as they are, instead of from `params` (what `zerosim.checkpoint._load`
            passes; shapes and dtypes must be the ones the rank would allocate).
        hooks: `Hooks` replacing named pieces of the step (_hooks.py; the exercises plug in there).
        wire: a `zeropp.Wire`: stage 3's weight gathers in fewer bits (DeepSpeed's qwZ, torchao's fp8 all-gather),
            and/or its gradient reduction as DeepSpeed's qgZ (recipe "deepspeed-zero3", two or more nodes;
            _qgz_reduce.py).
        shard_group: S, the group size of a strategy that needs one: HSDP's and MiCS's shard group, hpZ's
            zero_hpz_partition_size, FSDP2's reshard_after_forward=S (default: the cluster's GPUs per node).
        parallelisms: other parallelisms run beside data parallelism, each a `zerosim.parallel.Parallelism` acting at
            the step's four points (parallel/_contract.py); none by default.

    The loss scaler (static, torch's or DeepSpeed's: the policy's `loss_scale`) is `engine.scaler`; `engine.t`
    counts optimizer steps (a skipped step takes none), `engine.iteration` the calls of `step`.
    """

    def __init__(self, model, cluster, stage: int, optimizer, precision="fp16-mixed", checkpoint: bool | None = None,
                 params=None, accumulation_steps: int = 1, comm=None, clip_grad: float | None = None, recipe=None,
                 states: dict | None = None, hooks: Hooks | None = None, wire=None, shard_group: int | None = None,
                 clip_norm: str = "shards", parallelisms=()):
        if not isinstance(cluster, Cluster):  # first: an int failed later, as an AttributeError naming nothing
            raise TypeError(f"cluster must be a zerosim Cluster (e.g. Cluster(4)), got {cluster!r}")
        checkpoint = _checkpointing(model, checkpoint)
        plan = Parallelisms(parallelisms).place(get_plan(stage))  # offload: where each buffer lives (device by default)
        _check_arguments(model, optimizer, accumulation_steps, plan)
        self.model, self.cluster, self.stage_number, self.plan = model, cluster, plan.stage, plan
        self.optimizer, self.checkpoint, self.accumulation_steps = optimizer, checkpoint, accumulation_steps
        self.parallelisms = Parallelisms(parallelisms)  # beside data parallelism, through the contract
        self._choose(precision, comm, clip_grad, clip_norm, recipe, shard_group, wire)  # formats, recipe, groups
        self.hooks = hooks if hooks is not None else Hooks()
        self.scaler = self.precision.make_scaler()  # the loss scale S of the next step, and its state machine
        self._lay_out(states)  # how buffers are cut, the schedule; what fits and what was given, checked
        own, padded = self._initial_weights(params, states)
        self.ctx = self._context(wire)
        self.t = 0  # optimizer steps taken
        self.optimizer_run = OptimizerRun()  # where this engine's run of steps began (a resume: past 1)
        self.iteration = 0  # calls of step() that ran to the end, skipped ones included (DeepSpeed's global_steps)
        self._refresh = Handle()  # the last refresh all-gather: the next step's first computation waits for it
        self._kept = KeptForStep(accumulation_steps)  # the units a plan keeps for the step (FSDP2 beside PP)
        self.ddp_rebuilt = False  # DDP's Reducer::rebuild_buckets has run: after this engine's first synced backward
        with cluster.phase("init"):
            for rank in cluster.ranks:
                init_rank(rank, plan, self.layout, self.precision, self.recipe, optimizer, own.get(rank.index, padded),
                          None if states is None else states[rank.index])
        self.parallelisms.setup(self.ctx)
        for rank in cluster.ranks:
            rank.ledger.reset_peaks()

    def _choose(self, precision, comm, clip_grad, clip_norm: str, recipe, shard_group, wire) -> None:
        """The schedule, clipping, formats, gradient recipe and groups, each checked against the plan, the other
        parallelisms and each other before anything is allocated."""
        plan, optimizer, cluster = self.plan, self.optimizer, self.cluster
        self.comm = get_comm_schedule(comm).under(plan)  # the framework's overlap default read in
        self.clip_grad, self.clip_norm = clipping.check_max_norm(clip_grad), clipping.check_norm(clip_norm)
        if self.clip_norm == "torch" and plan.sharded:
            raise ValueError(f"clip_norm='torch' is clip_grad_norm_ on a whole gradient, which only stage 0 holds on a "
                             f"rank; at stage {plan.stage} use clip_norm='shards' (the shards' sums, all-reduced)")
        self.precision = get_precision(precision)
        check_stored(optimizer, self.precision.state_format, self.precision.update_format)  # 16-bit state: elementwise
        self.recipe = GradientRecipe.of(self.precision, default_recipe(plan, self.precision, recipe))
        self.recipe.check(plan, self.precision, self.comm.reduce_bucket_size is not None)
        if plan.reshard.keeps_for_step and self.recipe.reduction == "fsdp2":
            raise NotImplementedError(f"{plan.name} with recipe 'fsdp2': FSDP2's per-parameter reduce-scatter of the "
                                      "accumulated gradient after the last backward is not modelled yet; it runs with "
                                      "zerosim's flat layout (recipe 'seeds', the default)")
        self.parallelisms.check_recipe(self.recipe)  # e.g. offload: one framework's, not under another's recipe
        # the plan on these ranks beside the other parallelisms' dims: its degrees (ParallelDims), its group, the
        # nodes (multinode/_data_mesh.py)
        self.mesh = DataMesh.of(plan, cluster.world_size, cluster.gpus_per_node, shard_group,
                                **self.parallelisms.degrees)
        self.groups = self.mesh.groups(cluster.world)  # the world, or the strategy's groups (_groups.py)
        self.dims = self.mesh.dims  # ParallelDims: the degrees those groups come from
        check_recipe(plan, self.recipe)
        recipes.check_engine(self.recipe, optimizer, self.clip_grad)
        muon.check_matrix_optimizer(optimizer, plan, self.recipe)  # Muon's sharding fits these shards
        check_sub_mesh(self.dims, self.recipe, optimizer, clip_grad, wire)  # what runs over the world alone
        check_namespace(cluster.backend.xp, self.precision, self.recipe)  # bf16 on CuPy: the ring, not the models

    def _lay_out(self, states) -> None:
        """How every sharded buffer is cut (_flat.py or _partition.py, over the world or each shard group), the order
        one micro-batch visits the layers; refused before any large allocation if the model states cannot fit, or if
        `states` were given in shapes the ranks would not allocate."""
        model, cluster, plan = self.model, self.cluster, self.plan
        self.layout = layout_for(model, cluster.world_size, self.recipe, cluster.backend, self.groups.shard)
        self.ops = schedule(model, self.checkpoint)  # the order one micro-batch visits the layers
        self.end_reduction = plan.end_reduction(self.optimizer.elementwise)  # None: reduce-scattered unit by unit
        check_engine_fits(model, cluster.world_size, cluster.local_size, plan.stage, self.optimizer, self.precision,
                          cluster.backend.available_bytes(), self.recipe, self.groups.shard.size)
        for rank in cluster.ranks if states is not None else ():
            check_given(rank.index, plan, self.layout, self.precision, self.recipe, self.optimizer,
                        states.get(rank.index, {}))

    def _initial_weights(self, params, states) -> tuple:
        """({rank index: (Ψ,) padded weights} a parallelism gives ranks of their own (tensor parallelism: each TP
        rank's slice), the (Ψ,) padded weights of every other rank, float64 or float32); neither when `states` are
        given."""
        here = [r.index for r in self.cluster.ranks]
        own = {} if states is not None else self.parallelisms.initial_params(self.dims, here)
        if own and params is not None:
            raise ValueError(f"params= and a parallelism that gives every rank its own weights "
                             f"({', '.join(m.name for m in self.parallelisms.members)}): give the weights to it")
        padded = self._initial_padded(params) if states is None and len(own) < self.cluster.local_size else None
        laid = {}  # one padded copy per distinct vector (the TP ranks of one slice share theirs)
        for r, w in own.items():
            own[r] = laid[id(w)] = laid[id(w)] if id(w) in laid else self._initial_padded(w)
        return own, padded

    def _context(self, wire) -> Context:
        """The frozen record every helper of the step reads (_context.py), `wire` checked first."""
        model, plan = self.model, self.plan
        if wire is not None:
            if not isinstance(wire, zeropp.Wire):
                raise TypeError(f"wire must be a zerosim.parallel.data.zeropp._wire.Wire, got {wire!r}")
            wire.check(plan, self.layout, getattr(model, "specs", ()))
            zeropp.check_qgz_engine(wire, plan, self.recipe, self.precision, self.cluster, getattr(model, "specs", ()))
        names = tuple(x.name for x in model.layers)
        return Context(self.cluster, plan, self.layout, self.precision, self.recipe, names, groups=self.groups,
                       bucket_limit=self.comm.reduce_bucket_size, params=tuple(registration(model.specs)),
                       ddp_caps=self.comm.ddp.caps,
                       wire=None if wire is None else zeropp.WireState(wire, specs=tuple(getattr(model, "specs", ()))))

    def _initial_padded(self, params) -> np.ndarray:
        """(Ψ,) the initial weights in the layout's shard order, zero padding: float64, or float32 when they are
        fp32 already (a cast from fp32 rounds once too, and the copy is half the size). Checked before anything
        is allocated."""
        model, backend = self.model, self.cluster.backend
        init = model.init_params() if params is None else params
        if not hasattr(init, "dtype"):  # a list of numbers; an array (NumPy's, or the meta backend's: a stage's cut of
            init = np.asarray(init)     # a meta model's weights) is taken as given
        if init.shape != (model.num_params,):
            raise ValueError(f"params must have shape ({model.num_params},) for this model, got {init.shape}")
        if not backend.all_finite(init):
            raise ValueError("initial params contain NaN or inf")
        wide = np.float32 if init.dtype == np.float32 else np.float64
        padded = self.layout.arrange(backend.asarray(init, wide), empty=backend.empty)  # the backend's arrays
        if not backend.all_finite(cast(padded, self.precision.compute_format)):
            raise ValueError(f"initial params overflow {self.precision.compute}: its largest finite value is "
                             f"{self.precision.compute_format.max:g}, the params reach {np.abs(init).max():g}")
        return padded

    # -- the step --------------------------------------------------------------------------------
    def step(self, batches) -> list:
        """One training step on `batches`: per local rank one (x, target) micro-batch, or a list of K of them.
        Returns each local rank's loss (unscaled; the mean over its micro-batches). Malformed batches raise before
        any state changes; an overflow raises FloatingPointError (a static loss scale) or skips the step (a
        dynamic one: nothing changes but the scale)."""
        K = self.accumulation_steps
        micro = micro_batches(self.model, self.cluster, batches, K)  # micro[i][k]: (x, target)
        with self.stepping() as i:
            with self.computing(i):  # NOTE: a 16-bit overflow in backward is silent, as on a GPU: found in `reduce`
                losses, last = zip(*(self._micro_step(k, [m[k] for m in micro]) for k in range(K)))
                reduced = self.reduce(last[-1])  # stage 0: all-reduce, 1: reduce-scatter; the overflow, the norm
            self.finish(reduced)  # the optimizer on each rank's region, then the refresh (stages 1/2)
        return [_mean_loss(per_rank) for per_rank in zip(*losses)]

    def _micro_step(self, k: int, batches: list) -> tuple:
        """Micro-step k: every op of the schedule, unit by unit, on every local rank -> (losses, last grad handle)."""
        passes = self.passes(batches)
        last = self.run(k, passes, self.ops)
        return [work.loss for work in passes], last

    # -- the step's phases: `step` runs them in order; an engine that drives micro-batches itself (a pipeline
    # stage, parallel/pipeline) calls them one by one --------------------------------------------------------------
    @contextmanager
    def stepping(self):
        """One step's frame, yielding its iteration number i: its `StepBoundary` events, and every buffer the step
        allocated freed at its end, whether it ends or raises (refused: no "end" boundary); the cyclic collector
        looking less often meanwhile (zerosim/_collector.py: the thousands of records a step keeps a while)."""
        i, trace = self.iteration + 1, self.cluster.trace
        with fewer_collections():
            trace.record(StepBoundary(i, "begin", self.accumulation_steps))
            try:
                yield i
            finally:
                _free_transients(self.cluster.ranks)  # nothing of a step stays behind but the model states
            trace.record(StepBoundary(i, "end", self.accumulation_steps))  # (the window folds here)

    @contextmanager
    def computing(self, i: int):
        """Around the micro-steps and the reduction of iteration i: the trace's step label, 16-bit overflow left
        silent (the overflow check finds it), and the wire's carried state put back if the step is refused."""
        with self.cluster.trace.about(step=i), np.errstate(over="ignore", invalid="ignore"), carry(self.ctx):
            yield

    def passes(self, batches: list, tag: str = "") -> list:
        """A `Pass` per local rank for its micro-batch `batches[i]` = (x, target) (x: the data, or the activation a
        pipeline stage received; target None where no loss runs); `tag` names what it keeps apart from another
        micro-batch's in flight on the same rank (models/_run.py)."""
        ledgers = [rank.ledger for rank in self.cluster.ranks]
        return passes_of(self.model, batches, self.precision.compute_format, ledgers,
                         loss_scale=self.scaler.scale, keep_values=self.cluster.trace.keep_values, tag=tag)

    def run(self, k: int, passes: list, ops, needs=Handle()) -> Handle:
        """`ops` (this engine's schedule of a micro-step, or a part of it) of micro-step k on every local rank, unit
        by unit, their first compute also waiting for `needs`. Returns the handle of its last gradient reduction."""
        ctx, model, plan, trace, more = self.ctx, self.model, self.plan, self.cluster.trace, self.parallelisms
        params = ParamFetcher(ctx, self.comm, model, ops, self._kept, k) if plan.gathers_params else None  # stage 3
        grads = self._grad_buckets(k) if any(op.makes_grads for op in ops) else None  # stages 2/3, 0/1 in buckets
        waits = needs + (trace.live(self._refresh) if k == 0 else Handle())  # the first compute: the last refresh
        with self.cluster.phase("forward/backward"), trace.about(micro=k):
            for i, unit in runs(ops, alone=params is not None or grads is not None or more.per_unit):
                gathered = params.gather(i) if params else Handle()  # stage 3: all-gather the layer it reads
                needs = gathered + waits + more.before_unit(ctx, passes, unit)
                compute(ctx, model, passes, unit, needs, self.iteration + 1, k)
                waits = waits if not any(op.computes for op in unit) else Handle()
                if gathered:
                    params.release(i)  # stage 3: free the gathered layer (unless needed again soon)
                if unit[-1].makes_grads and grads is not None:
                    grads.reduce(unit[-1].layer)  # stages 2/3: reduce_scatter(grads) of the layer, in buckets
                waits += more.after_unit(ctx, passes, unit)  # e.g. tensor parallelism's all-reduce of the output
            if params:
                params.release_all()
            return grads.flush() if grads is not None else Handle()

    def reduce(self, last: Handle) -> "Reduced":
        """After the last micro-step's backward (`last`: its last gradient reduction), labelled that micro-step's like
        `finish`: stage 0's all-reduce or 1's reduce-scatter, the overflow check, the average, the norm to clip by."""
        ctx, phase, i, K = self.ctx, self.cluster.phase, self.iteration + 1, self.accumulation_steps
        last_micro = self.cluster.trace.about(micro=K - 1)  # the calls of the step's end (the scaler's decision too)
        with phase("reduce gradients"), last_micro:
            waits, reduced = reduce_gradients(ctx, self.end_reduction, self._bucketed(K - 1), last)
            waits += self.parallelisms.end_of_backward(ctx, reduced)  # e.g. offload: the shard to host
        with phase("optimizer step"), last_micro:
            decision, checked = all_reduce_overflow(ctx, reduced, self.scaler, i, self.t)
            grads32 = None
            if not decision.skip:
                grads32 = average(ctx, reduced, K, decision.scale_before, self.hooks.finish)
                if self.clip_grad is not None:  # global norm over the shards, then g *= clip_coef
                    checked += all_reduce_norm(ctx, grads32, self.clip_grad, i, self.clip_norm)
        return Reduced(decision, reduced, grads32, waits + checked)

    def finish(self, reduced: "Reduced") -> None:
        """The step's end: the optimizer on every rank's region and the 16-bit params refreshed (stages 1/2), unless
        the loss scaler skipped the step (masters, optimizer state, t and the 16-bit params stay as they were)."""
        ctx, phase, trace, i, K = self.ctx, self.cluster.phase, self.cluster.trace, self.iteration + 1, \
            self.accumulation_steps
        self.iteration, self.ddp_rebuilt = i, self.ddp_rebuilt or self._bucketed(K - 1)  # DDP: after a backward
        if reduced.decision.skip:
            return
        self.t += 1
        with phase("optimizer step"), trace.about(step=i, micro=K - 1):
            update(ctx, self.optimizer, self.model.specs, reduced.grads32, reduced.reduced, self.t,
                   needs=reduced.waits, first_step=self.optimizer_run.at(self.t))
        with phase("refresh params"), trace.about(step=i, micro=K - 1):  # stages 1/2: all-gather params
            self._refresh = self.parallelisms.after_update(ctx)  # e.g. offload: the new shard to the device
            if self.plan.refresh_after_update:
                self._refresh += self.hooks.refresh(ctx, self.comm.allgather_bucket_size)

    def _grad_buckets(self, k: int):
        """Micro-step k's `GradBucket` (_buckets.py): how its gradients travel during backward, or None when they
        wait for the end of backward (stages 0/1 without buckets)."""
        if not self._bucketed(k):
            return None
        plan, last = self.plan, k == self.accumulation_steps - 1
        return grad_buckets(self.ctx, self.comm.reduce_bucket_size, k == 0,
                            None if plan.reduces_per_unit else self.end_reduction, self.hooks.reduce_unit,
                            last if plan.replicate else None, self.ddp_rebuilt)

    def special_micro_step(self, k: int) -> bool:
        """Whether micro-step k's collectives differ from a middle micro-step's (a pipeline writes those again on the
        meta backend, parallel/pipeline/_repeat.py): the first (its backward makes the accumulation buffers, its
        first compute waits for the last refresh), and the last where it closes buckets (stages 0/1), the replicas
        agree (HSDP) or the units kept for the step are freed (FSDP2 beside a pipeline)."""
        last = k == self.accumulation_steps - 1
        return k == 0 or last and (self.plan.replicate is not None or self.plan.reshard.keeps_for_step
                                   or self._bucketed(k) != self._bucketed(1))

    def _bucketed(self, k: int) -> bool:
        """Whether micro-step k's gradients travel during backward: always at stages 2/3; at stages 0/1 with a
        reduce_bucket_size, the end-of-backward collective in buckets during the last micro-step."""
        bucketed = self.comm.reduce_bucket_size is not None or self.recipe.reduction == "ddp"  # DDP always buckets
        bucketed &= self.recipe.rules.collective != "aligned all-reduce"  # BF16_Optimizer: one call, at the end
        return self.plan.reduces_per_unit or (bucketed and k == self.accumulation_steps - 1)

    # -- looking inside (notebooks and tests may look at any rank) -------------------------------
    def region(self, rank_index: int) -> slice:
        """The part of the padded flat vector rank `rank_index` updates: its shard, or everything at stage 0."""
        return self.plan.region(self.layout, rank_index)

    def master_shards(self) -> list:
        """Each local rank's fp32 master region (its shard; the whole buffer at stage 0)."""
        return [master_of(r, self.plan, self.layout, self.precision).copy() for r in self.cluster.ranks]

    def optimizer_shards(self) -> list:
        """Each local rank's optimizer state {name: array} over the same region as `master_shards`."""
        return [{k: v.array.copy() for k, v in r.optim.items()} for r in self.cluster.ranks]

    def compute_params(self, i: int) -> np.ndarray:
        """Local rank i's 16-bit params as it holds them (full flat buffer at stages 0-2, its shard at stage 3)."""
        return self.cluster.ranks[i].params.array.copy()

    def full_master(self, rank: int | None = None) -> np.ndarray:
        """The whole fp32 master vector (P,), assembled from the local ranks (simulator only): as the shard group of
        rank `rank` holds it (default: the first local rank's; beside tensor parallelism each TP position's group
        holds its own slice)."""
        return self._assemble([master_of(r, self.plan, self.layout, self.precision) for r in self.cluster.ranks],
                              "master", rank)

    def full_optimizer_state(self, rank: int | None = None) -> dict:
        """{state name: (P,) array} assembled from the local ranks (simulator only), as `full_master`."""
        return {k: self._assemble([r.optim[k].array for r in self.cluster.ranks], "optimizer", rank)
                for k in self.optimizer.state_names}

    def full_params(self, rank: int | None = None) -> np.ndarray:
        """The whole 16-bit params vector (P,): rank 0's copy where ranks hold it whole, else the shards joined (of
        rank `rank`'s shard group, as `full_master`)."""
        return self._assemble([r.params.array for r in self.cluster.ranks], "params", rank)

    def _assemble(self, held: list, buffer: str, rank: int | None = None) -> np.ndarray:
        """(P,) model order from each local rank's `buffer` as the plan has them held: one rank's copy, or the shards
        of one shard group (the first local rank's, or `rank`'s; the others hold replicas or other slices)."""
        here = {r.index: i for i, r in enumerate(self.cluster.ranks)}
        first = self.cluster.ranks[0].index if rank is None else rank
        if not self.plan.shards(buffer):
            return np.array(self.layout.unarrange(held[here[first]]))
        group = self.groups.shard.group_of(first)  # one shard group holds every shard once (the others: replicas)
        if any(r not in here for r in group):
            raise RuntimeError("assembling the whole vector needs every rank in this process (numpy backend)")
        return np.array(self.layout.unarrange(np.concatenate([held[here[r]] for r in group])))


@dataclass(frozen=True)
class Reduced:
    """What `ZeroEngine.reduce` hands `finish`: the loss scaler's decision, each local rank's reduced gradient (its
    region), the averaged fp32 gradients (None when the step is skipped) and the handles the update waits for."""

    decision: object
    reduced: list
    grads32: list | None
    waits: Handle


def _checkpointing(model, checkpoint) -> bool:
    """Whether activations are recomputed: `checkpoint`, or the model's own strategy when None (GPT(checkpoint=
    "block") checkpoints without being told twice)."""
    if checkpoint is None:
        checkpoint = bool(getattr(model, "checkpointing", False))
    if not isinstance(checkpoint, (bool, np.bool_)):  # bool("no") is True: a string is refused, not read as a flag
        raise TypeError(f"checkpoint must be True, False or None (the model's own strategy), got {checkpoint!r}")
    return checkpoint


def _check_arguments(model, optimizer, accumulation_steps, plan) -> None:
    """The optimizer, the model and K are what the engine can run, and the optimizer runs at the plan's stage."""
    if not isinstance(optimizer, Optimizer):
        raise TypeError("optimizer must be a zerosim.optim optimizer (e.g. Adam(lr=1e-3) or "
                        f"get_optimizer('adam')), got {optimizer!r}")
    if not hasattr(model, "layers") or not hasattr(model, "num_params"):
        raise TypeError(f"model must be a zerosim.models.Model (e.g. MLP([16, 64, 4])), got {model!r}")
    if type(accumulation_steps) is not int or accumulation_steps < 1:
        raise ValueError(f"accumulation_steps must be a positive integer, got {accumulation_steps!r}")
    optimizer.check_stage(plan.stage)


def _free_transients(ranks) -> None:
    """Free every buffer a step allocated and still holds (activations, gathered layers, layer gradients,
    staging, the reduced gradient's wire-format copy), keeping each rank's model states."""
    for rank in ranks:
        keep = {id(b) for b in rank.model_states()}
        for buf in list(rank.ledger.live.values()):
            if id(buf) not in keep and not buf.name.startswith(zeropp.LOCO):  # LoCo's error buffers outlive the step
                buf.free()


def check_engine_fits(model, world_size: int, local_size: int, stage: int, optimizer, precision, have,
                      recipe=None, shards: int | None = None) -> None:
    """Raise `OutOfMemory` before anything is allocated if the model states of the `local_size` ranks this
    process hosts (and the initial weights) cannot fit in `have` bytes (None: no limit, the meta backend).
    `shards`: how many shards a sharded buffer is cut in (HSDP's and MiCS's S; default N)."""
    plan, policy = get_plan(stage), get_precision(precision)
    recipe = GradientRecipe.of(policy, recipe)
    layout = layout_for(model, world_size if shards is None else shards, recipe)
    per_rank = state_bytes(plan, layout, policy, recipe, optimizer)
    check_fits(12 * layout.padded + local_size * per_rank,  # + the fp32 init (P,) and its float64 padded copy
               f"ZeRO-{stage} for {model.num_params:,} parameters on {local_size:,} rank(s) in this process "
               f"({gb(per_rank)} of model states per rank, plus the initial weights)",
               "account it without allocating on the meta backend (Cluster(N, backend='meta'), zerosim memory)", have)


def _mean_loss(per_rank: tuple) -> float:
    """A rank's loss: the mean over its micro-batches (one micro-batch: its loss as it is, np.mean of one value being
    that value; at 64 ranks np.mean's calls cost 0.3 ms a step)."""
    return float(per_rank[0]) if len(per_rank) == 1 else float(np.mean(np.asarray(per_rank, dtype=np.float64)))
