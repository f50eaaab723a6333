"""A GPT's (and a Llama's) ops run once for every rank, their sequences stacked (models/_stacked.py), give the loop's
bits, log and ledgers.

Yardsticks: the same engine run rank by rank (`Cluster(N, stack_ranks=False)`, the naive twin: each rank's `Pass.run`
on its own micro-batch), every rank's state bit for bit, the whole log pickled to bytes and every ledger's timeline;
for the layers and helpers, each rank's own call on its own sequences. Each engine case counts the ops that landed
stacked, layer by layer, so a case that falls back to the loop fails instead of passing for nothing. No test here
times anything.
"""

from __future__ import annotations

import pickle

import ml_dtypes
import numpy as np
import pytest
from helpers import same, snapshot
from hypothesis import given, settings
from hypothesis import strategies as st

import zerosim.parallel.data._compute as compute_module
from zerosim import Cluster, ZeroEngine, get_optimizer, get_precision
from zerosim.cluster import MemoryLedger
from zerosim.models import passes_of, schedule
from zerosim.models.gpt import GPT, AttentionBlock, Embedding, FFNBlock, LMHead, TransformerBlock
from zerosim.models.gpt._embedding import embedding_backward
from zerosim.models.layers import (
    LMCrossEntropy,
    layernorm_backward,
    layernorm_forward,
    rmsnorm_backward,
    rmsnorm_forward,
    row_sums,
    tokens_linear_backward,
)
from zerosim.models.llama import Llama, LlamaAttention, LlamaBlock, LlamaHead, SwiGLUFFN, TokenEmbedding

# (stage, GPT options, precision, ranks, sequences per rank, length, micro-steps): each a path a GPT's stacked ops take
CASES = [
    (3, {}, "bf16-mixed", 4, 2, 5, 1),  # the gathered window: every unit, the loss
    (2, {"unit": "sublayer"}, "fp16-mixed", 3, 2, 6, 1),  # attention and FFN units apart; fp16's loss scale
    (1, {"checkpoint": "block"}, "fp32", 2, 3, 4, 2),  # checkpoints kept and recomputed from; two micro-steps
    (3, {"attention": "flash", "flash_block": 2}, "bf16-mixed", 3, 2, 6, 1),  # flash's key blocks, its LSE
    (3, {"attention": "selective", "checkpoint": "block"}, "fp16-mixed", 2, 2, 5, 2),  # P rebuilt in backward
    (2, {"n_layers": 4, "checkpoint": "every-k"}, "bf16-mixed", 3, 2, 4, 1),  # a checkpoint block of two blocks
    (1, {"unit": "sublayer", "attention": "flash"}, "bf16-mixed", 4, 1, 6, 2),
    (3, {"unit": "sublayer", "checkpoint": "subblock"}, "bf16-mixed", 2, 2, 5, 1),
    (0, {}, "fp32", 3, 2, 5, 2),  # stages 0/1 in fp32: the first micro-step's gradients in each rank's buffer
    (3, {"unit": "sublayer", "attention": "selective"}, "fp32", 2, 1, 6, 1),
    # fp32 dW of 128 tokens 32 and 128 wide, rank by rank (_basic.py `_BATCHED_BELOW`): a list per rank, packed
    (2, {"d_model": 32, "n_layers": 1}, "fp32", 2, 16, 8, 1),
    (1, {"d_model": 32, "n_layers": 1}, "fp32", 2, 16, 8, 1),
]
# the Llama's units on the same helpers: grouped-query attention, fused Q/K/V and gate/up gradients cut per rank
LLAMA_CASES = [
    (3, {"llama": True, "n_kv_heads": 1, "qkv_bias": True, "o_bias": True}, "bf16-mixed", 3, 2, 5, 1),
    (2, {"llama": True, "unit": "sublayer", "attention": "flash", "flash_block": 2}, "fp16-mixed", 2, 2, 6, 2),
    (1, {"llama": True, "checkpoint": "block", "attention": "selective"}, "fp32", 3, 1, 6, 1),
    (0, {"llama": True, "d_model": 32, "n_layers": 1, "qkv_bias": True}, "fp32", 2, 16, 8, 1),  # dW a list per rank
]
VOCAB = 11


