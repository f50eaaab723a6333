"""ZeroEngine: one training step of ZeRO stage 0, 1, 2 or 3, driven layer by layer across all local ranks.

The step (seeds 000/003/004), as `step` below reads:

    for each micro-step k of K (gradient accumulation):
        for each op of the schedule (forward, loss, recompute, backward; one layer at a time):
            stage 3: all-gather the layer's params, one call over every rank     (gather.py)
            the layer's compute on every rank                                    (models/run.py)
            stage 3: free the gathered copy; after backward, stage 2/3: reduce-scatter
            the layer's gradients at once, or stage 0/1: keep them locally       (reduce.py)
    stage 0: all-reduce the gradients; stage 1: reduce-scatter them               (reduce.py)
    did any rank's gradient overflow? MAX all-reduce of a flag; the scaler decides (step_checks.py)
        skip: nothing changes but the loss scale; the step ends here
    g32 = cast_fp32(reduced) / (N·K) / S, as the policy's recipe says             (averaging.py)
    clipping: SUM all-reduce of the shards' squares, g32 *= clip_coef             (step_checks.py)
    each rank updates its region in fp32 and casts it back to 16 bits            (update.py)
    stage 1/2: all-gather the new 16-bit params                                   (gather.py)

No threads and no callbacks: a collective is one call over every local rank (all N in the
simulator, one under MPI), so the same code runs on every backend. Everything that happens is a
typed event in `cluster.trace.log` (cluster/events.py), every buffer goes through a rank's ledger,
and a rank's state lives on its `Rank`. The stages differ only in their plan (plan.py).

Letters: P parameters, N ranks, K micro-steps, s = ceil(P/N), Ψ = N*s the padded flat length (with the
per-parameter partitions of `deepspeed-zero3` and `fsdp2`, s = Σ c_p over the parameters: partition.py).
"""

from __future__ import annotations

import numpy as np

from zerosim.cluster import Cluster, Compute, StepBoundary
from zerosim.cluster.budget import check_fits, gb
from zerosim.models.run import Pass
from zerosim.models.schedule import needs_params, schedule
from zerosim.optim import Optimizer
from zerosim.precision import cast, get_precision
from zerosim.zero import averaging, clipping
from zerosim.zero.comm_schedule import get_comm_schedule
from zerosim.zero.fetch import ParamFetcher
from zerosim.zero.gather import refresh_params, unit_params
from zerosim.zero.partition import layout_for
from zerosim.zero.plan import PLANS
from zerosim.zero.reduce import GradBucket, final_reduction, keep_grads, reduce_all
from zerosim.zero.state import FILLED_LATER, GivenStates, check_given, init_rank, master_of, region, state_bytes
from zerosim.zero.step_checks import clip_gradients, overflow_decision
from zerosim.zero.update import update_all


