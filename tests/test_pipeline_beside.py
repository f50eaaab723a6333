"""What runs beside a pipeline as its framework runs it there (zerosim/parallel/pipeline/_beside.py): torchtitan's FSDP2
keeps a stage gathered over the step and reduce-scatters once (`no_reshard_no_sync`, parallel/data/_plan.py: torchtitan
018740b `apply_fsdp`'s `reshard_after_forward = not pp_enabled`; torch 2.13 pipelining/stage.py
`backward_maybe_with_nosync`); and Megatron's sequence parallelism beside a pipeline (Korthikanti et al. 2022): each TP
rank keeps 1/T of the checkpointed block inputs, the norms' gradients summed over the TP group stage by stage. Counts
and bytes against hand tables; the numbers against the oracle, bit for bit.
"""

import numpy as np
import pytest
from helpers import same
from test_pipeline_oracle import assert_equal_bits

from zerosim import Cluster
from zerosim.cluster import LedgerEvent
from zerosim.models import GPT, MLP, Llama
from zerosim.optim import Adam
from zerosim.parallel.data import CommSchedule, get_plan
from zerosim.parallel.pipeline import PipelineEngine, plan_beside_pipeline
from zerosim.parallel.tensor import TensorParallel
from zerosim.reference import PipelineReference

B, W, M = 3, 8, 3  # an MLP of 4 Linear(8, 8) layers (72 parameters each), P = 2 stages of two, D = 2, M micro-batches
LAYER = W * W + W


def run_mlp(stage):
    cluster = Cluster(4, gpus_per_node=2)
    engine = PipelineEngine(MLP([W] * 5), cluster, stage, Adam(lr=1e-2), "fp32", pp=2, schedule="1f1b",
                            micro_batches=M, recipe="seeds")
    rng = np.random.default_rng(0)
    engine.step([[(rng.normal(size=(B, W)).astype(np.float32), rng.normal(size=(B, W)).astype(np.float32))
                  for _ in range(M)] for _ in range(2)])
    return cluster, engine


def calls(cluster) -> dict:
    out = {}
    for c in cluster.trace.calls:
        out[c.purpose] = out.get(c.purpose, 0) + 1
    return out


@pytest.mark.parametrize("stage, gathers, reductions", [
    (3, 4 * M * 2, 4 * M),  # ZeRO-3: each of the 4 layers gathered in every forward and again in every backward (it
    #                         was freed after forward), its gradient reduce-scattered every backward
    ("no_reshard_no_sync", 4, 4),  # FSDP2 beside PP: each layer gathered once a step (first forward) and its
    #                                accumulated gradient reduce-scattered once, after the stage's last backward
])
def test_fsdp2_beside_a_pipeline_gathers_once_a_step_and_reduces_once(stage, gathers, reductions):
    cluster, _ = run_mlp(stage)
    made = calls(cluster)
    assert (made["gather params"], made["reduce grads"]) == (gathers, reductions)
    assert (made["send activations"], made["send gradients"]) == (M, M)  # the pipeline itself: unchanged


def test_fsdp2_beside_a_pipeline_holds_the_stages_whole_parameters_and_gradients():
    """A stage's 144 parameters (fp32: 4 bytes) over D = 2: ZeRO-3 holds its 72-element shard and one gathered layer at
    a time (72 + 72); FSDP2 beside PP the shard and both layers, gathered for the whole step (72 + 144); its gradient
    rests whole (144), ZeRO-3's as a shard (72)."""
    for stage, params_peak, grads_resting in ((3, (72 + LAYER) * 4, 72 * 4),
                                               ("no_reshard_no_sync", (72 + 2 * LAYER) * 4, 2 * LAYER * 4)):
        cluster, _ = run_mlp(stage)
        for r in cluster.ranks:
            assert r.ledger.peak_by_kind()["params"] == params_peak, stage
            assert r.ledger.by_kind()["grads"] == grads_resting, stage
            assert "gathered" not in " ".join(r.ledger.live)  # nothing gathered is left after the step


