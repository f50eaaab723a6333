"""Gradients on the move: kept locally (stages 0/1) or reduce-scattered unit by unit (stages 2/3).

Letters: N ranks, K micro-steps, s the shard, Ψ = N*s; a unit occupies [a, b) of the flat vector.
Averaging, accumulation formats and the collective's op come from _averaging.py (one place); this
file decides only *where* gradients go and *when* they travel. Each collective is one call over
every local rank at once and returns its `Handle`; what it reduced stays in each rank's buffers,
where `reduced` finds it (no value is handed over through a rank's fields).

With a `reduce_bucket_size` (_comm_schedule.py) units travel in buckets of adjacent units (_buckets.py),
sent as backward finishes them: at stages 2/3 every micro-step, at stages 0/1 during the last
micro-step's backward (as DDP's buckets and DeepSpeed's overlap_comm do; the earlier micro-steps only
accumulate). A bucket over [lo, hi) moves [lo, hi) ∩ shard_r for each rank r, so no element changes owner
or bits.
"""

from __future__ import annotations

import numpy as np

from zerosim import collectives
from zerosim.cluster import Handle
from zerosim.collectives import all_reduce, reduce_scatter
from zerosim.parallel.data.layouts import owned_slices
from zerosim.parallel.data.multinode import AGREEMENTS
from zerosim.precision import get_format
from zerosim.parallel.data import recipes as averaging  # averaging's one place (recipes/_averaging.py), by its face

# NOTE: the recipes' own collectives (DeepSpeed's bucket and aligned all-reduces, ZeRO++ qgZ, NCCL's and gloo's chunk
# maps) are imported where their recipe runs: a default engine never calls them (benchmarks/imports.py)

WIRE = "grads (wire format)"  # stages 0/1: the reduced gradient, when it travelled in another format than it is kept


def grads_name(layer: int) -> str:
    return f"layer {layer} grads"


def keep_grads(ctx, model, rank, layer: int, grads: dict, first: bool) -> None:
    """Where a unit's fresh gradients go on `rank` as backward makes them.

    Stages 0/1: accumulated into the rank's whole (Ψ,) gradient buffer, which lives across all K
    micro-steps (seed 001, "gradient accumulation buffers"). Stages 2/3: packed into a buffer of
    their own, kind "grads", until `reduce_unit` sends and frees it. (`stage_grads`, then `adopt_grads`.)
    """
    adopt_grads(rank, layer, stage_grads(ctx, model, rank, layer, grads, first))


def stage_grads(ctx, model, rank, layer: int, grads: dict, first: bool):
    """`keep_grads`'s arithmetic, which reads and writes only `rank`'s arrays and records nothing (so the pool's
    workers run it, parallel/data/_compute.py): stages 0/1 accumulate into the (Ψ,) buffer and return None; stages 2/3
    return the (b-a,) packed gradients (compute format) for `adopt_grads`."""
    a, b = ctx.layout.windows[layer]
    if b <= a:
        return None
    if ctx.plan.reduces_per_unit:
        return model.pack(layer, grads)  # (b-a,) compute format
    if getattr(rank.grads.array, "is_meta", False):  # data-less (meta backend): only the shapes and dtypes count
        averaging.accumulate(rank.grads.array[a:b], model.pack(layer, grads), first)
    else:
        # each tensor into its own view of the (Ψ,) buffer: element for element the accumulate of the packed
        # (b-a,) vector, without making it (packing was 14% of a 10M-parameter fp32 step, benchmarks/peers.py)
        for name, acc in model.unflatten(rank.grads.array[a:b], layer).items():
            averaging.accumulate(acc, grads[name], first)
    return None