class ZeroEngine:
    """Train `model` on `cluster` with ZeRO `stage` (0-3), `optimizer` and a mixed-precision policy.

    Args:
        model: a `zerosim.models.Model` (TinyNet, MLP, ...).
        cluster: a `zerosim.Cluster`.
        stage: 0 (plain data parallel), 1 (shard optimizer state), 2 (+ gradients), 3 (+ parameters).
        optimizer: a `zerosim.optim` optimizer (Adam, AdamW, SGD, Lion, Adan; Muon at stages 0/1 only).
        precision: a preset name ("fp16-mixed", "bf16-mixed", "fp32", "fp16-pure", "bf16-pure", ...)
            or a `MixedPrecision` (its `grad_accum` sets the accumulation format).
        checkpoint: recompute activations in backward instead of keeping them (seed 004); None (default): as the
            model says (`model.checkpointing`: a GPT built with a checkpoint strategy; False for the others).
        params: initial fp32 weights (P,); default `model.init_params()`. (`zero.state.FILLED_LATER`: allocate
            the states unwritten for the caller to fill; `zero.state.GivenStates`: take each rank's states as
            given — `zerosim.checkpoint` loads with these.)
        accumulation_steps: K micro-batches per local rank per step (gradient accumulation).
        comm: when and in what pieces it communicates: a `CommSchedule` (bucket sizes, prefetch, overlap,
            under DeepSpeed's and FSDP's names), "deepspeed", "fsdp", or None (seed 004's schedule: one
            collective per unit, no prefetch). It changes the trace and the memory peaks, never a result bit.
        clip_grad: clip the gradient to this global L2 norm before the optimizer (torch's clip_grad_norm_
            max_norm, computed over the shards: step_checks.py), or None.

    The loss scaler (static, torch's or DeepSpeed's: the policy's `loss_scale`) is `engine.scaler`; `engine.t`
    counts optimizer steps (a skipped step takes none), `engine.iteration` the calls of `step`.
    """

    def __init__(self, model, cluster, stage: int, optimizer, precision="fp16-mixed", checkpoint: bool | None = None,
                 params=None, accumulation_steps: int = 1, comm=None, clip_grad: float | None = None):
        if not isinstance(cluster, Cluster):  # first: an int failed later, as an AttributeError naming nothing
            raise TypeError(f"cluster must be a zerosim Cluster (e.g. Cluster(4)), got {cluster!r}")
        if checkpoint is None:  # the model's own strategy: GPT(checkpoint="block") checkpoints without being told twice
            checkpoint = bool(getattr(model, "checkpointing", False))
        if not isinstance(checkpoint, (bool, np.bool_)):  # bool("no") is True: a string is refused, not read as a flag
            raise TypeError(f"checkpoint must be True, False or None (the model's own strategy), got {checkpoint!r}")
        if type(stage) is not int or stage not in PLANS:
            raise ValueError(f"ZeRO stage must be one of {sorted(PLANS)}, got {stage!r}")
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"optimizer must be a zerosim.optim optimizer (e.g. Adam(lr=1e-3) or get_optimizer('adam')), got {optimizer!r}")
        if not hasattr(model, "layers") or not hasattr(model, "num_params"):
            raise TypeError(f"model must be a zerosim.models.Model (e.g. MLP([16, 64, 4])), got {model!r}")
        if type(accumulation_steps) is not int or accumulation_steps < 1:
            raise ValueError(f"accumulation_steps must be a positive integer, got {accumulation_steps!r}")
        optimizer.check_stage(stage)
        self.comm = get_comm_schedule(comm)
        self.clip_grad = clipping.check_max_norm(clip_grad)
        self.model, self.cluster, self.stage_number, self.plan = model, cluster, stage, PLANS[stage]
        self.optimizer, self.precision = optimizer, get_precision(precision)
        averaging.check_recipe(self.precision, stage, self.comm.reduce_bucket_size is not None)
        self.scaler = self.precision.make_scaler()  # the loss scale S of the next step, and its state machine
        self.checkpoint, self.accumulation_steps = checkpoint, accumulation_steps
        if averaging.recipe(self.precision).partition != "flat" and not cluster.backend.holds_values:
            raise ValueError(f"reduction {self.precision.reduction!r} shards by per-parameter partitions, which the meta "
                             "backend does not account (it accounts zerosim's flat layout); use the numpy or mpi backend")
        self.layout = layout_for(model, cluster.world_size, self.precision)  # flat.py, or per-parameter (partition.py)
        self.ops = schedule(model, checkpoint)  # the order one micro-batch visits the layers
        check_engine_fits(model, cluster.world_size, cluster.local_size, stage, optimizer, self.precision,
                          cluster.backend.available_bytes())  # before any large allocation
        given = params if isinstance(params, GivenStates) else None  # a checkpoint's states, taken as they are
        for rank in cluster.ranks if given is not None else ():
            check_given(rank.index, self.plan, self.layout, self.precision, optimizer, given.get(rank.index, {}))
        padded = None if params is FILLED_LATER or given is not None else self._initial_padded(params)  # (Ψ,) float64 or float32
        self.t = 0  # optimizer steps taken
        self.iteration = 0  # calls of step() that ran to the end, skipped ones included (DeepSpeed's global_steps)
        self._after_refresh = ()  # the refresh all-gather the next step's first computation waits for
        self._last_reduce = ()  # the last gradient reduce-scatter of a micro-step (ZeRO-2/3): the optimizer waits for it
        with cluster.phase("init"):
            for rank in cluster.ranks:
                init_rank(rank, self.plan, self.layout, self.precision, optimizer, padded, given and given[rank.index])
        for rank in cluster.ranks:
            rank.ledger.reset_peaks()

    def _initial_padded(self, params) -> np.ndarray:
        """(Ψ,) the initial weights, zero padding at the end: float64, or float32 when they are fp32 already
        (a cast from fp32 rounds once too, and the copy is half the size). Checked before anything is allocated."""
        model, backend = self.model, self.cluster.backend
        init = model.init_params() if params is None else np.asarray(params)
        if init.shape != (model.num_params,):
            raise ValueError(f"params must have shape ({model.num_params},) for this model, got {init.shape}")
        if not backend.all_finite(init):
            raise ValueError("initial params contain NaN or inf")
        wide = np.float32 if init.dtype == np.float32 else np.float64
        if self.layout.kind != "flat":  # in the layout's shard order (partition.py), padding zero
            padded = self.layout.arrange(init.astype(wide))
        else:
            padded = backend.empty((self.layout.padded,), wide)
            padded[: model.num_params] = init.astype(wide)
            padded[model.num_params :] = 0
        if not backend.all_finite(cast(padded, self.precision.compute_format)):
            raise ValueError(f"initial params overflow {self.precision.compute}: its largest finite value is "
                             f"{self.precision.compute_format.max:g}, the params reach {np.abs(init).max():g}")
        return padded

    # -- the step --------------------------------------------------------------------------------
    def step(self, batches) -> list:
        """One training step. `batches` holds, per local rank, one (x, target) micro-batch, or a list of
        `accumulation_steps` of them. Returns each local rank's loss (unscaled; the mean over its micro-batches).

        Raises before touching any state if the batches are malformed. If a reduced gradient is not finite,
        a dynamic loss scaler skips the step (nothing changes but the scale); a static scale raises
        FloatingPointError, before any parameter or optimizer state changes.
        """
        micro = self._check_batches(batches)  # micro[i][k]: local rank i's k-th (x, target)
        cluster, plan, trace = self.cluster, self.plan, self.cluster.trace
        i, K = self.iteration + 1, self.accumulation_steps
        trace.record(StepBoundary(i, "begin", K))
        try:  # NOTE: a 16-bit overflow in backward is silent, as on a GPU: the overflow check below finds it
            with trace.about(step=i), np.errstate(over="ignore", invalid="ignore"):
                losses = [self._micro_step(k, [m[k] for m in micro]) for k in range(K)]  # 1. forward, backward
                with cluster.phase("reduce gradients"):
                    reduced = reduce_all(self) or self._last_reduce  # 2. stage 0 all-reduce, stage 1 reduce-scatter
                with cluster.phase("optimizer step"):
                    checked = len(trace.calls)  # the overflow flag's and the norm's all-reduces come next
                    decision = overflow_decision(self)  # 3. any inf/NaN on any rank? the loss scaler decides
                    grads32 = None if decision.skip else self._averaged_gradients(decision.scale_before)  # averaging.py
                    if grads32 is not None and self.clip_grad is not None:
                        clip_gradients(self, grads32)  # global norm over the shards, then g *= clip_coef
        except BaseException:
            self._free_transients()  # nothing of a failed step stays behind to break the next one
            raise
        self.iteration = i
        if decision.skip:  # masters, optimizer state, t and the 16-bit params stay as they were
            self._free_transients()
            trace.record(StepBoundary(i, "end", K))
            return self._mean_losses(losses)
        self.t += 1
        with cluster.phase("optimizer step"), trace.about(step=i, micro=K - 1):
            needs = tuple(reduced) + tuple(range(checked, len(trace.calls)))  # the update waits for all of them
            update_all(self, grads32, needs=needs)  # 4. each rank updates its own region in fp32
            for rank in cluster.ranks:
                rank.ledger.free("grad32")
        with cluster.phase("refresh params"), trace.about(step=i, micro=K - 1):
            self._after_refresh = refresh_params(self) if plan.refreshes_params else ()  # 5. stage 1/2 all-gather
        self._finish_step()
        trace.record(StepBoundary(i, "end", K))
        return self._mean_losses(losses)

    @staticmethod
    def _mean_losses(losses: list) -> list:
        return [float(np.mean(np.asarray(per_rank, dtype=np.float64))) for per_rank in zip(*losses)]

    def _micro_step(self, k: int, batches: list) -> list:
        """Micro-step k: every op of the schedule, layer by layer, on every local rank; the ranks' losses."""
        cluster, plan, model, trace = self.cluster, self.plan, self.model, self.cluster.trace
        policy, keep = self.precision, trace.keep_values
        for rank, (x, target) in zip(cluster.ranks, batches):
            rank.work = Pass(model, x, target, policy.compute_format, ledger=rank.ledger, loss_scale=self.scaler.scale, keep_values=keep)
        # the previous step's refresh, if the trace still holds it (a user may have cleared the trace since)
        refresh = tuple(c for c in self._after_refresh if c < len(trace.calls) and trace.calls[c].purpose == "refresh params")
        waits = {rank.index: refresh for rank in cluster.ranks} if k == 0 else {}
        fetch = ParamFetcher(self, self.ops) if plan.shards_params else None  # ZeRO-3: gathers, prefetch, frees (fetch.py)
        # ZeRO-2/3: reduce-scatter as grads come; stages 0/1 with buckets: reduce them during the last backward
        whole = final_reduction(self) if self.comm.reduce_bucket_size and k == self.accumulation_steps - 1 else None
        bucket = GradBucket(self, k == 0, whole) if plan.shards_grads or whole else None
        with cluster.phase("forward/backward"), trace.about(micro=k):
            for i, op in enumerate(self.ops):
                reads = needs_params(model, op)
                gathered = fetch.before(i) if reads and fetch and i in fetch.use_of else ()  # ZeRO-3: gathered first
                for rank in cluster.ranks:
                    done = rank.work.run(op, unit_params(self, rank, op.layer) if reads else {})
                    if op.computes:
                        name = model.layers[op.layer].name if op.layer >= 0 else "loss"
                        trace.record(Compute(rank.index, self.iteration + 1, k, op.layer, name, op.kind, done.flops, done.bytes_read,
                                             done.bytes_written, gathered + waits.pop(rank.index, ()), done.values))
                    if done.grads:
                        keep_grads(self, rank, op.layer, done.grads, first=k == 0)
                if gathered:
                    fetch.after(i)  # ZeRO-3: free it unless it is needed again soon
                if op.kind == "backward" and bucket:
                    bucket.add(op.layer)  # sent when the bucket is full
            if fetch:
                fetch.finish()
            self._last_reduce = bucket.flush() if bucket else ()
        losses = [rank.work.loss for rank in cluster.ranks]
        for rank in cluster.ranks:
            rank.work = None
        return losses

    def _averaged_gradients(self, scale: float) -> list:
        """Each rank's reduced gradient region, as the optimizer reads it (averaging.finish: averaged, and
        unscaled by the loss scale this step used), adopted as kind "grad32"."""
        policy, n, k = self.precision, self.cluster.world_size, self.accumulation_steps
        return [rank.ledger.adopt("grad32", averaging.finish(rank.reduced, policy, n, k, scale), "grad32").array
                for rank in self.cluster.ranks]

    def _finish_step(self) -> None:
        for rank in self.cluster.ranks:
            rank.reduced = None
            if "grads (wire format)" in rank.ledger.live:
                rank.ledger.free("grads (wire format)")

    def _free_transients(self) -> None:
        """Free every buffer a step allocated (activations, gathered layers, layer gradients, staging),
        keeping the model states on each rank: params, gradients, master, optimizer state."""
        for rank in self.cluster.ranks:
            keep = {id(b) for b in rank.model_states()}
            for buf in list(rank.ledger.live.values()):
                if id(buf) not in keep:
                    buf.free()
            rank.work = rank.reduced = None

    def _agree(self, problems: list, what: str, error=ValueError) -> None:
        """Raise `error` on every rank if any rank found a problem (one entry per local rank, None if
        fine): all ranks decide together, so under MPI none is left waiting in a collective."""
        everyone = self.cluster.backend.all_meta(problems)
        bad = [(r, p) for r, p in enumerate(everyone) if p]
        if bad:
            raise error("; ".join(f"rank {r}: {p}" for r, p in bad) + what)

    def _check_batches(self, batches) -> list:
        """Per local rank, the list of its K micro-batches; raises (on every rank) before anything runs."""
        local, K = self.cluster.local_size, self.accumulation_steps
        if not isinstance(batches, (list, tuple)) or len(batches) != local:
            got = len(batches) if isinstance(batches, (list, tuple)) else type(batches).__name__
            what = "one (x, target) micro-batch" if K == 1 else f"a list of {K} (x, target) micro-batches"
            raise ValueError(f"step needs {what} per local rank ({local}), got {got}")
        micro, problems = [], []
        for b in batches:
            pairs = [b] if K == 1 and _is_pair(b) else b
            if not isinstance(pairs, (list, tuple)) or len(pairs) != K or not all(_is_pair(p) for p in pairs):
                want = "an (x, target) pair" if K == 1 else f"a list of {K} (x, target) pairs (accumulation_steps={K})"
                micro.append(None)
                problems.append(f"each rank's micro-batches must be {want}")
                continue
            micro.append(list(pairs))
            try:
                for x, target in pairs:
                    self.model.check_batch(x, target)
                problems.append(None)
            except ValueError as e:
                problems.append(str(e))
        self._agree(problems, "; nothing was run")
        return micro

    # -- checkpoints (zerosim.checkpoint) ---------------------------------------------------------
    def save(self, directory: str, tag: str | None = None) -> str:
        """Save this engine's state: one file per rank, a manifest, and DIR/latest (see zerosim.checkpoint)."""
        from zerosim.checkpoint import save  # NOTE: imported here: the checkpoint layer sits above the engines

        return save(self, directory, tag)

    @classmethod
    def load(cls, directory: str, cluster, model, optimizer=None, **options) -> "ZeroEngine":
        """An engine on `cluster` with a saved state, at any rank count and stage (see zerosim.checkpoint.load)."""
        from zerosim.checkpoint import load

        return load(directory, cluster, model, optimizer, **options)

    # -- looking inside (notebooks and tests may look at any rank) -------------------------------
    def region(self, rank_index: int) -> slice:
        """The part of the padded flat vector rank `rank_index` updates: its shard, or everything at stage 0."""
        return region(self.plan, self.layout, rank_index)

    def master_shards(self) -> list:
        """Each local rank's fp32 master region (its shard; the whole buffer at stage 0)."""
        return [master_of(r, self.plan, self.layout, self.precision).copy() for r in self.cluster.ranks]

    def optimizer_shards(self) -> list:
        """Each local rank's optimizer state {name: array} over the same region as `master_shards`."""
        return [{k: v.array.copy() for k, v in r.optim.items()} for r in self.cluster.ranks]

    def compute_params(self, i: int) -> np.ndarray:
        """Local rank i's 16-bit params as it holds them (full flat buffer at stages 0-2, its shard at stage 3)."""
        return self.cluster.ranks[i].params.array.copy()

    def full_master(self) -> np.ndarray:
        """The whole fp32 master vector (P,), assembled from the local ranks (simulator only)."""
        return self._assemble([master_of(r, self.plan, self.layout, self.precision) for r in self.cluster.ranks])

    def full_optimizer_state(self) -> dict:
        """{state name: (P,) array} assembled from the local ranks (simulator only)."""
        return {k: self._assemble([r.optim[k].array for r in self.cluster.ranks]) for k in self.optimizer.state_names}

    def full_params(self) -> np.ndarray:
        """The whole 16-bit params vector (P,): rank 0's copy at stages 0-2, the shards joined at stage 3."""
        if self.plan.shards_params:
            return self._assemble([r.params.array for r in self.cluster.ranks])
        return self.cluster.ranks[0].params.array[: self.model.num_params].copy()

    def _assemble(self, regions: list) -> np.ndarray:
        if self.cluster.local_size != self.cluster.world_size:
            raise RuntimeError("assembling the whole vector needs every rank in this process (numpy backend)")
        full = regions[0] if not self.plan.shards_optimizer else np.concatenate(regions)
        return np.array(self.layout.unarrange(full))  # (P,) model order, padding dropped


def check_engine_fits(model, world_size: int, local_size: int, stage: int, optimizer, precision, have) -> None:
    """Raise `OutOfMemory` before anything is allocated if the model states of the `local_size` ranks this
    process hosts (and the initial weights) cannot fit in `have` bytes (None: no limit, the meta backend)."""
    plan, policy = PLANS[stage], get_precision(precision)
    layout = layout_for(model, world_size, policy)
    per_rank = state_bytes(plan, layout, policy, optimizer)
    check_fits(12 * layout.padded + local_size * per_rank,  # + the fp32 init (P,) and its float64 padded copy
               f"ZeRO-{stage} for {model.num_params:,} parameters on {local_size:,} rank(s) in this process "
               f"({gb(per_rank)} of model states per rank, plus the initial weights)",
               "account it without allocating on the meta backend (Cluster(N, backend='meta'), zerosim memory)", have)


def _is_pair(b) -> bool:
    return isinstance(b, (list, tuple)) and len(b) == 2 and not isinstance(b[0], (list, tuple))
