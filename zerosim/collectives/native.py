"""MPI's own reduce-scatter behind the ring's interface (backend option native=True), for speed."""

from __future__ import annotations

import numpy as np


def native_reduce_scatter(cluster, staged, op, wire, bounds, call):
    """MPI's own reduce-scatter (backend option native=True), for speed.

    NOTE: MPI picks the order of additions, not NCCL's ring, so results may differ in the last bits.
    The trace records what a ring would send (step -1): the backend does not say what MPI sent.
    """
    counts = [stop - start for (start, stop) in bounds]
    for rank in cluster.ranks:
        cluster.trace.hop(call, -1, rank.index, -1, -1, sum(counts) - counts[rank.index], wire.itemsize, wire.name)
    name = "max" if op.combine is np.maximum else "sum"  # the averaging variants scale before or after
    return [cluster.backend.native_reduce_scatter(s, counts=counts, op=name) for s in staged], []
