"""Tensor (and sequence) parallelism beside ZeRO equals its one-device oracle bit for bit (issue 38, must-show 1):
ZeroEngine(tp.model, ..., parallelisms=(tp,)) on N = T·dp ranks against TensorReference (reference/_tensor.py: the T
slices of every micro-batch on one device, their partial sums added by the naive twin in the ring's order, each slice
reduced over its dp ranks by Reference), for TP in {1, 2, 4} x SP on and off x every ZeRO stage and strategy x
precisions x gradient accumulation, on Hypothesis-drawn GPT and Llama shapes. tp = 1 is no tensor parallelism: the
same bits and the same log as the engine without it."""

import numpy as np
import pytest
from helpers import bits
from hypothesis import given, settings
from hypothesis import strategies as st

from zerosim import Cluster, ZeroEngine, get_optimizer
from zerosim.models import GPT, Llama
from zerosim.parallel.tensor import TensorParallel, padded_vocab
from zerosim.reference import TensorReference

PLANS = (0, 1, 2, 3, "hsdp", "hsdp_no_sync", "mics", "mics_hierarchical", "hpz", "no_reshard", "reshard_to_group")
GROUPED = {"hsdp", "hsdp_no_sync", "mics", "mics_hierarchical", "hpz", "reshard_to_group"}  # need a shard group S
PRECISIONS = ("fp16-mixed", "bf16-mixed", "fp32", "bf16-pure")


def gpt(T, heads_per_rank=1, head_dim=4, vocab=13, layers=2, seq=8, multiple=1, **kw):
    return GPT(vocab=padded_vocab(vocab, T, multiple), d_model=heads_per_rank * T * head_dim,
               n_heads=heads_per_rank * T, n_layers=layers, seq_len=seq, **kw)


def llama(T, heads_per_rank=2, kv_per_rank=1, head_dim=4, ffn_per_rank=6, vocab=13, layers=2, seq=8, multiple=1,
          **kw):
    return Llama(vocab=padded_vocab(vocab, T, multiple), d_model=8, n_heads=heads_per_rank * T,
                 n_kv_heads=kv_per_rank * T, head_dim=head_dim, n_layers=layers, seq_len=seq,
                 d_ff=ffn_per_rank * T, **kw)


def run_both(full, T, dp, plan, precision, sp=False, K=1, steps=2, L=8, B=2, seed=0):
    """The engine and the oracle through `steps` steps on the same drawn batches: (engine, tp, oracle, losses)."""
    N = T * dp
    tp = TensorParallel(full, tp=T, sequence_parallel=sp, params=full.init_params(np.random.default_rng(seed)))
    S = 2 if plan in GROUPED else None
    # one node per TP group beside one data-parallel position's worth: MiCS's hierarchy spans S nodes
    cluster = Cluster(N, gpus_per_node=T)
    engine = ZeroEngine(tp.model, cluster, plan, get_optimizer("adam", lr=1e-2), precision, parallelisms=(tp,),
                        accumulation_steps=K, shard_group=S)
    oracle = TensorReference(tp, get_optimizer("adam", lr=1e-2), precision, N, plan, accumulation_steps=K,
                             shard_group=S)
    rng = np.random.default_rng(seed + 1)
    losses = []
    for _ in range(steps):
        per_dp = [[(rng.integers(0, full.vocab, (B, L)), rng.integers(0, full.vocab, (B, L))) for _ in range(K)]
                  for _ in range(dp)]
        per_dp = [m[0] if K == 1 else m for m in per_dp]
        got = engine.step(tp.batches(engine.dims, per_dp))
        want = oracle.step(per_dp)
        losses.append((got, want))
    return engine, tp, oracle, losses


def assert_same(engine, tp, oracle, losses):
    dp = engine.dims.groups("dp")
    for got, want in losses:
        assert [got[r] for r in dp.members[0]] == want  # every TP rank of a group logs its group's loss
        assert all(got[r] == got[g[0]] for g in engine.dims.groups("tp").members for r in g)
    assert np.array_equal(bits(tp.whole_params(engine.ctx)), bits(oracle.whole_params()))
    if engine.precision.master_format is not None:
        master = tp.whole_params(engine.ctx, engine.master_shards(), "master")
        assert np.array_equal(bits(master), bits(oracle.whole_master()))


