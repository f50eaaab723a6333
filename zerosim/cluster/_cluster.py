"""The cluster: the ranks this process hosts, their ledgers, the trace, and the backend that moves data.

    cluster = Cluster(4)                            # four simulated ranks in this process
    out = all_reduce(cluster, [g0, g1, g2, g3])     # zerosim.collectives: one array per local rank in and out

The collectives are functions one layer up (zerosim.collectives) that take the cluster first, as
torch.distributed's take a process group; the cluster knows nothing of them. Every collective takes
a list with one array per *local* rank (all N in the simulator, one under MPI) and returns a list of
the same length, as NCCL's grouped calls do when one process drives several GPUs.
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np

from zerosim.backends import make_backend
from zerosim.cluster._budget import check_world_size
from zerosim.cluster._ledger import MemoryLedger
from zerosim.cluster._mesh import Groups, Mesh, hop_tier
from zerosim.cluster._pool import RankPool
from zerosim.cluster._rank import Rank
from zerosim.cluster._trace import Trace
from zerosim.cluster._window import WINDOW, budget


class Cluster:
    """N ranks with ledgers, a shared trace, and the backend their collectives move data through.

    Args:
        world_size: number of ranks N (>= 1).
        backend: ``"numpy"`` (all ranks in this process), ``"mpi"`` or ``"cupy"``.
        trace: ``"hop"`` (one event per send) or ``"call"`` (one summary per collective and rank); default
            "hop", or "call" on the meta backend's representative rank (which summarises in closed form).
        timeline: keep each ledger's alloc/free timeline (turn off for very long runs).
        keep_values: copy every chunk that crosses a link into the trace (for teaching; small runs only).
        gpus_per_node: G, the ranks each node holds (rank r sits on node r // G): hops between nodes cross the
            "inter-node" link tier (InfiniBand), the others stay "intra-node" (NVLink). None: one node, a flat
            cluster. `cluster.mesh` is then the (N/G, G) mesh with dims ("node", "gpu").
        workers: threads that run one op's per-rank compute and optimizer updates at once (_pool.py): 1 (default)
            runs the ranks one after another; "auto" uses every core this process may run on. Results and the
            event log are the same bits either way; pin BLAS to one thread per worker (OPENBLAS_NUM_THREADS=1).
        keep_steps: k: the trace holds the events of the last k engine steps and folds older steps into its
            summary, so a long run's memory stays flat (cluster/_window.py: bytes per collective, tier, step and
            rank stay whole-run; call numbers stay absolute, and `trace.logged` is the absolute log position; the
            lists lose their front: `zerosim train` holds 2 and reads nothing older). None: every step is held.
            "auto" (default): the last `WINDOW` (1024) steps, far more than any notebook runs, but no more of them than
            their events' share of what the ranks hold (cluster/_window.py `budget`: the ledgers' peaks, or 8 MB
            where that is more, at least `HELD_AT_LEAST` steps: a small model's 1024 steps of events were ~300 times
            its ledgers' peak), with absolute
            positions once a step folds (`trace.log`, `calls`, `events` and the ledgers' timelines become a
            `Tail`), so a position read as `len(trace.log)` before a step still points at that step's events
            after it.
        log_to: a file path: the trace streams the whole log there (each entry's repr, a call's sends below it),
            folded steps as they fold and the rest on `cluster.trace.flush_log()`.
        stack_ranks: with one worker, run a layer's op once for every rank, their micro-batches stacked row by row,
            where that gives each rank the bits of its own run (models/_stacked.py: Linear, ReLU, GELU, the half-MSE
            loss, a GPT's and a Llama's units and their loss under the portable kernels; an MLP's ops under native
            ones, each rank's products a matrix of their own; the ranks' weights the same bits); every rank's state and
            events as before. False: each rank's op by itself, the loop it is checked against
            (tests/test_stacked_ranks.py).
    """

    def __init__(
        self,
        world_size: int,
        backend: str = "numpy",
        trace: str | None = None,
        timeline: bool = True,
        keep_values: bool = False,
        gpus_per_node: int | None = None,
        workers: int | str = 1,
        keep_steps: int | None | str = "auto",
        log_to=None,
        stack_ranks: bool = True,
        **backend_options,
    ):
        if isinstance(world_size, bool) or not isinstance(world_size, (int, np.integer)) or world_size < 1:
            raise ValueError(f"world_size must be a positive integer, got {world_size!r}")
        world_size = int(world_size)
        if gpus_per_node is not None:
            if isinstance(gpus_per_node, bool) or not isinstance(gpus_per_node, (int, np.integer)) or gpus_per_node < 1:
                raise ValueError(f"gpus_per_node must be a positive integer, got {gpus_per_node!r}")
            if world_size % gpus_per_node:
                raise ValueError(f"{world_size} ranks do not fill nodes of {gpus_per_node} GPUs: gpus_per_node must "
                                 "divide world_size")
            gpus_per_node = int(gpus_per_node)
        pool = RankPool(workers, stack_ranks)  # checked before anything is made
        if isinstance(backend, str) and backend in ("numpy", "meta", "cupy-sim"):  # every rank lives in this process
            check_world_size(world_size, backend)
        self.backend = backend if not isinstance(backend, str) else make_backend(backend, world_size, **backend_options)
        if self.backend.world_size != world_size:
            raise ValueError(f"backend {self.backend.name!r} has world size {self.backend.world_size}, but the cluster "
                             f"was asked for {world_size}")
        self.world_size, self.pool = world_size, pool
        representative = len(self.backend.local_ranks) < world_size and self.backend.name == "meta"
        if representative and trace == "hop":
            raise ValueError("the meta backend's representative rank keeps one summary per call (trace='call'); "
                             "pass hosted='all' to host every rank and record every hop")
        self.gpus_per_node = gpus_per_node
        auto = isinstance(keep_steps, str) and keep_steps == "auto"  # the default window: positions kept absolute
        self.trace = Trace(trace or ("call" if representative else "hop"), keep_values=keep_values,
                           gpus_per_node=gpus_per_node, world_size=world_size,
                           keep_steps=WINDOW if auto else keep_steps, log_to=log_to, absolute=auto)
        recycle = getattr(self.backend, "recycle", None)
        self.fifo = {}  # the ring's working buffers per local rank: transport memory (NCCL's FIFOs), in no ledger
        # allocs and frees join the trace's ordered log (straight onto it: the trace's folding reads only the engine's
        # step boundaries, and keeps the same list)
        sink = self.trace._log.append if timeline else None
        self.ranks = [
            Rank(i, MemoryLedger(i, empty=self.backend.empty, recycle=recycle, keep_timeline=timeline, sink=sink,
                                 absolute=auto))
            for i in self.backend.local_ranks
        ]
        by_rank = {r.index: r.ledger for r in self.ranks}
        if auto:  # the default window holds no more events than a share of what the ranks hold (_window.py)
            ranks = self.ranks
            self.trace.budget = lambda: budget(sum(
                r.ledger._peak_total + sum(t._peak_total for t in r.tiers.values()) for r in ranks))
        self.trace.on_fold = lambda last: [by_rank[r].fold_timeline(*mark) for r, mark in last.items() if r in by_rank]
        if timeline:  # each step's end notes where every ledger's timeline stood, for a fold to let go of it
            ledgers = list(by_rank.items())
            self.trace.ledger_seqs = lambda: {r: ledger.mark() for r, ledger in ledgers}

    def __repr__(self) -> str:
        local = [r.index for r in self.ranks]
        nodes = "" if self.gpus_per_node is None else f", gpus_per_node={self.gpus_per_node}"
        return f"Cluster(world_size={self.world_size}{nodes}, backend={self.backend.name!r}, local_ranks={local})"

    def let_go(self) -> None:
        """Every ledger of every local rank (the device's, and an offload's host and NVMe) lets go of its live buffers
        (`MemoryLedger.let_go`), for an owner done with this cluster's run: its numbers stay, and the run is freed
        with its last reference instead of waiting for Python's cyclic collector (the planner's memory runs)."""
        for rank in self.ranks:
            for ledger in (rank.ledger, *rank.tiers.values()):
                ledger.let_go()

    @property
    def local_size(self) -> int:
        return len(self.ranks)

    @property
    def nodes(self) -> int:
        """How many nodes the ranks fill (1 for a flat cluster)."""
        return 1 if self.gpus_per_node is None else self.world_size // self.gpus_per_node

    @property
    def mesh(self) -> Mesh:
        """The physical mesh: (nodes, GPUs per node), dims ("node", "gpu")."""
        return Mesh((self.nodes, self.world_size // self.nodes), ("node", "gpu"))

    @property
    def world(self) -> Groups:
        """Every rank in one ring, in rank order: the group a collective runs over by default."""
        return Groups.world(self.world_size)

    def tier(self, src: int, dst: int) -> str:
        """The link tier a send from rank `src` to rank `dst` crosses ("intra-node" or "inter-node")."""
        return hop_tier(src, dst, self.gpus_per_node)

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

    def agree(self, problems: list, what: str = "", error=ValueError) -> None:
        """Raise `error` on every rank if any rank found a problem (one entry per local rank, None if fine): all
        ranks decide together through the backend's metadata exchange, so under MPI none is left waiting in a
        collective. The message names each rank's problem, then `what` (e.g. "; nothing was run")."""
        everyone = self.backend.all_meta(problems)
        bad = [(r, p) for r, p in enumerate(everyone) if p]
        if bad:
            raise error("; ".join(f"rank {r}: {p}" for r, p in bad) + what)
