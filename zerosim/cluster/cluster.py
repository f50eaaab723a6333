"""The cluster: the ranks this process hosts, their ledgers, the trace, and the collectives.

    cluster = Cluster(4)                       # four simulated ranks in this process
    out = cluster.all_reduce([g0, g1, g2, g3]) # one array per local rank in, one per rank out

Every collective takes a list with one array per *local* rank (all N in the simulator, one under
MPI) and returns a list of the same length, as NCCL's grouped calls do when one process drives
several GPUs.
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np

from zerosim.backends import make_backend
from zerosim.cluster.budget import check_world_size
from zerosim.cluster.ledger import MemoryLedger
from zerosim.cluster.rank import Rank
from zerosim.cluster.trace import Trace


class Cluster:
    """N ranks with ledgers, a shared trace, and ring collectives in NCCL's order.

    Args:
        world_size: number of ranks N (>= 1).
        backend: ``"numpy"`` (all ranks in this process), ``"mpi"`` or ``"cupy"``.
        trace: ``"hop"`` (one event per send) or ``"call"`` (one summary per collective and rank); default
            "hop", or "call" on the meta backend's representative rank (which summarises in closed form).
        timeline: keep each ledger's alloc/free timeline (turn off for very long runs).
        keep_values: copy every chunk that crosses a link into the trace (for teaching; small runs only).
    """

    def __init__(self, world_size: int, backend: str = "numpy", trace: str | None = None, timeline: bool = True, keep_values: bool = False,
                 **backend_options):
        if isinstance(world_size, bool) or not isinstance(world_size, (int, np.integer)) or world_size < 1:
            raise ValueError(f"world_size must be a positive integer, got {world_size!r}")
        world_size = int(world_size)
        if isinstance(backend, str) and backend in ("numpy", "meta"):  # every rank lives in this process
            check_world_size(world_size, backend)
        self.backend = backend if not isinstance(backend, str) else make_backend(backend, world_size, **backend_options)
        if self.backend.world_size != world_size:
            raise ValueError(f"backend {self.backend.name!r} has world size {self.backend.world_size}, but the cluster was asked for {world_size}")
        self.world_size = world_size
        representative = len(self.backend.local_ranks) < world_size and self.backend.name == "meta"
        if representative and trace == "hop":
            raise ValueError("the meta backend's representative rank keeps one summary per call (trace='call'); "
                             "pass hosted='all' to host every rank and record every hop")
        self.trace = Trace(trace or ("call" if representative else "hop"), keep_values=keep_values,
                           world_size=world_size)
        recycle = getattr(self.backend, "recycle", None)
        self.fifo = {}  # the ring's working buffers per local rank: transport memory (NCCL's FIFOs), in no ledger
        sink = self.trace.record if timeline else None  # allocs and frees join the trace's ordered log
        self.ranks = [Rank(i, MemoryLedger(i, empty=self.backend.empty, recycle=recycle, keep_timeline=timeline, sink=sink))
                      for i in self.backend.local_ranks]

    def __repr__(self) -> str:
        return f"Cluster(world_size={self.world_size}, backend={self.backend.name!r}, local_ranks={[r.index for r in self.ranks]})"

    @property
    def local_size(self) -> int:
        return len(self.ranks)

    @contextmanager
    def phase(self, label: str):
        """Label every ledger event inside the block (e.g. "forward layer 1"), for timelines and replay."""
        previous = [r.ledger.phase_label for r in self.ranks]
        for r in self.ranks:
            r.ledger.phase_label = label
        try:
            yield
        finally:
            for r, p in zip(self.ranks, previous):
                r.ledger.phase_label = p

    # -- collectives ---------------------------------------------------------------------------
    # NOTE: the ring algorithms live one layer up, in zerosim.collectives, and take the cluster as
    # an argument; these methods are the convenience front door, so they import at call time.
    def reduce_scatter(self, tensors, op: str = "sum", wire=None, tag: str = "", counts=None, out=None):
        """Ring reduce-scatter: rank r gets chunk r of the reduction. See `zerosim.collectives.reduce_scatter`."""
        from zerosim.collectives import reduce_scatter

        return reduce_scatter(self, tensors, op=op, wire=wire, tag=tag, counts=counts, out=out)

    def all_gather(self, shards, wire=None, tag: str = "", counts=None, out=None):
        """Ring all-gather: every rank gets the concatenation of all shards. See `zerosim.collectives.all_gather`."""
        from zerosim.collectives import all_gather

        return all_gather(self, shards, wire=wire, tag=tag, counts=counts, out=out)

    def all_reduce(self, tensors, op: str = "sum", wire=None, tag: str = "", counts=None):
        """Reduce-scatter then all-gather, 2(N-1) steps. See `zerosim.collectives.all_reduce`."""
        from zerosim.collectives import all_reduce

        return all_reduce(self, tensors, op=op, wire=wire, tag=tag, counts=counts)

    def broadcast(self, tensors, root: int, tag: str = ""):
        """Chain broadcast from `root` around the ring. See `zerosim.collectives.broadcast`."""
        from zerosim.collectives import broadcast

        return broadcast(self, tensors, root=root, tag=tag)
