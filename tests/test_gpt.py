"""GPT: layout, checkpoint strategies, seed 001 §5e's activation table measured by the ledger, every ZeRO
stage equal to the oracle, and a short run that learns the copy task."""

import math

import numpy as np
import pytest
from helpers import bits  # the tests' shared helpers (tests/helpers.py)
from hypothesis import given
from hypothesis import strategies as st

from zerosim import Adam, Cluster, MemoryLedger, Reference, ZeroEngine
from zerosim.models import GPT, answer_positions, loss_and_grad, make_sequence_task, predict
from zerosim.models.gpt import every_k

# Whole-model finite differences, as tests/test_models.py: h = 1e-6, truncation and rounding errors
# below 1e-8 for these O(1) losses; 1e-6 tolerates and still catches any wrong gradient.
FD_STEP = 1e-6
FD_TOL = 1e-6


def tokens(rng, B, L, vocab):
    """(ids, next-token targets), both (B, L) int64."""
    return rng.integers(0, vocab, (B, L)), rng.integers(0, vocab, (B, L))


# -- layout -----------------------------------------------------------------------------------------

def test_parameter_count_and_flat_layout():
    V, d, H, n, L = 11, 8, 2, 3, 6
    for unit in ("block", "sublayer"):
        m = GPT(V, d, H, n, L, unit=unit)
        # wte V·d + wpe L·d; per block LN1 2d, W_qkv 3d² + 3d, W_o d² + d, LN2 2d, W1 4d² + 4d, W2 4d² + d
        # = 12d² + 13d; final LN 2d, W_head V·d
        assert m.num_params == V * d + L * d + n * (12 * d * d + 13 * d) + 2 * d + V * d
        assert [s.offset for s in m.specs] == list(np.cumsum([0] + [s.size for s in m.specs[:-1]]))
    assert [layer.name for layer in GPT(V, d, H, 2, L).layers] == ["embed", "block0", "block1", "head"]
    assert [layer.name for layer in GPT(V, d, H, 2, L, unit="sublayer").layers] == [
        "embed", "block0.attn", "block0.ffn", "block1.attn", "block1.ffn", "head"]
    m = GPT(V, d, H, n, L)
    flat = m.init_params(np.random.default_rng(0))
    p = m.unflatten(flat, 1)
    p["w_o"][0, 0] = 7.0  # a view: the write lands in the flat vector
    spec = next(s for s in m.specs if s.layer == 1 and s.name == "w_o")
    assert flat[spec.offset] == 7.0
    start, stop = m.layer_window(1)
    assert np.array_equal(m.pack(1, m.unflatten(flat, 1)), flat[start:stop])
    assert np.array_equal(m.unflatten(flat[start:stop].copy(), 1)["w_o"], p["w_o"])  # a ZeRO-3 gathered window


def test_init_is_gpt2s():
    m = GPT(50, 16, 4, 8, 12)
    p = m.unflatten(m.init_params(np.random.default_rng(1)), 1)
    assert np.all(p["ln1.g"] == 1) and not p["ln1.b"].any() and not p["b_qkv"].any()
    # N(0, 0.02²) weights, N(0, (0.02/√(2·8))²) = N(0, 0.005²) residual projections: the sample std of
    # 768 and 1024 draws lies within 10% of it (its relative standard error is 1/√(2·768) < 3%).
    assert abs(p["w_qkv"].std() / 0.02 - 1) < 0.1 and abs(p["w2"].std() / 0.005 - 1) < 0.1


def test_block_and_sublayer_units_are_the_same_model():
    # The same flat order (attention then FFN parameters), the same init draws, the same arithmetic.
    rng = np.random.default_rng(2)
    x, t = tokens(rng, 2, 5, 7)
    whole, halves = GPT(7, 8, 2, 2, 5), GPT(7, 8, 2, 2, 5, unit="sublayer")
    theta = whole.init_params(np.random.default_rng(3))
    assert np.array_equal(theta, halves.init_params(np.random.default_rng(3)))
    (l1, g1), (l2, g2) = (loss_and_grad(m, theta, x, t, "bf16") for m in (whole, halves))
    assert l1 == l2 and g1.tobytes() == g2.tobytes()


