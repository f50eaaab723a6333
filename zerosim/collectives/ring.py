"""Ring collectives in NCCL's order, written against the backend protocol only.

Letters: N ranks on a ring (rank r sends to r+1 and receives from r-1, mod N); a flat buffer of L
elements is padded to N*s and cut into N chunks of s elements (see shards.py).

reduce-scatter, N-1 steps. At step k rank r sends the partial sum of chunk (r-1-k) mod N and adds
its own copy of chunk (r-2-k) mod N to what it received. The partial sum for chunk c therefore starts
at rank c+1 and walks the ring, ending at rank c, which owns it:

    chunk c = ((x[c+1] + x[c+2]) + ...) + x[c]          every + rounded to the wire dtype

all-gather, N-1 steps: at step k rank r forwards shard (r-k) mod N to rank r+1.
all-reduce = reduce-scatter, then all-gather: 2(N-1) steps.
broadcast: a chain root -> root+1 -> ... -> root-1, each link carrying the whole buffer once.

Each rank sends exactly (N-1)/N of the padded buffer per reduce-scatter or all-gather phase.

The public functions check their inputs on every rank, stage them (pad, cast to the wire format),
and then move the data with the ring below — unless the backend moves it itself
(`reduce_scatter_phase` / `all_gather_phase`: the meta backend, which only records what the ring
would send; MPI's own reduce-scatter with `native=True`). Either way the checks, the trace's calls
and the results' shapes are the same code.
"""

from __future__ import annotations

import math

import numpy as np

from zerosim.collectives.checks import check_counts, check_inputs, require_same
from zerosim.collectives.ops import get_op
from zerosim.collectives.shards import ShardLayout, chunk_bounds
from zerosim.precision import cast, get_format


def _stage(cluster, call: int, arrays, op, wire, length: int, padded: int):
    """Each rank's input as a wire-dtype buffer of `padded` elements. Zero-copy when nothing changes."""
    staged, temps = [], []
    for rank, (_, a, fmt) in zip(cluster.ranks, arrays):
        if fmt == wire and not op.changes_input and padded == length:
            staged.append(a)  # read only: the ring never writes into its inputs
            continue
        buf = rank.ledger.alloc(f"call{call}.staged", padded, wire.dtype, "comm")
        buf.array[:length] = op.pre(a, cluster.world_size, wire)
        buf.array[length:] = 0
        staged.append(buf.array)
        temps.append(buf)
    return staged, temps


def _ring_reduce_scatter(cluster, staged, op, wire, bounds, call, out=None):
    """The reduce-scatter phase over chunks `bounds`; returns each local rank's result chunk (wire dtype),
    written into `out[i]` when given."""
    n = cluster.world_size
    me = [rank.index for rank in cluster.ranks]
    size = [stop - start for (start, stop) in bounds]
    own = [[x[a:b] for (a, b) in bounds] for x in staged]  # own[i][c]: rank i's own copy of chunk c (views)
    results = out or [np.empty(size[r], dtype=wire.dtype) for r in me]  # (size[r],) wire dtype: rank r's chunk r
    if n == 1:
        results[0][...] = own[0][0]
        return results, []
    # Two partial-sum buffers per rank, used in turn, big enough for any chunk (none needed for N = 2:
    # the one step adds straight into the result). NOTE: transport memory, like NCCL's fixed per-peer
    # FIFO buffers, allocated once and reused: it grows with no tensor and sits in no rank's ledger.
    acc = [[_fifo(cluster, i, j, max(size), wire.dtype) for j in range(2)] for i in range(len(me))] if n > 2 else None
    send_to = [(r + 1) % n for r in me]
    recv_from = [(r - 1) % n for r in me]
    hops = cluster.trace.granularity == "hop"
    combine = op.combiner(wire)
    for k in range(n - 1):
        sends = []
        for i, r in enumerate(me):
            c = (r - 1 - k) % n  # the partial sum of chunk c leaves rank r at step k
            sends.append(own[i][c] if k == 0 else acc[i][(k - 1) % 2][: size[c]])
            if hops:
                cluster.trace.hop(call, k, r, send_to[i], c, size[c], wire.itemsize, wire.name, sends[-1])
        recv_like = [(size[(r - 2 - k) % n], wire.dtype) for r in me]  # both ends know what arrives
        received = cluster.backend.exchange(sends, send_to, recv_from, recv_like=recv_like)
        for i, r in enumerate(me):
            c = (r - 2 - k) % n  # ... and arrives at rank r one step later, which adds its own copy
            target = results[i] if k == n - 2 else acc[i][k % 2][: size[c]]
            combine(received[i], own[i][c], out=target)  # partial + own, one rounding
    if not hops:  # one summary per rank: over the N-1 steps rank r sent every chunk but its own (r)
        for r in me:
            cluster.trace.hop(call, -1, r, -1, -1, sum(size) - size[r], wire.itemsize, wire.name)
    return results, []


