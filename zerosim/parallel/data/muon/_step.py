"""One sharded Muon step: momentum and Nesterov input on every shard, whole matrices brought together as the plan
says, Newton-Schulz where it says, each rank's slice of the update applied to its shard.

Letters: N ranks of a shard group (positions p, q), s the shard, M a matrix (parallel/data/muon/_pieces.py).

    every rank     B = mu*B + G;  U = G + mu*B            on its (s,) shard, in G's place  (elementwise)
    plan           U's pieces -> whole matrices            all-gather / all-to-all          ("muon received")
    computing      O = NS(U), update = c*O                 a Compute event, its FLOPs       (kind "newton-schulz")
    plan           the update's pieces -> their holders    all-to-all / all-gather / none   (into U's place)
    every rank     w = w*(1 - lr*wd) - update              on its shard, elementwise        (the OptimizerStep)

U overwrites the averaged gradient G of Muon's pieces, and the update overwrites U, in the rank's (s,) fp32
gradient ("grad32"): each is read only before it is overwritten, as torchtitan forms the Nesterov input into its
compute buffer (`_prepare_muon_input(..., out=)`) and DeepSpeed copies the update into the gradient
(stage3.py `g.data.copy_(update)`). So the plan adds only what it gathers (ledger kind "muon").

Every operation on a shard is elementwise and every Newton-Schulz runs on the exact whole matrix U (the pieces are
copied, never summed), so every plan gives the single-device oracle's bits — unless the gather rounds U to a
narrower wire (`Muon(gather="bf16")`, Moonshot's), which then changes them unless Newton-Schulz rounds U to that
format anyway (`ns_dtype="bf16"`: a cast is elementwise). MuonAdamW's other parameters step AdamW on their pieces.
"""

from __future__ import annotations

import numpy as np

from zerosim.cluster import Compute, Handle
from zerosim.collectives import all_gather, all_to_all_v
from zerosim.parallel.data.muon import _owners as owners
from zerosim.parallel.data.muon._pieces import aux_params, muon_matrices, piece
from zerosim.parallel.data.muon._plans import get_muon_plan

# ledger names, all of kind "muon": what a collective brought (whole matrices' U on the wire), a whole U widened from
# a narrower wire, a whole matrix's update on the wire
RECEIVED, WIDENED, RESULT = "muon received", "muon widened", "muon result"
KIND = "muon"


def muon_update(ctx, opt, specs, grads32: list, reduced: list, t: int, needs, step_one) -> None:
    """The sharded Muon step of every local rank. `step_one(rank, g32, reduced, needs, step)` runs the engine's
    per-rank update (parallel/data/_update.py `_update`) with `step(w, state)` in place of the optimizer's own, and
    returns its `OptimizerStep` event."""
    plan = get_muon_plan(opt.sharding)
    plan.check(ctx.recipe.partition, ctx.plan.label)
    cluster, layout, ranks = ctx.cluster, ctx.layout, ctx.ranks
    mats = muon_matrices(opt, specs, layout)
    work = {}  # rank index -> its (s,) fp32 gradient, where U and then the update take G's place, piece by piece
    # 1. every rank's shard: momentum, then the Nesterov input U (Moonshot's g', torchtitan's `_prepare_muon_input`)
    for rank, g in zip(ranks, grads32):
        b = rank.optim["b"].array
        for m in mats:
            mine = piece(layout, m.lo, m.hi, rank.index)
            opt.momentum_(b[mine], g[mine])
            g[mine] = opt.nesterov_input(g[mine], b[mine])  # G is not read again: U takes its place
        work[rank.index] = g
    # 2. whole matrices where the plan computes them, the update's slices back to their holders (into U's place)
    with cluster.trace.about(purpose="optimizer", layers=()):
        handle = TRANSPORTS[plan.name](ctx, opt, mats, work)
    # 3. every rank applies its slice (and MuonAdamW's AdamW its other parameters, from their G)
    aux = aux_params(opt, specs)
    for rank, g, red in zip(ranks, grads32, reduced):
        update = work[rank.index]

        def apply(w, state, rank=rank, g=g, update=update):
            for m in mats:
                mine = piece(layout, m.lo, m.hi, rank.index)
                opt.apply_(w[mine], update[mine])
            for spec in aux:
                mine = piece(layout, spec.offset, spec.offset + spec.size, rank.index)
                opt.step_aux(w[mine], g[mine], {k: v[mine] for k, v in state.items()}, t)

        cluster.trace.record(step_one(rank, g, red, needs + handle, apply))


