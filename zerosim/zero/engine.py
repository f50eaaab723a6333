"""ZeroEngine: one training step of ZeRO stage 0, 1, 2 or 3 on a cluster.

The step is the same at every stage (seeds 000/003/004):

    forward/backward of one micro-batch per rank   (16-bit params; stage 3 gathers each layer first)
    reduce the 16-bit gradients                     (stage 0 all-reduce, 1 reduce-scatter, 2/3 per layer)
    update the rank's shard in fp32                 (g32 = cast32(g16 sum) / N / S; optimizer on the master)
    refresh the 16-bit params                       (cast; stage 1/2 all-gather, stage 3 keeps the shard)

The stages differ only in which buffers they shard and when they talk; that difference lives in the
`Stage` classes of stages.py. Every buffer goes through the rank's ledger; the engine never touches
another rank's data except through collectives.

Letters: P parameters, N ranks, s = ceil(P/N) elements per shard, N*s the padded flat length.
"""

from __future__ import annotations

import numpy as np

from zerosim.collectives import get_op
from zerosim.models.run import forward_backward
from zerosim.optim import Optimizer
from zerosim.precision import cast, get_precision
from zerosim.precision.cast import has_values
from zerosim.zero.flat import FlatLayout
from zerosim.zero.lockstep import Lockstep, choose_schedule
from zerosim.zero.stages import STAGES