CHECKPOINT_BLOCKS = [
    # (unit, checkpoint, n_layers, blocks): the embedding and the head are blocks of their own
    ("block", "block", 4, [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 6)]),  # one transformer block each
    ("sublayer", "block", 2, [(0, 1), (1, 3), (3, 5), (5, 6)]),  # attention + FFN of one block together
    ("sublayer", "subblock", 2, [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 6)]),  # each half alone
    ("block", "every-k", 4, [(0, 1), (1, 3), (3, 5), (5, 6)]),  # k = √4 = 2 blocks per checkpoint
    ("block", "every-k", 5, [(0, 1), (1, 3), (3, 5), (5, 6), (6, 7)]),  # k = round(√5) = 2; the last holds one
    ("sublayer", "every-k", 3, [(0, 1), (1, 5), (5, 7), (7, 8)]),  # k = round(√3) = 2 blocks = 4 sub-blocks
]


@pytest.mark.parametrize("unit, checkpoint, n_layers, blocks", CHECKPOINT_BLOCKS)
def test_checkpoint_blocks_follow_the_strategy(unit, checkpoint, n_layers, blocks):
    m = GPT(5, 4, 1, n_layers, 4, unit=unit, checkpoint=checkpoint)
    assert m.checkpoint_blocks == blocks and m.checkpointing
    assert not GPT(5, 4, 1, n_layers, 4, unit=unit).checkpointing


@pytest.mark.parametrize("n_layers, k", [(1, 1), (2, 1), (3, 2), (4, 2), (9, 3), (32, 6), (96, 10)])  # round(√n)
def test_every_k_is_the_rounded_square_root(n_layers, k):
    assert every_k(n_layers) == k


@pytest.mark.parametrize("kwargs, match", [
    (dict(checkpoint="subblock"), "unit='sublayer'"),
    (dict(n_heads=3), "split evenly"),
    (dict(attention="sparse"), "attention must be one of"),
    (dict(activation="tanh"), "activation must be one of"),
    (dict(unit="layer"), "unit must be one of"),
    (dict(checkpoint="all"), "checkpoint must be one of"),
    (dict(n_layers=0), "n_layers must be a positive integer"),
])
def test_bad_configurations_are_refused(kwargs, match):
    args = dict(vocab=5, d_model=8, n_heads=2, n_layers=1, seq_len=4) | kwargs
    with pytest.raises(ValueError, match=match):
        GPT(**args)


@pytest.mark.parametrize("x, t, match", [
    (np.zeros((2, 3)), np.zeros((2, 3), int), "integer token ids"),
    (np.zeros((0, 3), int), np.zeros((0, 3), int), "at least one sequence"),
    (np.zeros((2, 0), int), np.zeros((2, 0), int), "at least one sequence"),
    (np.zeros((2, 5), int), np.zeros((2, 5), int), "longer than the model's seq_len = 4"),
    (np.full((2, 3), 5), np.zeros((2, 3), int), r"token ids must lie in \[0, 5\)"),
    (np.zeros((2, 3), int), np.zeros((2, 2), int), "the input's shape"),
    (np.zeros((2, 3), int), np.full((2, 3), -1), r"target tokens must lie in \[0, 5\)"),
    (np.zeros((2, 3), int), np.zeros((2, 3)), "integer next-token targets"),
])
def test_check_batch_says_what_is_wrong(x, t, match):
    with pytest.raises(ValueError, match=match):
        GPT(5, 8, 2, 1, 4).check_batch(x, t)


# -- gradients --------------------------------------------------------------------------------------

@pytest.mark.parametrize("unit, activation, attention", [
    ("block", "gelu", "standard"), ("sublayer", "relu", "flash"), ("block", "relu", "selective")])
