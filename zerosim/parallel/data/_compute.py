"""One op of the schedule on every local rank: the layer's compute, its `Compute` event, and its gradients kept.

The engine calls `compute` once per op (forward, loss, recompute, backward of one layer); on each rank it
runs the op on that rank's micro-batch in flight (models/_run.py, `Pass`), records what it cost and which
collective handles it waited for, and — in backward — hands the layer's fresh gradients to where the plan
keeps them (reduce.keep_grads: its arithmetic, `stage_grads`, on the workers with the op; its ledger record,
`adopt_grads`, after). The ranks' ops run on the cluster's pool (`Cluster(N, workers=k)`, cluster/_pool.py:
concurrently when k > 1, each rank's arithmetic unchanged); what they record reaches the log rank by rank, so
it reads as each rank's program in order, whatever the workers' order.

With one worker (the default), an op whose layer treats rows apart (Linear, ReLU, GELU, the half-MSE loss; a GPT's
and a Llama's units and LM loss, each sequence apart; under the portable kernels) runs once for every rank instead,
their micro-batches stacked row by row (models/_stacked.py), when every rank reads the same weights' bits (_gather.py
`shared_unit`, asked once per layer in a run: `shared_units`); each rank's rows come back to its `Pass`, every rank's
ledger events made in one call per tensor, its `Compute` events in one go, its gradients kept in one call
(cluster/_ledger.py `adopt_ranks`), and the log written in rank order at the end, each rank's events together, as the
loop makes them (cluster/_trace.py `Trace.record_ranks`; tests/test_stacked_ranks.py).
`Cluster(N, stack_ranks=False)` keeps the loop.
"""

from __future__ import annotations

from zerosim.cluster import ComputeFields, Handle, adopt_ranks
from zerosim.models import done as made
from zerosim.models import needs_params, run_stacked, stacks
from zerosim.parallel.data._gather import shared_units, unit_reader
from zerosim.parallel.data._reduce import adopt_grads, grads_name, grads_room, stage_grads, stage_grads_together
from zerosim.precision.arithmetic import arithmetic_of


def compute(ctx, model, passes: list, ops: list, needs, step: int, micro: int) -> None:
    """Run `ops` — one op of the schedule, or a run of ops with no collective between them (`runs`) — on every
    local rank (passes[i]: local rank i's micro-batch in flight); the first `Compute` event names `needs` (the
    handles its inputs came from), the later ones nothing, for iteration `step`, micro-step `micro`."""
    names = [model.layers[op.layer].name if op.layer >= 0 else "loss" for op in ops]
    reads = [needs_params(model, op) for op in ops]
    first = next((j for j, op in enumerate(ops) if op.computes), None)
    waited = [needs if j == first else Handle() for j in range(len(ops))]  # one per op, as the ranks share it
    if not ctx.cluster.pool.stacks or len(passes) < 2:  # (one rank hosted, the meta backend's: nothing to stack)
        _each_rank(ctx, model, passes, ops, names, reads, waited, step, micro)
        return
    shared = shared_units(ctx, model)  # each layer's replicas compared once in this run: nothing in it writes them
    for j, op in enumerate(ops):  # one worker runs a run op by op anyway: each op once for every rank where it may
        if not _stacked(ctx, model, passes, op, reads[j], names[j], waited[j], step, micro, shared):
            _each_rank(ctx, model, passes, [op], [names[j]], [reads[j]], [waited[j]], step, micro)


