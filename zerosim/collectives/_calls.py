"""The ring collectives as callers see them: reduce-scatter, all-gather and all-reduce over every local rank.

Each public function checks its inputs on every rank (and agrees on lengths and dtypes with every
rank through the backend), opens a call in the trace, stages the inputs in the wire format
(_staging.py), lets a phase move the data — the ring hop by hop (_ring.py), its in-process twin
(_fast.py), or the backend itself (the meta backend's closed form, MPI's own reduce-scatter) — and
closes the call. It returns one array per local rank, as a list that also carries the collective's
`handle` (the trace calls it recorded: `staging.Collected`). Letters: N ranks, L elements per rank.

Every collective takes `group=`: a `zerosim.cluster.Groups` (N ranks cut into equal groups, each in its ring
order: every rank's shard group, node, ...). Each group then runs its own ring of n = group size ranks, all at
once, in one call: rank r's chunk is its *position* p in its group, and "N" below reads n. The default is the
world, one ring of all N ranks in rank order: the flat cluster, unchanged.
"""

from __future__ import annotations

import numpy as np

from zerosim.collectives import _fast
from zerosim.collectives._checks import check_counts, check_group, check_inputs, require_same, require_same_meta
from zerosim.collectives._ops import get_op
from zerosim.collectives._shards import ShardLayout, chunk_bounds, counts_total
from zerosim.collectives._staging import Collected, check_out, free, phases, stage, wire_format


def reduce_scatter(cluster, tensors, op: str = "sum", wire=None, tag: str = "", counts=None, out=None,
                   group=None, _name: str = "reduce_scatter") -> list:
    """Ring reduce-scatter of one flat array per local rank; rank r receives chunk r of the reduction.

    Any length L works (also L < N and L == 0): buffers are zero-padded to a multiple of N, and rank
    r's result holds only its real elements (`ShardLayout(L, N).real_size(r)`), so padding never
    leaks. With `counts` (N integers summing to L) chunk r has `counts[r]` elements instead, as in
    MPI's Reduce_scatter; ZeRO uses this for one layer's window of a sharded flat buffer.

    `wire` is the format on the wire (default: the inputs' own); inputs are rounded to it first, and
    every hop rounds to it. `op` is one of "sum", "max", "avg", "avg_predivide", "avg_premul", or a
    `ReduceOp` (see `zerosim.collectives._ops`). Returns one array per local rank (in the wire dtype, fp32 for "avg");
    temporary buffers go through each rank's ledger as kind "comm". `out` (one array per local rank,
    of its result's shape, in the wire dtype; not with "avg", whose result is a new fp32 array) receives
    the results in place of new arrays: a ZeRO engine passes its own gradient shard.
    Over `group` (a `Groups`; default the world) each group reduces on its own ring and the rank at position p
    receives chunk p; counts are then one per position.
    """
    what = _name.replace("_", "-")
    reduce_op = get_op(op)
    group = check_group(cluster, group, what)
    arrays = check_inputs(cluster, tensors, what)
    wire_fmt = wire_format(arrays, wire)
    meta = cluster.backend.all_meta([(a.shape[0], fmt.name) for (_, a, fmt) in arrays])
    require_same_meta(meta, what, ("length", "dtype"))
    length, n = meta[0][0], group.size
    layout = ShardLayout(length, n)
    if counts is not None:
        counts = check_counts(counts, n, what)
        if counts_total(counts) != length:
            raise ValueError(f"{what}: counts {list(counts)} add up to {sum(counts)}, but the buffers hold {length} "
                             "elements")
    padded = length if counts is not None else layout.padded
    bounds = chunk_bounds(layout, counts)
    if out is not None:
        sizes = counts if counts is not None else [stop - start for start, stop in bounds]  # chunk p's elements
        out = check_out(cluster, out, sizes, wire_fmt, what, reduce_op.name == "avg", group)
    call = cluster.trace.begin(_name, reduce_op.name, n, padded, wire_fmt.name, tag, group)
    staged, temps = stage(cluster, call, arrays, reduce_op, wire_fmt, length, padded, n)
    phase = phases(cluster)[0]  # the backend's own, the chunk-order shortcut, or the ring
    # NOTE: a 16-bit sum may overflow to inf on the wire, as on a GPU, silently: engines detect it afterwards
    # (count_nonfinite, loss scaling); numpy's warning would only be noise
    with np.errstate(over="ignore", invalid="ignore"):
        results, acc = phase(cluster, staged, reduce_op, wire_fmt, bounds, call, out=out, **_over(group))
    free(temps + acc)
    cluster.trace.end(call)
    handle = cluster.trace.handle(call)
    if out is not None:  # a backend that made new arrays (MPI's own reduce-scatter): copy them in
        for o, r in zip(out, results):
            if r is not o:
                o[...] = r
        return Collected(out, handle)
    keep = counts if counts is not None else layout.real_sizes()
    ns = cluster.backend.xp  # "avg" widens where the arrays live
    return Collected(
        [reduce_op.post(chunk[: keep[group.position(rank.index)]], n, ns)
         for rank, chunk in zip(cluster.ranks, results)],
        handle,
    )