def test_whole_model_gradient_matches_finite_differences(unit, activation, attention):
    rng = np.random.default_rng(4)
    m = GPT(6, 8, 2, 2, 5, unit=unit, activation=activation, attention=attention, flash_block=2)
    x, t = tokens(rng, 2, 5, 6)
    theta = 0.3 * rng.standard_normal(m.num_params)  # every parameter O(0.3), biases included
    _, g = loss_and_grad(m, theta, x, t, "fp64")
    # 40 coordinates drawn from every layer's window (a full check of all P is the units' job).
    for k in rng.choice(m.num_params, 40, replace=False):
        e = np.zeros_like(theta)
        e[k] = FD_STEP
        fd = (loss_and_grad(m, theta + e, x, t, "fp64")[0] - loss_and_grad(m, theta - e, x, t, "fp64")[0]) / (
            2 * FD_STEP
        )
        assert abs(fd - g[k]) <= FD_TOL * (1 + abs(g[k])), (k, fd, g[k])


@given(unit=st.sampled_from(["block", "sublayer"]), checkpoint=st.sampled_from(["block", "subblock", "every-k"]),
       attention=st.sampled_from(["standard", "selective", "flash"]), activation=st.sampled_from(["gelu", "relu"]),
       fmt=st.sampled_from(["fp16", "bf16", "fp32"]), n_layers=st.integers(1, 4), L=st.integers(1, 6),
       seed=st.integers(0, 2**16))
def test_checkpointing_and_selective_attention_change_no_bit(
    unit, checkpoint, attention, activation, fmt, n_layers, L, seed
):
    if checkpoint == "subblock":
        unit = "sublayer"
    rng = np.random.default_rng(seed)
    x, t = tokens(rng, 2, L, 5)
    kw = dict(unit=unit, activation=activation, flash_block=2)
    plain = GPT(5, 8, 2, n_layers, 6, attention=attention, **kw)
    theta = plain.init_params(rng)
    want_loss, want = loss_and_grad(plain, theta, x, t, fmt)
    ckpt = GPT(5, 8, 2, n_layers, 6, attention=attention, checkpoint=checkpoint, **kw)
    got_loss, got = loss_and_grad(ckpt, theta, x, t, fmt, checkpoint=ckpt.checkpointing)
    assert got_loss == want_loss and got.tobytes() == want.tobytes()
    if attention == "standard":  # selective rebuilds P with the forward's own code: the same bits again
        sel = GPT(5, 8, 2, n_layers, 6, attention="selective", **kw)
        assert loss_and_grad(sel, theta, x, t, fmt)[1].tobytes() == want.tobytes()


# -- seed 001 §5e, measured -------------------------------------------------------------------------

B, L, D, H, V = 2, 8, 16, 4, 11  # fp16: B·L·d·2 = 512 bytes, B·H·L²·2 = 1024, one fp32 (B, L) statistic 64
BLD2 = B * L * D * 2

PER_TENSOR = [
    # (name in the ledger, bytes, seed 001 §5e row)
    ("block0.block input", BLD2, "pre-attention LayerNorm: input, B·L·d"),
    ("block0.LN1 mean", B * L * 4, "LayerNorm μ (the seed: 'always recompute'; kept here, fp32)"),
    ("block0.LN1 rstd", B * L * 4, "LayerNorm 1/σ, fp32 (the seed's σ²)"),
    ("block0.Q", BLD2, "Q, B·L·d (the seed's 'attention input X' is LN1's output: rebuilt, not stored)"),
    ("block0.K", BLD2, "K, B·L·d"),
    ("block0.V", BLD2, "V, B·L·d"),
    ("block0.P", B * H * L * L * 2, "attention probabilities, B·H·L², 16-bit"),
    ("block0.attention output", BLD2, "O before the output projection, B·L·d (= its input, 'O reshaped')"),
    ("block0.pre-FFN input", BLD2, "pre-FFN LayerNorm: input, B·L·d"),
    ("block0.LN2 mean", B * L * 4, "LayerNorm μ, fp32"),
    ("block0.LN2 rstd", B * L * 4, "LayerNorm 1/σ, fp32 (the FFN input is LN2's output: rebuilt)"),
    ("block0.x1", 4 * BLD2, "FFN pre-activation, B·L·4d"),
    ("block0.x2", 4 * BLD2, "FFN post-activation, B·L·4d"),
    # outside the seed's per-layer table:
    ("embed.input", B * L * 8, "the token ids, int64"),
    ("head.final LN input", BLD2, "the final LayerNorm's input"),
    ("head.LN mean", B * L * 4, "its statistics, fp32"),
    ("head.LN rstd", B * L * 4, ""),
    ("loss.probabilities", B * L * V * 4, "softmax over the vocabulary, fp32 (B·L, V)"),
    ("loss.labels", B * L * 8, "the targets, int64"),
]


