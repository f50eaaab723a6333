"""The ring's in-process twin: every rank in this process, a send is a reference, so skip the hops.

The same additions in the same order as _ring.py, chunk by chunk —
chunk c = ((x[c+1] + x[c+2]) + ...) + x[c], each add rounded to the wire dtype — without a Python
step per hop (N·(N-1) of them per call). Bit for bit the ring's (tests/test_collectives_ring.py checks);
no sent chunk is copied, so _calls.py uses it only when the trace keeps no values (`phases`). Over a `Groups`
every group is summed the same way over its own members, in its ring order (position p plays rank r).

The phase is recorded as one record (`Trace.ring_hops`), from which the trace derives, when they are read, the
events the ring appends one by one: every hop at "hop" granularity, each rank's summary of the phase at "call"
(tests/test_trace_hops.py, tests/test_trace_sums.py).

Two ways to add up, the same adds in the same order for every element (a test holds them equal, bit for bit):
`_by_chunk`, one add per chunk per step, the naive twin; and `_by_step`, one add per ring step over every chunk at
once, where the chunks are small (a ZeRO layer's window cut by 64 ranks: a few hundred elements each, where a NumPy
call costs more than its adds). It stacks the ranks' inputs and rotates each chunk's rows in place (two slices
joined, one small copy a chunk), so that row k holds every chunk's k-th addend: its work is the same element adds
plus about two copies of the inputs. benchmarks/yardstick.py's 10k-parameter MLP on 64 ranks reduces its three
windows in 1.5 ms instead of 3.9 chunk by chunk (69 chunks of up to 163 elements; 1.9 ms with one index of every
addend, which it used before; `python benchmarks/collectives.py --windows`).
"""

from __future__ import annotations

import functools

import numpy as np

from zerosim.cluster import Groups, RunBounds, RunCounts

_SMALL_CHUNK = 2048  # elements: a mean chunk at most this size is added a ring step at a time (`_by_step`)
_MOST_TERMS = 1 << 20  # N × elements at most for `_by_step`: its (N, E) index (int32: 4 MB) and addends


def _members(cluster, group) -> tuple:
    """Every ring's ranks in ring order: the world's one, or each group's."""
    return (tuple(range(cluster.world_size)),) if group is None else group.members


def _record_hops(cluster, call: int, sizes: list, wire, lag: int, group) -> None:
    """Record the phase's sends as one record (lag 1: reduce-scatter, 0: all-gather), at either granularity."""
    ranks, positions, sends_to = (group if group is not None else Groups.world(cluster.world_size)).ring_order
    cluster.trace.ring_hops(call, tuple(sizes), wire.itemsize, wire.name, lag, ranks, positions, sends_to)


def reduce_scatter_phase(cluster, staged, op, wire, bounds, call, out=None, group=None):
    """ring.reduce_scatter_phase's results, chunk by chunk: staged[r] is rank r's (padded) input, in rank order."""
    ns = cluster.backend.xp  # where the arrays live and add (numpy, cupy)
    combine = op.combiner(wire, ns)
    results = [None] * cluster.world_size
    _record_hops(cluster, call, _spans(_key(bounds))[3], wire, 1, group)
    for ring in _members(cluster, group):
        add_up = _by_step if _small_chunks(ns, staged, ring, bounds) else _by_chunk
        add_up(ns, combine, staged, ring, bounds, wire, out, results)
    return results, []


def _by_chunk(ns, combine, staged, ring, bounds, wire, out, results) -> None:
    """results[ring[c]] = chunk c of the ring's sum, ((x[c+1] + x[c+2]) + ...) + x[c] (x[p]: ring position p's
    input), one chunk at a time: N - 1 adds per chunk."""
    n = len(ring)
    for c, (a, b) in enumerate(bounds):
        acc = out[ring[c]] if out else ns.empty(b - a, wire)  # (size[c],) wire: position c's result
        if n == 1:
            acc[...] = staged[ring[0]][a:b]
        elif b > a:  # an empty chunk (counts of 0: a ZeRO layer window outside rank c's shard) adds nothing
            combine(staged[ring[(c + 1) % n]][a:b], staged[ring[(c + 2) % n]][a:b], out=acc)
            for k in range(3, n + 1):  # the partial sum travels on: positions c+3, ..., c+N (= c)
                combine(acc, staged[ring[(c + k) % n]][a:b], out=acc)
        results[ring[c]] = acc


def _small_chunks(ns, staged, ring, bounds) -> bool:
    """True where `_by_step` pays: NumPy arrays of one length, three or more ranks, chunks small on average."""
    n = len(ring)
    if not ns.is_numpy or n < 3:
        return False
    inputs = [staged[r] for r in ring] if len(ring) != len(staged) else staged  # (a world ring: all, in order)
    if set(map(type, inputs)) != {np.ndarray} or len(set(map(len, inputs))) != 1:  # C loops, not a step per rank
        return False
    pieces, elements = _spans(_key(bounds))[:2]  # the non-empty chunks and their elements, found once per layout
    return 0 < elements <= _SMALL_CHUNK * len(pieces) and n * elements <= _MOST_TERMS


