"""The optimizer step on each rank's region: the gradient it reads, the update in fp32, the cast back to 16 bits.

Optimizers are elementwise (optim/_base.py), so stepping a rank's shard equals stepping the same
slice of the whole vector, bit for bit: that is what lets ZeRO shard optimizer state at all.
A matrix optimizer (Muon) needs whole matrices: at stage 0 every rank steps the whole model; at
stages 1-3 each rank forms the momentum and Nesterov input on its shard, and the plan its `sharding` names
(parallel/data/muon: gather-everywhere, owner-per-matrix, Moonshot's Distributed Muon) brings each matrix
together for Newton-Schulz and hands every rank its slice of the update.
"""

from __future__ import annotations

import numpy as np

from zerosim.cluster import OptimizerStep, optimizer_step_event
from zerosim.optim import step_in_blocks, widened
from zerosim.parallel.data._state import master_of, own_params
from zerosim.parallel.data import recipes as averaging  # averaging's one place (recipes/_averaging.py), by its face


def average(ctx, reduced: list, micro_steps: int, scale: float, finish=averaging.finish) -> list:
    """Each rank's `reduced` gradient region as the optimizer reads it — averaged over N ranks and K micro-steps
    and unscaled by the loss scale S this step used (`finish`: averaging.finish, or a hook's) — adopted into the
    rank's ledger as kind "grad32" until `update` frees it. Returns the (region,) update-format arrays."""
    n, ranks = ctx.mesh.world.size, ctx.ranks  # N: the data-parallel ranks
    if finish is averaging.finish and _finish_together(ctx, reduced):  # small regions: every rank's in one call
        made = _finished_together(ctx, reduced, n, micro_steps, scale)
    else:
        made = ctx.cluster.pool.map(lambda i: finish(reduced[i], ctx.policy, n, micro_steps, scale, recipe=ctx.recipe),
                                    ranks)  # elementwise, each rank's own region: on the pool
    tier = ctx.plan.where("grad32")  # the device's, or (offload) the host's: DeepSpeed's fp32 grad partition
    return [rank.ledger_of(tier).adopt("grad32", g, "grad32").array for rank, g in zip(ranks, made)]


def _finish_together(ctx, reduced: list) -> bool:
    """Whether `average` may finish every local rank's region in one call: one worker that may stack ranks (the loop
    of `Cluster(N, stack_ranks=False)` is what it is checked against), every region a 1-D host array of one dtype,
    and few elements in all (`TOGETHER`: the copy in costs less than a call per rank)."""
    if not ctx.cluster.pool.stacks or len(reduced) < 2 or sum(r.size for r in reduced) > TOGETHER:
        return False
    dtype = reduced[0].dtype
    return all(type(r) is np.ndarray and r.ndim == 1 and r.dtype == dtype for r in reduced)


def _finished_together(ctx, reduced: list, n: int, micro_steps: int, scale: float) -> list:
    """`averaging.finish` of every rank's region at once (`_finish_together` allows): their
    regions laid end to end, finished in one call (elementwise, with the same scalars: each element's bits are its
    own rank's call's), each rank's the view of its span of the one new array."""
    made = averaging.finish(np.concatenate(reduced), ctx.policy, n, micro_steps, scale, recipe=ctx.recipe)
    ends = np.cumsum([len(r) for r in reduced]).tolist()
    return [made[a:b] for a, b in zip([0, *ends[:-1]], ends)]


