"""Context parallelism beside pipeline parallelism on the meta backend (issue 60, Must show 4's groundwork): each
pipeline stage's ZeroEngine runs the CP rank's units of its layers, its activations the sequence shard (L / C tokens),
its ring over the stage's CP groups, its ZeRO shards over dp × cp (torchtitan's "fsdp" mesh, inside a "pp"
coordinate). CP = 1 beside PP and PP = 1 beside CP change nothing; what is not modelled stays refused by name."""

import pytest

from zerosim import Cluster, ZeroEngine, get_optimizer
from zerosim.analysis.costs import measure_stage
from zerosim.models import GPT, MetaGPT
from zerosim.parallel import ParallelDims, ParallelSpec
from zerosim.parallel.context import ContextParallel
from zerosim.parallel.pipeline import PipelineEngine

D, LAYERS, VOCAB, L = 32, 4, 64, 64


def twin():
    return MetaGPT(GPT(vocab=VOCAB, d_model=D, n_heads=4, n_layers=LAYERS, seq_len=L, attention="flash"))


def measured(spec, stage=3):
    row, _, _ = measure_stage(twin(), 8, stage, precision="bf16-mixed", micro_batch=(2, L), spec=spec,
                              micro_batches=4)
    return row


# A GPT block's parameters by hand: ln1 2d, qkv 3d² + 3d, proj d² + d, ln2 2d, fc 4d² + 4d, fc2 4d² + d
BLOCK = 12 * D * D + 13 * D  # 12,704
STAGE0 = 2 * VOCAB * D + 2 * BLOCK  # torchtitan's split of 4 layers + embedding + head over 2: embed, block0, block1


@pytest.mark.parametrize("cp, dp", [
    (2, 2),  # N 8 = pp 2 × dp 2 × cp 2: ZeRO-3 shards a stage over the 4 ranks of dp × cp
    (4, 1),  # N 8 = pp 2 × dp 1 × cp 4: over the 4 ranks of cp alone (torchtitan's "fsdp" = dp_shard × cp)
])
def test_a_stage_shards_its_states_over_dp_times_cp(cp, dp):
    row = measured(ParallelSpec(pp=2, cp=cp))
    assert row["pipeline"][0]["params"] == STAGE0 == 29504  # embed (wte + wpe: 2·64·32) + 2 blocks
    shard = STAGE0 // (dp * cp)  # 7,376 of stage 0's parameters a rank (4 divides 29,504: no padding)
    assert row["resting"] == {"params": 2 * shard,  # bf16 params: 2 bytes a parameter
                              "grads": 2 * shard,  # bf16 gradient shard
                              "master": 4 * shard, "optim:m": 4 * shard, "optim:v": 4 * shard}  # fp32 each


@pytest.mark.parametrize("cp", [2, 4])
@pytest.mark.parametrize("style", ["ring", "allgather", "torch"])
def test_each_stage_keeps_the_sequence_shard(cp, style):
    """Every tensor a flash GPT layer keeps is per token (tests/test_context_memory.py), and the pipeline's stages
    hold the same micro-batches in flight (1F1B: P − r) with or without CP, so each pipeline rank's activations are
    1/C of the CP-1 pipeline's, and its units are the CP rank's (the attention cut at the ring)."""
    plain, split = measured(ParallelSpec(pp=2)), measured(ParallelSpec(pp=2, cp=cp, cp_style=style))
    for a, b in zip(plain["pipeline"], split["pipeline"]):
        assert b["activations"] * cp == a["activations"]
        assert b["in_flight"] == a["in_flight"] and b["params"] == a["params"] and b["gpus"] == a["gpus"]
    assert split["pipeline"][1]["units"][0] == "block2.attn.qkv"  # the second stage starts at a layer's CP units


def sends(cluster, purpose):
    return [e for e in cluster.trace.log if getattr(e, "purpose", None) == purpose]


