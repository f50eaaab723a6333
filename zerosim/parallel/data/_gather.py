"""Parameters on the move: ZeRO-3 gathers a unit before each use and releases it after; stages 1/2 refresh.

Letters: N ranks, s the shard; a unit (model layer) occupies the window [a, b) of the flat vector, and rank r
owns window ∩ its shard (_flat.py; a run of whole parameters' chunks with _partition.py). Each function runs ONE
collective call over every local rank at once (one array per local rank in, one out) and returns its `Handle`.

Many nodes (S ranks per group, M = N / S; _groups.py):

    shard groups (HSDP, MiCS)  a unit is gathered within each shard group (S shards)
    hierarchical (MiCS)        across nodes first, then within each node: mics.py
                               `MiCS_Init._hierarchical_all_gather_params`
    a secondary piece          after forward a rank keeps the piece of the gathered unit its position in a group
      (hpZ, FSDP2's int)       of S consecutive ranks covers — the primary shards p·M .. (p+1)·M − 1, in shard order:
                               DeepSpeed `_partition_param_sec` (partition_parameters.py), FSDP2
                               `FSDPParam.to_sharded_post_forward` (`all_gather_outputs[0].narrow(0, numel/S·rank,
                               numel/S)`) — and later gathers of the unit run within that group from it, the same
                               bits in the same order. hpZ keeps it until the step (`invalidate_secondary_tensor`
                               in `_post_step`), FSDP2 until the backward gather (`to_unsharded` frees it).
"""

from __future__ import annotations

import numpy as np

from zerosim.cluster import Handle
from zerosim.collectives import Collected, all_gather
from zerosim.parallel.data._comm_schedule import allgather_pieces
from zerosim.parallel.data.layouts import FlatLayout, owned_slices


def gathered_name(layer: int) -> str:
    return f"layer {layer} params (gathered)"


def secondary_name(layer: int) -> str:
    return f"layer {layer} params (secondary)"


def gather(ctx, layer: int) -> Handle:
    """ZeRO-3: all-gather unit `layer`'s window from every rank's params shard (seed 004 Stage 3, "gather").

    Each rank adopts its (b - a,) compute-format copy (N·Σc_p in shard order with per-parameter partitions,
    padding included, as DeepSpeed gathers it) into its ledger as kind "params", until `release`. Within the
    shard groups (HSDP, MiCS: across nodes first with MiCS's hierarchy), or from the secondary piece where the
    ranks keep one (hpZ, FSDP2's reshard to a group); in fewer bits over the world with a quantized wire."""
    if ctx.wire is not None and ctx.wire.wire.gathers_quantized:  # ZeRO++ qwZ or torchao's fp8 all-gather
        from zerosim.parallel.data.zeropp import gather_quantized

        return gather_quantized(ctx, layer, gathered_name(layer))
    layout, ranks, tag = ctx.layout, ctx.ranks, f"{ctx.names[layer]} params"
    with ctx.cluster.trace.about(purpose="gather params", layers=(layer,)):
        if secondary_name(layer) in ranks[0].ledger.live:
            windows = _from_secondary(ctx, layer, tag)
        else:
            # each rank's piece of the unit: its window's [lo, hi) ∩ the rank's shard
            spans = owned_slices(layout, *layout.windows[layer], tuple(rank.index for rank in ranks))
            pieces = [rank.params.array[span] for rank, span in zip(ranks, spans)]
            gather_over = _hierarchical if ctx.plan.hierarchical_gather else _within_shard_groups
            windows = gather_over(ctx, pieces, layout.counts(layer), tag)
    name = gathered_name(layer)
    for rank, window in zip(ranks, windows):
        rank.ledger.adopt(name, window, "params")  # (b-a,) compute fmt, until released
    return windows.handle


def _within_shard_groups(ctx, pieces, counts, tag):
    # shared: a rank only reads its gathered window (layers read weights, never write them), so the ranks of a shard
    # group may hold one immutable copy in this process (collectives/_fast.py `frozen`)
    return all_gather(ctx.cluster, pieces, counts=counts, tag=tag, group=ctx.mesh.shard, shared=True)