def saved_bytes(model, fmt="fp16", checkpoint=False):
    """{ledger name: bytes} of every activation buffer one loss_and_grad allocates, and the ledger."""
    rng = np.random.default_rng(5)
    x, t = tokens(rng, B, L, V)
    ledger = MemoryLedger(rank=0)
    loss_and_grad(model, model.init_params(rng), x, t, fmt, checkpoint=checkpoint, ledger=ledger)
    assert ledger.current("activations") == 0  # everything saved was consumed
    return {e.name: e.nbytes for e in ledger.timeline if e.action == "alloc" and e.kind == "activations"}, ledger


def test_the_ledger_measures_seed_001s_per_tensor_table():
    measured, _ = saved_bytes(GPT(V, D, H, 1, L))
    assert measured == {name: nbytes for name, nbytes, _ in PER_TENSOR}
    layer = sum(b for name, b in measured.items() if name.startswith("block0."))
    # 14·B·L·d elements in fp16 + B·H·L² for P + the four fp32 LayerNorm statistics (B, L)
    assert layer == 14 * B * L * D * 2 + B * H * L * L * 2 + 4 * B * L * 4 == 8448


LAYER = 8448  # one block as measured above: 14·B·L·d·2 + B·H·L²·2 + 4·B·L·4
STRATEGY_TABLE = [
    # (GPT options, bytes of one block's saved tensors); B = 2, L = 8, d = 16, H = 4, fp16
    (dict(), LAYER),
    (dict(activation="relu"), LAYER - 4 * BLD2 + B * L * 4 * D // 8),  # no x1; a 1-bit mask of B·L·4d: 128 bytes
    (dict(attention="selective"), LAYER - B * H * L * L * 2),  # P dropped: no B·H·L² term at all
    (dict(attention="flash", flash_block=3), LAYER - B * H * L * L * 2 + B * H * L * 4),  # P -> fp32 LSE (B, H, L)
]


@pytest.mark.parametrize("options, layer_bytes", STRATEGY_TABLE)
def test_per_layer_bytes_for_each_attention_and_activation(options, layer_bytes):
    measured, _ = saved_bytes(GPT(V, D, H, 1, L, **options))
    assert sum(b for name, b in measured.items() if name.startswith("block0.")) == layer_bytes


EMBED, HEAD, LOSS = B * L * 8, BLD2 + 2 * B * L * 4, B * L * V * 4 + B * L * 8  # 128, 640, 832
FFN_HALF = BLD2 + 2 * B * L * 4 + 8 * BLD2  # pre-FFN input, LN2 stats, x1, x2: 4736
CHECKPOINT_TABLE = [
    # (unit, checkpoint, live activations when the loss runs (forward's end), peak) for 4 layers
    ("block", "none", EMBED + 4 * LAYER + HEAD, EMBED + 4 * LAYER + HEAD + LOSS),  # every cache, then the loss's
    # block: the ids, 4 block inputs and the head's caches (the embedding and the head are not checkpointed:
    # torchtitan wraps the blocks only); peak in block 3's backward: 3 inputs + one block's caches
    ("block", "block", EMBED + 4 * BLD2 + HEAD, EMBED + 3 * BLD2 + LAYER),
    # subblock: 8 sub-block inputs and the head's caches; peak in the last FFN's backward: 7 inputs + the FFN half's
    ("sublayer", "subblock", EMBED + 8 * BLD2 + HEAD, EMBED + 7 * BLD2 + FFN_HALF),
    # every-k, k = 2: two checkpoints and the head's caches; peak in block 3's backward: 1 input + blocks 2 and 3's
    ("block", "every-k", EMBED + 2 * BLD2 + HEAD, EMBED + BLD2 + 2 * LAYER),
]


@pytest.mark.parametrize("unit, checkpoint, at_loss, peak", CHECKPOINT_TABLE)
def test_checkpointing_strategies_hold_what_seed_001_says(unit, checkpoint, at_loss, peak):
    m = GPT(V, D, H, 4, L, unit=unit, checkpoint=checkpoint)
    _, ledger = saved_bytes(m, checkpoint=m.checkpointing)
    loss_alloc = next(e for e in ledger.timeline if e.name == "loss.probabilities")
    assert loss_alloc.kind_total - loss_alloc.nbytes == at_loss
    assert ledger.peak("activations") == peak


def test_block_checkpointing_recomputes_the_transformer_blocks_only():
    # Seed 001: "each transformer block computes its output normally but frees all intermediate tensors except the
    # block's input". The recompute FLOPs equal the forward FLOPs of the 3 blocks (units 1..3); the embedding (unit 0)
    # and the head (unit 4) keep their caches and are not run again, as torchtitan's apply_ac wraps the blocks only.
    m = GPT(V, D, H, 3, L, checkpoint="block")
    x, t = tokens(np.random.default_rng(6), B, L, V)
    events = []
    loss_and_grad(m, m.init_params(), x, t, "fp16", checkpoint=True, events=events)
    flops = lambda kind, layers: sum(done.flops for op, done in events if op.kind == kind and op.layer in layers)
    assert flops("recompute", range(5)) == flops("forward", range(1, 4)) > 0
    assert {op.layer for op, _ in events if op.kind in ("recompute", "keep input")} == {1, 2, 3}
    assert [op.layer for op, _ in events if op.kind == "forward" and op.save] == [0, 4]


# -- ZeRO -------------------------------------------------------------------------------------------

@pytest.mark.slow
@given(
    n=st.integers(1, 4),
    stage=st.integers(0, 3),
    heads=st.sampled_from([1, 2]),
    dh=st.sampled_from([2, 4]),
    n_layers=st.integers(1, 2),
    L=st.integers(1, 5),
    precision=st.sampled_from(["fp32", "fp16-mixed", "bf16-mixed"]),
    unit=st.sampled_from(["block", "sublayer"]),
    checkpoint=st.sampled_from(["none", "block", "subblock", "every-k"]),
    attention=st.sampled_from(["standard", "selective", "flash"]),
    activation=st.sampled_from(["gelu", "relu"]),
    seed=st.integers(0, 2**16),
)
def test_every_stage_equals_the_oracle_bitwise_on_gpt(n, stage, heads, dh, n_layers, L, precision, unit, checkpoint,
                                                      attention, activation, seed):
    if checkpoint == "subblock":
        unit = "sublayer"
    rng = np.random.default_rng(seed)
    model = GPT(7, heads * dh, heads, n_layers, 5, unit=unit, activation=activation, attention=attention,
                checkpoint=checkpoint, flash_block=2)
    params = model.init_params(rng)
    engine = ZeroEngine(
        model, Cluster(n), stage, Adam(lr=1e-2), precision, checkpoint=model.checkpointing, params=params
    )
    ref = Reference(model, Adam(lr=1e-2), precision, world_size=n, params=params)
    assert_steps_equal_the_oracle(engine, ref, lambda: [tokens(rng, 2, L, 7) for _ in range(n)])


def assert_steps_equal_the_oracle(engine, ref, draw, steps=2):
    """`steps` steps of the engine and the oracle on the same micro-batches (`draw()` gives one per rank): the same
    losses, then fp32 masters, optimizer states and compute-format params bit for bit."""
    for _ in range(steps):
        batches = draw()
        assert engine.step(batches) == ref.step(batches)
    assert np.array_equal(bits(engine.full_master()), bits(ref.master()))
    for name, got in engine.full_optimizer_state().items():
        assert np.array_equal(bits(got), bits(ref.optimizer_state()[name])), name
    assert np.array_equal(bits(engine.full_params()), bits(ref.compute_params()[: engine.model.num_params]))


@pytest.mark.slow
def test_gpt_learns_the_copy_task_through_zero_3():
    V_, n = 6, 3  # 5 symbols and the separator; strings of 3, so sequences of 6
    assert_learns_to_copy(GPT(V_, 16, 2, 1, 2 * n), V_, n)  # copying is attention to a fixed offset back: one block


def assert_learns_to_copy(model, V_, n):
    """160 ZeRO-3 steps on 2 ranks learn the copy task: the loss falls below its plateaus, answers beat chance."""
    engine = ZeroEngine(model, Cluster(2), 3, Adam(lr=1e-2), "bf16-mixed")
    rng = np.random.default_rng(7)
    losses = [np.mean(engine.step(make_sequence_task(rng, 2, 16, n, V_, "copy"))) for _ in range(160)]
    assert abs(losses[0] - math.log(V_)) < 0.05  # N(0, 0.02²) init: near-uniform predictions
    # The n − 1 random symbols a target can hold cost log 5 each however well the task is learnt:
    # the floor is (n − 1)/(2n)·log 5 = 0.54; 0.8 is well below log 6 = 1.79 (and below the 1.35
    # plateau of a model that has learnt only where the separator goes).
    assert np.mean(losses[-10:]) < 0.8
    x, t = make_sequence_task(np.random.default_rng(8), 1, 64, n, V_, "copy")[0]
    guess = predict(model, engine.full_master(), x, "bf16").argmax(-1)
    answer = answer_positions(n)
    assert np.mean(guess[:, answer] == t[:, answer]) > 0.9  # chance is 1/5


# -- the task ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("task, expected", [
    ("copy", [2, 3, 0, 3]),  # the string again
    ("reverse", [3, 0, 3, 2]),  # back to front
    ("sort", [0, 2, 3, 3]),  # ascending, repeats kept
])
def test_sequence_tasks_ask_for_the_right_answer(task, expected):
    x, t = make_sequence_task(np.random.default_rng(5), 1, 1, 4, 5, task)[0]
    assert x[0, :4].tolist() == [2, 3, 0, 3]  # the string drawn with this seed (symbols 0..3)
    assert x[0, 4] == 4 and t[0, 3] == 4  # the separator: read at position n, predicted at n − 1
    assert t[0, answer_positions(4)].tolist() == expected and x[0, 5:].tolist() == expected[:3]
    assert x.shape == t.shape == (1, 8) and x.dtype == t.dtype == np.int64 and np.array_equal(x[0, 1:], t[0, :-1])


def test_sequence_task_repeats_with_the_seed_and_refuses_nonsense():
    a = make_sequence_task(np.random.default_rng(1), 3, 4, 5, 9, "sort")
    b = make_sequence_task(np.random.default_rng(1), 3, 4, 5, 9, "sort")
    assert len(a) == 3 and all(np.array_equal(p[0], q[0]) and np.array_equal(p[1], q[1]) for p, q in zip(a, b))
    with pytest.raises(ValueError, match="task must be one of"):
        make_sequence_task(np.random.default_rng(1), 1, 1, 2, 5, "shuffle")
    with pytest.raises(ValueError, match="at least two symbols"):
        make_sequence_task(np.random.default_rng(1), 1, 1, 2, 2)