def _run(case, stack: bool, steps: int = 2):
    stage, options, precision, n, B, L, k = case
    options = {"d_model": 16, "n_layers": 2, **options}
    d, layers, family = options.pop("d_model"), options.pop("n_layers"), Llama if options.pop("llama", 0) else GPT
    gpt = family(VOCAB, d, 2, layers, 8, **options)
    engine = ZeroEngine(gpt, Cluster(n, stack_ranks=stack), stage, get_optimizer("adam", lr=1e-2), precision,
                        params=gpt.init_params(np.random.default_rng(3)), accumulation_steps=k)
    rng = np.random.default_rng(5)
    losses = []
    for _ in range(steps):
        mine = [[(rng.integers(0, VOCAB, (B, L)), rng.integers(0, VOCAB, (B, L))) for _ in range(k)]
                for _ in range(n)]
        losses.append(engine.step(mine if k > 1 else [m[0] for m in mine]))
    return engine, losses


def _landed(monkeypatch) -> list:
    """[(op kind, the unit's class name), ...] of every op that ran stacked and landed (not given back to the loop)."""
    landed = []
    real = compute_module.run_stacked

    def spy(passes, op, model, *rest):
        out = real(passes, op, model, *rest)
        if out is not None:
            landed.append((op.kind, type(model.loss if op.kind == "loss" else model.layers[op.layer]).__name__))
        return out

    monkeypatch.setattr(compute_module, "run_stacked", spy)
    return landed


def _same_runs(a, la, b, lb):
    assert la == lb
    assert same(snapshot(a), snapshot(b))
    assert pickle.dumps(a.cluster.trace.log) == pickle.dumps(b.cluster.trace.log)
    for x, y in zip(a.cluster.ranks, b.cluster.ranks):
        assert x.ledger.timeline == y.ledger.timeline and x.ledger.peak_by_kind() == y.ledger.peak_by_kind()


@pytest.mark.parametrize("case", CASES + LLAMA_CASES, ids=lambda c: f"{c[0]}-{c[2]}-{c[3]}x{c[4]}x{c[5]}-k{c[6]}-"
                         + ("-".join(f"{k}={v}" for k, v in c[1].items()) or "plain"))
def test_a_gpts_stacked_step_gives_the_loops_bits_log_and_ledgers(case, monkeypatch):
    landed = _landed(monkeypatch)
    stacked, stacked_losses = _run(case, True)
    kinds = set(landed)
    count = len(landed)
    loop, loop_losses = _run(case, False)
    assert len(landed) == count  # never with stack_ranks=False
    _same_runs(stacked, stacked_losses, loop, loop_losses)
    # every unit's forward and backward, and the loss, ran once for every rank
    if case[1].get("llama"):
        units = {"LlamaAttention", "SwiGLUFFN"} if case[1].get("unit") == "sublayer" else {"LlamaBlock"}
        units |= {"TokenEmbedding", "LlamaHead"}
    else:
        units = {"AttentionBlock", "FFNBlock"} if case[1].get("unit") == "sublayer" else {"TransformerBlock"}
        units |= {"Embedding", "LMHead"}
    for name in units:
        assert {("forward", name), ("backward", name)} <= kinds, name
    assert ("loss", "LMCrossEntropy") in kinds
    if "checkpoint" in case[1]:
        assert any(kind == "recompute" for kind, _ in kinds)