def _hierarchical(ctx, pieces, counts, tag):
    """MiCS's hierarchical all-gather (equal partitions of c): across the nodes a shard group spans (each rank
    gathers its GPU slot's M pieces), then within each node (each gathers its G slots' M pieces), then the
    pieces laid out node-major: position m·G + slot, the shard group's order (mics.py, `_hierarchical_all_gather_
    params`: `inter_outputs`, then `param_tensors[i].view((inter_node_size, intra_node_size, ...))`)."""
    cluster, inter, intra, c = ctx.cluster, ctx.mesh.inter, ctx.mesh.intra, counts[0]
    across = all_gather(cluster, pieces, counts=(c,) * inter.size, tag=tag + " (across nodes)", group=inter)
    within = all_gather(cluster, list(across), counts=(c * inter.size,) * intra.size, tag=tag + " (within nodes)",
                        group=intra)
    if cluster.backend.holds_values:  # (G, M, c) slot-major -> (M, G, c) node-major; data-less arrays have no order
        within = Collected([w.reshape(intra.size, inter.size, c).transpose(1, 0, 2).reshape(-1) for w in within],
                           within.handle)
    return Collected(list(within), across.handle + within.handle)


def keep_secondary(ctx, layer: int) -> None:
    """After forward: every rank copies its secondary piece out of the gathered window (kind "secondary")."""
    counts, secondary = ctx.layout.counts(layer), ctx.mesh.secondary
    m = len(counts) // secondary.size
    for rank in ctx.ranks:
        p = secondary.position(rank.index)
        a, b = sum(counts[: p * m]), sum(counts[: (p + 1) * m])
        window = rank.ledger.get(gathered_name(layer)).array
        rank.ledger.adopt(secondary_name(layer), window[a:b].copy(), "secondary")  # (Σ counts of M shards,)


def _from_secondary(ctx, layer: int, tag: str):
    """Gather unit `layer` within the secondary groups from the pieces kept after forward; FSDP2 frees them."""
    counts, secondary = ctx.layout.counts(layer), ctx.mesh.secondary
    m = len(counts) // secondary.size
    per_position = tuple(sum(counts[p * m:(p + 1) * m]) for p in range(secondary.size))
    pieces = [rank.ledger.get(secondary_name(layer)).array for rank in ctx.ranks]
    windows = all_gather(ctx.cluster, pieces, counts=per_position, tag=tag + " (secondary)", group=secondary)
    if ctx.plan.reshard.piece_until_backward:  # FSDP2: to_unsharded frees the post-forward piece
        for rank in ctx.ranks:
            rank.ledger.free(secondary_name(layer))
    return windows


def release(ctx, layer: int) -> None:
    """ZeRO-3: free every rank's gathered copy of unit `layer` (seed 004: "free")."""
    name = gathered_name(layer)
    for rank in ctx.ranks:
        rank.ledger.free(name)


def unit_weights(ctx, model, rank, layer: int) -> dict:
    """Layer `layer`'s weights by name as `rank` reads them: views of its whole params buffer, or (when the plan
    shards params) of the copy just gathered, in model order again (a copy for per-parameter chunks)."""
    if ctx.plan.gathers_params:
        window = rank.ledger.get(gathered_name(layer)).array
        return model.unflatten(ctx.layout.from_wire(*ctx.layout.windows[layer], window), layer)
    return model.unflatten(rank.params.array[: model.num_params], layer)  # views, no copy


def unit_reader(ctx, model, layer: int):
    """`rank -> unit_weights(ctx, model, rank, layer)`, with what every rank shares looked up once: an op reads the
    same layer on every rank (_compute.py). Where the layout copies on the way back to model order (per-parameter
    chunks), or the window is not exactly the layer's, each rank takes `unit_weights` itself."""
    a, b = model.layer_window(layer)
    if not ctx.plan.gathers_params or type(ctx.layout) is not FlatLayout or tuple(ctx.layout.windows[layer]) != (a, b):
        return lambda rank: unit_weights(ctx, model, rank, layer)
    name = gathered_name(layer)
    views = [(s.name, s.offset - a, s.offset - a + s.size, s.shape) for s in model.layer_specs(layer)]

    def read(rank) -> dict:  # what model.unflatten makes of the (b - a,) gathered window: views, by name
        window = rank.ledger.get(name).array
        if window.shape != (b - a,):
            return unit_weights(ctx, model, rank, layer)  # let unflatten say what is wrong
        if getattr(window, "is_meta", False):  # a data-less window: the twin's own unflatten, its views remembered
            return model.unflatten(window, layer)
        return {key: window[start:stop].reshape(shape) for key, start, stop, shape in views}

    return read