def update(ctx, optimizer, specs, grads32: list, reduced: list, t: int, needs: tuple = (), first_step: int = 1) -> None:
    """Every local rank's optimizer step `t` from its (region,) fp32 gradient, one rank at a time, then the
    gradients freed; logs an `OptimizerStep` per rank that waited for `needs` (with the intermediates, and the
    `reduced` gradient, when the cluster keeps values). `specs`: the model's parameters (Muon's matrices);
    `first_step`: where this process's run of steps began (optim/_base.py OptimizerRun)."""
    if not optimizer.elementwise and ctx.plan.shards("optimizer"):  # Muon on shards: parallel/data/muon
        from zerosim.parallel.data.muon import muon_update  # here: an elementwise optimizer never loads it

        muon_update(ctx, optimizer, specs, grads32, reduced, t, needs,
                    lambda rank, g, red, waits, step: _update(ctx, optimizer, specs, rank, g, red, t, waits, step,
                                                              first_step))
    elif _together(ctx, optimizer, grads32):  # small regions: every rank's at once, the events in rank order after
        for event in _update_together(ctx, optimizer, grads32, t, needs, first_step):
            ctx.cluster.trace.record(event)
    else:  # each rank's region on the cluster's pool; the OptimizerStep events in rank order after
        ranks = ctx.ranks
        ctx.cluster.pool.map(lambda i: _update(ctx, optimizer, specs, ranks[i], grads32[i], reduced[i], t, needs,
                                               first_step=first_step),
                             ranks, lambda i, event: ctx.cluster.trace.record(event))
    tier = ctx.plan.where("grad32")
    for rank in ctx.ranks:
        rank.ledger_of(tier).free("grad32")


TOGETHER = 1 << 14  # elements of all ranks' regions at most, for `_update_together`


def _together(ctx, optimizer, grads32: list) -> bool:
    """Whether `_update_together` may step every local rank's region at once: an optimizer whose bits are each
    element's own wherever a call's region begins (`split_freely`: not DeepSpeedCPUAdam's tail), one worker
    that may stack ranks (`Cluster(N, stack_ranks=False)` keeps the loop it is checked against), no values kept, every
    rank's fp32 master, state and gradient host arrays of one dtype, rounding to nearest, and few elements in all (the
    copies in and out then cost less than a step's Python per rank: 10k parameters on 64 ranks)."""
    if (not optimizer.split_freely or not ctx.cluster.pool.stacks or ctx.cluster.trace.keep_values
            or ctx.policy.rounding != "nearest" or sum(g.size for g in grads32) > TOGETHER):
        return False
    for rank, g in zip(ctx.ranks, grads32):
        w = None if rank.master is None else rank.master.array
        if type(w) is not np.ndarray or type(g) is not np.ndarray or w.dtype != np.float32 or g.dtype != w.dtype:
            return False
        for b in rank.optim.values():  # a loop, not a generator per rank: 64 ranks' states
            state = b.array
            if type(state) is not np.ndarray or state.dtype != w.dtype:
                return False
    return len({tuple(rank.optim) for rank in ctx.ranks}) == 1


def _update_together(ctx, optimizer, grads32: list, t: int, needs, first_step: int) -> list:
    """`_update` on every local rank at once, where `_together` allows: the ranks' masters, gradients and state laid
    end to end, one optimizer step over them (elementwise: each element's bits are its own rank's step's,
    optim/_base.py), copied back, each rank's 16-bit params rounded from its master as `_round_into` does. Returns the
    ranks' `OptimizerStep` events, in rank order."""
    plan, layout, policy, ranks = ctx.plan, ctx.layout, ctx.policy, ctx.ranks
    masters = [rank.master.array for rank in ranks]
    states = [{k: b.array for k, b in rank.optim.items()} for rank in ranks]
    w, g = np.concatenate(masters), np.concatenate(grads32)
    work = {k: np.concatenate([s[k] for s in states]) for k in states[0]}
    optimizer.step(w, g, work, t, first_step=first_step)
    owns = [own_params(rank, plan, layout) for rank in ranks]
    # the 16-bit params rounded from every rank's master at once, as `_round_into` rounds each (NumPy's cast to
    # nearest: each element its own), where every rank's are host arrays of one dtype; else rank by rank
    at_once = all(type(own) is np.ndarray and own.dtype == owns[0].dtype for own in owns)
    if at_once:
        with np.errstate(over="ignore", invalid="ignore"):  # overflow to inf/NaN is the format's defined answer
            rounded = w.astype(owns[0].dtype)
    events, a, where = [], 0, plan.where("optimizer")
    for rank, master, state, own in zip(ranks, masters, states, owns):
        b = a + master.shape[0]
        master[...] = w[a:b]
        for k, array in state.items():
            array[...] = work[k][a:b]
        mine = plan.region(layout, rank.index)
        if at_once:
            own[...] = rounded[a:b]
        else:
            _round_into(own, master, policy, t, None)  # nearest: no draws
        events.append(optimizer_step_event(rank.index, t, mine.start, mine.stop, optimizer.name, needs, None, where))
        a = b
    return events


