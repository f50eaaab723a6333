"""Context parallelism beside ZeRO (and TP) equals its one-device oracle bit for bit (issue 60, must-show 1):
ZeroEngine(cp.model, ..., parallelisms=cp.parallelisms) on N = dp·C·T ranks against ContextReference
(reference/_context.py: the C shards of every sequence on one device, with its own plain ring attention, reduced over
dp × cp by Reference), for CP in {1, 2, 4} x ring and all-gather x contiguous and zigzag x causal on and off x
precisions x ZeRO stages 0-3 (and FSDP2's, DeepSpeed's and DDP's recipes and schedules) x TP in {1, 2}, on
Hypothesis-drawn GPT and Llama shapes and sequence lengths — those that do not split refused as torch and torchtitan
refuse them. cp = 1 is no context parallelism: the same bits and the same log as the engine without it. And the
oracle is independent: bugs planted in the engine's ring (its direction either way, a block's rows) are caught."""

import numpy as np
import pytest
from helpers import bits
from hypothesis import given, settings
from hypothesis import strategies as st

from zerosim import Cluster, ZeroEngine, get_optimizer
from zerosim.models import GPT, Llama
from zerosim.parallel.context import ContextParallel
from zerosim.parallel.tensor import TensorParallel
from zerosim.reference import ContextReference

PRECISIONS = ("fp16-mixed", "bf16-mixed", "fp32", "bf16-pure")


def gpt(heads=2, head_dim=4, layers=2, seq=16, vocab=16, block=3, **kw):
    return GPT(vocab=vocab, d_model=heads * head_dim, n_heads=heads, n_layers=layers, seq_len=seq,
               attention="flash", flash_block=block, **kw)


def llama(kv=1, rep=2, head_dim=4, layers=2, seq=16, vocab=16, block=3, **kw):
    return Llama(vocab=vocab, d_model=8, n_heads=kv * rep, n_kv_heads=kv, head_dim=head_dim, n_layers=layers,
                 seq_len=seq, d_ff=12, attention="flash", flash_block=block, **kw)


def run_both(full, C, dp=2, stage=3, precision="bf16-mixed", style="ring", split="zigzag", causal=True, T=1, K=1,
             steps=2, L=8, B=2, seed=0, sp=False):
    """The engine and the oracle through `steps` steps on the same drawn batches: (engine, cp, oracle, losses)."""
    tp = TensorParallel(full, tp=T, sequence_parallel=sp, params=full.init_params(np.random.default_rng(seed))) \
        if T > 1 else None
    cp = ContextParallel(full, cp=C, style=style, split=split, causal=causal, tensor=tp)
    N = dp * C * T
    engine = ZeroEngine(cp.model, Cluster(N, gpus_per_node=C * T), stage, get_optimizer("adam", lr=1e-2), precision,
                        parallelisms=cp.parallelisms, accumulation_steps=K)
    oracle = ContextReference(cp, get_optimizer("adam", lr=1e-2), precision, N, stage, accumulation_steps=K)
    rng = np.random.default_rng(seed + 1)
    losses = []
    for _ in range(steps):
        per_dp = [[(rng.integers(0, full.vocab, (B, L)), rng.integers(0, full.vocab, (B, L))) for _ in range(K)]
                  for _ in range(dp)]
        per_dp = [m[0] if K == 1 else m for m in per_dp]
        losses.append((engine.step(cp.batches(engine.dims, per_dp)), oracle.step(per_dp)))
    return engine, cp, oracle, losses