# -- the transports: how U's pieces become whole matrices, and the update's pieces come back ------------------------
def _gather(ctx, opt, mats, work) -> Handle:
    """Every rank all-gathers every matrix (one call per matrix) and orthogonalises it; keeps its slice."""
    handle = Handle()
    for m in mats:
        sends = [work[rank.index][piece(ctx.layout, m.lo, m.hi, rank.index)] for rank in ctx.ranks]
        whole = all_gather(ctx.cluster, sends, wire=opt.gather, counts=m.counts, group=ctx.mesh.shard,
                           tag=f"muon {m.name}")
        handle += whole.handle
        made = {}  # one Newton-Schulz for every rank holding the same U's bits (`_orthogonalise`)
        for rank, w in zip(ctx.ranks, whole):
            got = rank.ledger.adopt(RECEIVED, w, KIND)  # (Σc,) M's whole U on the wire, in the gather's format
            _orthogonalise_into(ctx, opt, m, rank, got.array, whole.handle, work, made)
            got.free()
    return handle


def _to_computers(ctx, opt, bucket, computers, work) -> tuple:
    """One all-to-all-v: each position sends its piece of every matrix in `bucket` to the positions in
    `computers[i]` (a tuple per matrix). Returns ({(rank index, matrix i): its whole U on the wire}, handle); what
    each rank received is held as RECEIVED until the caller frees it. (The packed send buffer is the collective's
    staging and is not counted, as the ring's read-only inputs are not.)"""
    group, n = ctx.mesh.shard, ctx.mesh.shard.size
    table = [[sum(m.counts[p] for m, dst in zip(bucket, computers) if q in dst) for q in range(n)] for p in range(n)]
    sends = []
    for rank in ctx.ranks:
        p, u = group.position(rank.index), work[rank.index]
        parts = [u[piece(ctx.layout, m.lo, m.hi, rank.index)] for q in range(n)
                 for m, dst in zip(bucket, computers) if q in dst]
        sends.append(_concat(ctx, parts, u.dtype))
    got = all_to_all_v(ctx.cluster, sends, table, group=group, tag="muon input to " + "+".join(
        sorted({m.name.split(".")[0] for m in bucket})), wire=opt.gather)
    whole = {}
    for rank, buf in zip(ctx.ranks, got):
        buf = rank.ledger.adopt(RECEIVED, buf, KIND).array  # what the computing rank received; freed after NS
        q = group.position(rank.index)
        at, by_sender = 0, []
        for p in range(n):  # what p sent q: its pieces of q's matrices, in bucket order
            mine = {}
            for i, (m, dst) in enumerate(zip(bucket, computers)):
                if q in dst:
                    mine[i] = buf[at : at + m.counts[p]]
                    at += m.counts[p]
            by_sender.append(mine)
        for i, (m, dst) in enumerate(zip(bucket, computers)):
            if q in dst:
                whole[(rank.index, i)] = _concat(ctx, [by_sender[p][i] for p in range(n)], buf.dtype)
    return whole, got.handle


def _owner(ctx, opt, mats, work) -> Handle:
    """torchtitan's DistMuon: per bucket of whole units (at least n matrices), U's pieces to each matrix's owner
    (balanced), NS there, the update's pieces back."""
    group, n = ctx.mesh.shard, ctx.mesh.shard.size
    buckets = owners.units_of_at_least(mats, n)
    assigned = owners.balanced([[(owners.ns_flops(m.shape, opt.ns_steps), m.wire * 4, m.name) for m in b]
                                for b in buckets], n)
    handle = Handle()
    for bucket, own in zip(buckets, assigned):
        whole, there = _to_computers(ctx, opt, bucket, [(o,) for o in own], work)
        updates = {}
        for rank in ctx.ranks:
            q = group.position(rank.index)
            for i, m in enumerate(bucket):
                if own[i] == q:  # (Σc,) fp32, held until it is sent back
                    updates[(rank.index, i)] = _orthogonalise(ctx, opt, m, rank, whole[(rank.index, i)], there,
                                                              work, keep=f"{RESULT} {i}")
            _free(rank, RECEIVED)
        handle += there + _back_to_holders(ctx, bucket, own, updates, work)
    return handle