def _fifo(cluster, i: int, j: int, count: int, dtype) -> np.ndarray:
    """Local rank i's j-th ring working buffer as (count,) of dtype, grown when a call needs more."""
    key, nbytes = (i, j), count * np.dtype(dtype).itemsize
    buf = cluster.fifo.get(key)
    if buf is None or buf.nbytes < nbytes:
        buf = cluster.fifo[key] = np.empty(max(nbytes, 1), np.uint8)
    return buf[:nbytes].view(dtype)


def _ring_all_gather(cluster, shards, bounds, total: int, wire, call, out=None):
    """The all-gather phase; shard c fills [bounds[c]) of every rank's (total,) wire-dtype output (`out[i]` when given)."""
    n = cluster.world_size
    me = [rank.index for rank in cluster.ranks]
    full = out or [np.empty(total, dtype=wire.dtype) for _ in me]  # (total,) wire dtype, the output
    part = [[f[a:b] for (a, b) in bounds] for f in full]  # part[i][c]: shard c's place in rank i's output (views)
    for i, r in enumerate(me):
        part[i][r][...] = shards[i]
    send_to = [(r + 1) % n for r in me]
    recv_from = [(r - 1) % n for r in me]
    hops = cluster.trace.granularity == "hop"
    for k in range(n - 1):
        sends = []
        for i, r in enumerate(me):
            c = (r - k) % n
            sends.append(part[i][c])
            if hops:
                cluster.trace.hop(call, k, r, send_to[i], c, bounds[c][1] - bounds[c][0], wire.itemsize, wire.name, sends[-1])
        recv_like = [(bounds[(r - 1 - k) % n][1] - bounds[(r - 1 - k) % n][0], wire.dtype) for r in me]
        received = cluster.backend.exchange(sends, send_to, recv_from, recv_like=recv_like)
        for i, r in enumerate(me):
            part[i][(r - 1 - k) % n][...] = received[i]
    if not hops and n > 1:  # one summary per rank: rank r forwarded every shard but r+1's (the last to reach it)
        for r in me:
            c = (r + 1) % n
            cluster.trace.hop(call, -1, r, -1, -1, total - (bounds[c][1] - bounds[c][0]), wire.itemsize, wire.name)
    return full


def _local_reduce_scatter(cluster, staged, op, wire, bounds, call, out=None):
    """The ring's reduce-scatter when every rank lives in this process and a send is a reference (the numpy
    simulator with a per-call trace): the same additions in the same order, chunk by chunk —
    chunk c = ((x[c+1] + x[c+2]) + ...) + x[c], each add rounded to the wire dtype — without a Python
    step per hop. Bit for bit the ring's (a test checks); only the per-hop events are not recorded."""
    n = cluster.world_size
    combine = op.combiner(wire)
    results = []
    for c, (a, b) in enumerate(bounds):  # staged[r]: rank r's (padded) input, in rank order
        acc = out[c] if out else np.empty(b - a, dtype=wire.dtype)  # (size[c],) wire dtype: rank c's result
        if n == 1:
            acc[...] = staged[0][a:b]
        elif b > a:  # an empty chunk (counts of 0: a ZeRO layer window outside rank c's shard) adds nothing
            combine(staged[(c + 1) % n][a:b], staged[(c + 2) % n][a:b], out=acc)
            for k in range(3, n + 1):  # the partial sum travels on: ranks c+3, ..., c+N (= c)
                combine(acc, staged[(c + k) % n][a:b], out=acc)
        results.append(acc)
    if n > 1:
        sizes = [stop - start for start, stop in bounds]
        for r in range(n):  # what rank r sent over the N-1 steps: every chunk but its own
            cluster.trace.hop(call, -1, r, -1, -1, sum(sizes) - sizes[r], wire.itemsize, wire.name)
    return results, []


