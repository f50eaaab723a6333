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

from zerosim._lazy import lazy_face, names_of

# each name of the face and the module that defines it, imported the first time it is asked for (zerosim/_lazy.py):
# `from zerosim.cluster import Cluster` loads the cluster, not the pipeline's recordings beside it
_NAMES = {
    "._budget": ("GB", "MAX_UNITS", "available_bytes", "check_fits", "check_world_size", "gb"),
    "._closed": ("busiest_bytes",),
    "._cluster": ("Cluster",),
    "._events": ("Compute", "ComputeFields", "Fp8ScaleUpdate", "GradClip", "LossScaleUpdate", "OptimizerStep",
                 "StepBoundary", "optimizer_step_event"),
    "._ledger": ("Buffer", "LedgerError", "LedgerEvent", "MemoryLedger", "adopt_ranks", "free_ranks"),
    "._mesh": ("INTER", "INTRA", "TIERS", "Groups", "Mesh", "hop_tier"),
    "._rank": ("Rank",),
    "._recording": ("Recording",),
    "._runs": ("RunBounds", "RunCounts"),
    "._trace": ("TRANSFERS", "Call", "Event", "Handle", "Trace"),
}
__getattr__, __dir__ = lazy_face(__name__, _NAMES)

__all__ = sorted(names_of(_NAMES))
