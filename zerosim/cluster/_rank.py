"""One rank: its index in the world, the ledger of everything it holds, and the training state it owns.

State lives here, on the rank, not in parallel lists on an engine: a ZeRO engine puts the rank's
16-bit params (whole or its shard), its gradient buffer, its fp32 master and optimizer state (whole
at stage 0, its shard at stages 1-3) into these fields; every array among them is a buffer of
`ledger`, so memory stays a measurement. Nothing else passes through a rank: what a step makes on
the way (a reduced gradient, a gathered layer) lives in the ledger by name, and helpers hand it on
as return values.
"""

from __future__ import annotations

from dataclasses import field

from zerosim._dataclass import dataclass
from zerosim.cluster._ledger import Buffer, MemoryLedger

TIERS = ("host", "nvme")  # the memory tiers beside the device's (parallel/offload places buffers there)


@dataclass
class Rank:
    """One rank: its global index, its memory ledger, and the model states an engine gives it."""

    index: int  # global rank, 0..N-1
    ledger: MemoryLedger
    params: Buffer | None = None  # (N*s,) or (s,) compute format: the weights forward/backward read
    grads: Buffer | None = None  # (N*s,) or (s,) accumulation format: gradients until the step
    master: Buffer | None = None  # (N*s,) or (s,) fp32 master weights (None: "pure" 16-bit training)
    optim: dict = field(default_factory=dict)  # {state name: Buffer} over the same region as master
    tiers: dict = field(default_factory=dict, repr=False)  # {"host" | "nvme": MemoryLedger}: offload's other tiers

    def ledger_of(self, tier: str = "device") -> MemoryLedger:
        """The ledger of one memory tier: "device" (`ledger`, the GPU's), "host" (pinned CPU memory) or "nvme" (an
        offload's swap files). The same kinds in each, so a buffer's tier is where it is born, not a new kind; the
        host and NVMe ledgers keep no trace log of their own (the device's feeds the timeline)."""
        if tier == "device":
            return self.ledger
        if tier not in TIERS:
            raise ValueError(f"no memory tier {tier!r}; a rank's tiers are {('device',) + TIERS}")
        if tier not in self.tiers:
            d = self.ledger
            self.tiers[tier] = MemoryLedger(self.index, empty=d.empty, recycle=d.recycle, keep_timeline=d.keep_timeline)
        return self.tiers[tier]

    def model_states(self) -> list:
        """The buffers that outlive a step: params, grads, master and optimizer state (on whichever tier)."""
        return [b for b in (self.params, self.grads, self.master, *self.optim.values()) if b is not None]

    def __repr__(self) -> str:
        return f"Rank({self.index}, {self.ledger.current()} B live)"