def assert_same(engine, cp, oracle, losses):
    first = engine.dims.groups("fsdp").members[0]  # TP position 0's data-parallel and CP ranks, in ring order
    for got, want in losses:
        assert [got[r] for r in first] == want
    if cp.tensor is None:
        assert np.array_equal(bits(engine.full_params()), bits(oracle.whole_params()))
        if engine.precision.master_format is not None:
            assert np.array_equal(bits(engine.full_master()), bits(oracle.whole_master()))
    else:
        assert np.array_equal(bits(cp.tensor.whole_params(engine.ctx)), bits(oracle.whole_params()))


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "both ways"])
@pytest.mark.parametrize("split", ["zigzag", "contiguous"])
@pytest.mark.parametrize("style", ["ring", "allgather", "torch"])
@pytest.mark.parametrize("C", [2, 4])
def test_every_style_split_and_mask_equals_the_oracle(C, style, split, causal):
    full = gpt(layers=1) if (C == 2) == causal else llama(kv=2, rep=2, layers=1)  # both families over the grid
    if style == "torch" and split == "zigzag" and not causal:  # torch: "Load balancing requires `is_causal=True`"
        with pytest.raises(ValueError, match="needs causal attention"):
            ContextParallel(full, cp=C, style=style, split=split, causal=causal)
        return
    assert_same(*run_both(full, C, stage=3 if causal else 1, style=style, split=split, causal=causal))


@pytest.mark.parametrize("sp", [False, True], ids=["no SP", "SP"])
@pytest.mark.parametrize("stage", [0, 1, 2, 3])
@pytest.mark.parametrize("style", ["ring", "allgather", "torch"])
def test_beside_tensor_parallelism_every_stage_equals_the_oracle(stage, style, sp):
    """Beside TP, with or without its sequence parallelism (each CP rank's L / C tokens cut again over the TP group
    for the norms and residual adds: L / (C·T) a rank)."""
    full = gpt(heads=2, layers=1) if stage % 2 else llama(kv=2, rep=1, layers=1)
    assert_same(*run_both(full, 2, dp=1, stage=stage, style=style, split="zigzag" if stage < 2 else "contiguous",
                          T=2, sp=sp))


@pytest.mark.parametrize("family", ["gpt", "llama"])
def test_sequence_parallelism_beside_cp_trains_as_without_it(family):
    """An independent check of where SP's operators sit beside CP (the oracle reads the engine's placement table):
    SP moves where the TP group sums (a reduce-scatter and an all-gather where there was one all-reduce) and the norms'
    gradient sums, so its bits may differ, but in fp32 its losses and weights stay within a few roundings of the run
    without it, two steps on."""
    full = gpt(heads=2, layers=2) if family == "gpt" else llama(kv=2, rep=1, layers=2)
    runs = [run_both(full, 2, dp=1, stage=3, precision="fp32", T=2, sp=sp, L=16) for sp in (False, True)]
    (_, cp0, _, plain), (_, cp1, _, sp) = runs
    assert cp1.tensor.sequence_parallel and not cp0.tensor.sequence_parallel
    for (a, _), (b, _) in zip(plain, sp):
        assert np.allclose(a, b, rtol=1e-5, atol=0)
    first, second = (cp.tensor.whole_params(engine.ctx) for engine, cp, _, _ in runs)
    assert np.allclose(first, second, rtol=1e-4, atol=1e-6) and not np.array_equal(second, cp1.tensor._whole)


@pytest.mark.parametrize("stage, recipe, comm", [(3, "fsdp2", "fsdp"), (3, "deepspeed-zero3", "deepspeed"),
                                                  (0, "ddp", None), (1, "deepspeed-zero12", "deepspeed")])
def test_every_framework_recipe_and_schedule_equals_the_oracle(stage, recipe, comm):
    """FSDP2's and DeepSpeed's recipes with their own schedules (prefetch, buckets), DDP's: reduced over dp × cp."""
    full = gpt(layers=1)
    cp = ContextParallel(full, cp=2, split="contiguous")
    engine = ZeroEngine(cp.model, Cluster(4), stage, get_optimizer("adam", lr=1e-2), "bf16-mixed",
                        parallelisms=(cp,), recipe=recipe, comm=comm)
    oracle = ContextReference(cp, get_optimizer("adam", lr=1e-2), "bf16-mixed", 4, stage, recipe=recipe,
                              reduce_bucket_size=engine.comm.reduce_bucket_size)
    rng = np.random.default_rng(5)
    losses = []
    for _ in range(2):
        per_dp = [(rng.integers(0, 16, (2, 8)), rng.integers(0, 16, (2, 8))) for _ in range(2)]
        losses.append((engine.step(cp.batches(engine.dims, per_dp)), oracle.step(per_dp)))
    assert_same(engine, cp, oracle, losses)


