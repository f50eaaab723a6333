"""Gradients on the move: kept locally (stages 0/1) or reduce-scattered unit by unit (stages 2/3).

Letters: N ranks, K micro-steps, s = ceil(P/N), Ψ = N*s; a unit occupies [a, b) of the flat vector.
Averaging, accumulation formats and the collective's op come from averaging.py (one place); this
file decides only *where* gradients go and *when* they travel. Each collective is one call over
every local rank at once.
"""

from __future__ import annotations

from zerosim.zero import averaging


def grads_name(layer: int) -> str:
    return f"layer {layer} grads"


def keep_grads(engine, rank, layer: int, grads: dict, first: bool) -> None:
    """Where a unit's fresh gradients go on `rank` as backward makes them.

    Stages 0/1: accumulated into the rank's whole (Ψ,) gradient buffer, which lives across all K
    micro-steps (seed 001, "gradient accumulation buffers"). Stages 2/3: packed into a buffer of
    their own, kind "grads", until `reduce_unit` sends and frees it.
    """
    a, b = engine.layout.windows[layer]
    if b <= a:
        return
    packed = engine.model.pack(layer, grads)  # (b-a,) compute format
    if engine.plan.shards_grads:
        rank.ledger.adopt(grads_name(layer), packed, "grads")
    else:
        averaging.accumulate(rank.grads.array[a:b], packed, first)


def reduce_unit(engine, layer: int, first: bool) -> tuple:
    """Stages 2/3: reduce-scatter unit `layer`'s gradients across ranks as soon as backward made them,
    accumulate each rank's piece into its (s,) gradient shard, free the unit's gradients (seed 004
    Stage 2, step 1c). Every micro-step, as DeepSpeed does. Returns the call number."""
    cluster, layout, policy = engine.cluster, engine.layout, engine.precision
    a, b = layout.windows[layer]
    if b <= a:
        return ()
    held = [rank.ledger.get(grads_name(layer)) for rank in cluster.ranks]
    places = [rank.grads.array[slice(*layout.owned_piece(layer, rank.index))] for rank in cluster.ranks]  # views of each shard
    op, wire = averaging.wire_op(policy), policy.reduce_format
    direct = first and places[0].dtype == wire.dtype and op != "avg"  # the result lands in the shard itself: no copy
    calls = len(cluster.trace.calls)
    name = f"{engine.model.layers[layer].name} grads"
    with cluster.trace.about(purpose="reduce grads", layers=(layer,)):
        pieces = cluster.reduce_scatter([h.array for h in held], op=op, wire=wire, counts=layout.counts(layer), tag=name,
                                        out=places if direct else None)
    for place, piece, h in zip(places, pieces, held):
        if not direct:
            averaging.accumulate(place, piece, first)
        h.free()  # seed 004 stage 2, step 1c: freed at once
    return tuple(range(calls, len(cluster.trace.calls)))


def reduce_all(engine) -> tuple:
    """The end-of-backward reduction of stages 0/1 (none at 2/3): all-reduce the whole gradient buffer
    (stage 0, and stage 1 with a matrix optimizer) or reduce-scatter it (stage 1). Sets each rank's
    `reduced` to its region of the result. Returns the call numbers."""
    cluster, layout, policy, plan = engine.cluster, engine.layout, engine.precision, engine.plan
    how = plan.final_reduction(engine.optimizer.elementwise)
    if how is None:
        for rank in cluster.ranks:
            rank.reduced = rank.grads.array
        return ()
    calls = len(cluster.trace.calls)
    wire, op = policy.reduce_format, averaging.wire_op(policy)
    with cluster.trace.about(purpose="reduce grads", layers=()):
        if how == "all_reduce":
            out = cluster.all_reduce([r.grads.array for r in cluster.ranks], op=op, wire=wire, tag="grads")
        else:
            out = cluster.reduce_scatter([r.grads.array for r in cluster.ranks], op=op, wire=wire, tag="grads")
    for rank, result in zip(cluster.ranks, out):
        place = rank.grads.array if how == "all_reduce" else rank.grads.array[layout.own(rank.index)]
        if result.dtype == place.dtype:  # in place, in its own part of the gradient buffer, as DDP and DeepSpeed do
            place[...] = result
            rank.reduced = place
        else:  # it travelled in another format: a buffer of its own until the end of the step
            rank.reduced = rank.ledger.adopt("grads (wire format)", result, "grads").array
    return tuple(range(calls, len(cluster.trace.calls)))