def shared_unit(ctx, model, layer: int) -> dict | None:
    """Layer `layer`'s weights by name as every local rank reads them, where all read the same bits (one computation
    may then serve every rank: models/_stacked.py): rank 0's `unit_weights`, once every rank's gathered window is
    seen to be the one copy a ring shares (collectives/_fast.py `frozen`) or its weights equal rank 0's bit for bit;
    None where any rank's differ."""
    ranks, read = ctx.ranks, unit_reader(ctx, model, layer)
    first = read(ranks[0])
    if ctx.plan.gathers_params:
        name = gathered_name(layer)
        window = ranks[0].ledger.get(name).array
        where = _where(window)
        # one copy, read by every rank: the very array (a ring's shared window, the common case), or views alike
        held = [rank.ledger.live.get(name) for rank in ranks]  # each rank's buffer, as `get` finds it
        if all(buf is not None and (buf.array is window or _where(buf.array) == where) for buf in held):
            return first
    for rank in ranks[1:]:
        theirs = read(rank)
        if any(not _same_bits(a, theirs[k]) for k, a in first.items()):
            return None
    return first


def shared_units(ctx, model):
    """`layer -> shared_unit(ctx, model, layer)` for one run of ops handed to `compute` (_compute.py), each layer's
    replicas compared once in it, not once per op: at stages 0/1 a micro-step is one run, so a layer's forward,
    recompute and backward read one answer (the comparison, every rank's whole replica read against rank 0's, was ~5 %
    of a ZeRO-1 fp32 step at 919k / N = 8 and ~4 % at 10M / N = 4, twice per layer: benchmarks/peers.py).

    Kept for that run alone, because nothing in it writes a rank's params: its ops' layers read their weights and
    write activations and gradients (models/_stacked.py, models/_run.py; a recompute reads them as the forward did),
    and their gradients go to the ranks' gradient buffers (_reduce.py `stage_grads`); the pool stacks nothing with
    several workers. What writes them runs outside it: the update and the refresh after the micro-steps
    (`ZeroEngine.finish`, _update.py, `refresh`), the user between steps, and between runs whatever the engine calls
    out to (`ZeroEngine.run`: a gather, a hook's `reduce_unit`, a parallelism's `before_unit` and `after_unit`), so
    each run starts with nothing known. The answer stays `shared_unit`'s: rank 0's views, or None where a rank's
    weights differ (each rank then reads its own, op after op)."""
    answers = {}

    def shared(layer: int) -> dict | None:
        if layer not in answers:
            answers[layer] = shared_unit(ctx, model, layer)
        return answers[layer]

    return shared


def _where(a) -> tuple:
    """Where `a`'s elements lie in memory: two arrays alike here are the same elements (views of one copy)."""
    return a.__array_interface__["data"][0], a.shape, a.strides, a.dtype


# NumPy makes `__array_interface__` with PyDict_SetItemString, which interns each key: a key that no live object holds
# goes into the interpreter's table of interned strings and out again at every call, and once the entries dropped fill
# the table (~1 MB) it is made anew: a megabyte more RSS, every ~1,000 steps of a small model (benchmarks/memory.py
# --hand-built). Held here, the keys stay in the table (`ctypes.data` interns nothing, at 0.8 µs more a call).
_INTERFACE_KEYS = ("data", "strides", "descr", "typestr", "shape", "version")


def _same_bits(a, b) -> bool:
    """Every bit of `a` equal to `b`'s (same shape and dtype): NaN payloads and the sign of zero count."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return bool(np.array_equal(a.view(_UINT[a.dtype.itemsize]), b.view(_UINT[b.dtype.itemsize])))


_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def refresh(ctx, allgather_bucket_size: int | None = None) -> Handle:
    """Stages 1/2: all-gather the updated 16-bit shards so every rank holds the whole model again (seed 004
    step 4): one call, or with an `allgather_bucket_size` one call per piece, every rank sending the same piece
    of its shard (comm_schedule.allgather_pieces, as DeepSpeed's `all_gather_dp_groups`)."""
    cluster, layout, ranks = ctx.cluster, ctx.layout, ctx.ranks
    s, n, handles, group = layout.shard_size, ctx.mesh.world.size, [], ctx.mesh.world  # the data-parallel ranks
    pieces = allgather_pieces(s, n, allgather_bucket_size)
    for lo, hi in pieces:
        own = [rank.params.array[layout.own(rank.index)][lo:hi] for rank in ranks]
        with cluster.trace.about(purpose="refresh params", layers=()):
            if len(pieces) == 1:  # straight into each rank's (Ψ,) params: no N fresh copies of the model
                handles.append(all_gather(cluster, own, tag="params", out=[rank.params.array for rank in ranks],
                                          group=group).handle)
                continue
            full = all_gather(cluster, own, tag=f"params [{lo}:{hi}) of each shard", group=group)
        handles.append(full.handle)
        for rank, f in zip(ranks, full):  # (N*(hi-lo),) rank r's piece goes to [r*s + lo, r*s + hi)
            rank.params.array.reshape(n, s)[:, lo:hi] = f.reshape(n, hi - lo)
    return Handle.joined(handles)
