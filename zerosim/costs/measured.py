"""Memory and communication of ZeRO stages measured, not computed: one step of the real engines on the
meta backend (shapes and dtypes, no data), read back from the ledgers and the trace.

This is the second route to the numbers in memory.py and comm.py; tests check that the two agree.
"""

from __future__ import annotations

from zerosim.cluster import Cluster
from zerosim.optim import get_optimizer
from zerosim.progress import progress
from zerosim.zero import ZeroEngine

MODEL_STATES = ("params", "grads", "master")  # and every optim:* kind: the resting model states


def measure_by_stage(model, ranks: int, optimizer: str = "adam", precision: str = "fp16-mixed", step: bool = True,
                     stages=(0, 1, 2, 3), show_progress: bool | None = None) -> list:
    """Run each stage on the meta backend; per stage what the ledgers and the trace recorded.

    Returns [{"stage", "resting": {kind: bytes}, "peak": bytes, "peak_by_kind": {kind: bytes},
    "sent": bytes, "ranks_agree": bool}], where resting is the model states left after the step
    (params, grads, master, optim:*), peak the most any rank held at once during it (fp32 gradient
    shards and gathered layers included), sent the most bytes any rank put on the wire. A progress bar
    shows where someone watches (`zerosim.progress`; `show_progress` forces it on or off).
    """
    out = []
    for stage in progress(stages, f"{model.num_params / 1e9:.3g}B params on {ranks} ranks", enabled=show_progress, unit="stage"):
        cluster = Cluster(ranks, backend="meta", trace="call", timeline=False)
        engine = ZeroEngine(model, cluster, stage, get_optimizer(optimizer), precision)
        if step:
            engine.step(model.batches(cluster))  # one per rank this process hosts (the representative: 1)
        resting = [{k: v for k, v in r.ledger.by_kind().items() if k in MODEL_STATES or k.startswith("optim:")} for r in cluster.ranks]
        peaks = [r.ledger.peak() for r in cluster.ranks]  # the ranks hosted: all, or the representative
        top = max(range(len(peaks)), key=peaks.__getitem__)
        sent = cluster.trace.sent_totals(ranks)  # every rank's, in closed form where the trace summarised
        out.append({
            "stage": stage,
            "resting": resting[0],
            "ranks_agree": all(r == resting[0] for r in resting),  # padded buffers: every rank holds the same (hosted ones)
            "peak": peaks[top],
            "peak_by_kind": {k: v for k, v in cluster.ranks[top].ledger.peak_by_kind().items() if v},
            "sent": max(sent),
        })
    return out