def _by_step(ns, combine, staged, ring, bounds, wire, out, results) -> None:
    """`_by_chunk`'s results with one add per ring step over every chunk: each element's addends in the same order
    (positions c+1, c+2, ..., c+N for an element of chunk c), each add rounded to the wire dtype as before."""
    n = len(ring)
    pieces, width, side_by_side, _ = _spans(_key(bounds))
    if not side_by_side:  # chunks that overlap, leave gaps or come out of order: not a reduce-scatter's layout
        return _by_chunk(ns, combine, staged, ring, bounds, wire, out, results)
    rows = np.stack([staged[r] for r in ring])  # (N, L) wire: row p is ring position p's input, our own copy
    # each chunk's rows rotated in place, so that row k holds every chunk's addend from position c + k: rows c..N-1,
    # then 0..c-1, joined in one small array (whole rows moved as unsigned integers, which NumPy copies without the
    # format's own loop; no second (N, L) array, whose allocation on every call cost page faults)
    raw = rows.view(f"uint{8 * rows.itemsize}")
    for c, a, b, _ in pieces:
        if c:
            block = raw[:, a:b]
            raw[:, a:b] = np.concatenate((block[c:], block[:c]))  # the right side is a copy: it reads no row it wrote
    lo = pieces[0][1]
    terms = rows[:, lo:lo + width]  # (N, E) terms[k, e]: the addend of element e at position c(e) + k
    acc = np.empty(width, wire.dtype)  # (E,) wire: every non-empty chunk's result, in chunk order
    combine(terms[1], terms[2 % n], out=acc)
    for k in range(3, n + 1):  # positions c+3, ..., c+N (= c), every chunk at once
        combine(acc, terms[k % n], out=acc)
    for r in ring:  # every position's result: empty where its chunk is (host arrays here: NumPy's own empty) ...
        results[r] = out[r] if out else np.empty(0, wire.dtype)
    for c, a, b, at in pieces:  # ... and its chunk of the sum where it is not
        piece = acc[at:at + b - a]
        if out:
            out[ring[c]][...] = piece
        else:
            results[ring[c]] = piece.copy()  # its own array, as `_by_chunk` gives


def _key(bounds):
    """`bounds` as `_spans`' memo key: `chunk_bounds`' own tuple as it is, a `RunBounds` by its counts (a
    `RunCounts` keeps its hash), anything else as a tuple of int pairs."""
    if type(bounds) is RunBounds:
        return bounds.counts
    return bounds if type(bounds) is tuple else tuple((int(a), int(b)) for a, b in bounds)


@functools.lru_cache(maxsize=64)
def _spans(bounds: tuple) -> tuple:
    """(the non-empty chunks as (c, start, stop, offset among the non-empty ones), their elements E, whether they lie
    side by side in chunk order, each where the one before ends, every chunk's size): a ZeRO step moves the same
    layer windows every step. `bounds` as `_key` gives it: a `RunCounts` stands for its `RunBounds`."""
    if type(bounds) is RunCounts:
        bounds = RunBounds(bounds)
    pieces, offset, end = [], 0, None
    side_by_side = any(b > a for a, b in bounds)
    for c, (a, b) in enumerate(bounds):
        if b > a:
            side_by_side = side_by_side and end in (None, a)
            pieces.append((c, a, b, offset))
            offset, end = offset + b - a, b
    return tuple(pieces), offset, side_by_side, tuple(b - a for a, b in bounds)


def all_gather_phase(cluster, shards, bounds, total: int, wire, call, out=None, group=None, shared=False):
    """ring.all_gather_phase's result: the shards joined in ring order, copied once per rank; with `shared` (and no
    `out`), one immutable copy per ring that every member receives (`frozen`)."""
    full, ns = [None] * cluster.world_size, cluster.backend.xp
    pieces, _, _, sizes = _spans(_key(bounds))  # the non-empty chunks: an empty shard moves nothing
    _record_hops(cluster, call, sizes, wire, 0, group)
    for ring in _members(cluster, group):
        one = _frozen_join(shards, ring, pieces, total, wire) if shared and not out and ns.is_numpy else None
        if one is None:
            joined = out[ring[0]] if out else ns.empty(total, wire)  # (total,) wire dtype
            for c, a, b, _ in pieces:
                joined[a:b] = shards[ring[c]]
        if one is None and shared and not out and type(joined) is np.ndarray:
            one = frozen(joined)
        if one is not None:
            for r in ring:
                full[r] = one
            continue
        full[ring[0]] = joined
        for r in ring[1:]:
            if out:
                out[r][...] = joined
                full[r] = out[r]
            else:
                full[r] = joined.copy()
    return full


def _frozen_join(shards, ring, pieces, total: int, wire):
    """`frozen` of the ring's shards joined, written straight into the one `bytes` object (`bytes.join` over the
    shards' memory: one copy of the window, where joining into an array and freezing that copy made two, and two
    fresh allocations of its size: at 10M parameters on 4 ranks a layer's window is 21 MB, six a step); None where
    the shards are not NumPy arrays of the wire dtype, one line each, that lie side by side from 0 to `total` as the
    chunks say (then `frozen` of the joined array, as before)."""
    if not pieces or pieces[0][1] != 0 or pieces[-1][2] != total:
        return None
    dtype, parts, end = np.dtype(wire.dtype), [], 0
    for c, a, b, _ in pieces:
        x = shards[ring[c]]
        if (a != end or type(x) is not np.ndarray or x.dtype != dtype or x.shape != (b - a,)
                or not x.flags.c_contiguous):
            return None
        parts.append(x.view(np.uint8))  # its bytes (bytes.join reads any contiguous buffer; as bytes, any dtype)
        end = b
    return np.frombuffer(b"".join(parts), dtype)


def frozen(x: np.ndarray) -> np.ndarray:
    """An immutable copy of host array x: its values in a `bytes` object, which NumPy will not let anyone write
    (`flags.writeable` cannot be set back). Every rank of a ring may then hold the one copy, as sends in this process
    are references, and a kernel may know it by its address alone (precision/arithmetic/_operand_cache.py)."""
    return np.frombuffer(x.tobytes(), x.dtype).reshape(x.shape)