def _each_rank(ctx, model, passes: list, ops: list, names: list, reads: list, waited: list, step: int,
               micro: int) -> None:
    """`compute` rank by rank: each rank's `Pass.run` of each op on the pool (op by op, rank by rank, with one
    worker; on several, each rank's whole run on its thread), the events recorded in rank order."""
    ranks = ctx.ranks
    weights = [unit_reader(ctx, model, op.layer) if read else None for op, read in zip(ops, reads)]

    def run(i, j):  # on a worker: rank i's op j and its gradients' arithmetic, reading and writing rank i's arrays
        op = ops[j]
        done = passes[i].run(op, weights[j](ranks[i]) if reads[j] else {})
        if not done.grads:
            return done, None
        packed = stage_grads(ctx, model, ranks[i], op.layer, done.grads, micro == 0)
        # the layer's gradient arrays are not kept until the run's record (the (D_out, D_in) dW of every layer
        # alive at once, and fresh memory for each): what the record needs stays, the stage 2/3 packed copy
        return made(None, done.flops, done.bytes_read, done.bytes_written, done.values), packed

    log = ctx.cluster.trace.record

    def record(i, j, out):  # op by op, rank by rank, after the ranks ran: the events, as one thread makes them
        (done, packed), op = out, ops[j]
        if op.computes:
            log(ComputeFields((ranks[i].index, step, micro, op.layer, names[j], op.kind, done.flops,
                               done.bytes_read, done.bytes_written, waited[j], done.values)))
        adopt_grads(ranks[i], op.layer, packed)

    # (data-less arrays: nothing for the kernels to measure, and no kernel runs)
    prepare = arithmetic_of(passes[0].fmt).prepare if passes and ctx.cluster.backend.holds_values else None

    def before(j):  # what every rank's op j multiplies, for the kernels to measure together (a hint: no bit moves)
        tensors = [x for x in (work.multiplied(ops[j]) for work in passes) if x is not None]
        if tensors:
            prepare(tensors)

    ctx.cluster.pool.map_steps(run, ranks, len(ops), record, None if prepare is None else before)


def _stacked(ctx, model, passes, op, read: bool, name: str, waited, step: int, micro: int, shared) -> bool:
    """`compute` of one op as one computation for every rank (models/_stacked.py), where it may run: the op and
    tensors allow it and every rank reads the same weights (`shared`: the run's `shared_units`); each rank's events
    as the loop makes them. False where it did not run (nothing changed but, on a first micro-step at stages 0/1,
    gradients its backward wrote, which the loop then assigns: `grads_room`)."""
    if not stacks(passes, op, model):
        return False
    params = shared(op.layer) if read else {}
    # where every rank's gradients go, laid out before the backward, which writes them there: stages 2/3 packed,
    # stages 0/1 (the first micro-step) each rank's gradient buffer
    room = grads_room(ctx, model, op.layer, len(passes), passes[0].fmt, micro == 0) if (
        params is not None and op.kind == "backward") else None
    landing = None if params is None else run_stacked(passes, op, model, params, None if room is None else room[1])
    if landing is None:
        return False
    ranks, grads, made, n = ctx.ranks, landing.grads, landing.made, len(passes)
    # the op's `Compute` fields after the rank's, alike on every rank (one `Done` for all: the landing's)
    costs = (step, micro, op.layer, name, op.kind, made.flops, made.bytes_read, made.bytes_written, waited, None)
    columns = landing.events  # every rank's saved tensors adopted or freed already: its ledger events, by rank
    columns.append([ComputeFields((rank.index, *costs)) for rank in ranks])
    if grads:
        # stages 2/3 pack every rank's gradients in one go; else (or stages 0/1: accumulated, None) rank by rank
        packs = stage_grads_together(ctx, model, op.layer, grads, n, room)
        if packs is None:
            packs = [stage_grads(ctx, model, ranks[i], op.layer, landing.grads_of(i), micro == 0) for i in range(n)]
        if packs[0] is not None:  # kept as kind "grads" (`adopt_grads`, every rank at once): a unit's window is
            # the same on every rank, so all or none pack
            columns.append(adopt_ranks([rank.ledger for rank in ranks], [grads_name(op.layer) for _ in ranks], packs,
                                       "grads")[1])
    # each rank's row in rank order: its landing's events, its `Compute`, its gradients kept, as the loop makes them
    ctx.cluster.trace.record_ranks(columns, [rank.ledger.sink for rank in ranks])
    return True


def runs(ops, alone: bool) -> list:
    """The schedule's ops as the engine hands them to `compute`: [(index of the run's first op, [ops])]. One op
    at a time when something crosses ranks between ops (`alone`: stage 3's gathers, a bucketed reduction);
    else (stages 0/1 reducing once backward is done) the whole micro-step as one run, one pool handoff."""
    ops = list(ops)
    return [(i, [op]) for i, op in enumerate(ops)] if alone else [(0, ops)]