@pytest.mark.parametrize("plan", PLANS)
@pytest.mark.parametrize("sp", [False, True], ids=["no SP", "SP"])
@pytest.mark.parametrize("T", [2, 4])
def test_every_stage_and_strategy_equals_the_oracle(plan, sp, T):
    dp = 4 if plan in GROUPED else 2  # S = 2 shards, 2 replicas (HSDP, MiCS); hpZ's secondary groups of 2
    full = gpt(T) if (plan in GROUPED) == sp else llama(T)  # both families over the grid
    assert_same(*run_both(full, T, dp, plan, "bf16-mixed", sp=sp))


# a test for each family with and without SP, 10 examples apiece (40 in all, as one test drew them): each under 20 s
@pytest.mark.parametrize("family", ["gpt", "llama"])
@pytest.mark.parametrize("sp", [False, True], ids=["no SP", "SP"])
@settings(max_examples=10)
@given(T=st.sampled_from([1, 2, 4]),
       plan=st.sampled_from(PLANS), precision=st.sampled_from(PRECISIONS), K=st.sampled_from([1, 2]),
       data=st.data())
def test_drawn_shapes_equal_the_oracle(family, T, sp, plan, precision, K, data):
    dp = data.draw(st.sampled_from([4] if plan in GROUPED else [1, 2, 3]), label="dp")
    vocab = data.draw(st.integers(2, 40), label="vocab (before Megatron's padding)")
    multiple = data.draw(st.sampled_from([1, 2]), label="make_vocab_size_divisible_by")
    seq = data.draw(st.integers(1, 3), label="L / T") * T if sp else data.draw(st.integers(1, 9), label="L")
    mode = data.draw(st.sampled_from(["standard", "selective", "flash"]), label="attention")
    checkpoint = data.draw(st.sampled_from(["none", "block", "every-k"]), label="checkpoint")
    if family == "gpt":
        full = gpt(T, data.draw(st.integers(1, 2), label="heads per rank"), data.draw(st.sampled_from([2, 4])),
                   vocab, data.draw(st.integers(1, 3), label="layers"), seq, multiple, attention=mode,
                   checkpoint=checkpoint, activation=data.draw(st.sampled_from(["gelu", "relu"])))
    else:
        kv = data.draw(st.sampled_from([1, 2]), label="kv heads per rank")
        full = llama(T, kv * data.draw(st.integers(1, 2), label="queries per kv head"), kv, 4,
                     data.draw(st.integers(1, 4), label="ffn per rank"), vocab, data.draw(st.integers(1, 3)), seq,
                     multiple, attention=mode, checkpoint=checkpoint, qkv_bias=data.draw(st.booleans()),
                     o_bias=data.draw(st.booleans()))
    assert_same(*run_both(full, T, dp, plan, precision, sp=sp, K=K, L=seq, B=data.draw(st.integers(1, 2))))


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_tp_one_changes_no_bit_and_no_call(stage):
    """TensorParallel(tp=1) hands the engine the model itself and does nothing at any point: the trace's log and every
    bit equal the engine's without it."""
    full = gpt(1)

    def run(parallelisms):
        engine = ZeroEngine(full, Cluster(2), stage, get_optimizer("adam", lr=1e-2), "bf16-mixed",
                            params=full.init_params(), parallelisms=parallelisms)
        rng = np.random.default_rng(3)
        for _ in range(2):
            engine.step([(rng.integers(0, full.vocab, (2, 8)), rng.integers(0, full.vocab, (2, 8))) for _ in range(2)])
        return engine

    tp = TensorParallel(full, tp=1, sequence_parallel=True)
    assert tp.model is full and tp.sequence_parallel is False  # Megatron turns SP off on one rank
    plain, with_tp = run(()), run((tp,))
    assert [repr(e) for e in plain.cluster.trace.log] == [repr(e) for e in with_tp.cluster.trace.log]
    assert np.array_equal(bits(plain.full_params()), bits(with_tp.full_params()))
    assert np.array_equal(bits(plain.full_master()), bits(with_tp.full_master()))