def test_a_relu_ffn_keeps_the_loop_and_the_rest_stacks(monkeypatch):
    # ReLU's saved mask packs a whole micro-batch's bits in one array, not a row per sequence: its units run rank by
    # rank; the embedding, the head and the loss still stack, and the step is the loop's
    case = (3, {"activation": "relu"}, "bf16-mixed", 3, 2, 5, 1)
    landed = _landed(monkeypatch)
    stacked, stacked_losses = _run(case, True)
    names = {name for _, name in landed}
    assert not FFNBlock(8, "relu").stacks_rows() and not TransformerBlock(8, 2, "relu").stacks_rows()
    assert FFNBlock(8).stacks_rows() and TransformerBlock(8, 2).stacks_rows()
    assert "TransformerBlock" not in names and {"Embedding", "LMHead", "LMCrossEntropy"} <= names
    _same_runs(stacked, stacked_losses, *_run(case, False))


@pytest.mark.parametrize("stack", [True, False])
def test_op_level_checkpoints_keep_the_loop_and_its_refusal(stack, monkeypatch):
    # `Pass._selective` decides what an op-sac checkpoint keeps, and with values it refuses: the checkpointing forward
    # runs on the loop (models/_stacked.py `stacks`), which refuses as it does rank by rank
    landed = _landed(monkeypatch)
    with pytest.raises(ValueError, match="op-level selective checkpointing"):
        _run((2, {"checkpoint": "op-sac", "attention": "flash"}, "bf16-mixed", 3, 2, 5, 1), stack)
    # the embedding, which checkpointing leaves alone, ran stacked (when asked); block 0's checkpoint did not
    assert landed == ([("forward", "Embedding")] if stack else [])


def test_native_arithmetic_keeps_the_loop(monkeypatch):
    landed = _landed(monkeypatch)
    gpt = GPT(VOCAB, 16, 2, 1, 8)
    native = get_precision("bf16-mixed").with_(arithmetic="native")
    engine = ZeroEngine(gpt, Cluster(3), 2, get_optimizer("adam", lr=1e-2), native,
                        params=gpt.init_params(np.random.default_rng(3)))
    rng = np.random.default_rng(5)
    engine.step([(rng.integers(0, VOCAB, (2, 5)), rng.integers(0, VOCAB, (2, 5))) for _ in range(3)])
    assert landed == []  # native products are not rows apart: rank by rank, as before


def _gpt_passes(n=3, B=2, L=5, fmt="bf16", **options):
    gpt = GPT(VOCAB, 16, 2, 1, 8, **options)
    rng = np.random.default_rng(0)
    batches = [(rng.integers(0, VOCAB, (B, L)), rng.integers(0, VOCAB, (B, L))) for _ in range(n)]
    return gpt, passes_of(gpt, batches, get_precision("bf16-mixed").compute_format if fmt == "bf16" else fmt,
                          [MemoryLedger(i) for i in range(n)])


def test_stacks_takes_a_gpts_ids_sequences_and_logits_and_refuses_wrapped_ids():
    from zerosim.models._stacked import stacks
    from zerosim.parallel.context._records import Located

    gpt, passes = _gpt_passes()
    ops = {(op.kind, op.layer): op for op in schedule(gpt)}
    embed, block, loss = ops[("forward", 0)], ops[("forward", 1)], ops[("loss", -1)]
    assert stacks(passes, embed, gpt)  # (B, L) integer ids
    for work in passes:
        work.a = np.zeros((2, 5, 16), ml_dtypes.bfloat16)
    assert stacks(passes, block, gpt)  # (B, L, d): a rows_apart_nd layer
    for work in passes:
        work.a = np.zeros((2, 5, VOCAB), ml_dtypes.bfloat16)
    assert stacks(passes, loss, gpt)  # (B, L, V) logits, (B, L) integer targets
    passes[1].target = passes[1].target[:, :4]
    assert not stacks(passes, loss, gpt)  # targets of another shape
    gpt, passes = _gpt_passes()
    passes[2].a = Located(passes[2].a, np.arange(5))  # a context-parallel rank's ids beside their positions
    assert not stacks(passes, embed, gpt)


