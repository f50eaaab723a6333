"""The optimizer step on each rank's region, in fp32, then the cast back to 16 bits (seed 004 step 3).

Optimizers are elementwise (optim/base.py), so stepping a rank's shard equals stepping the same
slice of the whole vector, bit for bit: that is what lets ZeRO shard optimizer state at all.
A matrix optimizer (Muon) needs whole matrices: at stage 0 every rank steps the whole model; at
stage 1 (the "distributed Muon" of Moonlight, Liu et al. 2025) each rank updates its own shard of
the momentum, the momentum is all-gathered (one extra fp32 all-gather per step) so every rank can
orthogonalise whole matrices, and each rank applies only its own part of the update.
"""

from __future__ import annotations

import numpy as np

from zerosim.cluster import OptimizerStep
from zerosim.optim.by_matrix import matrix_shape, step_by_matrix
from zerosim.zero.state import master_of, own_params, region


def update_all(engine, grads32: list, needs: tuple = ()) -> None:
    """Every local rank's update from its (region,) fp32 gradient, one rank at a time; logs an
    `OptimizerStep` per rank (with the intermediates when the cluster keeps values)."""
    if not engine.optimizer.elementwise and engine.plan.shards_optimizer:
        return _muon_stage1(engine, grads32, needs)
    for rank, g32 in zip(engine.cluster.ranks, grads32):
        _update(engine, rank, g32, needs)


def _update(engine, rank, g32, needs, step=None) -> None:
    """Optimizer step on rank's region in the update format, then round into its 16-bit params.
    `step(w, state)` replaces the optimizer's own step (ZeRO-1 Muon uses it)."""
    plan, layout, policy, opt, t = engine.plan, engine.layout, engine.precision, engine.optimizer, engine.t
    keep = engine.cluster.trace.keep_values
    # the gradient as the optimizer reads it, and as it was reduced (still loss-scaled, in the reduced format)
    values = {"grad32": g32.copy(), "reduced": np.array(rank.reduced)} if keep else None
    state = {k: b.array for k, b in rank.optim.items()}
    scratch = None
    if rank.master is not None:
        w = rank.master.array  # (region,) fp32 master
    else:  # "pure": widen the 16-bit weights, update, round straight back (where updates get lost)
        scratch = rank.ledger.adopt("update scratch", master_of(rank, plan, layout, policy), "scratch")
        w = scratch.array
    if step is not None:
        step(w, state)
    elif opt.elementwise:
        opt.step(w, g32, state, t, values)
    else:  # a matrix optimizer on whole parameters: only where the region is the whole model
        step_by_matrix(opt, engine.model.specs, w, g32, state, t)
    mine = region(plan, layout, rank.index)  # w's place in the flat vector (stochastic rounding draws by index)
    own_params(rank, plan, layout)[...] = policy.round_weights(w, t, layout.draw_index(mine))
    if scratch is not None:
        scratch.free()
    if keep:
        values["master"] = np.array(w)
        values["compute_after"] = own_params(rank, plan, layout).copy()
        values["params_held"] = rank.params.array.copy()  # all this rank holds, before any refresh (seed 004's inconsistent model)
    engine.cluster.trace.record(OptimizerStep(rank.index, t, mine.start, mine.stop, opt.name, needs, values))


def _muon_stage1(engine, grads32: list, needs: tuple) -> None:
    """ZeRO-1 Muon: shard the momentum, all-gather it, orthogonalise whole matrices, apply own part."""
    cluster, layout, opt = engine.cluster, engine.layout, engine.optimizer
    own = [layout.own(rank.index) for rank in cluster.ranks]
    for rank, g32, mine in zip(cluster.ranks, grads32, own):  # g32: (Ψ,) the whole averaged gradient
        opt.momentum_(rank.optim["b"].array, g32[mine])  # (s,) fp32 momentum shard
    with cluster.trace.about(purpose="optimizer", layers=()):
        gathered = cluster.all_gather([rank.optim["b"].array for rank in cluster.ranks], tag="muon momentum")
    for rank, g32, b, mine in zip(cluster.ranks, grads32, gathered, own):
        held = rank.ledger.adopt("muon momentum (gathered)", b, "comm")  # (Ψ,) fp32, transient
        update = np.zeros_like(g32)  # (Ψ,) fp32: every rank computes the whole matrices' updates
        for spec in engine.model.specs:
            window, shape = slice(spec.offset, spec.offset + spec.size), matrix_shape(spec.shape)
            update[window] = opt.direction(g32[window].reshape(shape), b[window].reshape(shape))[0].reshape(-1)
        _update(engine, rank, g32[mine], needs, step=lambda w, state, u=update[mine]: opt.apply_(w, u))
        held.free()
