"""One pipeline stage's ranks as the data-parallel step sees a cluster: a part of the world, as one MPI process
hosts a part of it.

Letters: N ranks, P pipeline ranks. A stage's data-parallel engine (a `ZeroEngine` on `StageCluster`) runs over the
N / P ranks of its stage (pp is the outermost mesh dim: torchtitan's ParallelDims order, so a stage's ranks are one
block of consecutive ranks, parallel/_dims.py), with the world's rank numbers, ledgers and trace: its collectives run
over groups cut from the whole mesh (its data-parallel groups lie inside the stage), and each stage's call is its own
in the trace, as each process group's call is its own under torch. Its "world" (what a collective over no group runs
over: the overflow flag) is the stage.

The backend it sees hosts the stage's ranks: `exchange` hands a message from one of them to another by their rank
numbers (as MPI does between processes); everything else is the world's backend. `all_meta`, every rank's
description of its input, answers for a rank of another stage with what the rank at the same place of this stage
describes: every stage's groups are the same shape (one block of the mesh each), a collective's checks compare
descriptions within a group or group against group, and this stage's groups are the only ones that run in its call.
So the checks see this stage's sizes in every block, as if each stage ran the same call at once (they run theirs at
other times: each stage's call is its own in the trace).
"""

from __future__ import annotations

from zerosim.cluster import Cluster, Groups


class StageCluster(Cluster):
    """The ranks `ranks` of `cluster` (one pipeline stage's), sharing its ledgers, trace and backend; `world` is
    `stages`, the groups of every stage (see the module docstring)."""

    def __init__(self, cluster: Cluster, ranks, stages: Groups):  # not Cluster.__init__: the ranks exist already
        hosted = set(int(r) for r in ranks)
        self.whole, self.stages = cluster, stages
        self.backend = _Hosting(cluster.backend, [r.index for r in cluster.ranks if r.index in hosted],
                                cluster.world_size)
        self.world_size, self.pool, self.gpus_per_node = cluster.world_size, cluster.pool, cluster.gpus_per_node
        self.trace, self.fifo = cluster.trace, {}  # the ring's working buffers of these ranks (transport memory)
        self.ranks = [r for r in cluster.ranks if r.index in hosted]

    def agree(self, problems: list, what: str = "", error=ValueError) -> None:
        """`Cluster.agree` over this stage's ranks, naming each by its rank number."""
        bad = [(rank.index, p) for rank, p in zip(self.ranks, problems) if p]
        if bad:
            raise error("; ".join(f"rank {r}: {p}" for r, p in bad) + what)

    @property
    def world(self) -> Groups:
        """Every stage's ranks, each its own ring: what a collective over no group runs over on this stage."""
        return self.stages

    def __repr__(self) -> str:
        return f"StageCluster(ranks {[r.index for r in self.ranks]} of {self.whole!r})"


# what the collectives ask a backend on every call (its namespace, whether it holds values, its own phases): copied
# once where the backend has them, not looked up through __getattr__ ~80,000 times a pipeline's step
_ASKED_EVERY_CALL = ("xp", "holds_values", "reduce_scatter_phase", "all_gather_phase", "sends_by_reference")


class _Hosting:
    """The world's backend, hosting only the stage's ranks (`local_ranks`)."""

    def __init__(self, backend, local_ranks: list, world_size: int):
        self._backend, self.local_ranks, self.world_size = backend, list(local_ranks), world_size
        for name in _ASKED_EVERY_CALL:
            if hasattr(backend, name):  # one it lacks stays lacking (`getattr(backend, name, default)` reads it so)
                setattr(self, name, getattr(backend, name))

    def __getattr__(self, name):
        return getattr(self._backend, name)

    def all_meta(self, items) -> list:
        """Every rank's item: the stage's own, and for a rank of another stage the item of the rank at its place in
        this stage (the module docstring). On a backend without values (meta) hosting a representative a stage:
        the representative's, as the meta backend answers (its collectives take the others alike)."""
        if not self._backend.holds_values:
            return self._backend.all_meta(items)
        block = len(self.local_ranks)
        return [items[r % block] for r in range(self.world_size)]

    def exchange(self, sends, send_to, recv_from, recv_like=None) -> list:
        """Local rank i sends `sends[i]` to rank `send_to[i]` and receives from rank `recv_from[i]` (rank numbers:
        the world's)."""
        outbox = {(src, dst): a for src, a, dst in zip(self.local_ranks, sends, send_to) if dst is not None}
        received = []
        for me, src in zip(self.local_ranks, recv_from):
            if src is None:
                received.append(None)
                continue
            if (src, me) not in outbox:
                raise RuntimeError(f"rank {me} waits for a message from rank {src} that was never sent")
            a = outbox[(src, me)]
            received.append(a if getattr(self._backend, "sends_by_reference", False) else a.copy())
        return received