def _update(ctx, optimizer, specs, rank, g32, reduced, t, needs, step=None, first_step: int = 1) -> OptimizerStep:
    """Optimizer step on rank's region in the update format, then round into its 16-bit params; returns its
    `OptimizerStep` event for the caller to record. `step(w, state)` replaces the optimizer's own step (sharded
    Muon applies its slice of the update there)."""
    plan, layout, policy = ctx.plan, ctx.layout, ctx.policy
    keep = ctx.cluster.trace.keep_values
    # the gradient as the optimizer reads it, and as it was reduced (still loss-scaled, in the reduced format)
    values = {"grad32": g32.copy(), "reduced": np.array(reduced)} if keep else None
    state = {k: b.array for k, b in rank.optim.items()}
    scratch = None
    if rank.master is not None:
        w = rank.master.array  # (region,) fp32 master
    else:  # "pure": widen the 16-bit weights, update, round straight back (where updates get lost)
        scratch = rank.ledger.adopt("update scratch", master_of(rank, plan, layout, policy), "scratch")
        w = scratch.array
    with widened(state, w.dtype) as work:  # 16-bit stored state (optim_state): widened, stepped, rounded back
        if step is not None:
            step(w, work)
        elif optimizer.elementwise and values is None and isinstance(w, np.ndarray):
            step_in_blocks(optimizer, w, g32, work, t, first_step)  # cache-sized blocks: the same bits (optim/_base.py)
        elif optimizer.elementwise:
            optimizer.step(w, g32, work, t, values, first_step=first_step)
        else:  # a matrix optimizer on whole parameters: only where the region is the whole model
            from zerosim.optim import step_by_matrix

            step_by_matrix(optimizer, specs, w, g32, work, t)
    mine = plan.region(layout, rank.index)  # w's place in the flat vector (stochastic rounding draws by index)
    _round_into(own_params(rank, plan, layout), w, policy, t, layout.draw_index(mine))
    if scratch is not None:
        scratch.free()
    if keep:
        values["master"] = np.array(w)
        values["compute_after"] = own_params(rank, plan, layout).copy()
        # all it holds, before any refresh (seed 004's inconsistent model)
        values["params_held"] = rank.params.array.copy()
    return OptimizerStep(rank.index, t, mine.start, mine.stop, optimizer.name, needs, values,
                         where=plan.where("optimizer"))


def _round_into(own, w, policy, t: int, draws) -> None:
    """own[...] = policy.round_weights(w, t, draws): the updated weights into the rank's 16-bit (or fp32) params.
    Rounding to nearest from fp32 is NumPy's own cast (precision/cast/_reference.py `nearest_reference`: one
    `astype`, a copy when the dtypes match), and assigning casts with that same function, so the rounded copy
    is not made first (a pass over the region and an allocation fewer)."""
    if policy.rounding == "nearest" and type(w) is np.ndarray and type(own) is np.ndarray and w.dtype == np.float32:
        with np.errstate(over="ignore", invalid="ignore"):  # overflow to inf/NaN is the format's defined answer
            own[...] = w
    else:
        own[...] = policy.round_weights(w, t, draws)
