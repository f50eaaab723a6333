"""Parameters on the move: ZeRO-3 gathers a unit before each use and releases it after; stages 1/2 refresh.

Letters: N ranks, s the shard; a unit (model layer) occupies the window [a, b) of the flat vector, and rank r
owns window ∩ its shard (flat.py; a run of whole parameters' chunks with partition.py). Each function runs ONE
collective call over every local rank at once (one array per local rank in, one out) and returns its `Handle`.
"""

from __future__ import annotations

from zerosim.cluster import Handle
from zerosim.collectives import all_gather
from zerosim.zero.comm_schedule import allgather_pieces


def gathered_name(layer: int) -> str:
    return f"layer {layer} params (gathered)"


def gather(ctx, layer: int) -> Handle:
    """ZeRO-3: all-gather unit `layer`'s window from every rank's params shard (seed 004 Stage 3, "gather").

    Each rank adopts its (b - a,) compute-format copy (N·Σc_p in shard order with per-parameter partitions,
    padding included, as DeepSpeed gathers it) into its ledger as kind "params", until `release`."""
    layout, ranks = ctx.layout, ctx.ranks
    pieces = [rank.params.array[slice(*layout.owned_piece(layer, rank.index))] for rank in ranks]
    with ctx.cluster.trace.about(purpose="gather params", layers=(layer,)):
        windows = all_gather(ctx.cluster, pieces, counts=layout.counts(layer), tag=f"{ctx.names[layer]} params")
    for rank, window in zip(ranks, windows):
        rank.ledger.adopt(gathered_name(layer), window, "params")  # (b-a,) compute fmt, until released
    return windows.handle


def release(ctx, layer: int) -> None:
    """ZeRO-3: free every rank's gathered copy of unit `layer` (seed 004: "free")."""
    for rank in ctx.ranks:
        rank.ledger.free(gathered_name(layer))


def unit_weights(ctx, model, rank, layer: int) -> dict:
    """Layer `layer`'s weights by name as `rank` reads them: views of its whole params buffer, or (when the plan
    shards params) of the copy just gathered, in model order again (a copy for per-parameter chunks)."""
    if ctx.plan.gathers_params:
        window = rank.ledger.get(gathered_name(layer)).array
        return model.unflatten(ctx.layout.from_wire(*ctx.layout.windows[layer], window), layer)
    return model.unflatten(rank.params.array[: model.num_params], layer)  # views, no copy


def refresh(ctx, allgather_bucket_size: int | None = None) -> Handle:
    """Stages 1/2: all-gather the updated 16-bit shards so every rank holds the whole model again (seed 004
    step 4): one call, or with an `allgather_bucket_size` one call per piece, every rank sending the same piece
    of its shard (comm_schedule.allgather_pieces, as DeepSpeed's `all_gather_dp_groups`)."""
    cluster, layout, ranks = ctx.cluster, ctx.layout, ctx.ranks
    s, n, handle = layout.shard_size, cluster.world_size, Handle()
    pieces = allgather_pieces(s, n, allgather_bucket_size)
    for lo, hi in pieces:
        own = [rank.params.array[layout.own(rank.index)][lo:hi] for rank in ranks]
        with cluster.trace.about(purpose="refresh params", layers=()):
            if len(pieces) == 1:  # straight into each rank's (Ψ,) params: no N fresh copies of the model
                handle += all_gather(cluster, own, tag="params", out=[rank.params.array for rank in ranks]).handle
                continue
            full = all_gather(cluster, own, tag=f"params [{lo}:{hi}) of each shard")
        handle += full.handle
        for rank, f in zip(ranks, full):  # (N*(hi-lo),) rank r's piece goes to [r*s + lo, r*s + hi)
            rank.params.array.reshape(n, s)[:, lo:hi] = f.reshape(n, hi - lo)
    return handle
