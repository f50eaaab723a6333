"""What each rank's ledger and trace say, as one small report per rank, gathered onto rank 0.

    reports = gather_reports(cluster)     # every rank's RankReport on rank 0 (None elsewhere under MPI)

Gathering goes through the backend protocol (`all_meta`), so the same call works in the simulator
(every rank is local), under MPI (one rank per process) and on GPUs.
"""

from __future__ import annotations

from dataclasses import field

from zerosim._dataclass import dataclass


@dataclass(frozen=True)
class RankReport:
    """What one rank's ledger and trace say: bytes live and peak by kind, bytes it sent by collective."""

    rank: int
    current: dict  # kind -> bytes live now (kinds with nothing live left out)
    peak: dict  # kind -> most bytes ever live at once
    current_total: int
    peak_total: int
    bytes_sent: int
    bytes_sent_by_collective: dict = field(default_factory=dict)


def local_reports(cluster) -> list:
    """A `RankReport` for each rank this process hosts (all N in the simulator)."""
    reports = []
    for rank in cluster.ranks:
        ledger, r = rank.ledger, rank.index
        by_collective = {}
        for e in cluster.trace.events:
            if e.src == r:
                by_collective[e.collective] = by_collective.get(e.collective, 0) + e.bytes
        reports.append(
            RankReport(
                r,
                ledger.by_kind(),
                ledger.peak_by_kind(),
                ledger.current(),
                ledger.peak(),
                cluster.trace.bytes_sent(r),
                by_collective,
            )
        )
    return reports


def gather_reports(cluster, root: int = 0):
    """Every rank's `RankReport`, in rank order, on the process hosting `root`; None on the others.

    Collective: under MPI every process must call it (it is one `all_meta` exchange).
    """
    everyone = cluster.backend.all_meta(local_reports(cluster))  # one report per rank of the world
    if root not in (rank.index for rank in cluster.ranks):
        return None
    return sorted(everyone, key=lambda report: report.rank)