def grads_room(ctx, model, layer: int, n: int, fmt, first: bool = False):
    """Where every local rank's gradients of `layer` will lie, before backward makes them, for the stacked backward
    to write them there (models/_stacked.py), so that no rank's gradients are made apart and copied after; None where
    the layer has none, or `fmt` is narrower than the products (16 and 8 bits): their gradients are rounded from a
    float32 product, a fresh array anyway, and copied after (a room made ahead of the backward only moved the copy,
    and it lifted a 919k bf16 step on 8 ranks from ~190 page faults to ~2,100 and 66 to 81 ms of CPU: the heap's
    layout).

    Stages 2/3: (packed (n, b-a) array of compute format `fmt`, its views by name, rank r's at [r]: models/_model.py
    `packed_ranks`). Stages 0/1, on the `first` micro-step only: (None, {name: [rank r's view of its (Ψ,) gradient
    buffer]}), where `stage_grads` would assign the gradients there (`accumulate`'s first micro-step: the same bits
    without a fresh array per rank and tensor and its copy: a 919k ZeRO-1 fp32 step on 8 ranks met ~4,400 minor page
    faults and ~97 ms of CPU, ~7 and ~83 ms so, benchmarks/peers.py's engine); later micro-steps add to it, so they
    make their gradients apart, and a stacked backward that gives up after writing there leaves the loop to assign
    them again."""
    a, b = ctx.layout.windows[layer]
    f = get_format(fmt)
    if b <= a or f.bits < 32:
        return None
    if ctx.plan.reduces_per_unit:
        return model.packed_ranks(layer, n, f.dtype)
    held = [rank.grads.array for rank in ctx.ranks]
    if not first or any(type(g) is not np.ndarray or g.dtype != f.dtype for g in held):
        return None  # a later micro-step adds; another accumulation format casts; data-less buffers
    views = [model.unflatten(g[a:b], layer) for g in held]  # each tensor's view of the buffer, as stage_grads's
    return None, {name: [v[name] for v in views] for name in views[0]}


def stage_grads_together(ctx, model, layer: int, grads: dict, n: int, room=None):
    """`stage_grads` of every local rank at once, from their gradients stacked (models/_stacked.py `Landing.grads`:
    {name: (n, ...)}, rank r's at [r]): stages 2/3's packed gradients, rank r's the row r of one (n, b-a) array (the
    elements `model.pack` makes of rank r's); None where this does not apply (stages 0/1, gradients that are a list
    per rank), and `stage_grads` runs rank by rank instead. `room` (`grads_room`): where the gradients are its views,
    written there by the backward, its array is the answer as it is (stages 0/1: n Nones, each rank's gradients in
    its buffer already, nothing to keep); else they are packed afresh (`pack_ranks`)."""
    a, b = ctx.layout.windows[layer]
    if b <= a:
        return None
    if room is not None and grads.keys() == room[1].keys() and all(grads[k] is v for k, v in room[1].items()):
        return list(room[0]) if room[0] is not None else [None] * n  # stages 0/1: in each rank's buffer already
    if not ctx.plan.reduces_per_unit:
        return None
    packed = model.pack_ranks(layer, grads, n)
    return None if packed is None else list(packed)


def adopt_grads(rank, layer: int, packed) -> None:
    """Stages 2/3: the packed gradients `stage_grads` made, into `rank`'s ledger as kind "grads" (None: nothing)."""
    if packed is not None:
        rank.ledger.adopt(grads_name(layer), packed, "grads")


def reduce_unit(ctx, layer: int, first: bool) -> Handle:
    """Stages 2/3: reduce-scatter unit `layer`'s gradients across ranks as soon as backward made them,
    accumulate each rank's piece into its (s,) gradient shard, free the unit's gradients (seed 004
    Stage 2, step 1c). Every micro-step, as DeepSpeed does. (An engine's `Hooks.reduce_unit`.)"""
    return reduce_units(ctx, [layer], first)


def reduce_units(ctx, layers: list, first: bool, last: bool = True) -> Handle:
    """Stages 2/3: one reduce-scatter for the gradients of `layers`, units whose windows are adjacent in
    the flat buffer (a bucket), over their joint window [lo, hi) with counts [lo, hi) ∩ shard_r: each
    element keeps its owner and its ring order, so a bucket changes no bit.

    Over shard groups (HSDP, MiCS) the reduce-scatter runs within each, and the replicas then agree as the plan
    says (_replicate.py AGREEMENTS): HSDP all-reduces the piece each micro-step (or keeps partial sums until the
    `last`), MiCS all-reduces the accumulated piece on the `last` micro-step. The recipe's collective picks the
    path (UNIT_REDUCTIONS): DeepSpeed ZeRO-2's bucket all-reduce, or the reduce-scatter to the owners."""
    return UNIT_REDUCTIONS[ctx.recipe.rules.collective](ctx, layers, first, last)


