"""Gradients on the move: kept locally (stages 0/1) or reduce-scattered unit by unit (stages 2/3).

Letters: N ranks, K micro-steps, s = ceil(P/N), Ψ = N*s; a unit occupies [a, b) of the flat vector.
Averaging, accumulation formats and the collective's op come from averaging.py (one place); this
file decides only *where* gradients go and *when* they travel. Each collective is one call over
every local rank at once.

With a `reduce_bucket_size` (comm_schedule.py) units travel in buckets of adjacent units, sent as
backward finishes them: at stages 2/3 every micro-step, at stages 0/1 during the last micro-step's
backward (as DDP's buckets and DeepSpeed's overlap_comm do; the earlier micro-steps only accumulate).
A bucket over [lo, hi) moves [lo, hi) ∩ shard_r for each rank r, so no element changes owner or bits.
"""

from __future__ import annotations

from zerosim.collectives import nccl_all_reduce
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


class GradBucket:
    """Gradients waiting for their collective in one micro-step. Units join as backward finishes them; the
    bucket is sent before a unit that would overflow `reduce_bucket_size` (DeepSpeed's rule,
    comm_schedule.buckets), or at once when there is no bucket size (seed 004: unit by unit).

    `whole`: None at stages 2/3 (each bucket is reduce-scattered into the shards, reduce_units); at stages
    0/1 the end-of-backward collective ("all_reduce" or "reduce_scatter") done bucket by bucket on the
    whole gradient buffer (reduce_range), the padding [P, Ψ) with the first bucket."""

    def __init__(self, engine, first: bool, whole: str | None = None):
        self.engine, self.first, self.whole, self.limit = engine, first, whole, engine.comm.reduce_bucket_size
        self.units, self.filled, self.last, self.sent = [], 0, (), False

    def add(self, layer: int) -> None:
        a, b = self.engine.layout.windows[layer]
        if b <= a:
            return
        if self.units and self.limit is not None and self.filled + (b - a) > self.limit:
            self._send()
        self.units.append(layer)
        self.filled += b - a
        if self.limit is None:
            self._send()

    def flush(self) -> tuple:
        """Send what waits (end of backward); the last call's numbers (the optimizer waits for it)."""
        if self.units:
            self._send()
        return self.last

    def _send(self) -> None:
        engine, units = self.engine, self.units
        if self.whole is not None:
            windows = engine.layout.windows
            lo, hi = windows[min(units)][0], windows[max(units)][1]
            sent = reduce_range(engine, lo, engine.layout.padded if not self.sent else hi, self.whole, tuple(units))
        elif len(units) == 1:  # a unit alone goes through reduce_unit (the stage2_free exercise replaces it)
            sent = reduce_unit(engine, units[0], self.first)
        else:
            sent = reduce_units(engine, units, self.first)
        self.last, self.sent = sent or self.last, True
        self.units, self.filled = [], 0


def reduce_unit(engine, layer: int, first: bool) -> tuple:
    """Stages 2/3: reduce-scatter unit `layer`'s gradients across ranks as soon as backward made them,
    accumulate each rank's piece into its (s,) gradient shard, free the unit's gradients (seed 004
    Stage 2, step 1c). Every micro-step, as DeepSpeed does. Returns the call number."""
    return reduce_units(engine, [layer], first)


def reduce_units(engine, layers: list, first: bool) -> tuple:
    """Stages 2/3: one reduce-scatter for the gradients of `layers`, units whose windows are adjacent in
    the flat buffer (a bucket, comm_schedule.py), over their joint window [lo, hi) with counts
    [lo, hi) ∩ shard_r: each element keeps its owner and its ring order, so a bucket changes no bit.
    Returns the call number."""
    cluster, layout, policy = engine.cluster, engine.layout, engine.precision
    layers = sorted(layer for layer in layers if layout.windows[layer][1] > layout.windows[layer][0])
    if not layers:
        return ()
    lo, hi = layout.windows[layers[0]][0], layout.windows[layers[-1]][1]
    if sum(layout.windows[x][1] - layout.windows[x][0] for x in layers) != hi - lo:
        raise ValueError(f"a gradient bucket must hold units adjacent in the flat buffer, got layers {layers}")
    held = [[rank.ledger.get(grads_name(x)) for x in layers] for rank in cluster.ranks]
    if len(layers) == 1:
        sends, bucket = [h[0].array for h in held], None
    else:
        # (hi-lo,) compute fmt per rank: the units' gradients side by side, as DeepSpeed copies them into its
        # ipg bucket (stage_1_and_2.py, reduce_independent_p_g_buckets_and_remove_grads). NOTE: DeepSpeed keeps
        # one (two with overlap_comm) reduce_bucket_size buffer for the whole run; here only waiting grads count.
        bucket = [rank.ledger.alloc("grad bucket", hi - lo, h[0].array.dtype, "grads") for rank, h in zip(cluster.ranks, held)]
        for b, h in zip(bucket, held):
            for x, buf in zip(layers, h):
                a, z = layout.windows[x]
                b.array[a - lo : z - lo] = buf.array
                buf.free()
        sends = [b.array for b in bucket]
    counts = layout.range_counts(lo, hi)
    interleaved = []
    if layout.kind != "flat":  # per-parameter chunks (partition.py): reduce_scatter_coalesced's interleaved buffer
        interleaved = [rank.ledger.alloc("grads (interleaved)", sum(counts), x.dtype, "grads") for rank, x in zip(cluster.ranks, sends)]
        sends = [layout.to_wire(lo, hi, x, out=buf.array) for x, buf in zip(sends, interleaved)]  # (N*Σc_p,) compute fmt
    places = [rank.grads.array[slice(*layout.owned_range(lo, hi, rank.index))] for rank in cluster.ranks]  # views of each shard
    n, op, wire = cluster.world_size, averaging.reduce_op(policy, cluster.world_size), policy.reduce_format
    kept = averaging.recipe(policy).after is None  # the recipe keeps the reduced piece as it arrives
    direct = first and kept and places[0].dtype == wire.dtype  # the result lands in the shard itself: no copy
    calls = len(cluster.trace.calls)
    name = " + ".join(engine.model.layers[x].name for x in reversed(layers)) + " grads"
    with cluster.trace.about(purpose="reduce grads", layers=tuple(reversed(layers))):
        pieces = cluster.reduce_scatter(sends, op=op, wire=wire, counts=counts, tag=name, out=places if direct else None)
    for place, piece in zip(places, pieces):
        if not direct:
            averaging.accumulate(place, averaging.after_reduce(piece, policy, n), first)
    for h in (held if bucket is None else [[b] for b in bucket]) + [interleaved]:
        for buf in h:
            buf.free()  # seed 004 stage 2, step 1c: freed at once
    return tuple(range(calls, len(cluster.trace.calls)))