def test_a_two_dimensional_only_layer_refuses_sequences():
    # a Linear's backward transposes a 2-D dy: (B, L, D) activations keep the loop (it vouches for 2-D rows alone)
    from zerosim.models import MLP
    from zerosim.models._stacked import stacks

    model = MLP([5, 7, 3])
    rng = np.random.default_rng(0)
    batches = [(rng.standard_normal((2, 5)).astype(np.float32), rng.standard_normal((2, 3)).astype(np.float32))
               for _ in range(3)]
    passes = passes_of(model, batches, "fp32", [MemoryLedger(i) for i in range(3)])
    forward = next(op for op in schedule(model) if op.kind == "forward" and op.layer == 0)
    assert stacks(passes, forward, model)
    for work in passes:
        work.a = np.zeros((2, 4, 5), np.float32)
    assert not stacks(passes, forward, model)


# -- the helpers and layers: n ranks' sequences as one batch against each rank's own call --------------------------

# magnitudes spread so that float32 sums of a rank's rows round, in an order that shows: 2**25 + 1 + 1 - 2**25 is 0
# added left to right in float32 and 2 in another order; zeros of both signs
VALUES = [2.0**25, -(2.0**25), 1.0, -1.0, 3.0, 0.5, -0.75, 2.0**-9, 0.0, -0.0, 1.5 * 2**12, -(2.0**13)]
FORMATS = {"bf16": ml_dtypes.bfloat16, "fp16": np.float16, "fp32": np.float32}
PRESETS = {"bf16": "bf16-mixed", "fp16": "fp16-mixed", "fp32": "fp32"}


@st.composite
def sequences(draw, width=None):
    """(fmt, n, B, L, draw an array of a shape): n ranks of B sequences of L tokens, values from VALUES in fmt."""
    fmt = draw(st.sampled_from(sorted(FORMATS)))
    n, B, L = draw(st.integers(2, 4)), draw(st.integers(1, 3)), draw(st.integers(1, 4))
    finite = 2.0**14 if fmt == "fp16" else 2.0**30  # fp16 holds up to 65,504

    def array(shape):
        flat = draw(st.lists(st.sampled_from([v for v in VALUES if abs(v) < finite]), min_size=int(np.prod(shape)),
                             max_size=int(np.prod(shape))))
        return np.array(flat, np.float32).reshape(shape).astype(FORMATS[fmt])

    return fmt, n, B, L, array


def _mine(n, B):
    return [slice(r * B, (r + 1) * B) for r in range(n)]


@pytest.mark.pinned  # NumPy's order of adds, kernel-independent by construction: CI reruns it under other SIMD builds
@given(sequences(), st.integers(1, 5))
def test_each_ranks_row_sums_and_layernorm_gradients_are_its_own(case, d):
    fmt, n, B, L, array = case
    f = get_precision(PRESETS[fmt]).compute_format
    a = array((n * B, L, d)).astype(np.float32)
    sums = row_sums(a, n)
    for r, part in enumerate(_mine(n, B)):
        assert same(sums[r], row_sums(a[part]))
    x, dy, g, b = array((n * B, L, d)), array((n * B, L, d)), array((d,)), array((d,))
    with np.errstate(all="ignore"):  # a constant row's rstd, huge values' squares: the same in both
        _, cache = layernorm_forward(x, g, b, f)
        dx, dg, db = layernorm_backward(dy, cache, g, f, n)
        for r, part in enumerate(_mine(n, B)):
            _, cache_r = layernorm_forward(x[part], g, b, f)
            dx_r, dg_r, db_r = layernorm_backward(dy[part], cache_r, g, f)
            assert same(dx[part], dx_r) and same(dg[r], dg_r) and same(db[r], db_r)


@given(sequences(), st.integers(1, 5))
def test_each_ranks_rmsnorm_gradients_are_its_own(case, d):
    fmt, n, B, L, array = case
    f = get_precision(PRESETS[fmt]).compute_format
    x, dy, w = array((n * B, L, d)), array((n * B, L, d)), array((d,))
    with np.errstate(all="ignore"):
        _, cache = rmsnorm_forward(x, w, f)
        dx, dw = rmsnorm_backward(dy, cache, w, f, n)
        for r, part in enumerate(_mine(n, B)):
            _, cache_r = rmsnorm_forward(x[part], w, f)
            dx_r, dw_r = rmsnorm_backward(dy[part], cache_r, w, f)
            assert same(dx[part], dx_r) and same(dw[r], dw_r)


