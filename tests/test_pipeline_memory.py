"""Each stage's memory in its ranks' ledgers (zerosim/parallel/pipeline): the activations a schedule holds in flight
against the hand formula per schedule (_costs.py: GPipe M, 1F1B P - r, interleaved Megatron's warmup + 1, zero
bubble's), the first stage's peak the highest, and the embedding and head on the first and last stage.

Activations by hand: every Linear and every ReLU of an MLP saves its input, (B, W) fp32, as "<unit>.input"
(models/layers/_basic.py: "every layer here saves exactly its input"); a stage of two Linear + ReLU pairs keeps four
such inputs per micro-batch; the model's last Linear has no ReLU after it, and the loss keeps its input for the
moment its backward takes (models/_run.py: the loss's forward and backward are one op).
"""

import numpy as np
import pytest

from zerosim import Cluster
from zerosim.models import GPT, MLP, MetaGPT
from zerosim.optim import Adam
from zerosim.parallel import ParallelDims
from zerosim.parallel.pipeline import PipelineEngine, make_table
from zerosim.parallel.pipeline._costs import in_flight
from zerosim.parallel.tensor import TensorParallel

B, W = 3, 8
INPUT = B * W * 4  # one saved (B, W) fp32 input


def run(schedule: str, P: int, M: int, V: int):
    widths = [W] * (2 * P * V + 1)  # two Linear layers a stage
    cluster = Cluster(P)
    engine = PipelineEngine(MLP(widths), cluster, 1, Adam(), "fp32", pp=P, schedule=schedule, micro_batches=M,
                            virtual_stages=V)
    rng = np.random.default_rng(0)
    engine.step([[(rng.normal(size=(B, W)).astype(np.float32), rng.normal(size=(B, W)).astype(np.float32))
                  for _ in range(M)]])
    return engine, [r.ledger.peak("activations") for r in cluster.ranks]


@pytest.mark.parametrize("schedule, P, M, V", [
    ("gpipe", 4, 6, 1), ("1f1b", 4, 6, 1), ("1f1b", 3, 9, 1), ("interleaved-1f1b", 2, 4, 2),
    ("interleaved-1f1b", 4, 8, 2), ("zero-bubble", 4, 4, 1), ("zero-bubble", 2, 6, 2),
])
def test_activations_in_flight_are_the_hand_formula(schedule, P, M, V):
    engine, peaks = run(schedule, P, M, V)
    last_rank = (P * V - 1) % P
    for r in range(P):
        if r == last_rank and V > 1:
            continue  # its chunks differ in size (the model's last Linear has no ReLU): below, for one chunk a rank
        chunk = 4 * INPUT  # fc, act, fc, act
        if r == last_rank:  # one chunk, the last: fc, act, fc, and the loss's input for a moment
            assert peaks[r] == in_flight(schedule, P, M, V, r) * 3 * INPUT + INPUT, r
        else:
            assert peaks[r] == in_flight(schedule, P, M, V, r) * chunk, r


def test_1f1b_holds_p_minus_r_micro_batches_whatever_m_and_gpipe_holds_m():
    for M in (4, 8):
        _, one_f = run("1f1b", 4, M, 1)
        _, fill = run("gpipe", 4, M, 1)
        assert one_f[:3] == [4 * 4 * INPUT, 3 * 4 * INPUT, 2 * 4 * INPUT]  # P - r micro-batches of a stage
        assert fill[:3] == [M * 4 * INPUT] * 3  # every micro-batch
    assert one_f[0] == max(one_f)  # the first stage's peak is the pipeline's


def test_interleaving_holds_more_chunks_of_smaller_stages():
    # P = 4, M = 8: 1F1B's first rank holds 4 micro-batches of its stage; interleaved (V = 2) holds 11 chunks of half
    # a stage each (Megatron: (4 - 1)·2 + (2 - 1)·4 warmup, one more): 5.5 stages' worth
    assert make_table("1f1b", 4, 8).in_flight(0) == 4
    assert make_table("interleaved-1f1b", 4, 8, 2).in_flight(0) == 11
    _, peaks = run("interleaved-1f1b", 4, 8, 2)
    assert peaks[0] == 11 * 4 * INPUT


def test_the_embedding_sits_on_the_first_stage_and_the_head_on_the_last():
    vocab, d, L, seq = 32, 8, 4, 6
    model = GPT(vocab=vocab, d_model=d, n_heads=2, n_layers=L, seq_len=seq)
    cluster = Cluster(2)
    engine = PipelineEngine(model, cluster, 0, Adam(), "bf16-mixed", pp=2, micro_batches=2)
    block = 2 * d + (3 * d * d + 3 * d) + (d * d + d) + 2 * d + (4 * d * d + 4 * d) + (4 * d * d + d)  # 12d² + 13d
    embedding, head = vocab * d + seq * d, 2 * d + vocab * d
    # torchtitan's split of 4 layers + 2: 3 effective a stage: the embedding and 2 blocks | 2 blocks and the head
    want = [embedding + 2 * block, 2 * block + head]
    assert [m.num_params for m in engine.stage_models] == want
    assert [r.ledger.current("params") for r in cluster.ranks] == [2 * n for n in want]  # bf16 params, stage 0
    assert engine.stage_models[0].units == (0, 1, 2) and engine.stage_models[1].units == (3, 4, 5)


@pytest.mark.parametrize("schedule, stage", [("1f1b", 3), ("interleaved-1f1b", 1)])
def test_the_meta_backend_answers_for_each_stage_as_the_real_run(schedule, stage):
    """One representative a stage on the meta backend (a data-less GPT twin beside TP 2) holds, kind by kind, what
    the real run's rank holds: the meta accounting of benchmarks/pipeline_meta.py (405B on 16,384 GPUs) rests on it."""
    gpt = GPT(vocab=16, d_model=8, n_heads=2, n_layers=4, seq_len=4)
    dims = ParallelDims(8, pp=2, tp=2)
    peaks = []
    for meta in (False, True):
        if meta:
            cluster = Cluster(8, backend="meta", hosted=dims.groups("pp").group_of(0), trace="call")
            tensor = TensorParallel(MetaGPT(gpt), 2)
            ids = cluster.backend.empty((2, 4), np.int64)
            batches = [[(ids, ids)] * 4 for _ in range(dims.dp)]
        else:
            cluster, tensor, rng = Cluster(8), TensorParallel(gpt, 2), np.random.default_rng(0)
            batches = [[(rng.integers(0, 16, (2, 4)), rng.integers(0, 16, (2, 4))) for _ in range(4)]
                       for _ in range(dims.dp)]
        engine = PipelineEngine(tensor.model, cluster, stage, Adam(), "bf16-mixed", pp=2, micro_batches=4,
                                schedule=schedule, tensor=tensor)
        engine.step(batches)
        peaks.append({r.index: r.ledger.peak_by_kind() for r in cluster.ranks})
    real, meta = peaks
    assert sorted(meta) == [0, 4]  # the first rank of each stage
    assert all(meta[r] == real[r] for r in meta)


@pytest.mark.bad_input("cluster and backends")
@pytest.mark.parametrize("hosted", [(), (3, 1), (0, 8), (0, 0), ("0",), (True,)])
def test_the_meta_backend_hosts_only_ranks_it_can(hosted):
    with pytest.raises(ValueError, match="or the ranks it hosts in increasing order"):
        Cluster(8, backend="meta", hosted=hosted, trace="call")
    assert [r.index for r in Cluster(8, backend="meta", hosted=(0, 4), trace="call").ranks] == [0, 4]