def _bucket_all_reduce_units(ctx, layers: list, first: bool, last: bool) -> Handle:
    """DeepSpeed ZeRO-2's default path: the units' parameters in ready order, each bucket all-reduced whole."""
    from zerosim.parallel.data.recipes import all_reduce_bucket, ready_order

    mine = [p for p in ready_order(list(ctx.params)) if p[0] in set(layers)]
    return all_reduce_bucket(ctx, mine, first, ctx.bucket_limit, held=True, free=list(layers))


def _scatter_units(ctx, layers: list, first: bool, last: bool) -> Handle:
    """The reduce-scatter to the owners: the units' gradients as one send (or ZeRO++ qgZ's, parameter by
    parameter), each rank's piece accumulated into its shard, the replicas agreeing, the units' buffers freed."""
    layers = _adjacent(ctx.layout, layers)
    if not layers:
        return Handle()
    names = [grads_name(x) for x in layers]  # (named once, not once a rank)
    held = [[rank.ledger.get(name) for name in names] for rank in ctx.ranks]
    if ctx.wire is not None and ctx.wire.wire.zero_quantized_gradients:  # ZeRO++ qgZ: parameter by parameter
        from zerosim.parallel.data.zeropp import reduce_params_qgz

        handle = reduce_params_qgz(ctx, layers, held, first)
        _free(held)
        return handle
    sends, bucket = _bucket(ctx, layers, held)
    handle, interleaved = _scatter_and_keep(ctx, layers, sends, first, last)
    _free((held if bucket is None else [[b] for b in bucket]) + [interleaved])
    return handle


UNIT_REDUCTIONS = {  # Recipe.collective -> how a bucket of units leaves its ranks at stages 2/3
    "reduce-scatter": _scatter_units,
    "bucket all-reduce": _bucket_all_reduce_units,
    "aligned all-reduce": _scatter_units,  # (BF16_Optimizer runs at stage 1 only: never here)
}


def _adjacent(layout, layers: list) -> list:
    """The units of `layers` that have gradients, sorted; refused unless their windows are adjacent."""
    layers = sorted(layer for layer in layers if layout.windows[layer][1] > layout.windows[layer][0])
    if layers:
        lo, hi = layout.windows[layers[0]][0], layout.windows[layers[-1]][1]
        if sum(layout.windows[x][1] - layout.windows[x][0] for x in layers) != hi - lo:
            raise ValueError(f"a gradient bucket must hold units adjacent in the flat buffer, got layers {layers}")
    return layers


def _bucket(ctx, layers: list, held: list) -> tuple:
    """(what each rank sends, the bucket buffers or None): one unit's own gradients, or several units' side by side
    in a bucket of their joint window (their own buffers freed once copied)."""
    if len(layers) == 1:
        return [h[0].array for h in held], None
    layout = ctx.layout
    lo, hi = layout.windows[layers[0]][0], layout.windows[layers[-1]][1]
    # (hi-lo,) compute fmt per rank: the units' gradients side by side, as DeepSpeed copies them into its
    # ipg bucket (stage_1_and_2.py, reduce_independent_p_g_buckets_and_remove_grads). NOTE: DeepSpeed keeps
    # one (two with overlap_comm) reduce_bucket_size buffer for the whole run; here only waiting grads count.
    bucket = [rank.ledger.alloc("grad bucket", hi - lo, h[0].array.dtype, "grads") for rank, h in zip(ctx.ranks, held)]
    for b, h in zip(bucket, held):
        for x, buf in zip(layers, h):
            a, z = layout.windows[x]
            b.array[a - lo : z - lo] = buf.array
            buf.free()
    return [b.array for b in bucket], bucket


