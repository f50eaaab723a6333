"""The oracle of pipeline parallelism: one device runs every micro-batch through the whole model, cuts its gradient
into the stages' pieces, and each stage's piece is a data-parallel job of its own, as `Reference` runs one.

Letters: N ranks, P pipeline ranks, T the TP degree, D = N / (P·T) data-parallel ranks, M micro-batches a step.

    for each data-parallel rank d, micro-batch k:       the whole model's forward and backward, layer by layer
                                                        (models/_run.py; beside TP the T slices side by side with
                                                        their partial sums in the ring's order: TensorReference)
    for each pipeline rank p (and TP position t):       a Reference of its stage model over D ranks: the stage's
                                                        gradients accumulated over the micro-batches in the order
                                                        the schedule's table runs that stage's (weight) backwards,
                                                        reduced in the ring's order, averaged, the optimizer

Which units each stage holds and the order of accumulation are configuration it reads from the pipeline's face (the
split, the table), as the TP oracle reads where the operators sit; what it checks: the stages' data-parallel
sharding (each stage's flat vector cut over its own D ranks), the activations and gradients sent between stages
(which the oracle never sends: it runs the whole model), the schedule's order of micro-batches, and the stages'
ZeroEngines driven phase by phase.

Where a run without pipelining differs: not in the order of micro-batches (every torch schedule accumulates a stage's
gradients in micro-batch order, as gradient accumulation does), but in who owns which element. A stage's ZeroEngine
cuts the stage's own flat vector into D shards, so an element's ring sum starts at another rank than in the whole
model's vector cut D ways, and 16-bit sums in another order round differently (tests/test_pipeline_oracle.py shows
the float64 distance of both from exact arithmetic). ZeRO stage 0's all-reduce over the stage's vector likewise.
"""

from __future__ import annotations

import numpy as np

from zerosim.models import forward_backward
from zerosim.parallel.pipeline import StageModel, make_table, split
from zerosim.parallel.tensor import local_flat
from zerosim.reference._tensor import (  # _Slice: a Reference fed made gradients
    TensorReference,
    _Key,
    _Slice,
    sum_sequence_parallel,
)


