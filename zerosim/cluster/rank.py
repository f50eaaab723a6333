"""One rank: its index in the world and the ledger of everything it holds."""

from __future__ import annotations

from dataclasses import dataclass, field

from zerosim.cluster.ledger import MemoryLedger


@dataclass
class Rank:
    """One rank: its global index, its memory ledger, and any per-rank state an engine keeps."""

    index: int  # global rank, 0..N-1
    ledger: MemoryLedger
    state: dict = field(default_factory=dict)  # per-rank engine state lives on the rank, not in globals

    def __repr__(self) -> str:
        return f"Rank({self.index}, {self.ledger.current()} B live)"