def _local_all_gather(cluster, shards, bounds, total: int, wire, call, out=None):
    """The ring's all-gather when every rank lives here and a send is a reference: each rank's output is
    the shards joined in rank order (the ring's result), copied once per rank, no Python step per hop."""
    n = cluster.world_size
    joined = out[0] if out else np.empty(total, dtype=wire.dtype)  # (total,) wire dtype
    for (a, b), shard in zip(bounds, shards):
        joined[a:b] = shard
    if n > 1:
        for r in range(n):  # rank r forwarded every shard but r+1's, the last to reach it
            c = (r + 1) % n
            cluster.trace.hop(call, -1, r, -1, -1, total - (bounds[c][1] - bounds[c][0]), wire.itemsize, wire.name)
    if out:
        for o in out[1:]:
            o[...] = joined
        return out
    return [joined] + [joined.copy() for _ in range(n - 1)]


def _phases(cluster) -> tuple:
    """(reduce-scatter phase, all-gather phase): the backend's own; the chunk-order shortcut when every rank
    is here, sends are references and the trace keeps one summary per call; else the ring, hop by hop."""
    backend = cluster.backend
    local = (getattr(backend, "sends_by_reference", False) and cluster.local_size == cluster.world_size
             and cluster.trace.granularity == "call" and not cluster.trace.keep_values)
    rs = getattr(backend, "reduce_scatter_phase", _local_reduce_scatter if local else _ring_reduce_scatter)
    ag = getattr(backend, "all_gather_phase", _local_all_gather if local else _ring_all_gather)
    return rs, ag


def _free(temps) -> None:
    for b in temps:
        b.free()


def _wire_format(arrays, wire):
    return get_format(wire) if wire is not None else arrays[0][2]


def reduce_scatter(cluster, tensors, op: str = "sum", wire=None, tag: str = "", counts=None, out=None,
                   _name: str = "reduce_scatter") -> list:
    """Ring reduce-scatter of one flat array per local rank; rank r receives chunk r of the reduction.

    Any length L works (also L < N and L == 0): buffers are zero-padded to a multiple of N, and rank
    r's result holds only its real elements (`ShardLayout(L, N).real_size(r)`), so padding never
    leaks. With `counts` (N integers summing to L) chunk r has `counts[r]` elements instead, as in
    MPI's Reduce_scatter; ZeRO uses this for one layer's window of a sharded flat buffer.

    `wire` is the format on the wire (default: the inputs' own); inputs are rounded to it first, and
    every hop rounds to it. `op` is one of "sum", "max", "avg", "avg_predivide", "avg_premul", or a
    `ReduceOp` (see `zerosim.collectives.ops`). Returns one array per local rank (in the wire dtype, fp32 for "avg");
    temporary buffers go through each rank's ledger as kind "comm". `out` (one array per local rank,
    of its result's shape, in the wire dtype; not with "avg", whose result is a new fp32 array) receives
    the results in place of new arrays: a ZeRO engine passes its own gradient shard.
    """
    what = _name.replace("_", "-")
    reduce_op = get_op(op)
    arrays = check_inputs(cluster, tensors, what)
    wire_fmt = _wire_format(arrays, wire)
    meta = cluster.backend.all_meta([(a.shape[0], fmt.name) for (_, a, fmt) in arrays])
    require_same([m[0] for m in meta], what, "length")
    require_same([m[1] for m in meta], what, "dtype")
    length, n = meta[0][0], cluster.world_size
    layout = ShardLayout(length, n)
    if counts is not None:
        counts = check_counts(counts, n, what)
        if sum(counts) != length:
            raise ValueError(f"{what}: counts {list(counts)} add up to {sum(counts)}, but the buffers hold {length} elements")
    padded = length if counts is not None else layout.padded
    bounds = chunk_bounds(layout, counts)
    if out is not None:
        out = _check_out(cluster, out, [stop - start for start, stop in bounds], wire_fmt, what, reduce_op.name == "avg")
    call = cluster.trace.begin(_name, reduce_op.name, n, padded, wire_fmt.name, tag)
    staged, temps = _stage(cluster, call, arrays, reduce_op, wire_fmt, length, padded)
    phase = _phases(cluster)[0]  # the backend's own, the chunk-order shortcut, or the ring
    # NOTE: a 16-bit sum may overflow to inf on the wire, as on a GPU, silently: engines detect it afterwards
    # (count_nonfinite, loss scaling); numpy's warning would only be noise
    with np.errstate(over="ignore", invalid="ignore"):
        results, acc = phase(cluster, staged, reduce_op, wire_fmt, bounds, call, out=out)
    _free(temps + acc)
    cluster.trace.end(call)
    if out is not None:  # a backend that made new arrays (MPI's own reduce-scatter): copy them in
        for o, r in zip(out, results):
            if r is not o:
                o[...] = r
        return out
    keep = [c for c in counts] if counts is not None else layout.real_sizes()
    return [reduce_op.post(chunk[: keep[rank.index]], n) for rank, chunk in zip(cluster.ranks, results)]


