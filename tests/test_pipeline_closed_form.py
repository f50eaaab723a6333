"""A pipeline stage's ring collectives (ZeRO's, TP's) on the meta backend, counted in closed form, against the NumPy
backend running the same step: every rank's bytes, by collective, by tier and by step, the folded steps included.

A stage's call runs on its own ranks alone (`Trace.within`, `Trace.call_ranks`); the closed form (cluster/_closed.py)
knows the call's groups, which span every stage, so until 2026-11-27 it counted each stage's call on every stage's
ranks: a rank's total held every stage's calls. The NumPy backend runs each ring send by send: the independent answer.
"""

import numpy as np
import pytest

from zerosim import Adam, Cluster
from zerosim.models import Llama, MetaLlama
from zerosim.parallel import ParallelDims
from zerosim.parallel.pipeline import PipelineEngine
from zerosim.parallel.tensor import TensorParallel

P, M, SEQ, VOCAB = 2, 2, 8, 64


def run(backend: str, stage: int, recipe: str, tp: int, dp: int, hosted: str, steps: int, keep_steps):
    """A Llama of one block a stage on P·tp·dp ranks, nodes of 2 GPUs (so that some rings cross nodes)."""
    model = Llama(vocab=VOCAB, d_model=32, n_heads=4, n_layers=P, seq_len=SEQ, d_ff=64, n_kv_heads=2)
    dims = ParallelDims(P * tp * dp, pp=P, tp=tp)
    meta = backend == "meta"
    hosting = {} if not meta else {"hosted": "all" if hosted == "all" else dims.groups("pp").group_of(0)}
    cluster = Cluster(dims.world_size, backend=backend, trace="call", timeline=False, gpus_per_node=2,
                      keep_steps=keep_steps, **hosting)
    whole = MetaLlama(model) if meta else model
    tensor = TensorParallel(whole, tp) if tp > 1 else None
    engine = PipelineEngine(whole if tensor is None else tensor.model, cluster, stage, Adam(), "bf16-mixed", pp=P,
                            micro_batches=M, schedule="1f1b", tensor=tensor, recipe=recipe)
    ids = cluster.backend.empty((1, SEQ), np.int64) if meta else np.arange(SEQ).reshape(1, SEQ) % VOCAB
    for _ in range(steps):
        engine.step([[(ids, ids)] * M for _ in range(dims.dp)])
    return cluster


def sent(cluster) -> dict:
    trace, n = cluster.trace, cluster.world_size
    return {
        "sent by rank": list(trace.sent_totals(n)),
        "by collective and rank": [[trace.bytes_sent(r, c) for c in ("send_recv", "reduce_scatter", "all_gather",
                                                                      "all_reduce")] for r in range(n)],
        "bytes by tier": trace.bytes_by_tier(),
        "summary": trace.summary(),
    }


CASES = [  # ZeRO stage, recipe, tp, dp, steps, keep_steps
    (1, "seeds", 1, 2, 1, None),  # ZeRO-1's reduce-scatter and all-gather, each stage's own
    (3, "fsdp2", 1, 3, 1, None),  # ZeRO-3's gathers a micro-batch; rings of 3 over nodes of 2
    (3, "fsdp2", 2, 2, 2, 1),  # beside TP's all-reduces, the first step folded out of the window
]


@pytest.mark.parametrize("stage, recipe, tp, dp, steps, keep_steps", CASES)
@pytest.mark.parametrize("hosted", ["representative", "all"])
def test_a_stages_closed_form_calls_count_its_own_ranks_alone(stage, recipe, tp, dp, steps, keep_steps, hosted):
    meta = sent(run("meta", stage, recipe, tp, dp, hosted, steps, keep_steps))
    numpy = sent(run("numpy", stage, recipe, tp, dp, hosted, steps, keep_steps))
    assert meta["sent by rank"] == numpy["sent by rank"]
    for key in numpy:
        assert meta[key] == numpy[key], key
