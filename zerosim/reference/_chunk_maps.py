"""The oracle's own map of where each element's sum ends, and in which order its N terms are added.

A sum of N ranks' gradients, element by element, in the ring's order ends at the chunk's owner c and starts at rank
c+1 (`naive_reduce(chunks=[(c, start, stop), ...])`). Who c is depends on the recipe: written here again, plainly,
from the frameworks' rules, apart from the engine's (parallel/data/recipes/ and parallel/data/layouts/).

Letters: N ranks, P parameters, Ψ the oracle's padded length (P rounded up to a multiple of N), a parameter
(unit, a, b) its range [a, b) of the flat vector, n_p its elements.

    owners            zerosim's flat shards of s = ceil(P/N); DeepSpeed ZeRO-3's chunks of ceil(n_p/N) elements of
                      each parameter (partition_parameters.py: _partition_param); FSDP2's ceil(rows/N) rows of dim 0
                      (_fsdp_param.py: _init_sharded_param, `_chunk_with_empty`)
    one all-reduce    over m elements: NCCL's runRing chunk map, gloo's ring (the other way round), or N equal shards
    DDP's buckets     torch 2.13 nn/parallel/distributed.py + c10d/reducer.cpp: iteration 1 one bucket in registration
                      order; then, rebuilt, by bytes in gradient-ready order with caps [first, cap]
                      (compute_bucket_assignment_by_size: a parameter that reaches the cap closes its bucket)
    DeepSpeed's ipg   0.19 stage_1_and_2.py: reduce_independent_p_g_buckets_and_remove_grads (a bucket is sent before
                      a parameter would pass reduce_bucket_size), average_tensor's slices per owner, and
                      allreduce_and_scatter's calls (a call ends with the slice that passes the limit)
    BF16_Optimizer    bf16_optimizer.py: one all-reduce of the fp32 buffer padded to a multiple of 2N

Gradient-ready order is taken as the reverse of registration order (autograd's for a chain of Linear layers).
"""

from __future__ import annotations

from zerosim.collectives import gloo_ring, nccl_ring_allreduce_chunks

MIB = 2**20  # torch/nn/parallel/distributed.py: _MB_TO_BYTES
DDP_CAP_MB, DDP_FIRST_BYTES = 25, MIB  # _DEFAULT_BUCKET_CAP_MB; dist._DEFAULT_FIRST_BUCKET_BYTES


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def owner_chunks(specs, n: int, partition: str, length: int) -> list:
    """[(owner, start, stop)] over a model-order vector of `length` >= P elements; the zero tail goes to rank 0."""
    P = sum(s.size for s in specs)
    if partition == "flat":
        s = ceil_div(P, n)
        return [(r, min(r * s, length), min((r + 1) * s, length)) for r in range(n)]
    out = []
    for spec in sorted(specs, key=lambda x: x.offset):
        size, o = spec.size, spec.offset
        rows = size if partition == "elements" else (spec.shape[0] if spec.shape else 1)
        c = ceil_div(rows, n) * (size // rows if rows else 0)  # a rank's chunk, padding included
        out += [(r, o + min(r * c, size), o + min((r + 1) * c, size)) for r in range(n)]
    return out + ([(0, P, length)] if length > P else [])


def call_chunks(m: int, n: int, itemsize: int, allreduce: str) -> tuple:
    """(chunks, direction) of one all-reduce over m elements: chunk c's sum ends at rank c; direction -1 is gloo's."""
    if allreduce == "nccl":
        return [(c, a, b) for loop in nccl_ring_allreduce_chunks(m, n, itemsize) for c, (a, b) in
                enumerate(loop.chunks)], 1
    if allreduce == "gloo":
        return [(c, a, b) for c, (a, b) in enumerate(gloo_ring(m, n, itemsize).chunks)], -1
    s = ceil_div(m, n)
    return [(c, min(c * s, m), min((c + 1) * s, m)) for c in range(n)], 1


def in_flat(call: list, n: int, itemsize: int, allreduce: str) -> tuple:
    """One call's chunk map over the buffer its (owner, a, b) slices make, one after another, moved back to the
    flat vector's coordinates; and the direction."""
    chunks, direction = call_chunks(sum(b - a for _, a, b in call), n, itemsize, allreduce)
    out, at = [], 0
    for _, a, b in call:
        for c, lo, hi in chunks:
            x, y = max(lo, at), min(hi, at + b - a)
            if y > x:
                out.append((c, a + x - at, a + y - at))
        at += b - a
    return out, direction


def registration(specs) -> list:
    """[(unit, a, b)]: the parameters in registration order, empty ones left out."""
    return [(s.layer, s.offset, s.offset + s.size) for s in specs if s.size > 0]


def ipg_buckets(ready: list, limit: int | None) -> list:
    """DeepSpeed's buckets over parameters in gradient-ready order; None: each unit's parameters alone."""
    buckets = []
    for p in ready:
        if buckets:
            filled = sum(b - a for _, a, b in buckets[-1])
            if (filled + p[2] - p[1] > limit) if limit is not None else buckets[-1][-1][0] != p[0]:
                buckets.append([])
        else:
            buckets.append([])
        buckets[-1].append(p)
    return buckets


def ddp_caps(ddp) -> list:
    """[first bucket's bytes, every later bucket's]: torch's _BucketCapacityConfig.create, for a `DDPBuckets`."""
    cap = int((DDP_CAP_MB if ddp.bucket_cap_mb is None else ddp.bucket_cap_mb) * MIB)
    if ddp.first_bucket_mb is not None:
        return [int(ddp.first_bucket_mb * MIB), cap]
    return [DDP_FIRST_BYTES if ddp.bucket_cap_mb is None else cap, cap]


def ddp_buckets(params: list, itemsize: int, caps: list, rebuilt: bool) -> list:
    """DDP's buckets: one in registration order at first; rebuilt, gradient-ready order cut by bytes."""
    if not rebuilt:
        return [list(params)] if params else []
    buckets, size, limit = [[]], 0, 0
    for p in reversed(params):
        buckets[-1].append(p)
        size += (p[2] - p[1]) * itemsize
        if size >= caps[limit]:
            buckets.append([])
            size, limit = 0, min(limit + 1, len(caps) - 1)
    return [b for b in buckets if b]


def owner_slices(ranges: list, s: int) -> list:
    """[(owner, a, b)]: the ranges, in the order given, cut at every flat shard they touch and merged while the owner
    repeats (average_tensor's `rank_and_offsets`)."""
    out = []
    for a, b in ranges:
        for owner in range(a // s, ceil_div(b, s)):
            lo, hi = max(a, owner * s), min(b, (owner + 1) * s)
            if out and out[-1][0] == owner and out[-1][2] == lo:
                out[-1] = (owner, out[-1][1], hi)
            elif hi > lo:
                out.append((owner, lo, hi))
    return out


def calls(slices: list, limit: int | None) -> list:
    """allreduce_and_scatter: slices join a call until their count passes the limit; None: one call."""
    out, count = [[]], 0
    for piece in slices:
        out[-1].append(piece)
        count += piece[2] - piece[1]
        if limit is not None and count > limit:
            out.append([])
            count = 0
    return [c for c in out if c]


def aligned_chunks(P: int, padded: int, n: int, itemsize: int, allreduce: str) -> tuple:
    """BF16_Optimizer's one all-reduce over P padded to a multiple of 2N, clipped to the oracle's Ψ."""
    chunks, direction = call_chunks(ceil_div(P, 2 * n) * 2 * n, n, itemsize, allreduce)
    return [(c, a, min(b, padded)) for c, a, b in chunks if a < padded], direction