def _check_out(cluster, out, sizes: list, wire, what: str, averaging: bool) -> list:
    """`out` as a list of writable destination arrays, one per local rank, of each result's size and the wire dtype."""
    if averaging:
        raise ValueError(f"{what}: out= cannot hold op 'avg' results (a new fp32 array, divided after the cast); reduce with 'sum'")
    if not isinstance(out, (list, tuple)) or len(out) != cluster.local_size:
        raise ValueError(f"{what}: out must be a list of {cluster.local_size} array(s), one per local rank")
    for rank, o in zip(cluster.ranks, out):
        want = sizes[rank.index]
        flags = getattr(o, "flags", None)  # data-less (meta) arrays have none: nothing to write into
        if getattr(o, "shape", None) != (want,) or o.dtype != wire.dtype or (flags is not None and not flags.writeable):
            raise ValueError(f"{what}: out for rank {rank.index} must be a writable ({want},) {wire.name} array, "
                             f"got {getattr(o, 'shape', type(o).__name__)} {getattr(o, 'dtype', '')}")
    return list(out)


def all_gather(cluster, shards, wire=None, tag: str = "", counts=None, out=None, _name: str = "all_gather", _length=None) -> list:
    """Ring all-gather: every rank receives the concatenation of all ranks' shards, in rank order.

    Without `counts`, shards must be equal in size or follow reduce-scatter's layout for an unpadded
    length L (ceil(L/N) each, the last ones shorter or empty; they travel padded to equal size and
    the result has exactly L elements). With `counts`, rank r's shard must hold `counts[r]` elements
    (an all-gather-v; ZeRO-3 uses it to gather one layer's window). Other sizes are a clear error.
    `out` (one array per local rank, of the result's shape and the wire dtype) receives the results.
    NOTE: on the meta backend's representative rank the other ranks' sizes are not seen: they are taken
    to be `counts`, or equal to the representative's (or reduce-scatter's layout of `_length`).
    """
    what = _name.replace("_", "-")
    arrays = check_inputs(cluster, shards, what)
    wire_fmt = _wire_format(arrays, wire)
    meta = cluster.backend.all_meta([(a.shape[0], fmt.name) for (_, a, fmt) in arrays])
    require_same([m[1] for m in meta], what, "dtype")
    sizes, n = [m[0] for m in meta], cluster.world_size
    partial = len(sizes) < n  # a representative rank (meta backend) sees only the ranks it hosts
    if counts is not None:
        counts = check_counts(counts, n, what)
        if sizes != ([counts[r.index] for r in cluster.ranks] if partial else list(counts)):
            raise ValueError(f"{what}: mismatched shard sizes {sizes}; counts say {list(counts)}")
        bounds, total, length = chunk_bounds(None, counts), sum(counts), sum(counts)
    else:
        if partial:  # the ranks it stands for: reduce-scatter's layout of _length, or equal shards
            sizes = ShardLayout(_length, n).real_sizes() if _length is not None else sizes[:1] * n
        try:
            layout = ShardLayout.from_shard_sizes(sizes)
        except ValueError as e:
            raise ValueError(f"{what}: {e}") from None
        bounds, total, length = chunk_bounds(layout, None), layout.padded, layout.length
    if out is not None:
        if total != length:
            raise ValueError(f"{what}: out= needs shards that are not padded (equal sizes, or counts), got a padded {total} for {length}")
        out = _check_out(cluster, out, [length] * n, wire_fmt, what, False)
    call = cluster.trace.begin(_name, "gather", n, total, wire_fmt.name, tag)
    padded, temps = [], []
    for rank, (_, a, fmt) in zip(cluster.ranks, arrays):
        want = bounds[rank.index][1] - bounds[rank.index][0]
        if fmt == wire_fmt and a.shape[0] == want:
            padded.append(a)  # read only
            continue
        buf = rank.ledger.alloc(f"call{call}.staged", want, wire_fmt.dtype, "comm")  # re-typed and/or padded copy
        buf.array[: a.shape[0]] = a if fmt == wire_fmt else cast(a, wire_fmt)
        buf.array[a.shape[0] :] = 0  # a short last shard travels padded with zeros
        padded.append(buf.array)
        temps.append(buf)
    phase = _phases(cluster)[1]  # the backend's own, the chunk-order shortcut, or the ring
    full = phase(cluster, padded, bounds, total, wire_fmt, call, out=out)
    _free(temps)
    cluster.trace.end(call)
    if out is not None:
        for o, f in zip(out, full):
            if f is not o:
                o[...] = f
        return out
    return [f[:length] for f in full]


