"""Cases beside tensor parallelism that once answered raw or silently (issue 57): each now a clear refusal naming the
flag, or the combination working bit for bit against the oracle.

    train --tp 2 --reduction deepspeed-zero12      numpy's broadcast error     -> equal to the oracle (stages 1, 2)
    TensorParallel beside Offload (the API)        IndexError in the step      -> refused when the engine is built
    train --tp 0                                   ran without TP              -> "--tp must be a positive integer"
    train --tp 2 --vocab 7                         header said 7, trained 256  -> the header says the padded 256
    the torchtitan layout                          (new)                       -> the same bits, no re-gather
"""

import subprocess
import sys

import numpy as np
import pytest
from test_tensor_oracle import assert_same, llama, run_both

from zerosim import Cluster, ZeroEngine, get_optimizer
from zerosim.cluster import Call
from zerosim.models import GPT
from zerosim.parallel.offload import Offload
from zerosim.parallel.tensor import TensorParallel
from zerosim.precision import get_precision


def zerosim(*argv) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "zerosim.cli.main", *argv], capture_output=True, text=True)


@pytest.mark.parametrize("reduction", ["deepspeed-zero12", "deepspeed-zero12-reduce"])
@pytest.mark.parametrize("stage", [1, 2])
def test_deepspeeds_bucket_all_reduce_beside_tp_equals_the_oracle(stage, reduction):
    """Each rank copies back the bucket slices its shard owns: its position among the data-parallel ranks, not its
    world rank (recipes/_bucket_allreduce.py): beside TP 2 on 4 GPUs world rank 1 is data-parallel position 0."""
    precision = get_precision("bf16-mixed").with_(reduction=reduction)
    assert_same(*run_both(llama(2), 2, 2, stage, precision, sp=True))


@pytest.mark.parametrize("plan", [1, 3, "hsdp"])
def test_the_torchtitan_layout_moves_no_bit_and_gathers_nothing_again(plan):
    """torch DTensor's layout keeps the all-gathered input instead of the shard: the weight gradient reads the same
    bits, so the engine still equals the oracle, and backward makes no "input again" all-gather."""
    full = llama(2)
    T, dp = 2, 4 if plan == "hsdp" else 2
    tp = TensorParallel(full, T, sequence_parallel=True, params=full.init_params(np.random.default_rng(0)),
                        layout="torchtitan")
    engine = ZeroEngine(tp.model, Cluster(T * dp, gpus_per_node=T), plan, get_optimizer("adam", lr=1e-2),
                        "bf16-mixed", parallelisms=(tp,), shard_group=2 if plan == "hsdp" else None)
    megatron = run_both(full, T, dp, plan, "bf16-mixed", sp=True)
    rng = np.random.default_rng(1)  # run_both's draws (seed + 1)
    for got, _ in megatron[3]:
        per_dp = [(rng.integers(0, full.vocab, (2, 8)), rng.integers(0, full.vocab, (2, 8))) for _ in range(dp)]
        assert engine.step(tp.batches(engine.dims, per_dp)) == got
    assert np.array_equal(tp.whole_params(engine.ctx), megatron[1].whole_params(megatron[0].ctx))
    tags = [e.tag for e in engine.cluster.trace.log if isinstance(e, Call)]
    assert not any("input again" in t for t in tags)
    assert any("input again" in e.tag for e in megatron[0].cluster.trace.log if isinstance(e, Call))


@pytest.mark.bad_input("engine arguments", unchanged=True)
def test_tensor_parallel_beside_offload_is_refused_when_the_engine_is_built():
    gpt = GPT(vocab=64, d_model=32, n_heads=4, n_layers=2, seq_len=16)
    tp, cluster = TensorParallel(gpt, tp=2), Cluster(4, gpus_per_node=2)
    with pytest.raises(ValueError, match="offload beside tensor parallelism is not modelled"):
        ZeroEngine(tp.model, cluster, 2, get_optimizer("adam"), "bf16-mixed", parallelisms=(tp, Offload("cpu")))
    assert all(not r.ledger.live for r in cluster.ranks)  # nothing was born
    # TP of degree 1 is no tensor parallelism: nothing to refuse beside
    one = TensorParallel(gpt, tp=1)
    ZeroEngine(one.model, Cluster(2), 2, get_optimizer("adam"), "bf16-mixed", parallelisms=(one, Offload("cpu")))


@pytest.mark.bad_input("engine arguments")
def test_an_unknown_layout_is_refused_by_name():
    with pytest.raises(ValueError, match=r"layout must be one of \('megatron', 'torchtitan'\)"):
        TensorParallel(GPT(vocab=64, d_model=32, n_heads=4, n_layers=2, seq_len=16), tp=2, layout="deepspeed")


@pytest.mark.bad_input("command line")
@pytest.mark.parametrize("argv, said", [
    (["train", "--model", "gpt", "--ranks", "4", "--tp", "0"], "--tp must be a positive integer, got 0"),
    (["train", "--model", "gpt", "--ranks", "4", "--tp-layout", "torchtitan"],
     "--tp-layout says what a TP rank keeps: give --tp T > 1 with it"),
    (["timeline", "--model", "llama-3-8b", "--ranks", "8", "--seq-len", "1024", "--tp-layout", "megatron"],
     "--tp-layout says what a TP rank keeps: give --tp T > 1 with it"),
    (["plan", "--model", "llama-3-8b", "--gpus", "8", "--gpu", "h100-80gb", "--seq-len", "1024", "--global-batch", "8",
      "--tp-layout", "torchtitan"], "--tp-layout says what a TP rank keeps: give --tp degrees above 1 with it"),
])
def test_tp_flags_are_refused_by_name(argv, said):
    out = zerosim(*argv)
    assert out.returncode == 2 and said in out.stderr, out.stderr


def test_the_train_header_says_the_vocabulary_megatron_pads_to():
    out = zerosim("train", "--model", "gpt", "--ranks", "4", "--tp", "2", "--vocab", "7", "--steps", "1")
    assert out.returncode == 0, out.stderr
    head = out.stdout.splitlines()[0]
    assert "its vocabulary of 7 padded to 256 as Megatron pads it over tp 2" in head  # 7 up to a multiple of 128·2