class PipelineReference:
    """One device: the numbers a `PipelineEngine` with the same arguments must give, bit for bit.

    Args:
        model, optimizer, precision, stage, recipe, shard_group: as for the engine.
        world_size: N, every rank of the job.
        pp, schedule, micro_batches, virtual_stages, split_rule, layers: as for the engine.
        tensor: the engine's `TensorParallel`, or None.
        params: the whole model's (P,) initial weights (default `model.init_params()`; with `tensor`, its own).
    """

    def __init__(self, model, optimizer, precision="fp16-mixed", world_size: int = 2, stage=0, *, pp: int,
                 schedule: str = "1f1b", micro_batches: int | None = None, virtual_stages: int | None = None,
                 split_rule: str = "torchtitan", layers=None, tensor=None, params=None, recipe=None,
                 shard_group: int | None = None):
        self.tensor = tensor if tensor is not None and tensor.local is not None else None
        T = 1 if self.tensor is None else self.tensor.tp
        if world_size % (pp * T):
            raise ValueError(f"pp {pp} × tp {T} does not divide the {world_size} ranks")
        self.dp = world_size // (pp * T)
        self.table = make_table(schedule, pp, pp if micro_batches is None else micro_batches, virtual_stages)
        M = self.table.micro_batches
        whole = model if self.tensor is None else self.tensor.model
        self.whole, self.model = whole, model
        self.split = split(whole, pp, self.table.virtual, split_rule, layers)
        self.parts = [StageModel(whole, self.split, p) for p in range(pp)]
        if self.tensor is None:
            init = [model.init_params() if params is None else np.asarray(params)]
        else:
            init = [local_flat(whole, self.tensor._whole, self.tensor.full, t) for t in range(T)]
            self._tp = TensorReference(self.tensor, optimizer, precision, self.dp * T, 0)  # the T slices' passes
        self.stages = [[_Slice(part, optimizer, precision, self.dp, params=part.cut(w), accumulation_steps=M,
                               recipe=recipe, strategy=stage, shard_group=shard_group) for w in init]
                       for part in self.parts]  # stages[p][t]
        for row in self.stages:
            for ref in row:
                ref.made = {}
        self.precision = self.stages[0][0].precision
        self.where = {u: (p, i) for p, part in enumerate(self.parts) for i, u in enumerate(part.units)}

    # -- one step ---------------------------------------------------------------------------------------
    def step(self, batches) -> list:
        """`batches[d]`: data-parallel rank d's M micro-batches. Returns each data-parallel rank's mean loss."""
        M, D = self.table.micro_batches, self.dp
        if len(batches) != D or any(len(b) != M for b in batches):
            raise ValueError(f"the pipeline reference needs {D} data-parallel ranks' {M} micro-batches")
        scale = self.stages[0][0].scaler.scale
        losses = [[] for _ in range(D)]
        with np.errstate(over="ignore", invalid="ignore"):
            for d in range(D):
                for k in range(M):
                    loss, grads = self._gradients(*batches[d][k], scale)  # grads[t]: the (P_local,) gradient
                    losses[d].append(loss)
                    for part, row in zip(self.parts, self.stages):
                        for ref, g in zip(row, grads):
                            mine = np.zeros(ref.padded, g.dtype)
                            mine[:part.num_params] = part.cut(g)
                            ref.made[(d, k)] = (loss, mine)
            reduced, kept = [], [[[] for _ in range(D)] for _ in range(len(self.stages) * len(self.stages[0]))]
            for p, row in enumerate(self.stages):
                order = self.table.backward_order(self.parts[p].stage_ids[0])  # the micro-batches' order on stage p
                keys = [[(_Key(d, k), None) for k in order] for d in range(D)]
                mine = [ref.reduce_step(keys, kept[len(reduced) + t]) for t, ref in enumerate(row)]
                if self.tensor is not None and self.tensor.sequence_parallel:  # the stage's norms summed over TP
                    sum_sequence_parallel(row[0].layout, self.parts[p], mine, row[0].plan.stage == 0)
                reduced += mine
        refs = [ref for row in self.stages for ref in row]
        for ref, r, lost in zip(refs, reduced, kept):
            ref.apply_step(r, lost)
            ref.made = {}
        return [float(x[0]) if M == 1 else float(np.mean(np.asarray(x, dtype=np.float64))) for x in losses]

    def _gradients(self, x, target, scale) -> tuple:
        """(the loss, [each TP position's (P_local,) gradient in the compute format]) of one micro-batch through the
        whole model, with the weights the stages hold now."""
        fmt = self.precision.compute_format
        if self.tensor is not None:
            for t, s in enumerate(self._tp.slices):  # the TP slices read the stages' current weights
                s.params = np.zeros(s.padded, fmt.dtype)
                for part, row in zip(self.parts, self.stages):
                    part.join(s.params, row[t].params[:part.num_params])
            made = self._tp.gradients(x, target, scale)
            return made[0][0], [g[:self.whole.num_params] for _, g in made]
        grad = np.zeros(self.whole.num_params, fmt.dtype)

        def weights(u):
            p, i = self.where[u]
            return self.stages[p][0].layer_params(i)

        def keep(u, g):
            a, b = self.whole.layer_window(u)
            grad[a:b] = self.whole.pack(u, g)

        loss = forward_backward(self.whole, x, target, fmt, weights, on_grads=keep, loss_scale=scale)
        return loss, [grad]

    # -- looking inside ---------------------------------------------------------------------------------
    def full_master(self, t: int = 0) -> np.ndarray:
        """The whole (TP position t's) model's (P,) update-format weights, joined from the stages."""
        return self._join(lambda ref: ref.master(), t)

    def full_params(self, t: int = 0) -> np.ndarray:
        """The whole (TP position t's) model's (P,) compute-format weights, joined from the stages."""
        return self._join(lambda ref: ref.compute_params(), t)

    def _join(self, read, t: int) -> np.ndarray:
        parts = [read(row[t]) for row in self.stages]
        out = np.zeros(self.whole.num_params, parts[0].dtype)
        for part, mine in zip(self.parts, parts):
            part.join(out, mine)
        return out