def _back_to_holders(ctx, bucket, own, updates, work) -> Handle:
    """The owner sends each position its piece of the update (the mirrored all-to-all-v)."""
    group, n = ctx.mesh.shard, ctx.mesh.shard.size
    table = [[sum(m.counts[q] for m, o in zip(bucket, own) if o == p) for q in range(n)] for p in range(n)]
    sends = []
    for rank in ctx.ranks:
        p = group.position(rank.index)
        parts = [updates[(rank.index, i)][m.start(q) : m.start(q) + m.counts[q]] for q in range(n)
                 for i, m in enumerate(bucket) if own[i] == p]
        sends.append(_concat(ctx, parts, np.float32))
    for rank in ctx.ranks:
        for i in range(len(bucket)):
            _free(rank, f"{RESULT} {i}")
    got = all_to_all_v(ctx.cluster, sends, table, group=group, tag="muon update to holders")
    for rank, buf in zip(ctx.ranks, got):
        q, at = group.position(rank.index), 0
        buf = rank.ledger.adopt(RECEIVED, buf, KIND).array  # (Σ_M c_M(q),) fp32: its slices of the bucket's updates
        update = work[rank.index]
        for p in range(n):
            for m, o in zip(bucket, own):
                if o == p:
                    update[piece(ctx.layout, m.lo, m.hi, rank.index)] = buf[at : at + m.counts[q]]
                    at += m.counts[q]
        _free(rank, RECEIVED)
    return got.handle


def _round_robin(ctx, opt, mats, work) -> Handle:
    """KellerJordan's muon.py Muon: matrices sorted by size, block by block of N, the i-th to position i mod N; each
    block's U to its owners (all-to-all-v), NS there, then an all-gather of the whole updates (every rank takes its
    slice)."""
    group, n = ctx.mesh.shard, ctx.mesh.shard.size
    order, own = owners.round_robin([m.shape for m in mats], n)
    handle = Handle()
    for start in range(0, len(order), n):
        bucket = [mats[i] for i in order[start : start + n]]
        block_own = [own[i] for i in order[start : start + n]]  # = 0, 1, ..., len(bucket) - 1
        whole, there = _to_computers(ctx, opt, bucket, [(o,) for o in block_own], work)
        handle += there
        sends, counts = [], [0] * n
        for i, m in enumerate(bucket):
            counts[block_own[i]] = m.wire
        for rank in ctx.ranks:
            q = group.position(rank.index)
            mine = [i for i in range(len(bucket)) if block_own[i] == q]
            sends.append(_orthogonalise(ctx, opt, bucket[mine[0]], rank, whole[(rank.index, mine[0])], there, work,
                                        keep=RESULT) if mine else ctx.cluster.backend.empty((0,), np.float32))
            _free(rank, RECEIVED)
        got = all_gather(ctx.cluster, sends, counts=counts, group=group, tag="muon updates (round robin)")
        handle += got.handle
        for rank, full in zip(ctx.ranks, got):
            _free(rank, RESULT)
            full = rank.ledger.adopt(RECEIVED, full, KIND).array  # (Σ_block Σc,) every update of the block
            q, update = group.position(rank.index), work[rank.index]
            for i, m in enumerate(bucket):
                at = sum(counts[: block_own[i]])
                first = at + m.start(q)
                update[piece(ctx.layout, m.lo, m.hi, rank.index)] = full[first : first + m.counts[q]]
            _free(rank, RECEIVED)
    return handle


