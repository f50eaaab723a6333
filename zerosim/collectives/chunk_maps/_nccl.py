"""NCCL's own ring all-reduce: which elements each ring step reduces (one channel, one ring in rank order).

zerosim's `all_reduce` is reduce-scatter then all-gather over N equal contiguous chunks of the padded
buffer. NCCL's ring all-reduce (src/device/all_reduce.h: runRing) walks the same ring but cuts the
buffer differently: in *loops* of N chunks of `chunkCount` elements, and the last, shorter loop into
chunks of ceil(rem / N) elements rounded up to 16 bytes:

    chunkCount = chunk_bytes / elem_size              # ncclCollCbdPart: chunkGrains * eltPerGrain
    loopCount  = N * chunkCount
    for elemOffset in 0, loopCount, 2*loopCount, ... < count:
        rem = count - elemOffset
        if rem < loopCount: chunkCount = alignUp(divUp(rem, N), 16 / elem_size)
        chunk c = [elemOffset + c*chunkCount, + min(chunkCount, rem - c*chunkCount))   # may be empty

Within a loop the steps are the familiar ones: rank r sends chunk r-1 first, then at reduce step s
(s = 0 .. N-2) adds its own copy of chunk r-2-s to what arrived, so chunk c ends, fully reduced, at
rank c, summed as ((x[c+1] + x[c+2]) + ...) + x[c]; then N-1 copy steps pass the results around.
Element i therefore starts its sum at rank (chunk of i) + 1 — a different rank than in zerosim's
layout whenever the two chunk maps disagree, and 16-bit addition is not associative.

`chunk_bytes`: NCCL's Simple protocol uses stepSize * ALLREDUCE_CHUNKSTEPS = (4 MiB / 8) * 4 = 2 MiB
by default (enqueue.cc: calcCollChunking; init.cc: DEFAULT_BUFFSIZE), always a multiple of the
512-byte grain (device.h: ncclProtoGrainSize). Smaller values here are allowed to show several loops
on a small buffer. Not modelled: several channels (each takes a contiguous part of the buffer),
LL/LL128 protocols, tree, NVLS, CollNet and PAT algorithms — each changes the order again.
"""

from __future__ import annotations


import numpy as np

from zerosim._dataclass import dataclass
from zerosim.collectives._checks import check_inputs, require_same
from zerosim.collectives._ops import get_op
from zerosim.collectives._staging import Collected, free, phases, stage, wire_format

NCCL_SIMPLE_CHUNK_BYTES = 2 * 1024 * 1024  # (DEFAULT_BUFFSIZE 4 MiB / NCCL_STEPS 8) * ALLREDUCE_CHUNKSTEPS 4
ALIGN_BYTES = 16  # the last loop's chunks are a multiple of 16 bytes (all_reduce.h: alignUp(.., 16/sizeof(T)))


@dataclass(frozen=True)
class NcclLoop:
    """One loop of runRing: its N chunks and, per reduce step, the chunk each rank adds into."""

    offset: int  # elemOffset: the loop's first element
    chunk_count: int  # elements per chunk in this loop (the last chunks may hold fewer, or none)
    chunks: tuple  # chunks[c] = (start, stop): global element range of chunk c, stop >= start
    reduce_steps: tuple  # reduce_steps[s][r] = chunk index rank r reduces at step s: (r - 2 - s) mod N

    @property
    def length(self) -> int:
        """Elements this loop covers."""
        return self.chunks[-1][1] - self.offset if self.chunks else 0


def _positive_int(x, name: str, minimum: int = 1) -> int:
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or x < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {x!r}")
    return int(x)