def final_reduction(engine) -> str | None:
    """The stage's end-of-backward collective: "all_reduce", "reduce_scatter", or None (stages 2/3)."""
    return engine.plan.final_reduction(engine.optimizer.elementwise)


def reduce_all(engine) -> tuple:
    """The end-of-backward reduction of stages 0/1 (none at 2/3): all-reduce the whole gradient buffer
    (stage 0, and stage 1 with a matrix optimizer) or reduce-scatter it (stage 1), in one call (or
    nothing here when buckets were sent during backward). Sets each rank's `reduced` to its region of
    the result. Returns the call numbers."""
    cluster, layout = engine.cluster, engine.layout
    how = final_reduction(engine)
    if how is None:
        for rank in cluster.ranks:
            rank.reduced = rank.grads.array
        return ()
    if engine.comm.reduce_bucket_size is not None:
        return ()  # sent bucket by bucket during the last micro-step's backward (GradBucket)
    return reduce_range(engine, 0, layout.padded, how, ())


def reduce_range(engine, lo: int, hi: int, how: str, layers: tuple) -> tuple:
    """Stages 0/1: `how` ("all_reduce" or "reduce_scatter") over [lo, hi) of every rank's gradient buffer,
    with counts [lo, hi) ∩ shard_r (none for the whole buffer: its chunks are the shards). Writes the result
    in place, or into a "grads (wire format)" buffer when it travelled in another format, and sets each
    rank's `reduced`. Returns the call numbers."""
    cluster, layout, policy = engine.cluster, engine.layout, engine.precision
    calls, n = len(cluster.trace.calls), cluster.world_size
    wire, op = policy.reduce_format, averaging.reduce_op(policy, n)
    whole = (lo, hi) == (0, layout.padded)
    counts = None if whole else layout.range_counts(lo, hi)  # each element keeps its owner: the same bits
    with cluster.trace.about(purpose="reduce grads", layers=tuple(sorted(layers, reverse=True))):
        if how == "all_reduce" and policy.allreduce == "nccl":  # NCCL's own chunk map, over the P real elements
            hi = engine.model.num_params  # (the padding [P, Ψ) is zero on every rank and stays so)
            out = nccl_all_reduce(cluster, [r.grads.array[lo:hi] for r in cluster.ranks], op=op, wire=wire, tag="grads")
        else:
            collective = cluster.all_reduce if how == "all_reduce" else cluster.reduce_scatter
            out = collective([r.grads.array[lo:hi] for r in cluster.ranks], op=op, wire=wire, tag="grads", counts=counts)
    for rank, result in zip(cluster.ranks, out):
        result = averaging.after_reduce(result, policy, n)
        grads = rank.grads.array
        own = slice(0, layout.padded) if how == "all_reduce" else layout.own(rank.index)
        region = slice(lo, hi) if how == "all_reduce" else _shifted(own, layout.owned_range(lo, hi, rank.index))
        if result.dtype == grads.dtype:  # in place, in its own part of the gradient buffer, as DDP and DeepSpeed do
            grads[region] = result
            rank.reduced = grads[own]
            continue
        if "grads (wire format)" not in rank.ledger.live:  # it travelled in another format: a buffer of its own
            rank.ledger.alloc("grads (wire format)", own.stop - own.start, result.dtype, "grads", fill=0)  # (Ψ,) or (s,) wire fmt
        target = rank.ledger.get("grads (wire format)").array
        target[region.start - own.start : region.stop - own.start] = result
        rank.reduced = target
    return tuple(range(calls, len(cluster.trace.calls)))


def _shifted(own: slice, piece: tuple) -> slice:
    """A piece in shard coordinates, as a slice of the flat buffer."""
    return slice(own.start + piece[0], own.start + piece[1])
