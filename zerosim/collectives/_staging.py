"""Around the ring: inputs staged in the wire format, outputs checked, results handed back with their handle.

`stage` pads and casts each rank's input into a wire-dtype buffer (through the rank's ledger, kind "comm"),
or passes it as is when nothing changes; `phases` picks who moves the data: the backend itself (the meta
backend's closed form, MPI's own reduce-scatter), the in-process twin (_fast.py), or the ring (_ring.py).
"""

from __future__ import annotations

from zerosim.collectives import _fast as fast
from zerosim.precision import get_format


class Collected(list):
    """A collective's results, one per local rank, and `handle`: the trace calls that made them
    (`zerosim.cluster.Handle`), which later work names when it must wait for them."""

    def __init__(self, results, handle):
        super().__init__(results)
        self.handle = handle


def stage(cluster, call: int, arrays, op, wire, length: int, padded: int, n: int | None = None):
    """Each rank's input as a wire-dtype buffer of `padded` elements. Zero-copy when nothing changes. `n`: the ranks
    on each ring (the group's size; default the world), which an averaging op divides by."""
    n = cluster.world_size if n is None else n
    if padded == length and not op.changes_input and all(fmt is wire or fmt == wire for (_, _, fmt) in arrays):
        return [a for (_, a, _) in arrays], []  # nothing changes on any rank: every input as it is, read only
    staged, temps = [], []
    for rank, (_, a, fmt) in zip(cluster.ranks, arrays):
        if (fmt is wire or fmt == wire) and not op.changes_input and padded == length:
            staged.append(a)  # read only: the ring never writes into its inputs
            continue
        buf = rank.ledger.alloc(f"call{call}.staged", padded, wire.dtype, "comm")
        buf.array[:length] = op.pre(a, n, wire, cluster.backend.xp)
        buf.array[length:] = 0
        staged.append(buf.array)
        temps.append(buf)
    return staged, temps


def phases(cluster) -> tuple:
    """(reduce-scatter phase, all-gather phase): the backend's own; the in-process twin when every rank is
    here, sends are references and the trace keeps no values (it records each phase's hops as one record, or one
    summary per rank); else the ring, hop by hop."""
    backend = cluster.backend
    local = (getattr(backend, "sends_by_reference", False) and cluster.local_size == cluster.world_size
             and not cluster.trace.keep_values)
    if local:
        moves = fast
    else:  # hop by hop: kept values (teaching runs), another process's ranks; not a cost of importing the engine
        from zerosim.collectives import _ring as moves
    rs = getattr(backend, "reduce_scatter_phase", moves.reduce_scatter_phase)
    ag = getattr(backend, "all_gather_phase", moves.all_gather_phase)
    return rs, ag


def free(temps) -> None:
    for b in temps:
        b.free()


def wire_format(arrays, wire):
    return get_format(wire) if wire is not None else arrays[0][2]


def check_out(cluster, out, sizes: list, wire, what: str, averaging: bool, group=None) -> list:
    """`out` as a list of writable destination arrays, one per local rank, of each result's size and the wire dtype
    (`sizes` by position in the rank's ring: its rank in the world when `group` is None)."""
    if averaging:
        raise ValueError(f"{what}: out= cannot hold op 'avg' results (a new fp32 array, divided after the cast); "
                         "reduce with 'sum'")
    if not isinstance(out, (list, tuple)) or len(out) != cluster.local_size:
        raise ValueError(f"{what}: out must be a list of {cluster.local_size} array(s), one per local rank")
    stored = cluster.backend.xp.storage(wire)  # bf16 as uint16 where the backend keeps it as bits
    sizes = tuple(sizes)  # (a RunCounts answers one index by walking its runs: expanded once)
    where = group.ring_order[1] if group is not None else range(cluster.world_size)  # every rank's place in `sizes`
    for rank, o in zip(cluster.ranks, out):
        want = sizes[where[rank.index]]
        flags = getattr(o, "flags", None)  # data-less (meta) arrays have none: nothing to write into
        read_only = flags is not None and not getattr(flags, "writeable", True)  # CuPy's flags have no writeable
        if getattr(o, "shape", None) != (want,) or o.dtype != stored or read_only:
            raise ValueError(f"{what}: out for rank {rank.index} must be a writable ({want},) {wire.name} array, "
                             f"got {getattr(o, 'shape', type(o).__name__)} {getattr(o, 'dtype', '')}")
    return list(out)