def drawn(data, family, C=2, split="zigzag", T=1):
    """A model and the sequence length, drawn: heads and head widths, layers, flash tiles, checkpointing; L a number
    of whole chunks (pieces · C tokens each), or — one time in four — a few tokens more, which does not split."""
    block = data.draw(st.integers(1, 5), label="flash tile")
    layers = data.draw(st.integers(1, 2), label="layers")
    checkpoint = data.draw(st.sampled_from(["none", "block", "every-k"]), label="checkpoint")
    unit = data.draw(st.sampled_from(["block", "sublayer"]), label="unit")
    chunk = {"zigzag": 2, "contiguous": 1}[split] * C
    L = data.draw(st.integers(1, 16 // chunk), label="chunks") * chunk + data.draw(st.sampled_from([0, 0, 0, 1, 3]),
                                                                                   label="tokens more")
    if family == "gpt":
        heads = data.draw(st.sampled_from([T, 2 * T]), label="heads")
        return gpt(heads, data.draw(st.sampled_from([2, 4]), label="head_dim"), layers, 20, 8 * T, block,
                   unit=unit, checkpoint=checkpoint, activation=data.draw(st.sampled_from(["gelu", "relu"]))), L
    kv = data.draw(st.sampled_from([T, 2 * T]), label="kv heads")
    return llama(kv, data.draw(st.integers(1, 2), label="queries per kv head"), 4, layers, 20, 8 * T, block,
                 unit=unit, checkpoint=checkpoint, qkv_bias=data.draw(st.booleans()),
                 o_bias=data.draw(st.booleans())), L


def check_drawn(full, L, C, style, split, causal, stage, precision, K, dp, B, T=1):
    """Engine = oracle where L splits; where it does not, the frameworks' refusal, before any state changes (the rule,
    written here as torch and torchtitan write it: L % (2·C) for the head-tail split, L % C for the contiguous)."""
    if L % ({"zigzag": 2, "contiguous": 1}[split] * C):
        cp = ContextParallel(full, cp=C, style=style, split=split, causal=causal)
        engine = ZeroEngine(cp.model, Cluster(dp * C), stage, get_optimizer("adam"), precision,
                            parallelisms=cp.parallelisms)
        before = bits(engine.full_params())
        with pytest.raises(ValueError, match=f"does not split {split} over cp = {C}"):
            engine.step(cp.batches(engine.dims, [(np.zeros((B, L), int),) * 2] * dp))
        assert np.array_equal(bits(engine.full_params()), before) and engine.iteration == 0
        return
    assert_same(*run_both(full, C, dp, stage, precision, style, split, causal, T, K, 2, L, B))


SETTINGS = dict(max_examples=30)  # each drawn case runs about 0.15 s; 30 a style, three styles


@pytest.mark.slow
@pytest.mark.parametrize("style", ["ring", "allgather", "torch"])
@settings(**SETTINGS)
@given(family=st.sampled_from(["gpt", "llama"]), C=st.sampled_from([2, 4]), split=st.sampled_from(["zigzag",
       "contiguous"]), causal=st.booleans(), stage=st.integers(0, 3), precision=st.sampled_from(PRECISIONS),
       data=st.data())
def test_drawn_equals_the_oracle(style, family, C, split, causal, stage, precision, data):
    """Each style on drawn shapes; torch's load-balanced (zigzag) split only under the causal mask, as torch runs
    it."""
    full, L = drawn(data, family, C, split)
    check_drawn(full, L, C, style, split, causal or (style == "torch" and split == "zigzag"), stage, precision,
                data.draw(st.sampled_from([1, 2]), label="K"), data.draw(st.integers(1, 2), label="dp"),
                data.draw(st.integers(1, 2), label="B"))


@pytest.mark.slow
@settings(max_examples=20)
@given(family=st.sampled_from(["gpt", "llama"]), style=st.sampled_from(["ring", "allgather", "torch"]),
       split=st.sampled_from(["zigzag", "contiguous"]), stage=st.integers(0, 3),
       precision=st.sampled_from(PRECISIONS), sp=st.booleans(), data=st.data())
def test_drawn_beside_tensor_parallelism_equals_the_oracle(family, style, split, stage, precision, sp, data):
    full, L = drawn(data, family, 2, split, T=2)
    L -= L % ({"zigzag": 2, "contiguous": 1}[split] * 2 * (2 if sp else 1))  # a length that splits (SP: L / C over
    # the TP group too): the refusals are the other tests'
    assert_same(*run_both(full, 2, 1, stage, precision, style, split, True, 2, 1, 2, L or 8, 1, sp=sp))


@pytest.mark.parametrize("stage", [0, 3])
def test_cp_one_changes_no_bit_and_no_call(stage):
    """ContextParallel(cp=1) hands the engine the model itself and does nothing at any point: the trace's log and
    every bit equal the engine's without it."""
    full = gpt()

    def run(parallelisms):
        engine = ZeroEngine(full, Cluster(2), stage, get_optimizer("adam", lr=1e-2), "bf16-mixed",
                            params=full.init_params(), parallelisms=parallelisms)
        rng = np.random.default_rng(3)
        for _ in range(2):
            engine.step([(rng.integers(0, 16, (2, 8)), rng.integers(0, 16, (2, 8))) for _ in range(2)])
        return engine

    cp = ContextParallel(full, cp=1)
    assert cp.model is full and cp.local is None
    plain, with_cp = run(()), run((cp,))
    assert [repr(e) for e in plain.cluster.trace.log] == [repr(e) for e in with_cp.cluster.trace.log]
    assert np.array_equal(bits(plain.full_master()), bits(with_cp.full_master()))


# -- the oracle is independent: bugs planted in the engine's CP code are caught ---------------------------------------
def _turned_forward(real):
    """The ring turned the wrong way in forward: K/V sent to p − 1 (hop j then holds p + j's)."""
    def send_recv(cluster, tensors, group=None, shift=1, tag=""):
        return real(cluster, tensors, group=group, shift=-shift if "next rank" in tag else shift, tag=tag)
    return send_recv


def _turned_backward(real):
    """The backward ring turned the wrong way: K/V and the dK/dV sums sent to p + 1."""
    def send_recv(cluster, tensors, group=None, shift=1, tag=""):
        return real(cluster, tensors, group=group, shift=-shift if "backward" in tag else shift, tag=tag)
    return send_recv


def _upper_as_lower(real):
    """Zigzag's upper-triangle hop computed on the first half of the K/V instead of Q's second half."""
    from zerosim.parallel.context import Block

    def ring_block(split, causal, cp, p, j):
        b = real(split, causal, cp, p, j)
        if b is not None and b.q == (1,):
            return Block((0, 1), (0,), False, b.first_dq, b.first_dkv)
        return b
    return ring_block


@pytest.mark.slow
@pytest.mark.parametrize("plant, what", [(_turned_forward, "send_recv"), (_turned_backward, "send_recv"),
                                         (_upper_as_lower, "ring_block")],
                         ids=["forward ring turned", "backward ring turned", "upper block's rows"])
def test_a_bug_in_the_engines_ring_is_caught(monkeypatch, plant, what):
    import zerosim.parallel.context._communication as engine_side

    full = gpt(layers=1)
    clean = run_both(full, 4, dp=1, stage=0, precision="fp16-mixed")
    assert_same(*clean)
    monkeypatch.setattr(engine_side, what, plant(getattr(engine_side, what)))
    engine, cp, oracle, losses = run_both(full, 4, dp=1, stage=0, precision="fp16-mixed")
    with pytest.raises(AssertionError):
        assert_same(engine, cp, oracle, losses)
