"""One op of the schedule on every local rank: the layer's compute, its `Compute` event, and its gradients kept.

The engine calls `compute` once per op (forward, loss, recompute, backward of one layer); on each rank it
runs the op on that rank's micro-batch in flight (models/run.py, `Pass`), records what it cost and which
collective handles it waited for, and — in backward — hands the layer's fresh gradients to where the plan
keeps them (reduce.keep_grads). The ranks' ops run on the cluster's pool (`Cluster(N, workers=k)`,
cluster/pool.py: concurrently when k > 1, each rank's arithmetic unchanged); what they record reaches the log
rank by rank, so it reads as each rank's program in order, whatever the workers' order.
"""

from __future__ import annotations

from zerosim.cluster import Compute
from zerosim.models.schedule import needs_params
from zerosim.zero.gather import unit_weights
from zerosim.zero.reduce import keep_grads


def compute(ctx, model, passes: list, op, needs, step: int, micro: int) -> None:
    """Run `op` on every local rank (passes[i]: local rank i's micro-batch in flight), each `Compute` event
    naming `needs` (the handles its inputs came from) for iteration `step`, micro-step `micro`."""
    reads = needs_params(model, op)
    name = model.layers[op.layer].name if op.layer >= 0 else "loss"
    ranks = ctx.ranks

    def run(i):  # on a worker: rank i's op, reading only rank i's arrays
        return passes[i].run(op, unit_weights(ctx, model, ranks[i], op.layer) if reads else {})

    def record(i, done):  # in rank order, after every rank's op ran
        if op.computes:
            ctx.cluster.trace.record(Compute(ranks[i].index, step, micro, op.layer, name, op.kind, done.flops,
                                             done.bytes_read, done.bytes_written, needs, done.values))
        if done.grads:
            keep_grads(ctx, model, ranks[i], op.layer, done.grads, first=micro == 0)

    ctx.cluster.pool.map(run, ranks, record)