def _scatter_and_keep(ctx, layers: list, sends: list, first: bool, last: bool) -> tuple:
    """The reduce-scatter of `sends` (the units' joint window [lo, hi) on every rank) within the shard groups, the
    replicas' agreement (_replicate.py AGREEMENTS), and each rank's piece accumulated into its gradient shard.
    Returns (the handle, the interleaved staging buffers for the caller to free)."""
    layout, policy, recipe, ranks = ctx.layout, ctx.policy, ctx.recipe, ctx.ranks
    lo, hi = layout.windows[layers[0]][0], layout.windows[layers[-1]][1]
    interleaved = []
    if not layout.sends_as_is:  # per-parameter chunks: reduce_scatter_coalesced's interleaved buffer, rank by rank
        staged = [layout.staged_for_wire(lo, hi, x, lambda n, dtype, r=rank: r.ledger.alloc("grads (interleaved)", n,
                                                                                            dtype, "grads"))
                  for rank, x in zip(ranks, sends)]
        sends, interleaved = [x for x, _ in staged], [buf for _, buf in staged if buf is not None]
    spans = owned_slices(layout, lo, hi, tuple(rank.index for rank in ranks))
    places = [rank.grads.array[span] for rank, span in zip(ranks, spans)]  # views of shards
    n, wire, agree = ctx.mesh.world.size, policy.reduce_format, AGREEMENTS[ctx.plan.replicate]  # N: data-parallel
    op = averaging.reduce_op(policy, n, recipe)
    kept = recipe.rules.after is None  # the recipe keeps the reduced piece as it arrives
    # the result lands in the shard itself: the first piece, kept as reduced, in the shard's dtype, one copy of it
    direct = first and kept and places[0].dtype == wire.dtype and ctx.plan.replicate is None
    name = " + ".join(ctx.names[x] for x in reversed(layers)) + " grads"
    with ctx.cluster.trace.about(purpose="reduce grads", layers=tuple(reversed(layers))):
        pieces = reduce_scatter(ctx.cluster, sends, op=op, wire=wire, counts=layout.range_counts(lo, hi), tag=name,
                                out=places if direct else None, group=ctx.mesh.shard)
        handle, q = pieces.handle, layout.owned_range(lo, hi, ranks[0].index)  # equal partitions: one q for all
        pieces, more, first = agree.after_scatter(ctx, pieces, q, first, last, name)  # HSDP: the replicas' all-reduce
        handle += more
    for place, piece in zip(places, pieces if pieces is not None else ()):
        if not direct:
            averaging.accumulate(place, averaging.after_reduce(piece, policy, n, recipe), first)
    if agree.at_boundary is not None and last:  # MiCS: at the boundary the replicas all-reduce what they accumulated
        with ctx.cluster.trace.about(purpose="reduce grads", layers=tuple(reversed(layers))):
            handle += agree.at_boundary(ctx, tuple(layers), q, name)
    return handle, interleaved


def _free(buffers: list) -> None:
    """Seed 004 stage 2, step 1c: a unit's gradients are freed as soon as they were sent."""
    for h in buffers:
        for buf in h:
            buf.free()


END_OF_BACKWARD = {"all_reduce": all_reduce, "reduce_scatter": reduce_scatter}  # Plan.end_of_backward -> the call
# GradientRecipe.allreduce -> its all-reduce in zerosim.collectives ("ring": END_OF_BACKWARD's, over the shards)
OWN_CHUNK_MAPS = {"nccl": "nccl_all_reduce", "gloo": "gloo_all_reduce"}


