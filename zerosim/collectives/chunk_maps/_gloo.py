"""gloo's ring all-reduce, as torch's ProcessGroupGloo runs it on CPU tensors: its chunk map and its order.

A learner who compares zerosim with torch on a laptop runs gloo, not NCCL. torch 2.13's ProcessGroupGloo
(torch/csrc/distributed/c10d/ProcessGroupGlooDetail.hpp: AsyncAllreduceWork::allreduce) calls `gloo::allreduce`
with no algorithm set, which is the ring (gloo/allreduce.cc: `allreduce`, UNSPECIFIED -> `ring`). `ring` cuts the
buffer into segments, and chunk k (the part rank k owns after the reduce-scatter) is segments [k·spr, (k+1)·spr):

    maxSegmentBytes = elementSize * max(1, maxSegmentSize / elementSize)      # kMaxSegmentSize = 1 MiB
    numSegments     = roundUp(max(ceil(totalBytes / maxSegmentBytes), 2N), N)  # at least two per rank
    spr             = numSegments / N                                          # segments per rank
    segmentBytes    = roundUp(ceil(totalBytes / numSegments), elementSize)     # so ceil(count / numSegments) elements

so a small buffer gets 2N segments of ceil(L / 2N) elements and chunk k holds 2·ceil(L / 2N) of them — not
zerosim's ceil(L / N) shards, nor NCCL's aligned loops. The ring runs the other way round from NCCL's: rank r
sends to r-1 (`sendRank = rank - 1`) and receives from r+1, so the partial sum of chunk k starts at rank k-1 and
ends at rank k:

    chunk k = ((x[k-1] + x[k-2]) + ...) + x[k]          every + rounded to the wire dtype (gloo::sum<T>)

For N <= 3 that is NCCL's order too (the first add commutes); from N = 4 on it is not. The all-gather then passes
chunk r on to r-1. gloo has no AVG: ProcessGroupGloo sums and then divides the result by N in place
(`tensors[0] /= context_->size`, on the CPU: a correctly rounded division in the tensor's dtype), and its
reduce-scatter (`reduce_scatter_tensor_coalesced`) is this all-reduce of a copy of the whole input, each rank
keeping its block. Both checked against torch 2.13.0's gloo on N = 2..5 processes (tests/test_gloo.py).

Letters: N ranks, L elements per rank.
"""

from __future__ import annotations


import numpy as np

from zerosim._dataclass import dataclass
from zerosim.collectives._checks import check_counts, check_inputs, require_same
from zerosim.collectives._ops import get_op
from zerosim.collectives._staging import Collected, free, stage, wire_format
from zerosim.precision import cast, format_of

GLOO_MAX_SEGMENT_BYTES = 1024 * 1024  # gloo/allreduce.h: AllreduceOptionsImpl::kMaxSegmentSize


@dataclass(frozen=True)
class GlooRing:
    """gloo's segmentation of one all-reduce: how many segments, of how many elements, and each rank's chunk."""

    num_segments: int  # numSegments: a multiple of N, at least 2N
    segment_count: int  # elements per segment (segmentBytes / elementSize); the last ones may be short or empty
    chunks: tuple  # chunks[k] = (start, stop): the elements rank k owns after the reduce-scatter (maybe empty)


def _whole(x, name: str, minimum: int) -> int:
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or x < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {x!r}")
    return int(x)