def test_the_framework_picks_its_plan_beside_a_pipeline():
    three = get_plan(3)
    assert plan_beside_pipeline(three, CommSchedule.fsdp()).name == "no_reshard_no_sync"  # torchtitan's default
    assert plan_beside_pipeline(three, CommSchedule.fsdp(backward_prefetch="BACKWARD_POST")).name == \
        "no_reshard_no_sync"  # FSDP's knobs changed: still FSDP's
    assert plan_beside_pipeline(three, CommSchedule.deepspeed()) is three  # DeepSpeed's (refused at stage 3 anyway)
    assert plan_beside_pipeline(three, CommSchedule()) is three  # the seed's schedule: zerosim's own ZeRO-3
    assert plan_beside_pipeline(get_plan(1), CommSchedule.fsdp()) is get_plan(1)  # a stage FSDP has no plan for
    kept = get_plan("no_reshard_no_sync")  # ZeRO-3's shards at rest, ZeRO-1's one reduction
    assert (kept.sharded, kept.end_of_backward, kept.refresh_after_update, kept.reshard.keeps_for_step) == (
        ("params", "master", "optimizer"), "reduce_scatter", False, True)


def family(name: str, layers: int):
    make = {"gpt": GPT, "llama": Llama}[name.partition("+")[0]]
    return make(vocab=16, d_model=8, n_heads=2, n_layers=layers, seq_len=4,
                checkpoint=name.partition("+")[2] or "none")


def batches(rng, dp: int, micro: int) -> list:
    return [[(rng.integers(0, 16, (2, 4)), rng.integers(0, 16, (2, 4))) for _ in range(micro)] for _ in range(dp)]


