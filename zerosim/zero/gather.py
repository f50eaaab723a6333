"""Parameters on the move: ZeRO-3 gathers a unit before each use and frees it after; stages 1/2 refresh.

Letters: N ranks, s = ceil(P/N); a unit (model layer) occupies the window [a, b) of the flat vector,
and rank r owns window ∩ [r*s, (r+1)*s) of it (flat.py). Each function runs ONE collective call over
every local rank at once: the list-of-arrays rank API (one array per local rank in, one out).
"""

from __future__ import annotations

from zerosim.zero.comm_schedule import allgather_pieces


def gathered_name(layer: int) -> str:
    return f"layer {layer} params (gathered)"


def gather_unit(engine, layer: int) -> tuple:
    """ZeRO-3: all-gather unit `layer`'s window from every rank's shard (seed 004 Stage 3, "gather").

    Each rank adopts its (b - a,) compute-format copy (N·Σc_p in shard order with per-parameter partitions,
    padding included, as DeepSpeed gathers it) into its ledger as kind "params"; returns the
    call number, which the computation that reads it waits for.
    """
    cluster, layout = engine.cluster, engine.layout
    pieces = [rank.params.array[slice(*layout.owned_piece(layer, rank.index))] for rank in cluster.ranks]
    calls = len(cluster.trace.calls)
    name = f"{engine.model.layers[layer].name} params"
    with cluster.trace.about(purpose="gather params", layers=(layer,)):
        windows = cluster.all_gather(pieces, counts=layout.counts(layer), tag=name)
    for rank, window in zip(cluster.ranks, windows):
        rank.ledger.adopt(gathered_name(layer), window, "params")  # (b-a,) compute fmt, until released
    return tuple(range(calls, len(cluster.trace.calls)))


def release_unit(engine, layer: int) -> None:
    """ZeRO-3: free every rank's gathered copy of unit `layer` right after its use (seed 004: "free")."""
    for rank in engine.cluster.ranks:
        rank.ledger.free(gathered_name(layer))


def unit_params(engine, rank, layer: int) -> dict:
    """Layer `layer`'s weights by name as `rank` reads them: views of its whole params buffer
    (stages 0-2), or of the copy ZeRO-3 just gathered."""
    model = engine.model
    if engine.plan.shards_params:  # the gathered unit in shard order: model order again (a copy for per-parameter chunks)
        return model.unflatten(engine.layout.from_wire(*engine.layout.windows[layer], rank.ledger.get(gathered_name(layer)).array), layer)
    return model.unflatten(rank.params.array[: model.num_params], layer)  # views, no copy


def refresh_params(engine) -> tuple:
    """Stages 1/2: all-gather the updated 16-bit shards so every rank holds the whole model again
    (seed 004 step 4): one call, or with an `allgather_bucket_size` one call per piece, every rank sending
    the same piece of its shard (comm_schedule.allgather_pieces, as DeepSpeed's `all_gather_dp_groups`).
    Returns the call numbers."""
    cluster, layout = engine.cluster, engine.layout
    calls, s = len(cluster.trace.calls), layout.shard_size
    pieces = allgather_pieces(s, cluster.world_size, engine.comm.allgather_bucket_size)
    for lo, hi in pieces:
        own = [rank.params.array[layout.own(rank.index)][lo:hi] for rank in cluster.ranks]
        with cluster.trace.about(purpose="refresh params", layers=()):
            if len(pieces) == 1:  # straight into each rank's (Ψ,) params: no N fresh copies of the model
                cluster.all_gather(own, tag="params", out=[rank.params.array for rank in cluster.ranks])
                continue
            full = cluster.all_gather(own, tag=f"params [{lo}:{hi}) of each shard")
        for rank, f in zip(cluster.ranks, full):  # (N*(hi-lo),) rank r's piece goes to [r*s + lo, r*s + hi)
            rank.params.array.reshape(cluster.world_size, s)[:, lo:hi] = f.reshape(cluster.world_size, hi - lo)
    return tuple(range(calls, len(cluster.trace.calls)))