class ZeroEngine:
    """Train `model` on `cluster` with ZeRO `stage` (0-3), `optimizer` and a mixed-precision policy.

    Args:
        model: a `zerosim.models.Model` (TinyNet, MLP, ...).
        cluster: a `zerosim.Cluster`; one micro-batch per local rank per step.
        stage: 0 (plain data parallel), 1 (shard optimizer state), 2 (+ gradients), 3 (+ parameters).
        optimizer: a `zerosim.optim` optimizer (Adam, AdamW, SGD, Lion, Adan; Muon at stages 0/1 only).
        precision: a preset name ("fp16-mixed", "bf16-mixed", "fp32", "fp16-pure", "bf16-pure") or
            a `MixedPrecision`.
        checkpoint: recompute activations in backward instead of keeping them (seed 004).
        params: initial fp32 weights (P,); default `model.init_params()`.
    """

    def __init__(self, model, cluster, stage: int, optimizer, precision="fp16-mixed", checkpoint: bool = False, params=None):
        if type(stage) is not int or stage not in STAGES:
            raise ValueError(f"ZeRO stage must be one of {sorted(STAGES)}, got {stage!r}")
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"optimizer must be a zerosim.optim optimizer (e.g. Adam(lr=1e-3) or get_optimizer('adam')), got {optimizer!r}")
        optimizer.check_stage(stage)
        self.model, self.cluster, self.stage_number = model, cluster, stage
        self.optimizer = optimizer
        self.precision = get_precision(precision)
        self.checkpoint = checkpoint
        self.layout = FlatLayout.for_model(model, cluster.world_size)
        init = model.init_params() if params is None else np.asarray(params)
        if init.shape != (model.num_params,):
            raise ValueError(f"params must have shape ({model.num_params},) for this model, got {init.shape}")
        if has_values(init) and not np.all(np.isfinite(init)):  # a meta model's params have no values to check
            raise ValueError("initial params contain NaN or inf")
        self.t = 0  # optimizer steps taken
        self.stage = STAGES[stage](self)
        padded = np.zeros(self.layout.padded, dtype=np.float64, like=init)  # like=: a meta init gives a meta buffer
        padded[: model.num_params] = init.astype(np.float64)
        if has_values(init) and not np.all(np.isfinite(cast(padded, self.precision.compute_format).astype(np.float64))):
            raise ValueError(f"initial params overflow {self.precision.compute}: its largest finite value is "
                             f"{self.precision.compute_format.max:g}, the params reach {np.abs(init).max():g}")
        with cluster.phase("init"):
            for rank in cluster.ranks:
                self.stage.init_rank(rank, padded)
        for rank in cluster.ranks:
            rank.ledger.reset_peaks()
        # stages 2 and 3 talk inside backward (per-layer reduce-scatter; stage 3 gathers too)
        self._lockstep = Lockstep(cluster.local_size, choose_schedule(cluster.backend, self.stage.shards_grads or self.stage.shards_params))

    # -- the step --------------------------------------------------------------------------------
    def step(self, batches, record: dict | None = None) -> list:
        """One training step: `batches` holds one (x, target) micro-batch per local rank.

        Returns the per-rank (unscaled) losses. If `record` is a dict, it is filled with what the
        replay narrates: per-rank model events, collective call ids and optimizer intermediates.
        Raises before touching any state if the batches are malformed; raises FloatingPointError,
        before any parameter or optimizer state changes, if a reduced gradient is not finite.
        """
        self._check_batches(batches)
        cluster, stage, fmt = self.cluster, self.stage, self.precision.compute_format
        if record is not None:
            record.update(ranks=[{"model": []} for _ in cluster.ranks], calls={})
        first_call = len(cluster.trace.calls)

        def one_rank(i):
            rank = cluster.ranks[i]
            x, target = batches[i]
            events = record["ranks"][i]["model"] if record is not None else None
            rank.ledger.phase_label = "forward/backward"
            return forward_backward(
                self.model, x, target, fmt,
                get_params=lambda layer: stage.get_params(i, layer),
                release_params=lambda layer: stage.release_params(i, layer),
                on_grads=lambda layer, grads: stage.on_grads(i, layer, grads),
                checkpoint=self.checkpoint, ledger=rank.ledger,
                loss_scale=self.precision.loss_scale, record=events,
            )

        try:
            with cluster.phase("forward/backward"):
                stage.begin_step()
                losses = self._lockstep.run(one_rank)
            with cluster.phase("reduce gradients"):
                stage.reduce_gradients()
        except BaseException:
            self._free_transients()  # nothing of a failed step stays behind to break the next one
            raise
        if record is not None:
            record["calls"]["backward"] = list(range(first_call, len(cluster.trace.calls)))
        with cluster.phase("optimizer step"):
            grads32 = self._averaged_gradients()
            self.t += 1
            records = [{} if record is not None else None for _ in cluster.ranks]
            stage.update_all(grads32, self.t, records)
            for i, rank in enumerate(cluster.ranks):
                if record is not None:
                    record["ranks"][i]["optim"] = records[i]
                    record["ranks"][i]["grad32"] = grads32[i].copy()
                rank.ledger.free("grad32")
        before = len(cluster.trace.calls)
        with cluster.phase("refresh params"):
            stage.refresh_params()
            stage.finish_step()
        if record is not None:
            record["calls"]["refresh"] = list(range(before, len(cluster.trace.calls)))
            record["losses"] = list(losses)
        return losses

    def _free_transients(self) -> None:
        """Free every buffer a step allocated (activations, gathered layers, layer gradients, staging),
        keeping the model states the stage owns: params, gradients, master, optimizer state."""
        stage = self.stage
        keep = {id(b) for b in stage.params + stage.grads + stage.master_buf}
        keep |= {id(b) for state in stage.opt_state for b in state.values()}
        stage._transient = []
        for rank in self.cluster.ranks:
            for buf in list(rank.ledger.live.values()):
                if id(buf) not in keep:
                    buf.free()

    def _agree(self, problems: list, what: str, error=ValueError) -> None:
        """Raise `error` on every rank if any rank found a problem (one entry per local rank, None if
        fine): all ranks decide together, so under MPI none is left waiting in a collective."""
        everyone = self.cluster.backend.all_meta(problems)
        bad = [(r, p) for r, p in enumerate(everyone) if p]
        if bad:
            raise error("; ".join(f"rank {r}: {p}" for r, p in bad) + what)

    def _averaged_gradients(self) -> list:
        """Each rank's reduced 16-bit gradient region, widened and averaged: g32 = cast32(g) / N / S.

        Checks every rank before returning, so a non-finite gradient stops the step with nothing updated.
        """
        n, upd = self.cluster.world_size, self.precision.update_format
        average = get_op(self.precision.average)
        problems = []
        for i in range(self.cluster.local_size):
            g = self.stage.reduced_gradient(i)
            bad = int(np.count_nonzero(~np.isfinite(g.astype(np.float64)))) if has_values(g) else 0
            problems.append(f"{bad} reduced gradient element(s) are NaN or inf" if bad else None)
        try:
            scale = self.precision.loss_scale
            self._agree(problems, (f" (loss scale {scale} may be too large)" if scale != 1 else "")
                        + "; no parameter or optimizer state was changed", FloatingPointError)
        except FloatingPointError:
            self._free_transients()
            raise
        wide = []
        for i, rank in enumerate(self.cluster.ranks):
            g = self.stage.reduced_gradient(i)
            g32 = average.post(g, n) if average.name == "avg" else g
            g32 = cast(g32, upd) if g32.dtype != upd.dtype else g32.copy()
            if self.precision.loss_scale != 1:
                g32 = (g32 / upd.dtype.type(self.precision.loss_scale)).astype(upd.dtype)  # unscale in fp32
            wide.append(rank.ledger.adopt("grad32", g32, "grad32"))
        return [b.array for b in wide]

    def _check_batches(self, batches) -> None:
        if not isinstance(batches, (list, tuple)) or len(batches) != self.cluster.local_size:
            got = len(batches) if isinstance(batches, (list, tuple)) else type(batches).__name__
            raise ValueError(f"step needs one (x, target) micro-batch per local rank ({self.cluster.local_size}), got {got}")
        problems = []
        for b in batches:
            if not (isinstance(b, (list, tuple)) and len(b) == 2):
                problems.append("a micro-batch is an (x, target) pair")
                continue
            try:
                if has_values(b[0]):  # a meta batch has shapes only
                    self.model.check_batch(b[0], b[1])
                problems.append(None)
            except ValueError as e:
                problems.append(str(e))
        self._agree(problems, "; nothing was run")

    # -- looking inside (notebooks and tests may look at any rank) -------------------------------
    def master_shards(self) -> list:
        """Each local rank's fp32 master region (its shard; the whole buffer at stage 0)."""
        return [self.stage.master(i).copy() for i in range(self.cluster.local_size)]

    def optimizer_shards(self) -> list:
        """Each local rank's optimizer state {name: array} over the same region as `master_shards`."""
        return [{k: v.array.copy() for k, v in self.stage.opt_state[i].items()} for i in range(self.cluster.local_size)]

    def compute_params(self, i: int) -> np.ndarray:
        """Rank i's 16-bit params as it holds them (full flat buffer at stages 0-2, its shard at stage 3)."""
        return self.stage.params[i].array.copy()

    def full_master(self) -> np.ndarray:
        """The whole fp32 master vector (P,), assembled from the local ranks (simulator only)."""
        return self.stage.assemble([self.stage.master(i) for i in range(self.cluster.local_size)])

    def full_optimizer_state(self) -> dict:
        """{state name: (P,) array} assembled from the local ranks (simulator only)."""
        names = self.optimizer.state_names
        return {k: self.stage.assemble([self.stage.opt_state[i][k].array for i in range(self.cluster.local_size)]) for k in names}