def all_reduce(cluster, tensors, op: str = "sum", wire=None, tag: str = "", counts=None) -> list:
    """Ring all-reduce = reduce-scatter then all-gather (2(N-1) steps); any shape, returned as given.

    With op="avg" the division by N happens after the gather, in fp32, so the wire carries the wire
    dtype in both phases. With `counts` (flat inputs only) chunk r holds `counts[r]` elements in both
    phases: a ZeRO engine's bucket keeps each element with the rank that owns it in the whole buffer.
    """
    arrays = check_inputs(cluster, tensors, "all-reduce", flat=False)
    require_same([tuple(m) for m in cluster.backend.all_meta([a.shape for (_, a, _) in arrays])], "all-reduce", "shape")
    shape = arrays[0][1].shape
    flat = [a.reshape(-1) for (_, a, _) in arrays]
    reduce_op = get_op(op)
    summed = reduce_scatter(cluster, flat, op="sum" if reduce_op.name == "avg" else reduce_op, wire=wire, tag=tag, counts=counts, _name="all_reduce")
    full = all_gather(cluster, summed, tag=tag, counts=counts, _name="all_reduce", _length=None if counts is not None else flat[0].shape[0])
    return [reduce_op.post(f, cluster.world_size).reshape(shape) for f in full]


def broadcast(cluster, tensors, root: int, tag: str = "") -> list:
    """Chain broadcast of rank `root`'s array: every rank gets a copy. Non-root arrays give only shape
    and dtype (they are the receive buffers, as in NCCL); they must match the root's."""
    n = cluster.world_size
    if isinstance(root, bool) or not isinstance(root, (int, np.integer)) or not 0 <= root < n:
        raise ValueError(f"broadcast: root must be a rank in 0..{n - 1}, got {root!r}")
    arrays = check_inputs(cluster, tensors, "broadcast", flat=False)
    meta = cluster.backend.all_meta([(a.shape, fmt.name) for (_, a, fmt) in arrays])
    require_same([m[0] for m in meta], "broadcast", "shape")
    require_same([m[1] for m in meta], "broadcast", "dtype")
    fmt = arrays[0][2]
    shape = arrays[0][1].shape
    count = math.prod(shape)
    call = cluster.trace.begin("broadcast", "copy", n, count, fmt.name, tag)
    me = [rank.index for rank in cluster.ranks]
    out = [a.reshape(-1).copy() if r == root else np.empty(count, dtype=fmt.dtype) for (r, a, _) in arrays]
    for k in range(n - 1):
        src, dst = (root + k) % n, (root + k + 1) % n
        sends = [out[i] if r == src else None for i, r in enumerate(me)]
        send_to = [dst if r == src else None for r in me]
        recv_from = [src if r == dst else None for r in me]
        if src in me:
            cluster.trace.hop(call, k, src, dst, -1, count, fmt.itemsize, fmt.name, out[me.index(src)])
        recv_like = [(count, fmt.dtype) if r == dst else None for r in me]
        received = cluster.backend.exchange(sends, send_to, recv_from, recv_like=recv_like)
        for i, r in enumerate(me):
            if r == dst:
                out[i][...] = received[i]
    cluster.trace.end(call)
    return [o.reshape(shape) for o in out]