@given(sequences(), st.integers(1, 4), st.integers(1, 3))
def test_each_ranks_token_linear_gradients_are_its_own(case, d_in, d_out):
    fmt, n, B, L, array = case
    f = get_precision(PRESETS[fmt]).compute_format
    x, dy, w = array((n * B, L, d_in)), array((n * B, L, d_out)), array((d_out, d_in))
    dx, dw, db = tokens_linear_backward(dy, x, w, f, n)
    for r, part in enumerate(_mine(n, B)):
        dx_r, dw_r, db_r = tokens_linear_backward(dy[part], x[part], w, f)
        assert same(dx[part], dx_r) and same(dw[r], dw_r) and same(db[r], db_r)


@given(sequences(), st.integers(1, 3), st.data())
def test_each_ranks_embedding_gradients_are_its_own_with_repeated_tokens(case, d, data):
    fmt, n, B, L, array = case
    f = get_precision(PRESETS[fmt]).compute_format
    vocab = data.draw(st.integers(1, 4))  # few tokens: most repeat, within a rank and across ranks
    ids = np.array(data.draw(st.lists(st.integers(0, vocab - 1), min_size=n * B * L, max_size=n * B * L)),
                   np.int64).reshape(n * B, L)
    dy = array((n * B, L, d))
    dwte, dwpe = embedding_backward(dy, (ids,), vocab, 6, f, n=n)
    layer = Embedding(vocab, 6, d)
    none, grads = layer.backward_ranks({}, dy, {"input": ids}, f, n)
    assert none is None
    for r, part in enumerate(_mine(n, B)):
        dwte_r, dwpe_r = embedding_backward(dy[part], (ids[part],), vocab, 6, f)
        assert same(dwte[r], dwte_r) and same(dwpe[r], dwpe_r)
        assert same(grads["wte"][r], dwte_r) and same(grads["wpe"][r], dwpe_r)


@given(sequences(), st.sampled_from([1.0, 2.0**12, 0.5]), st.data())
def test_each_ranks_lm_loss_and_its_gradient_are_its_own(case, scale, data):
    fmt, n, B, L, array = case
    f = get_precision(PRESETS[fmt]).compute_format
    V = data.draw(st.integers(1, 5))
    y = (array((n * B, L, V)).astype(np.float32) * 2.0**-20).astype(FORMATS[fmt])  # logits exp can take
    t = np.array(data.draw(st.lists(st.integers(0, V - 1), min_size=n * B * L, max_size=n * B * L)),
                 np.int64).reshape(n * B, L)
    loss = LMCrossEntropy()
    losses, cache = loss.forward_ranks(y, t, f, n)
    dy = loss.backward_ranks(cache, f, n, scale)
    for r, part in enumerate(_mine(n, B)):
        loss_r, cache_r = loss.forward(y[part], t[part], f)
        assert same(np.float64(losses[r]), np.float64(loss_r))
        assert same(dy[part], loss.backward(cache_r, f, scale))


@pytest.mark.pinned  # NumPy's pairwise sums, kernel-independent by construction: CI reruns it under other SIMD builds
@pytest.mark.parametrize("tokens", [(8, 16), (16, 32), (4, 160)])  # a rank's (B, L): sums of 128 to 640 terms
@pytest.mark.parametrize("fmt", ["bf16", "fp32"])
def test_each_ranks_lm_loss_over_many_tokens_is_its_own(tokens, fmt):
    # NumPy's pairwise sum of one rank's (B·L,) token losses and of each row of the ranks' (n, B·L): the same adds
    f = get_precision(PRESETS[fmt]).compute_format
    n, (B, L) = 3, tokens
    rng = np.random.default_rng(7)
    y = rng.standard_normal((n * B, L, 13)).astype(FORMATS[fmt])
    t = rng.integers(0, 13, (n * B, L))
    losses, _ = LMCrossEntropy().forward_ranks(y, t, f, n)
    for r, part in enumerate(_mine(n, B)):
        assert losses[r] == LMCrossEntropy().forward(y[part], t[part], f)[0]