def test_the_ring_runs_inside_each_stage_over_its_cp_groups():
    _, cluster, engine = measure_stage(twin(), 8, 3, precision="bf16-mixed", micro_batch=(2, L),
                                       spec=ParallelSpec(pp=2, cp=2), micro_batches=4)
    assert engine.dims == ParallelDims(8, pp=2, cp=2)
    cps = engine.dims.groups("cp")
    assert cps.members == ((0, 1), (2, 3), (4, 5), (6, 7))  # a stage's block of 4 ranks holds 2 CP groups
    ring = sends(cluster, "context parallel")
    # C = 2: forward hop 0 sends its K/V on; backward hop 1 sends the K/V back, hop 0 the dK/dV: 3 messages a layer,
    # for each of the 4 layers (2 a stage) and each of the M = 4 micro-batches, each over a CP group of 2
    assert len(ring) == 3 * LAYERS * 4
    assert {(e.group, e.world_size, e.collective) for e in ring} == {("cp", 2, "send_recv")}
    kv = 2 * 2 * 4 * (L // 2) * (D // 4)  # K and V of one rank's L / C tokens: 2 · B · H · L/C · d_h elements
    assert {e.elements for e in ring if e.tag.endswith("K, V to the next rank")} == {kv}
    # each message is sent by every rank of its stage (the representative and the 3 it stands for), one K/V (or dK/dV,
    # or both) of its own, and by no rank of the other stage, which runs its own ring at its own times
    stage_of = {call.call: 0 if call.tag.startswith(("block0.", "block1.")) else 1 for call in ring}
    senders = {}
    for e in cluster.trace.events:
        if e.call in stage_of:
            senders.setdefault(e.call, []).append(e.src)
    assert {c: sorted(s) for c, s in senders.items()} == {c: [4 * p, 4 * p + 1, 4 * p + 2, 4 * p + 3]
                                                          for c, p in stage_of.items()}
    # the activations handed between stages are a CP rank's: B × L / C × d
    acts = sends(cluster, "send activations")
    assert len(acts) == 4 and {e.elements for e in acts} == {2 * (L // 2) * D}


def step_record(engine, cluster):
    return ([repr(e) for e in cluster.trace.log], [r.ledger.peak_by_kind() for r in cluster.ranks],
            [r.ledger.by_kind() for r in cluster.ranks])


def test_cp_1_beside_pp_changes_nothing():
    """A ContextParallel of degree 1 given to the pipeline: every event, peak and resting byte as without it."""
    runs = []
    for context in (None, "cp1"):
        m = twin()
        cluster = Cluster(8, backend="meta", hosted=ParallelDims(8, pp=2).groups("pp").group_of(0), trace="call")
        cp = None if context is None else ContextParallel(m, cp=1)
        engine = PipelineEngine(m, cluster, 3, get_optimizer("adam"), "bf16-mixed", pp=2, micro_batches=4,
                                context=cp)
        pair = m.batches(cluster, 2, L)[0]
        engine.step([[pair] * 4 for _ in range(engine.dims.dp)])
        runs.append(step_record(engine, cluster))
    assert runs[0] == runs[1]


def test_pp_1_beside_cp_changes_nothing():
    """A pipeline of one stage beside CP 2 is the data-parallel step beside CP 2: every event, peak and byte."""
    runs = []
    for pipeline in (False, True):
        cp = ContextParallel(twin(), cp=2)
        cluster = Cluster(4, backend="meta", trace="call")
        if pipeline:
            engine = PipelineEngine(cp.model, cluster, 3, get_optimizer("adam"), "bf16-mixed", pp=1, context=cp)
            engine.step([[cp.model.batches(cluster, 2, L // 2)[0]] for _ in range(engine.dims.dp)])
        else:
            engine = ZeroEngine(cp.model, cluster, 3, get_optimizer("adam"), "bf16-mixed", parallelisms=(cp,))
            engine.step(cp.model.batches(cluster, 2, L // 2))
        runs.append(step_record(engine, cluster))
    assert runs[0] == runs[1]


@pytest.mark.bad_input("api", unchanged="nothing runs: refused before the stages' engines are built")
def test_real_numbers_beside_a_pipeline_are_refused():
    real = GPT(vocab=16, d_model=8, n_heads=2, n_layers=2, seq_len=8, attention="flash")
    cp = ContextParallel(real, cp=2)
    with pytest.raises(NotImplementedError, match="context parallelism beside pipeline parallelism runs on the "
                                                  "meta backend"):
        PipelineEngine(cp.model, Cluster(8), 3, get_optimizer("adam"), "bf16-mixed", pp=2, context=cp)


def test_a_tp_ranks_stage_shards_its_slice_over_dp_times_cp():
    """TP 2 × CP 2 × PP 2 on 8 GPUs (dp 1): the first stage's TP slice of a Llama, by hand, over the stage's dp × cp."""
    from zerosim.models import Llama, MetaLlama

    twin_ = MetaLlama(Llama(vocab=64, d_model=32, n_heads=4, n_kv_heads=2, n_layers=4, seq_len=L, d_ff=64,
                            attention="flash"))
    row, _, engine = measure_stage(twin_, 8, 3, precision="bf16-mixed", micro_batch=(2, L),
                                   spec=ParallelSpec(tp=2, cp=2, pp=2), micro_batches=4)
    assert engine.dims == ParallelDims(8, tp=2, cp=2, pp=2)
    embed = 64 // 2 * 32  # the vocabulary-parallel table: V / T rows of d
    block = (32  # the attention's RMSNorm, whole on every TP rank
             + 2 * (2 * 8 * 32)  # q_proj and o_proj: H / T = 2 heads of 8 by d
             + 2 * (1 * 8 * 32)  # k_proj and v_proj: G / T = 1 head of 8 by d
             + 32  # the FFN's RMSNorm
             + 3 * (64 // 2) * 32)  # gate, up and down: F / T = 32 columns (rows) of d
    assert row["pipeline"][0]["params"] == embed + 2 * block == 10368  # torchtitan's split: embed, block0, block1
    shard = (embed + 2 * block) // 2  # over dp × cp = 1 × 2
    assert row["resting"] == {"params": 2 * shard, "grads": 2 * shard, "master": 4 * shard, "optim:m": 4 * shard,
                              "optim:v": 4 * shard}


@pytest.mark.slow  # the command in a process of its own: ~4 s
def test_memory_and_timeline_take_pp_beside_cp(capsys):
    from zerosim.cli.main import main

    argv = ["--model", "gpt2-small", "--seq-len", "1024", "--batch", "2", "--precision", "bf16-mixed", "--ranks", "8",
            "--pp", "2", "--cp", "2", "--checkpoint", "flash"]
    assert main(["memory", *argv]) == 0
    out = capsys.readouterr().out
    assert "N = 8 GPUs = pp 2 x cp 2 x dp 2" in out and "over the dp × cp = 4 ranks\nholding them" in out
    assert main(["timeline", *argv, "--gpu", "h100-80gb"]) == 0
    out = capsys.readouterr().out
    assert "N = 8 ranks = pp 2 x cp 2 x dp 2 (ring, zigzag split)" in out
    assert "each rank 512 tokens of a sequence" in out