def nccl_ring_allreduce_chunks(count: int, nranks: int, elem_size: int, chunk_bytes: int = NCCL_SIMPLE_CHUNK_BYTES,
                               align_bytes: int = ALIGN_BYTES) -> list:
    """runRing's element-to-chunk map for `count` elements of `elem_size` bytes on `nranks` ranks.

    Returns one `NcclLoop` per loop, in order. `chunk_bytes` must be a multiple of `elem_size`.
    """
    count = _positive_int(count, "count", minimum=0)
    nranks = _positive_int(nranks, "nranks")
    elem_size = _positive_int(elem_size, "elem_size")
    chunk_bytes = _positive_int(chunk_bytes, "chunk_bytes")
    if chunk_bytes % elem_size or align_bytes % elem_size:
        raise ValueError(f"chunk_bytes ({chunk_bytes}) and align_bytes ({align_bytes}) must be multiples of "
                         f"elem_size ({elem_size})")
    chunk_count = chunk_bytes // elem_size
    loop_count = nranks * chunk_count  # fixed by the full chunkCount, as in the kernel
    align = align_bytes // elem_size
    loops = []
    for offset in range(0, count, loop_count):
        rem = count - offset
        if rem < loop_count:
            per_rank = -(-rem // nranks)  # divUp(remCount, nranks)
            chunk_count = -(-per_rank // align) * align  # alignUp(.., 16 / sizeof(T))
        chunks = []
        for c in range(nranks):
            start = offset + c * chunk_count
            nelem = max(0, min(chunk_count, rem - c * chunk_count))  # a negative nelem moves nothing
            chunks.append((min(start, count), min(start, count) + nelem))
        steps = tuple(tuple((r - 2 - s) % nranks for r in range(nranks)) for s in range(nranks - 1))
        loops.append(NcclLoop(offset, chunk_count, tuple(chunks), steps))
    return loops


def nccl_all_reduce(cluster, tensors, op: str = "sum", wire=None, tag: str = "",
                    chunk_bytes: int = NCCL_SIMPLE_CHUNK_BYTES) -> list:
    """All-reduce in NCCL's ring all-reduce order (`nccl_ring_allreduce_chunks`), any shape.

    Loop by loop, as the kernel runs: the loop's reduce-scatter phase (N-1 steps), then its
    all-gather phase (N-1 steps), each as `all_reduce`'s phases run (the ring through
    `cluster.backend.exchange`, its chunk-order shortcut, or the backend's own). Each phase of each
    loop is one trace call named "nccl_all_reduce" with its hops (or per-rank summaries) and the loop's chunks
    (`Call.chunk_map`, element ranges of the whole buffer). `op` and `wire` mean what
    they mean for
    `all_reduce` ("avg" divides by N in fp32 after the gather; "avg_premul" is NCCL's ncclAvg).
    """
    arrays = check_inputs(cluster, tensors, "nccl all-reduce", flat=False)
    require_same(
        [tuple(m) for m in cluster.backend.all_meta([a.shape for (_, a, _) in arrays])], "nccl all-reduce", "shape"
    )
    shape = arrays[0][1].shape
    flat = [(r, a.reshape(-1), fmt) for (r, a, fmt) in arrays]
    reduce_op = get_op(op)  # its combine runs on the ring; "avg" divides only in post(), after the gather
    wire_fmt = wire_format(flat, wire)
    require_same([m[1] for m in cluster.backend.all_meta([(a.shape[0], fmt.name) for (_, a, fmt) in flat])],
                 "nccl all-reduce", "dtype")
    n, count = cluster.world_size, flat[0][1].shape[0]
    loops = nccl_ring_allreduce_chunks(count, n, wire_fmt.itemsize, chunk_bytes)
    out = [cluster.backend.empty((count,), wire_fmt.dtype) for _ in flat]  # (count,) wire dtype per local rank
    first = cluster.trace.begin("nccl_all_reduce", reduce_op.name, n, loops[0].length if loops else 0, wire_fmt.name,
                                tag, chunk_map=loops[0].chunks if loops else ())
    staged, temps = stage(cluster, first, flat, reduce_op, wire_fmt, count, count)
    reduce_scatter_phase, all_gather_phase = phases(cluster)  # the ring, its chunk-order shortcut, or the backend's own
    calls = []  # the trace calls: each loop's reduce-scatter phase, then its all-gather phase
    for k, loop in enumerate(loops):
        lo, hi = loop.offset, loop.offset + loop.length
        bounds = [(a - lo, b - lo) for (a, b) in loop.chunks]  # loop-relative
        call = first if k == 0 else cluster.trace.begin("nccl_all_reduce", reduce_op.name, n, hi - lo, wire_fmt.name,
                                                        tag, chunk_map=loop.chunks)
        calls.append(call)
        with np.errstate(over="ignore", invalid="ignore"):  # 16-bit overflow is silent on the wire, as on a GPU
            mine, _ = reduce_scatter_phase(cluster, [x[lo:hi] for x in staged], reduce_op, wire_fmt, bounds, call)
        cluster.trace.end(call)
        call = cluster.trace.begin("nccl_all_reduce", reduce_op.name, n, hi - lo, wire_fmt.name, tag,
                                   chunk_map=loop.chunks)
        calls.append(call)
        full = all_gather_phase(cluster, mine, bounds, hi - lo, wire_fmt, call)
        cluster.trace.end(call)
        for o, f in zip(out, full):
            o[lo:hi] = f
    if not loops:
        cluster.trace.end(first)
        calls.append(first)
    free(temps)
    done = [reduce_op.post(o, n, cluster.backend.xp).reshape(shape) for o in out]
    return Collected(done, cluster.trace.handle(*calls))