def reduce_range(ctx, lo: int, hi: int, how: str, layers: tuple) -> Handle:
    """Stages 0/1: `how` ("all_reduce" or "reduce_scatter") over [lo, hi) of every rank's gradient buffer,
    with counts [lo, hi) ∩ shard_r (none for the whole buffer: its chunks are the shards). Writes the result
    in place, or into a WIRE buffer when it travelled in another format (`reduced` finds either)."""
    cluster, layout, policy, recipe, ranks = ctx.cluster, ctx.layout, ctx.policy, ctx.recipe, ctx.ranks
    if recipe.rules.collective == "aligned all-reduce":  # DeepSpeed's BF16_Optimizer: the whole buffer, one call
        from zerosim.parallel.data.recipes import all_reduce_aligned

        return all_reduce_aligned(ctx, layers)
    if how == "reduce_scatter" and recipe.rules.collective == "bucket all-reduce":  # DeepSpeed ZeRO-1's default
        from zerosim.parallel.data.recipes import all_reduce_bucket, ready_order

        mine = [p for p in ready_order(list(ctx.params)) if p[0] in set(layers)] if layers else list(ctx.params)
        return all_reduce_bucket(ctx, mine, True, ctx.bucket_limit, held=False)  # the end of backward: flat order
    n, wire, group = ctx.mesh.world.size, policy.reduce_format, ctx.mesh.world  # the data-parallel ranks
    op = averaging.reduce_op(policy, n, recipe)
    whole = (lo, hi) == (0, layout.padded)
    counts = None if whole else layout.range_counts(lo, hi)  # each element keeps its owner: the same bits
    own_map = getattr(collectives, OWN_CHUNK_MAPS[recipe.allreduce]) if (
        how == "all_reduce" and recipe.allreduce in OWN_CHUNK_MAPS) else None
    with cluster.trace.about(purpose="reduce grads", layers=tuple(sorted(layers, reverse=True))):
        if own_map is not None:  # NCCL's and gloo's all-reduce: their own chunk maps, over the P elements
            hi = layout.num_params  # (the padding [P, Ψ) is zero on every rank and stays so)
            out = own_map(cluster, [r.grads.array[lo:hi] for r in ranks], op=op, wire=wire, tag="grads")
        else:
            out = END_OF_BACKWARD[how](
                cluster, [r.grads.array[lo:hi] for r in ranks], op=op, wire=wire, tag="grads", counts=counts,
                group=group,
            )
    for rank, result in zip(ranks, out):
        result = averaging.after_reduce(result, policy, n, recipe)
        grads, own = rank.grads.array, _region(layout, rank.index, how)
        region = slice(lo, hi) if how == "all_reduce" else _shifted(own, layout.owned_range(lo, hi, rank.index))
        if result.dtype == grads.dtype:  # in place, in its own part of the gradient buffer, as DDP and DeepSpeed do
            grads[region] = result
            continue
        if WIRE not in rank.ledger.live:  # it travelled in another format: a buffer of its own
            rank.ledger.alloc(WIRE, own.stop - own.start, result.dtype, "grads", fill=0)  # (Ψ,) or (s,) wire fmt
        rank.ledger.get(WIRE).array[region.start - own.start : region.stop - own.start] = result
    return out.handle


def reduce_gradients(ctx, how: str | None, bucketed: bool, last: Handle) -> tuple:
    """The end-of-backward reduction: all-reduce the whole gradient buffer (stage 0, and stage 1 with a matrix
    optimizer) or reduce-scatter it (stage 1) in one call — unless it was reduced already, unit by unit (`how`
    None: stages 2/3) or bucket by bucket during the last backward (`bucketed`), whose last call was `last`.
    Returns (the handle the optimizer waits for, each rank's reduced gradient region: `reduced`)."""
    if how is not None and not bucketed:
        for lo, hi, layers in _end_ranges(ctx):
            last = reduce_range(ctx, lo, hi, how, layers)
    return last, reduced(ctx, how)


def _end_ranges(ctx) -> list:
    """[(lo, hi, layers)] the end-of-backward collective runs over: the whole buffer in one call, or one call a unit
    with parameters (`plan.end_by_unit`: FSDP2's post_backward per group after a pipeline's last backward, torch 2.13
    pipelining/stage.py `perform_reduce_grad`, over `_state_ctx.all_states` in model order). A unit's window is a run
    of whole parameters in every layout, and each element keeps its owner: the same bits as one call."""
    if not ctx.plan.end_by_unit:
        return [(0, ctx.layout.padded, ())]
    return [(a, b, (layer,)) for layer, (a, b) in enumerate(ctx.layout.windows) if b > a]


def reduced(ctx, how: str | None) -> list:
    """Each local rank's reduced (accumulated, not yet averaged) gradient over the region it updates, a view:
    its gradient shard (stages 2/3), the WIRE buffer when the reduction changed format, else its part of the
    gradient buffer the reduction wrote in place."""
    out = []
    for rank in ctx.ranks:
        if how is None:
            out.append(rank.grads.array)
        elif WIRE in rank.ledger.live:
            out.append(rank.ledger.get(WIRE).array)
        else:
            out.append(rank.grads.array[_region(ctx.layout, rank.index, how)])
    return out


def _region(layout, rank: int, how: str) -> slice:
    """Where a rank's result of `how` lives in the flat buffer: all of it (all-reduce), or its shard."""
    return slice(0, layout.padded) if how == "all_reduce" else layout.own(rank)


def _shifted(own: slice, piece: tuple) -> slice:
    """A piece in shard coordinates, as a slice of the flat buffer."""
    return slice(own.start + piece[0], own.start + piece[1])