UNITS = [
    lambda: TokenEmbedding(VOCAB, 16),
    lambda: LlamaBlock(16, 4, 2, 4, 24, attention="flash", block=2, qkv_bias=True, o_bias=True),
    lambda: LlamaAttention(16, 2, 1, attention="selective"),
    lambda: SwiGLUFFN(16, 24),
    lambda: LlamaHead(16, VOCAB),
    lambda: Embedding(VOCAB, 8, 16),
    lambda: TransformerBlock(16, 2),
    lambda: TransformerBlock(16, 2, attention="flash", block=2),
    lambda: AttentionBlock(16, 2, attention="selective"),
    lambda: FFNBlock(16),
    lambda: LMHead(16, VOCAB),
]


@settings(deadline=None)
@given(st.sampled_from(range(len(UNITS))), st.sampled_from(sorted(FORMATS)), st.integers(2, 4), st.integers(1, 3),
       st.integers(1, 6), st.integers(0, 2**16))
def test_each_gpt_units_stacked_forward_and_backward_are_each_ranks_own(which, fmt, n, B, L, seed):
    layer, f = UNITS[which](), get_precision(PRESETS[fmt]).compute_format
    rng = np.random.default_rng(seed)
    p = {k: v.astype(f.dtype) for k, v in layer.init(rng).items()}
    for k in p:  # biases and gains off their initial zeros and ones
        p[k] = (p[k].astype(np.float32) + 0.1 * rng.standard_normal(p[k].shape).astype(np.float32)).astype(f.dtype)
    if isinstance(layer, (Embedding, TokenEmbedding)):
        x = rng.integers(0, 3, (n * B, L))  # few tokens: repeated
    else:
        x = rng.standard_normal((n * B, L, 16)).astype(f.dtype)
    y, cache = layer.forward(p, x, f)
    dy = rng.standard_normal(y.shape).astype(f.dtype)
    dx, grads = layer.backward_ranks(p, dy, cache, f, n)
    for r, part in enumerate(_mine(n, B)):
        y_r, cache_r = layer.forward(p, x[part], f)
        dx_r, grads_r = layer.backward(p, dy[part], cache_r, f)
        assert same(y[part], y_r)
        assert all(same(cache[k][part], cache_r[k]) for k in cache_r)  # what each rank saves: its rows of the stack
        assert (dx is None and dx_r is None) or same(dx[part], dx_r)
        assert grads.keys() == grads_r.keys() and all(same(grads[k][r], grads_r[k]) for k in grads_r)


def test_a_units_gradients_land_in_the_rooms_handed_to_it():
    # `out` (the ranks' packed gradients, or each rank's buffer): written there and handed back as those arrays
    f = get_precision("fp32").compute_format
    layer, n = LMHead(16, VOCAB), 3
    rng = np.random.default_rng(1)
    p = layer.init(rng)
    y, cache = layer.forward(p, rng.standard_normal((n * 2, 5, 16)).astype(np.float32), f)
    dy = rng.standard_normal(y.shape).astype(np.float32)
    made = layer.backward_ranks(p, dy, cache, f, n)[1]
    out = {"w_head": np.empty((n, VOCAB, 16), np.float32), "lnf.g": [np.empty(16, np.float32) for _ in range(n)]}
    grads = layer.backward_ranks(p, dy, cache, f, n, out)[1]
    assert grads["w_head"] is out["w_head"] and grads["lnf.g"] is out["lnf.g"]
    assert all(same(grads[k][r], made[k][r]) for k in made for r in range(n))
