"""On the meta backend a pipeline may host one rank a stage, which stands for its stage's ranks
(`Cluster(N, backend="meta", hosted=...)`, zerosim/parallel/pipeline/_engine.py): what every rank sent must be what a
run hosting every rank (`hosted="all"`) records, rank by rank, on every schedule, beside DP, TP and CP. The yardstick
runs every action (`repeat=False`); the representative run writes alike actions again from their records, as the
planner's runs do (parallel/pipeline/_repeat.py).

The stages hand their activations and gradients on point to point (collectives/_p2p.py `send_pairs`): every rank of
a stage to the next stage's rank at its place, so the ranks a representative stands for send too, each its own
message. Each rank's sent bytes are the trace's per-rank records at "call" granularity (the representative's: one
summary a rank and call, naming its sender; what a rank received is recorded with hops alone), and the steps folded
out of the trace's window keep them by rank (`Summary.sent_items`).
"""

import numpy as np
import pytest

from zerosim import Adam, Cluster
from zerosim.models import Llama, MetaLlama
from zerosim.parallel import ParallelDims
from zerosim.parallel.context import ContextParallel
from zerosim.parallel.pipeline import PipelineEngine
from zerosim.parallel.tensor import TensorParallel

P, M, SEQ = 4, 4, 16


def run(schedule: str, V: int, stage, recipe: str, tp: int, cp: int, dp: int, hosted: str, keep_steps=None,
        steps: int = 1):
    """A Llama of 2 blocks a stage on P·tp·cp·dp ranks, nodes of 4 GPUs; `hosted` "all", or "representative": the
    first rank of each stage (analysis/costs `pipeline_run`'s hosting)."""
    model = Llama(vocab=256, d_model=64, n_heads=4, n_layers=2 * P * V, seq_len=SEQ, d_ff=128, n_kv_heads=2,
                  checkpoint="block", **({} if cp == 1 else {"attention": "flash"}))
    dims = ParallelDims(P * tp * cp * dp, pp=P, tp=tp, cp=cp)
    cluster = Cluster(dims.world_size, backend="meta", trace="call", timeline=False, gpus_per_node=4,
                      hosted="all" if hosted == "all" else dims.groups("pp").group_of(0), keep_steps=keep_steps)
    tensor = TensorParallel(MetaLlama(model), tp) if tp > 1 else None
    context = ContextParallel(MetaLlama(model), cp, "ring", tensor=tensor) if cp > 1 else None
    whole = context.model if context is not None else MetaLlama(model) if tensor is None else tensor.model
    engine = PipelineEngine(whole, cluster, stage, Adam(), "bf16-mixed", pp=P, micro_batches=M, schedule=schedule,
                            virtual_stages=V, tensor=tensor, recipe=recipe, context=context,
                            repeat=hosted != "all")
    ids = cluster.backend.empty((1, SEQ // cp), np.int64)
    for _ in range(steps):
        engine.step([[(ids, ids)] * M for _ in range(dims.dp)])
    return cluster


def what_each_rank_sent(cluster) -> dict:
    """Every per-rank record of the sends (and what the calls say of them: their tiers), and the totals over them."""
    trace = cluster.trace
    return {
        "calls": [repr(c) for c in trace.calls],
        "sends": [repr(e) for e in trace.events],
        "sent by rank": list(trace.sent_totals(cluster.world_size)),
        "by collective": [[trace.bytes_sent(r, c) for c in ("send_recv", "reduce_scatter", "all_gather")]
                          for r in range(cluster.world_size)],
        "bytes by tier": trace.bytes_by_tier(),
        "summary": trace.summary(),
        "folded by rank": sorted(trace.folded.sent_items()),
    }


CASES = [  # schedule, V, ZeRO stage, recipe, tp, cp, dp
    ("gpipe", 1, 1, "seeds", 1, 1, 2),  # a stage's two ranks in one node: every send crosses the same link
    ("1f1b", 1, 1, "seeds", 1, 1, 3),  # stages of 3 ranks over nodes of 4: rank 0 -> 3 stays in its node, 1 -> 4 not
    ("1f1b", 1, 3, "fsdp2", 2, 1, 2),  # torchtitan's FSDP beside TP
    ("interleaved-1f1b", 2, 1, "seeds", 2, 1, 1),  # the last stage's chunk hands on to the first rank's next chunk
    ("zero-bubble", 2, 1, "seeds", 1, 1, 2),  # a backward-input sends the gradient, a backward-weight nothing
    ("1f1b", 1, 1, "seeds", 1, 2, 2),  # the long-context points' pipeline: a CP ring inside each stage
    pytest.param("interleaved-1f1b", 2, 3, "fsdp2", 2, 2, 1, marks=pytest.mark.slow),
]


@pytest.mark.parametrize("schedule, V, stage, recipe, tp, cp, dp", CASES)
def test_a_representative_a_stage_records_every_ranks_sends(schedule, V, stage, recipe, tp, cp, dp):
    stood_for = what_each_rank_sent(run(schedule, V, stage, recipe, tp, cp, dp, "representative"))
    every = what_each_rank_sent(run(schedule, V, stage, recipe, tp, cp, dp, "all"))
    for key in every:
        assert stood_for[key] == every[key], key


def test_a_stages_ranks_send_alike_and_the_steps_folded_keep_them():
    """Two steps, the first folded out of a window of one: each stage's ranks sent the same bytes (their stage's, each
    its own message), in the window and in the fold, as the run hosting every rank counts them."""
    stood_for = run("1f1b", 1, 1, "seeds", 1, 2, 2, "representative", keep_steps=1, steps=2)
    every = run("1f1b", 1, 1, "seeds", 1, 2, 2, "all", keep_steps=1, steps=2)
    assert stood_for.trace.folded.calls > 0
    assert what_each_rank_sent(stood_for) == what_each_rank_sent(every)
    sent = stood_for.trace.sent_totals(stood_for.world_size)
    block = stood_for.world_size // P
    assert all(len(set(sent[p * block:(p + 1) * block])) == 1 for p in range(P))