def _distributed(ctx, opt, mats, work) -> Handle:
    """Moonshot's Distributed Muon: per unit, every rank whose flat shard touches M receives the other pieces,
    runs NS on M and keeps its own slice (no update travels)."""
    group = ctx.mesh.shard
    handle = Handle()
    for bucket in owners.by_unit(mats):
        sharers = [m.holders() for m in bucket]
        whole, there = _to_computers(ctx, opt, bucket, sharers, work)
        handle += there
        made = [{} for _ in bucket]  # one Newton-Schulz per matrix for the sharers holding the same U's bits
        for rank in ctx.ranks:
            q = group.position(rank.index)
            for i, m in enumerate(bucket):
                if q in sharers[i]:
                    _orthogonalise_into(ctx, opt, m, rank, whole[(rank.index, i)], there, work, made[i])
            _free(rank, RECEIVED)
    return handle


TRANSPORTS = {"gather": _gather, "owner": _owner, "round_robin": _round_robin, "distributed": _distributed}


# -- helpers -------------------------------------------------------------------------------------------------------
def _orthogonalise(ctx, opt, m, rank, wire_u, needs, work, keep: str | None = None, made: dict | None = None):
    """Newton-Schulz on M's whole U (on the wire, in position order) on `rank`: its update on the wire, (Σc,) fp32,
    held as `keep` when the caller keeps it (else a transient the caller reads at once). A U that travelled
    narrower is widened into a buffer of its own (exact) for the NS; a Compute event charges NS's FLOPs to the
    rank's compute stream, after `needs`. `made` ({U's bytes: result}, one per matrix): the ranks that gathered
    the same whole U (every rank under "gather", the sharers under "distributed") each hold what one
    Newton-Schulz makes of those bits, so the simulator makes it once for them, found by every byte compared; each
    rank still records its own Compute event and holds its own copy."""
    layout, dt = ctx.layout, work[rank.index].dtype
    widened = None
    if wire_u.dtype != dt:
        widened = rank.ledger.adopt(WIDENED, wire_u.astype(dt), KIND)  # (Σc,) update format
        wire_u = widened.array
    u = layout.from_wire(m.lo, m.hi, wire_u).reshape(m.shape)  # (rows, cols) model order
    key = None if made is None or getattr(u, "is_meta", False) else (u.dtype, u.shape, u.tobytes())
    if getattr(u, "is_meta", False):  # data-less: only the shape and dtype of the result
        out = u.reshape(-1)
    elif made is not None and key in made:
        out = made[key].copy()  # the same bits a Newton-Schulz of this rank's U gives
    else:
        out = opt.orthogonalised(u)[0].reshape(-1)
        if made is not None:
            made[key] = out.copy()  # kept apart from what this rank's caller may write into
    result = layout.to_wire(m.lo, m.hi, out)  # (Σc,) fp32, padding 0
    if widened is not None:
        widened.free()
    n_bytes = (m.hi - m.lo) * np.dtype(dt).itemsize
    labels = ctx.cluster.trace.labels()
    ctx.cluster.trace.record(Compute(rank.index, labels.get("step", 0), labels.get("micro", 0), m.spec.layer,
                                     f"newton-schulz {m.name}", "newton-schulz", owners.ns_flops(m.shape, opt.ns_steps),
                                     n_bytes, n_bytes, tuple(needs)))
    if keep is not None:
        rank.ledger.adopt(keep, result, KIND)
    return result


def _orthogonalise_into(ctx, opt, m, rank, wire_u, needs, work, made: dict | None = None) -> None:
    """`_orthogonalise`, keeping only rank's own piece of the update (the whole result held while it is cut)."""
    q = ctx.mesh.shard.position(rank.index)
    out = _orthogonalise(ctx, opt, m, rank, wire_u, needs, work, keep=RESULT, made=made)
    work[rank.index][piece(ctx.layout, m.lo, m.hi, rank.index)] = out[m.start(q) : m.start(q) + m.counts[q]]
    _free(rank, RESULT)


def _free(rank, name: str) -> None:
    if name in rank.ledger.live:
        rank.ledger.free(name)


def _concat(ctx, parts, dtype):
    """Pieces side by side in one flat array of the backend's (a data-less one on the meta backend)."""
    if not parts:
        return ctx.cluster.backend.empty((0,), dtype)
    if any(getattr(p, "is_meta", False) for p in parts):
        return ctx.cluster.backend.empty((sum(p.shape[0] for p in parts),), parts[0].dtype)
    return np.concatenate(parts)