def all_gather(
    cluster, shards, wire=None, tag: str = "", counts=None, out=None, group=None, _name: str = "all_gather",
    _length=None, shared: bool = False
) -> list:
    """Ring all-gather: every rank receives the concatenation of all ranks' shards, in rank order.

    Without `counts`, shards must be equal in size or follow reduce-scatter's layout for an unpadded
    length L (ceil(L/N) each, the last ones shorter or empty; they travel padded to equal size and
    the result has exactly L elements). With `counts`, rank r's shard must hold `counts[r]` elements
    (an all-gather-v; ZeRO-3 uses it to gather one layer's window). Other sizes are a clear error.
    `out` (one array per local rank, of the result's shape and the wire dtype) receives the results.
    NOTE: on the meta backend's representative rank the other ranks' sizes are not seen: they are taken
    to be `counts`, or equal to the representative's (or reduce-scatter's layout of `_length`).
    Over `group` (a `Groups`; default the world) each group gathers its members' shards in its ring order;
    counts are one per position, the same in every group.
    `shared`: the ranks only read what they receive, so every rank of a ring may be handed the same immutable
    array (where sends are references, the in-process twin: one copy per ring instead of one per rank, which the
    portable kernels know by address, not by content); elsewhere each rank receives its own, as without it.
    """
    what = _name.replace("_", "-")
    group = check_group(cluster, group, what)
    arrays = check_inputs(cluster, shards, what)
    wire_fmt = wire_format(arrays, wire)
    meta = cluster.backend.all_meta([(a.shape[0], fmt.name) for (_, a, fmt) in arrays])
    require_same([m[1] for m in meta], what, "dtype")
    everyone, n = [m[0] for m in meta], group.size
    bounds, total, length, by_position = _gather_sizes(cluster, group, everyone, counts, _length, what)
    if out is not None:
        if total != length:
            raise ValueError(f"{what}: out= needs shards that are not padded (equal sizes, or counts), got a padded "
                             f"{total} for {length}")
        out = check_out(cluster, out, [length] * n, wire_fmt, what, False, group)
    call = cluster.trace.begin(_name, "gather", n, total, wire_fmt.name, tag, group)
    padded, temps = _stage_shards(cluster, call, group, arrays, wire_fmt, bounds, by_position)
    phase = phases(cluster)[1]  # the backend's own, the chunk-order shortcut, or the ring
    share = {"shared": True} if shared and out is None and phase is _fast.all_gather_phase else {}
    full = phase(cluster, padded, bounds, total, wire_fmt, call, out=out, **_over(group), **share)
    free(temps)
    cluster.trace.end(call)
    handle = cluster.trace.handle(call)
    if out is not None:
        for o, f in zip(out, full):
            if f is not o:
                o[...] = f
        return Collected(out, handle)
    if share and length == total:  # nothing to cut: each ring's one immutable copy is every member's result
        return Collected(full, handle)
    if share:  # the ranks that share one immutable copy share its one view too (a reader may know it by identity)
        views = {}
        return Collected([views[id(f)] if id(f) in views else views.setdefault(id(f), f[:length]) for f in full],
                         handle)
    return Collected([f[:length] for f in full], handle)


def _gather_sizes(cluster, group, everyone: list, counts, _length, what: str) -> tuple:
    """The all-gather's chunks from the shards' sizes (or `counts`), checked: (bounds, total sent per rank with
    padding, length of the result, each ring position's chunk size when every rank is here and counts say it)."""
    n = group.size
    partial = len(everyone) < cluster.world_size  # a representative rank (meta backend) sees only the ranks it hosts
    sizes = everyone if partial else _by_position(everyone, group, what)
    by_position = None  # each ring position's chunk size, when every rank is here and counts say it
    if counts is not None:
        counts = check_counts(counts, n, what)
        by_position = None if partial else list(counts)
        if sizes != ([counts[group.position(r.index)] for r in cluster.ranks] if partial else by_position):
            raise ValueError(f"{what}: mismatched shard sizes {sizes}; counts say {list(counts)}")
        bounds, total, length = chunk_bounds(None, counts), counts_total(counts), counts_total(counts)
    else:
        if partial:  # the ranks it stands for: reduce-scatter's layout of _length, or equal shards
            sizes = ShardLayout(_length, n).real_sizes() if _length is not None else sizes[:1] * n
        try:
            layout = ShardLayout.from_shard_sizes(sizes)
        except ValueError as e:
            raise ValueError(f"{what}: {e}") from None
        bounds, total, length = chunk_bounds(layout, None), layout.padded, layout.length
    return bounds, total, length, by_position


