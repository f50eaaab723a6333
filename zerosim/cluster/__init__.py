"""Cluster, Rank, MemoryLedger, Trace: what each rank holds and what crossed a link.

    _cluster.py  Cluster: the ranks this process hosts, their ledgers, the trace, the backend (no collectives:
                 they are functions one layer up, zerosim.collectives)
    _rank.py     Rank: one rank's model states
    _mesh.py     Mesh (torch's DeviceMesh: dims with names) and Groups (the process groups a collective runs over);
                 the two link tiers, within a node and across nodes
    _ledger.py   MemoryLedger: every buffer a rank holds, by kind, with peaks and a timeline
    _trace.py    Trace: every hop and the ordered log; Handle, the calls one collective recorded
    _events.py   the typed events of a step (Compute, OptimizerStep, LossScaleUpdate, GradClip,
                 Fp8ScaleUpdate, StepBoundary)
    _report.py   per-rank reports gathered on rank 0
    _budget.py   will it fit? refuse a run before allocating it
    _pool.py     the local ranks' work in parallel: one op's per-rank compute on a few threads, its record in rank order
    _hops.py     a ring phase's sends as one record, its hop events derived when read
    _runs.py     RunCounts: per-rank counts of a flat range, run-length encoded (O(1) at any N)
    _closed.py   a ring phase in closed form: each rank's bytes from the chunk sizes (the meta backend's)
    _recording.py a span of a run recorded and written again, renumbered (the meta pipeline's repeated actions)
    _window.py   a long run's trace: the last steps' events, a summary of the rest, the whole log to a file
"""

from zerosim.cluster._budget import GB, MAX_UNITS, available_bytes, check_fits, gb
from zerosim.cluster._closed import busiest_bytes
from zerosim.cluster._cluster import Cluster
from zerosim.cluster._events import (
    Compute,
    ComputeFields,
    Fp8ScaleUpdate,
    GradClip,
    LossScaleUpdate,
    OptimizerStep,
    StepBoundary,
)
from zerosim.cluster._ledger import Buffer, LedgerError, LedgerEvent, MemoryLedger
from zerosim.cluster._mesh import INTER, INTRA, TIERS, Groups, Mesh
from zerosim.cluster._rank import Rank
from zerosim.cluster._recording import Recording
from zerosim.cluster._runs import RunBounds, RunCounts
from zerosim.cluster._trace import TRANSFERS, Call, Event, Handle, Trace

__all__ = [
    "MAX_UNITS",
    "Buffer",
    "Call",
    "Cluster",
    "Compute",
    "Event",
    "Fp8ScaleUpdate",
    "GradClip",
    "Groups",
    "Handle",
    "INTER",
    "INTRA",
    "LedgerError",
    "LedgerEvent",
    "LossScaleUpdate",
    "MemoryLedger",
    "Mesh",
    "OptimizerStep",
    "Rank",
    "Recording",
    "RunBounds",
    "RunCounts",
    "StepBoundary",
    "TIERS",
    "TRANSFERS",
    "Trace",
    "busiest_bytes",
    "ComputeFields", "GB", "available_bytes", "check_fits", "gb",
]
