"""Cluster, Rank, MemoryLedger, Trace: what each rank holds and what crossed a link."""

from zerosim.cluster.cluster import Cluster
from zerosim.cluster.events import Compute, GradClip, LossScaleUpdate, OptimizerStep, StepBoundary
from zerosim.cluster.ledger import Buffer, LedgerError, LedgerEvent, MemoryLedger
from zerosim.cluster.rank import Rank
from zerosim.cluster.trace import Call, Event, Handle, Trace

__all__ = ["Buffer", "Call", "Cluster", "Compute", "Event", "GradClip", "Handle", "LedgerError", "LedgerEvent", "LossScaleUpdate",
           "MemoryLedger", "OptimizerStep", "Rank", "StepBoundary", "Trace"]