def _stage_shards(cluster, call: int, group, arrays, wire_fmt, bounds, by_position) -> tuple:
    """Each local rank's shard as it travels: its own array when already in the wire format and chunk size, else a
    re-typed and/or zero-padded copy on its ledger (kind "comm"); (shards, temporary buffers)."""
    if by_position is not None and all(fmt is wire_fmt or fmt == wire_fmt for (_, _, fmt) in arrays):
        return [a for (_, a, _) in arrays], []  # every shard its position's count (`_gather_sizes` saw it): as it is
    padded, temps = [], []
    # each local rank's position on its ring (all of them, in rank order, when every rank is local)
    local = cluster.local_size == cluster.world_size
    positions = group.ring_order[1] if local else [group.position(rank.index) for rank in cluster.ranks]
    for rank, p, (_, a, fmt) in zip(cluster.ranks, positions, arrays):
        want = by_position[p] if by_position is not None else bounds[p][1] - bounds[p][0]
        if (fmt is wire_fmt or fmt == wire_fmt) and a.shape[0] == want:
            padded.append(a)  # read only
            continue
        buf = rank.ledger.alloc(f"call{call}.staged", want, wire_fmt.dtype, "comm")  # re-typed and/or padded copy
        buf.array[: a.shape[0]] = a if fmt == wire_fmt else cluster.backend.xp.cast(a, wire_fmt)
        buf.array[a.shape[0] :] = 0  # a short last shard travels padded with zeros
        padded.append(buf.array)
        temps.append(buf)
    return padded, temps


def all_reduce(cluster, tensors, op: str = "sum", wire=None, tag: str = "", counts=None, group=None) -> list:
    """Ring all-reduce = reduce-scatter then all-gather (2(N-1) steps); any shape, returned as given.

    With op="avg" the division by N happens after the gather, in fp32, so the wire carries the wire
    dtype in both phases. With `counts` (flat inputs only) chunk r holds `counts[r]` elements in both
    phases: a ZeRO engine's bucket keeps each element with the rank that owns it in the whole buffer.
    Over `group` each group all-reduces on its own ring (n = group size replaces N).
    """
    group = check_group(cluster, group, "all-reduce")
    arrays = check_inputs(cluster, tensors, "all-reduce", flat=False)
    require_same([tuple(m) for m in cluster.backend.all_meta([a.shape for (_, a, _) in arrays])], "all-reduce", "shape")
    shape = arrays[0][1].shape
    flat = [a.reshape(-1) for (_, a, _) in arrays]
    reduce_op = get_op(op)
    summed = reduce_scatter(
        cluster,
        flat,
        op="sum" if reduce_op.name == "avg" else reduce_op,
        wire=wire,
        tag=tag,
        counts=counts,
        group=group,
        _name="all_reduce",
    )
    full = all_gather(
        cluster,
        summed,
        tag=tag,
        counts=counts,
        group=group,
        _name="all_reduce",
        _length=None if counts is not None else flat[0].shape[0],
    )
    return Collected([reduce_op.post(f, group.size, cluster.backend.xp).reshape(shape) for f in full],
                     summed.handle + full.handle)


def _over(group) -> dict:
    """The phases' keyword for `group`: none for the world, so a backend's own phase written before groups
    existed still runs the flat cluster."""
    return {} if group.is_world else {"group": group}


def _by_position(sizes: list, group, what: str) -> list:
    """Every rank's shard size (rank order) -> the sizes by position in the ring, which every group must share."""
    if group.is_world:
        return list(sizes)
    by_group = [[sizes[r] for r in members] for members in group.members]
    for other in by_group[1:]:
        if other != by_group[0]:
            raise ValueError(f"{what}: the groups of {group!r} pass different shard sizes ({by_group[0]} and {other}); "
                             "every group gathers the same layout")
    return by_group[0]


