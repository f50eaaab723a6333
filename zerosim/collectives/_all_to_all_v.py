"""All-to-all with uneven splits: rank p sends `counts[p][q]` elements to member q of its group, one message each.

    out = all_to_all_v(cluster, bufs, counts)      # counts[p][q]: what position p sends to position q

torch.distributed.all_to_all_single(output, input, output_split_sizes, input_split_sizes) is this call: NCCL runs it
as grouped point-to-point sends (src/collectives.cc, ncclAllToAllv is ncclGroupStart + ncclSend/ncclRecv per peer;
not a ring). torchtitan's DistMuon moves each matrix's shards to the rank that orthogonalises it, and the result
back, with it (torchtitan b5bcd76, torchtitan/distributed/flex_shard/_optimizer_reshard_runtime.py,
`_execute_packed_all_to_all`). The equal-split all-to-all (_all_to_all.py) is the case counts[p][q] = L/g.

Letters: N ranks, g ranks a group, counts a (g, g) table of element counts the same in every group. Position p's
buffer is its g pieces for positions 0..g-1 side by side (Σ_q counts[p][q] elements); it receives the pieces every
position sent it, in position order (Σ_p counts[p][q] elements). Nothing is summed: the bytes arrive as sent, in
the wire dtype (`wire`: the inputs are rounded to it first, as a cast before the send; None keeps their dtype).
Each rank's sends are hops of the trace: at step k = 1..g-1 position p sends its piece for (p + k) mod g.
"""

from __future__ import annotations

import numpy as np

from zerosim.collectives._checks import check_group
from zerosim.collectives._staging import Collected
from zerosim.precision import get_format


def check_counts_table(counts, g: int) -> tuple:
    """`counts` as a (g, g) tuple of tuples of non-negative ints, or a ValueError naming what is wrong."""
    try:
        table = tuple(tuple(int(c) for c in row) for row in counts)
    except (TypeError, ValueError):
        raise ValueError(f"all-to-all-v: counts must be a {g} x {g} table of element counts, got {counts!r}") from None
    if len(table) != g or any(len(row) != g for row in table):
        raise ValueError(f"all-to-all-v: counts must be a {g} x {g} table (one row per sender, one column per "
                         f"receiver), got {len(table)} rows of lengths {[len(r) for r in table]}")
    if any(c < 0 for row in table for c in row):
        raise ValueError("all-to-all-v: counts must be >= 0")
    return table


def all_to_all_v(cluster, tensors, counts, group=None, tag: str = "", wire=None) -> list:
    """One uneven all-to-all per group, all groups at once (see the module docstring). Returns one array per local
    rank (its received pieces in position order, `Σ_p counts[p][q]` elements, in the wire dtype) with `.handle`."""
    group = check_group(cluster, group, "all-to-all-v")
    g = group.size
    table = check_counts_table(counts, g)
    if not isinstance(tensors, (list, tuple)) or len(tensors) != cluster.local_size:
        raise ValueError(f"all-to-all-v takes a list of {cluster.local_size} array(s), one per local rank")
    ns = cluster.backend.xp
    arrays = []
    for rank, a in zip(cluster.ranks, tensors):
        p = group.position(rank.index)
        if getattr(a, "ndim", None) != 1 or a.shape[0] != sum(table[p]):
            raise ValueError(f"all-to-all-v: rank {rank.index} (position {p}) must pass a flat buffer of "
                             f"{sum(table[p])} elements (its row of counts), got {getattr(a, 'shape', type(a))}")
        arrays.append(a if wire is None or a.dtype == _fmt(wire).dtype else
                      ns.cast(a, _fmt(wire)) if cluster.backend.holds_values else a.astype(_fmt(wire).dtype))
    dtypes = {a.dtype for a in arrays}
    if len(dtypes) != 1:
        raise ValueError(f"all-to-all-v: every rank must send one dtype, got {sorted(map(str, dtypes))}")
    dtype = np.dtype(dtypes.pop())
    total = sum(map(sum, table))
    call = cluster.trace.begin("all_to_all", "copy", g, total, _name_of(dtype), tag, group)
    starts = [np.cumsum((0,) + row[:-1]).tolist() for row in table]  # where p's piece for q starts in p's buffer
    if not cluster.backend.holds_values:
        out = [cluster.backend.empty((sum(row[group.position(r.index)] for row in table),), dtype)
               for r in cluster.ranks]
    elif cluster.local_size == cluster.world_size:
        out = [_receive(arrays, group, table, starts, rank.index) for rank in cluster.ranks]
    else:
        out = _exchange(cluster, arrays, group, table, starts)
    for rank in cluster.ranks:
        p = group.position(rank.index)
        for k in range(1, g):
            q = (p + k) % g
            if table[p][q]:
                cluster.trace.hop(call, k - 1, rank.index, group.group_of(rank.index)[q], q, table[p][q],
                                  dtype.itemsize, _name_of(dtype))
    cluster.trace.end(call)
    return Collected(out, cluster.trace.handle(call))


def _fmt(x):
    return get_format(x)


def _name_of(dtype) -> str:
    return get_format(dtype).name


def _receive(arrays, group, table, starts, rank: int):
    """Every rank in this process: rank's pieces from each member of its group, in position order."""
    members, q = group.group_of(rank), group.position(rank)
    return np.concatenate([arrays[m][starts[p][q] : starts[p][q] + table[p][q]] for p, m in enumerate(members)])


def _exchange(cluster, arrays, group, table, starts) -> list:
    """Ranks in other processes (MPI): g−1 rounds of point-to-point messages through the backend."""
    g = group.size
    out, pos = [], []
    for i, rank in enumerate(cluster.ranks):
        q = group.position(rank.index)
        pos.append(q)
        recv_at = np.cumsum((0,) + tuple(row[q] for row in table)[:-1]).tolist()
        buf = np.empty(sum(row[q] for row in table), arrays[i].dtype)
        buf[recv_at[q] : recv_at[q] + table[q][q]] = arrays[i][starts[q][q] : starts[q][q] + table[q][q]]
        out.append((buf, recv_at))
    for k in range(1, g):
        sends, send_to, recv_from, like = [], [], [], []
        for i, rank in enumerate(cluster.ranks):
            p, members = pos[i], group.group_of(rank.index)
            to, frm = (p + k) % g, (p - k) % g
            sends.append(arrays[i][starts[p][to] : starts[p][to] + table[p][to]])
            send_to.append(members[to])
            recv_from.append(members[frm])
            like.append((table[frm][p], arrays[i].dtype))
        got = cluster.backend.exchange(sends, send_to, recv_from, recv_like=like)
        for i in range(len(cluster.ranks)):
            (buf, recv_at), frm = out[i], (pos[i] - k) % g
            buf[recv_at[frm] : recv_at[frm] + table[frm][pos[i]]] = got[i]
    return [buf for buf, _ in out]


def naive_all_to_all_v(tensors, counts) -> list:
    """Naive twin over one group of every rank: rank q receives, from each p in order, p's slice for q."""
    n = len(tensors)
    table = check_counts_table(counts, n)
    out = []
    for q in range(n):
        pieces = []
        for p in range(n):
            start = sum(table[p][:q])
            pieces.append(np.asarray(tensors[p])[start : start + table[p][q]])
        out.append(np.concatenate(pieces))
    return out