def run_both(name, layers, stage, schedule, micro, virtual, tp, sp, recipe, precision, dp=2, pp=2):
    model = family(name, layers)
    tensor = TensorParallel(model, tp, sequence_parallel=sp) if tp > 1 else None
    params = None if tensor else model.init_params(np.random.default_rng(layers))
    args = dict(pp=pp, schedule=schedule, micro_batches=micro, virtual_stages=virtual, tensor=tensor, params=params,
                recipe=recipe)
    n = pp * tp * dp
    engine = PipelineEngine(model, Cluster(n, gpus_per_node=n // pp), stage, Adam(lr=1e-2), precision, **args)
    oracle = PipelineReference(model, Adam(lr=1e-2), precision, n, stage, **args)
    rng = np.random.default_rng(7)
    for _ in range(2):
        b = batches(rng, dp, micro)
        assert engine.step(b) == oracle.step(b)
    assert_equal_bits(engine, oracle, tp)


@pytest.mark.parametrize("case", [  # (family, layers, stage, schedule, M, V, TP, SP, recipe, precision)
    ("gpt", 3, "no_reshard_no_sync", "1f1b", 3, 1, 1, False, "seeds", "bf16-mixed"),  # kept for the step
    ("llama", 5, "no_reshard_no_sync", "interleaved-1f1b", 4, 2, 1, False, "seeds", "fp16-mixed"),
    ("gpt+block", 4, "no_reshard_no_sync", "zero-bubble", 2, 2, 1, False, "seeds", "bf16-mixed"),
    ("llama", 3, "no_reshard_no_sync", "gpipe", 3, 1, 2, False, "seeds", "bf16-mixed"),  # ... beside TP
    ("gpt", 4, 1, "1f1b", 2, 1, 2, True, "seeds", "bf16-mixed"),  # sequence parallelism beside the pipeline
    ("llama", 4, 3, "gpipe", 3, 1, 2, True, "fsdp2", "bf16-mixed"),  # ... beside torchtitan's FSDP
    ("gpt+block", 4, 0, "interleaved-1f1b", 2, 2, 2, True, "seeds", "bf16-mixed"),  # ... at stage 0, 2 chunks a rank
    ("llama", 5, "no_reshard_no_sync", "1f1b", 2, 1, 2, True, "seeds", "bf16-mixed"),  # ... both
])
def test_beside_a_pipeline_the_engine_equals_the_oracle(case):
    run_both(*case)


@pytest.mark.bad_input("engine arguments", unchanged=True)
@pytest.mark.parametrize("backend", ["numpy", "meta"])
def test_fsdp2s_own_recipe_beside_the_kept_stage_is_refused(backend):
    """FSDP2's per-parameter reduce-scatter of the accumulated gradient is not modelled: refused before anything is
    made, on every backend (the strategy runs with zerosim's flat layout)."""
    cluster = Cluster(4, gpus_per_node=2, backend=backend, **({"hosted": (0, 2)} if backend == "meta" else {}))
    with pytest.raises(NotImplementedError, match="no_reshard_no_sync with recipe 'fsdp2': FSDP2's per-parameter "
                                                  "reduce-scatter of the accumulated gradient"):
        PipelineEngine(MLP([W] * 5), cluster, "no_reshard_no_sync", Adam(), "bf16-mixed", pp=2, recipe="fsdp2")
    assert len(cluster.trace.log) == 0 and all(r.ledger.current() == 0 for r in cluster.ranks)


@pytest.mark.parametrize("sp, T", [(True, 2), (False, 2), (True, 4)])
def test_sequence_parallelism_beside_a_pipeline_keeps_a_tp_ranks_shard_of_each_block_input(sp, T):
    """GPipe holds all M = 3 micro-batches on the first stage (embed, block0, block1: torchtitan's split of 4 blocks +
    2 over 2 stages), each block checkpointed (checkpoint "block") keeping its (B, L, d) = (2, 4, 8) bf16 input, 128
    bytes whole (the embedding is not checkpointed: its ids are its cache, no block input). With sequence parallelism
    each TP rank keeps its L/T rows of a block's input (Korthikanti et al. 2022, §4.2.2; Megatron's sequence
    parallel); without, the whole input."""
    model = GPT(vocab=16, d_model=8, n_heads=4, n_layers=4, seq_len=4, checkpoint="block")
    cluster = Cluster(2 * T, gpus_per_node=T)
    engine = PipelineEngine(model, cluster, 1, Adam(lr=1e-2), "bf16-mixed", pp=2, schedule="gpipe", micro_batches=3,
                            tensor=TensorParallel(model, T, sequence_parallel=sp))
    rng = np.random.default_rng(0)
    engine.step(batches(rng, 1, 3))
    live, most = 0, 0
    for e in cluster.trace.log:
        if isinstance(e, LedgerEvent) and e.rank == 0 and e.name.endswith(".block input"):
            live += e.nbytes if e.action == "alloc" else -e.nbytes
            most = max(most, live)
    whole = 2 * 4 * 8 * 2  # B·L·d bf16
    assert most == 3 * 2 * (whole // T if sp else whole)  # M micro-batches × 2 blocks' inputs


# -- Megatron's overlapped gradient reduce beside a pipeline -------------------------------------------------------


@pytest.mark.parametrize("dp, bucket", [
    (1, 40_000_000),  # max(40000000, 1000000 * dp): the floor (Megatron-Core DistributedDataParallelConfig.bucket_size)
    (40, 40_000_000),  # 1000000 * 40 = the floor
    (64, 64_000_000),  # past the floor: a million parameters a data-parallel rank
])
def test_megatrons_bucket_size_is_its_default(dp, bucket):
    comm = CommSchedule.megatron(dp)
    assert (comm.reduce_bucket_size, comm.framework) == (bucket, "megatron")


def run_buckets(comm, schedule="interleaved-1f1b", V=2, micro=3):
    """An MLP of 8 Linear(8, 8) layers (72 parameters each) over P = 2 pipeline ranks of V = 2 chunks: each chunk two
    layers; ZeRO-1 (Megatron's distributed optimizer) over D = 2."""
    cluster = Cluster(4, gpus_per_node=2)
    engine = PipelineEngine(MLP([W] * 9), cluster, 1, Adam(lr=1e-2), "fp32", pp=2, schedule=schedule,
                            micro_batches=micro, virtual_stages=V, recipe="seeds", comm=comm)
    rng = np.random.default_rng(0)
    engine.step([[(rng.normal(size=(B, W)).astype(np.float32), rng.normal(size=(B, W)).astype(np.float32))
                  for _ in range(micro)] for _ in range(2)])
    return cluster, engine


@pytest.mark.parametrize("bucket, calls_a_rank", [
    (None, 1),  # no overlap: one reduce-scatter of the rank's whole buffer after its last backward
    (2 * LAYER, 2),  # a bucket a chunk (two layers fill it): each chunk's own, in its last backward
    (LAYER, 4),  # a bucket a layer
])
def test_megatrons_overlapped_reduce_runs_in_each_chunks_last_backward(bucket, calls_a_rank):
    cluster, _ = run_buckets(CommSchedule(reduce_bucket_size=bucket))
    log = cluster.trace.log
    reduces = [i for i, e in enumerate(log) if getattr(e, "purpose", "") == "reduce grads"]
    computes = [i for i, e in enumerate(log) if type(e).__name__ == "Compute"]
    assert len(reduces) == 2 * calls_a_rank  # two pipeline ranks
    if bucket is None:  # after the step's every backward
        assert min(reduces) > max(computes)
        return
    assert all(log[i].micro == 2 for i in reduces)  # in the last micro-batch (grad sync off for the others) ...
    assert min(reduces) < max(computes)  # ... issued while backwards still run: overlapped with them


@pytest.mark.parametrize("case", [  # (family, layers, schedule, M, V, bucket, precision)
    ("gpt", 6, "interleaved-1f1b", 4, 2, 200, "bf16-mixed"),
    ("llama", 7, "interleaved-1f1b", 2, 2, 1, "fp16-mixed"),  # a bucket a unit
    ("gpt+block", 4, "zero-bubble", 2, 2, 10**6, "bf16-mixed"),  # one bucket a chunk
    ("llama", 5, "1f1b", 3, 1, 300, "bf16-mixed"),
])
def test_megatrons_buckets_beside_a_pipeline_equal_the_oracle(case):
    name, layers, schedule, micro, virtual, bucket, precision = case
    model = family(name, layers)
    args = dict(pp=2, schedule=schedule, micro_batches=micro, virtual_stages=virtual,
                params=model.init_params(np.random.default_rng(3)), recipe="seeds")
    engine = PipelineEngine(model, Cluster(8, gpus_per_node=4), 1, Adam(lr=1e-2), precision,
                            comm=CommSchedule(reduce_bucket_size=bucket), **args)
    oracle = PipelineReference(model, Adam(lr=1e-2), precision, 8, 1, **args)  # buckets change no bit
    rng = np.random.default_rng(7)
    for _ in range(2):
        b = batches(rng, 4, micro)
        assert engine.step(b) == oracle.step(b)
    assert same(engine.full_master(), oracle.full_master()) and same(engine.full_params(), oracle.full_params())


@pytest.mark.bad_input("engine arguments", unchanged=True)
def test_ddps_parameter_buckets_with_virtual_stages_are_still_refused():
    cluster = Cluster(4, gpus_per_node=2)
    with pytest.raises(ValueError, match="reduction buckets of recipe 'ddp' at stages 0/1 with virtual stages"):
        PipelineEngine(MLP([W] * 9), cluster, 0, Adam(), "bf16-mixed", pp=2, schedule="interleaved-1f1b",
                       micro_batches=2, recipe="ddp")
    assert len(cluster.trace.log) == 0 and all(r.ledger.current() == 0 for r in cluster.ranks)