def gloo_ring(count: int, nranks: int, elem_size: int, max_segment_bytes: int = GLOO_MAX_SEGMENT_BYTES) -> GlooRing:
    """gloo/allreduce.cc `ring`'s segments and chunks for `count` elements of `elem_size` bytes on `nranks` ranks."""
    count, n = _whole(count, "count", 0), _whole(nranks, "nranks", 1)
    elem_size, max_segment_bytes = _whole(elem_size, "elem_size", 1), _whole(max_segment_bytes, "max_segment_bytes", 1)
    max_bytes = elem_size * max(1, max_segment_bytes // elem_size)
    total = count * elem_size
    segments = max(-(-total // max_bytes), 2 * n)
    segments = -(-segments // n) * n  # roundUp(.., N)
    per_rank = segments // n
    seg_bytes = -(-total // segments)
    seg_count = -(-seg_bytes // elem_size)  # roundUp(.., elementSize) bytes: ceil(count / numSegments) elements
    chunk = per_rank * seg_count
    chunks = tuple((min(k * chunk, count), min((k + 1) * chunk, count)) for k in range(n))
    return GlooRing(segments, seg_count, chunks)


def gloo_all_reduce(cluster, tensors, op: str = "sum", wire=None, tag: str = "",
                    max_segment_bytes: int = GLOO_MAX_SEGMENT_BYTES) -> list:
    """All-reduce in gloo's ring order (see the module docstring), any shape; one array per local rank.

    `op` is a reduction's name or a `ReduceOp`; "avg" is what ProcessGroupGloo makes of ReduceOp.AVG: the sum, then
    a division by N in the wire dtype, correctly rounded (the CPU's `/=`). Recorded as one trace call per phase,
    each naming gloo's chunk map (`Call.chunk_map`)."""
    return _gloo(cluster, tensors, op, wire, tag, None, max_segment_bytes, "gloo all-reduce", flat=False)


def gloo_reduce_scatter(cluster, tensors, op: str = "sum", wire=None, tag: str = "", counts=None, out=None,
                        max_segment_bytes: int = GLOO_MAX_SEGMENT_BYTES) -> list:
    """ProcessGroupGloo's reduce-scatter: gloo's all-reduce of the whole (L,) buffer, then rank r keeps block r —
    `counts[r]` elements (N integers summing to L), or the r-th of N equal blocks (L a multiple of N, as torch
    requires). `out` (one (counts[r],) wire-dtype array per local rank) receives the blocks."""
    return _gloo(cluster, tensors, op, wire, tag, counts if counts is not None else (), max_segment_bytes,
                 "gloo reduce-scatter", out=out)


def _gloo(cluster, tensors, op, wire, tag, counts, max_segment_bytes, what, flat=True, out=None) -> list:
    arrays = check_inputs(cluster, tensors, what, flat=flat)
    meta = cluster.backend.all_meta([(tuple(a.shape), fmt.name) for (_, a, fmt) in arrays])
    require_same([m[0] for m in meta], what, "shape")
    require_same([m[1] for m in meta], what, "dtype")
    shape, n = tuple(meta[0][0]), cluster.world_size
    flat_in = [(r, a.reshape(-1), fmt) for (r, a, fmt) in arrays]
    count = flat_in[0][1].shape[0]
    blocks = _blocks(counts, count, n, what)  # None: an all-reduce; else each rank's (start, stop)
    reduce_op = get_op(op)
    divide = reduce_op.name == "avg"  # ProcessGroupGloo: SUM, then tensors[0] /= size
    wire_fmt = wire_format(flat_in, wire)
    if out is not None:
        out = _check_out(cluster, out, blocks, wire_fmt, what)
    ring = gloo_ring(count, n, wire_fmt.itemsize, max_segment_bytes)
    name = "gloo_all_reduce" if blocks is None else "gloo_reduce_scatter"
    call = cluster.trace.begin(name, reduce_op.name, n, count, wire_fmt.name, tag, chunk_map=ring.chunks)
    staged, temps = stage(cluster, call, flat_in, get_op("sum") if divide else reduce_op, wire_fmt, count, count)
    with np.errstate(over="ignore", invalid="ignore"):  # 16-bit overflow is silent on the wire, as on a CPU
        mine = _reduce_scatter_phase(cluster, staged, reduce_op, wire_fmt, ring.chunks, call)
    cluster.trace.end(call)
    second = cluster.trace.begin(name, reduce_op.name, n, count, wire_fmt.name, tag, chunk_map=ring.chunks)
    full = _all_gather_phase(cluster, mine, ring.chunks, count, wire_fmt, second)
    cluster.trace.end(second)
    free(temps)
    if divide:
        full = [_divide(f, n) for f in full]
    handle = cluster.trace.handle(call, second)
    if blocks is None:
        return Collected([f.reshape(shape) for f in full], handle)
    kept = [f[slice(*blocks[rank.index])] for rank, f in zip(cluster.ranks, full)]
    if out is None:
        return Collected([k.copy() for k in kept], handle)
    for o, k in zip(out, kept):
        o[...] = k
    return Collected(out, handle)


def _blocks(counts, count: int, n: int, what: str):
    if counts is None:
        return None
    if len(counts) == 0:  # torch's reduce_scatter_tensor: N equal blocks
        if count % n:
            raise ValueError(f"{what}: {count} elements do not split into {n} equal blocks; pass counts")
        counts = (count // n,) * n
    counts = check_counts(counts, n, what)
    if sum(counts) != count:
        raise ValueError(
            f"{what}: counts {list(counts)} add up to {sum(counts)}, but the buffers hold {count} elements"
        )
    starts = np.concatenate([[0], np.cumsum(counts)]).tolist()
    return [(starts[r], starts[r + 1]) for r in range(n)]


def _check_out(cluster, out, blocks, wire, what) -> list:
    if not isinstance(out, (list, tuple)) or len(out) != cluster.local_size:
        raise ValueError(f"{what}: out must be a list of {cluster.local_size} array(s), one per local rank")
    for rank, o in zip(cluster.ranks, out):
        want = blocks[rank.index][1] - blocks[rank.index][0]
        if getattr(o, "shape", None) != (want,) or o.dtype != wire.dtype:
            raise ValueError(f"{what}: out for rank {rank.index} must be a ({want},) {wire.name} array, got "
                             f"{getattr(o, 'shape', type(o).__name__)} {getattr(o, 'dtype', '')}")
    return list(out)


def _divide(x, n: int):
    """x / n in x's dtype as torch's CPU kernel gives it: the quotient in fp32 (fp64 for fp64), rounded once more to
    a 16-bit dtype — for fp16/bf16 the same as one correct rounding (24 >= 2·11 + 2 bits)."""
    fmt = format_of(x)
    wide = np.float64 if fmt.name == "fp64" else np.float32
    q = x.astype(wide) / wide(n)
    return q if fmt.dtype == q.dtype else cast(q, fmt)


# -- the ring, the other way round from NCCL's: rank r sends to r-1 ------------------------------------------------
def _local(cluster) -> bool:
    backend = cluster.backend
    return (getattr(backend, "sends_by_reference", False) and cluster.local_size == cluster.world_size
            and cluster.trace.granularity == "call" and not cluster.trace.keep_values)


def _reduce_scatter_phase(cluster, staged, op, wire, bounds, call) -> list:
    """Each local rank's fully reduced chunk (its own index), summed in gloo's order: chunk k starts at k-1."""
    n = cluster.world_size
    combine = op.combiner(wire)
    size = [b - a for a, b in bounds]
    me = [rank.index for rank in cluster.ranks]
    if n == 1:
        return [staged[0][slice(*bounds[0])].copy()]
    if _local(cluster):  # every rank here: chunk by chunk, the same adds in the same order
        results = []
        for k, (a, b) in enumerate(bounds):
            acc = np.empty(b - a, dtype=wire.dtype)  # (size[k],) wire dtype: rank k's chunk
            if b > a:
                combine(staged[(k - 1) % n][a:b], staged[(k - 2) % n][a:b], out=acc)
                for j in range(3, n + 1):  # ranks k-3, ..., k-N (= k)
                    combine(acc, staged[(k - j) % n][a:b], out=acc)
            results.append(acc)
        _summaries(cluster, call, size, wire, skip=lambda r: r)
        return results
    own = [[x[a:b] for (a, b) in bounds] for x in staged]
    partial = [None] * len(me)
    hops = cluster.trace.granularity == "hop"
    for j in range(n - 1):  # step j: rank r sends chunk r+1+j to r-1 and adds its own copy of chunk r+2+j
        sends = []
        for i, r in enumerate(me):
            c = (r + 1 + j) % n
            sends.append(own[i][c] if j == 0 else partial[i])
            if hops:
                cluster.trace.hop(call, j, r, (r - 1) % n, c, size[c], wire.itemsize, wire.name, sends[-1])
        recv_like = [(size[(r + 2 + j) % n], wire.dtype) for r in me]
        received = cluster.backend.exchange(sends, [(r - 1) % n for r in me], [(r + 1) % n for r in me],
                                            recv_like=recv_like)
        partial = [combine(received[i], own[i][(r + 2 + j) % n]) for i, r in enumerate(me)]  # one rounding each
    if not hops:
        _summaries(cluster, call, size, wire, skip=lambda r: r)
    return partial  # after N-1 steps rank r holds chunk r + 2 + (N-2) = r, fully reduced


def _all_gather_phase(cluster, mine, bounds, total: int, wire, call) -> list:
    """Every local rank's (total,) result: chunk r travels r -> r-1 -> ... (gloo's allgather loop)."""
    n = cluster.world_size
    size = [b - a for a, b in bounds]
    me = [rank.index for rank in cluster.ranks]
    full = [cluster.backend.empty((total,), wire.dtype) for _ in me]  # (L,) wire dtype per local rank
    for i, r in enumerate(me):
        full[i][slice(*bounds[r])] = mine[i]
    if n == 1:
        return full
    if _local(cluster):  # mine[k] is rank k's chunk: copy it into every rank's result
        for f in full:
            for k in range(n):
                f[slice(*bounds[k])] = mine[k]
        _summaries(cluster, call, size, wire, skip=lambda r: (r - 1) % n)
        return full
    hops = cluster.trace.granularity == "hop"
    for j in range(n - 1):  # step j: rank r sends chunk r+j to r-1, receives chunk r+1+j from r+1
        sends = []
        for i, r in enumerate(me):
            c = (r + j) % n
            sends.append(full[i][slice(*bounds[c])])
            if hops:
                cluster.trace.hop(call, j, r, (r - 1) % n, c, size[c], wire.itemsize, wire.name, sends[-1])
        recv_like = [(size[(r + 1 + j) % n], wire.dtype) for r in me]
        received = cluster.backend.exchange(sends, [(r - 1) % n for r in me], [(r + 1) % n for r in me],
                                            recv_like=recv_like)
        for i, r in enumerate(me):
            full[i][slice(*bounds[(r + 1 + j) % n])] = received[i]
    if not hops:
        _summaries(cluster, call, size, wire, skip=lambda r: (r - 1) % n)
    return full


def _summaries(cluster, call, size, wire, skip) -> None:
    """One summary per local rank: over the N-1 steps rank r sent every chunk but `skip(r)`."""
    for rank in cluster.ranks:
        r = rank.index
        cluster.trace.hop(call, -1, r, -1, -1, sum(size) - size[skip(r)], wire.itemsize, wire.name)
