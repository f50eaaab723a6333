"""The Llama: layout and parameter count, the ledger's per-tensor table for every checkpointing strategy (hand-
derived, a comment per row), its data-less twin recording what it records, every ZeRO stage equal to the oracle
bit for bit, and a short run that learns to copy."""

from collections import Counter

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_gpt import (
    FD_STEP,
    FD_TOL,
    assert_learns_to_copy,
    assert_steps_equal_the_oracle,  # noqa: E402
    tokens,
)
from test_meta_gpt import compute_events, ledger_events  # noqa: E402

from zerosim import Adam, Cluster, MemoryLedger, Reference, ZeroEngine
from zerosim.models import loss_and_grad
from zerosim.models.gpt import STRATEGIES, strategy_options
from zerosim.models.hf import read_hf_config
from zerosim.models.llama import Llama, MetaLlama

# -- layout -----------------------------------------------------------------------------------------


def test_parameter_count_and_units():
    V, d, H, G, F, n, L = 11, 16, 4, 2, 40, 3, 8
    for unit in ("block", "sublayer"):
        m = Llama(V, d, H, n, L, d_ff=F, n_kv_heads=G, unit=unit)
        # embed_tokens V·d; per layer: two RMSNorm weights 2d, q_proj d·d, k_proj and v_proj d·(d·G/H) each,
        # o_proj d·d, gate/up/down 3·d·F; final norm d, untied lm_head V·d. No biases, no position table.
        assert m.num_params == V * d + n * (2 * d + 2 * d * d + 2 * d * (d * G // H) + 3 * d * F) + d + V * d
    assert [u.name for u in Llama(V, d, H, 2, L).layers] == ["embed", "block0", "block1", "head"]
    assert [u.name for u in Llama(V, d, H, 1, L, unit="sublayer").layers] == [
        "embed",
        "block0.attn",
        "block0.ffn",
        "head",
    ]


def test_block_and_sublayer_units_are_the_same_model():
    rng = np.random.default_rng(2)
    x, t = tokens(rng, 2, 5, 7)
    whole, halves = Llama(7, 8, 4, 2, 5, n_kv_heads=2), Llama(7, 8, 4, 2, 5, n_kv_heads=2, unit="sublayer")
    theta = whole.init_params(np.random.default_rng(3))
    assert np.array_equal(theta, halves.init_params(np.random.default_rng(3)))
    (l1, g1), (l2, g2) = (loss_and_grad(m, theta, x, t, "bf16") for m in (whole, halves))
    assert l1 == l2 and g1.tobytes() == g2.tobytes()


def test_from_config_builds_the_config_s_shape():
    config = read_hf_config(
        {
            "model_type": "qwen2",
            "hidden_size": 16,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "intermediate_size": 24,
            "num_hidden_layers": 2,
            "vocab_size": 9,
            "max_position_embeddings": 32,
            "rope_theta": 1e6,
        }
    )
    m = Llama.from_config(config, seq_len=8)
    assert m.num_params == config.num_params and (m.seq_len, m.rope_theta, m.qkv_bias) == (8, 1e6, True)
    with pytest.raises(ValueError, match="ties its LM head"):
        Llama.from_config(config.with_(tied=True))


@pytest.mark.bad_input("models")
@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(n_kv_heads=3), "must split evenly over n_kv_heads = 3"),
        (dict(n_heads=3), "does not split into n_heads = 3 heads: give head_dim"),
        (dict(head_dim=3), "head_dim must be even"),
        (dict(checkpoint="subblock"), "unit='sublayer'"),
        (dict(attention="sparse"), "attention must be one of"),
        (dict(n_layers=0), "n_layers must be a positive integer"),
    ],
)
def test_bad_configurations_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Llama(**(dict(vocab=5, d_model=8, n_heads=2, n_layers=1, seq_len=4) | kwargs))


@pytest.mark.parametrize("unit, attention", [("block", "standard"), ("sublayer", "flash"), ("block", "selective")])
def test_whole_model_gradient_matches_finite_differences(unit, attention):
    rng = np.random.default_rng(4)
    m = Llama(6, 8, 4, 2, 5, d_ff=12, n_kv_heads=2, unit=unit, attention=attention, rope_theta=10.0, flash_block=2)
    x, t = tokens(rng, 2, 5, 6)
    theta = 0.3 * rng.standard_normal(m.num_params)  # every parameter O(0.3), norm weights included
    _, g = loss_and_grad(m, theta, x, t, "fp64")
    for k in rng.choice(m.num_params, 40, replace=False):  # 40 coordinates from every unit's window
        e = np.zeros_like(theta)
        e[k] = FD_STEP
        fd = (loss_and_grad(m, theta + e, x, t, "fp64")[0] - loss_and_grad(m, theta - e, x, t, "fp64")[0]) / (
            2 * FD_STEP
        )
        assert abs(fd - g[k]) <= FD_TOL * (1 + abs(g[k])), (k, fd, g[k])


# -- what a Llama block saves, by name, for each strategy ----------------------------------------------

B, L, D, H, G, F, V = 2, 8, 16, 4, 2, 40, 11  # d_h = D/H = 4; fp16 or bf16: 2 bytes per element
BLD2 = B * L * D * 2  # 512: one (B, L, d) tensor
STAT = B * L * 4  # 64: one fp32 RMSNorm statistic per token

PER_TENSOR = [
    # what block 0 saves with standard attention: (tensor, bytes, sub-block, how). The ledger names it after its
    # unit: "block0.Q" (unit="block"), "block0.attn.Q" (unit="sublayer").
    ("block input", BLD2, "attn", "input_layernorm's input x: B·L·d·2"),
    ("norm1 rstd", STAT, "attn", "RMSNorm's 1/rms per token, fp32 as LlamaRMSNorm: B·L·4 (RMSNorm keeps no mean)"),
    ("Q", B * H * L * (D // H) * 2, "attn", "Q after rotation, H = 4 heads of d_h = 4: B·H·L·d_h·2 = 512"),
    ("K", B * G * L * (D // H) * 2, "attn", "K after rotation, G = 2 key/value heads (GQA): B·G·L·d_h·2 = 256, half Q"),
    ("V", B * G * L * (D // H) * 2, "attn", "V at G heads: 256 (repeat_kv's H-head copies are rebuilt, not kept)"),
    ("P", B * H * L * L * 2, "attn", "the softmax output at all H query heads: B·H·L²·2 = 1024"),
    ("attention output", B * L * H * (D // H) * 2, "attn", "O merged, o_proj's input: B·L·H·d_h·2 = 512"),
    ("pre-FFN input", BLD2, "ffn", "post_attention_layernorm's input h"),
    ("norm2 rstd", STAT, "ffn", "its 1/rms, fp32"),
    ("gate", B * L * F * 2, "ffn", "gate_proj's output, SiLU's input: B·L·F·2 = 1280"),
    ("up", B * L * F * 2, "ffn", "up_proj's output, the product's other factor: 1280"),
    ("h", B * L * F * 2, "ffn", "silu(gate)·up, down_proj's input: 1280 (silu(gate) itself is rebuilt)"),
    # Rotary embeddings save nothing: cos and sin depend on positions only and are rebuilt, bitwise, in backward
    # (no "cos"/"sin" name appears in the ledger); HF keeps one shared (B, L, d_h) pair for the whole model instead.
]
LAYER = sum(b for _, b, _, _ in PER_TENSOR)
ATTN_HALF = sum(b for _, b, half, _ in PER_TENSOR if half == "attn")
FFN_HALF = LAYER - ATTN_HALF
assert (LAYER, ATTN_HALF, FFN_HALF) == (7552, 3136, 4416)  # the sums the rows below use, written out
NO_P = [row for row in PER_TENSOR if row[0] != "P"]
FLASH = NO_P + [("LSE", B * H * L * 4, "attn", "an fp32 log-sum-exp per query row and head: B·H·L·4 = 256")]
EMBED, HEAD = B * L * 8, BLD2 + STAT  # the token ids (int64); the final RMSNorm's input and statistic: 128, 576
LOSS = B * L * V * 4 + B * L * 8  # the fused cross-entropy's fp32 softmax (B·L, V) and the int64 targets: 832

STRATEGY_TABLE = [
    # (strategy, block 0's tensors, its checkpoints, live when the loss starts, the activation peak); 4 layers
    # none: every tensor; at the loss every layer's, the ids and the head's; the peak adds the loss's own
    ("none", PER_TENSOR, [], EMBED + 4 * LAYER + HEAD, EMBED + 4 * LAYER + HEAD + LOSS),
    # selective: the same without P (rebuilt from Q and K in each block's backward)
    ("selective", NO_P, [], EMBED + 4 * (LAYER - 1024) + HEAD, EMBED + 4 * (LAYER - 1024) + HEAD + LOSS),
    # flash: no P; the LSE instead
    ("flash", FLASH, [], EMBED + 4 * (LAYER - 768) + HEAD, EMBED + 4 * (LAYER - 768) + HEAD + LOSS),
    # block: forward keeps each block's input as its checkpoint; backward rebuilds the block's tensors, the same
    # names and bytes. The embedding and the head are not checkpointed (torchtitan wraps the blocks only): at the
    # loss, ids, 4 block inputs and the head's tensors; the peak is block 3's backward, the head's freed by then:
    # 3 block inputs beside block 3's tensors (its own input among them)
    ("block", PER_TENSOR, [("block input", BLD2, "")], EMBED + 4 * BLD2 + HEAD, EMBED + 3 * BLD2 + LAYER),
    # subblock: each half's input is a checkpoint; 8 of them and the head's tensors at the loss; the peak is the
    # last SwiGLU half's backward: 7 inputs beside that half's tensors
    (
        "subblock",
        PER_TENSOR,
        [("block input", BLD2, "attn"), ("block input", BLD2, "ffn")],
        EMBED + 8 * BLD2 + HEAD,
        EMBED + 7 * BLD2 + FFN_HALF,
    ),
    # every-k, k = round(√4) = 2: blocks 0 and 2 start the two checkpoints; the peak is the second group's
    # backward: the first group's input beside blocks 2 and 3's tensors
    ("every-k", PER_TENSOR, [("block input", BLD2, "")], EMBED + 2 * BLD2 + HEAD, EMBED + BLD2 + 2 * LAYER),
]


def measured(model, fmt="bf16"):
    rng = np.random.default_rng(5)
    x, t = tokens(rng, B, L, V)
    ledger = MemoryLedger(rank=0)
    loss_and_grad(model, model.init_params(rng), x, t, fmt, checkpoint=model.checkpointing, ledger=ledger)
    assert ledger.current("activations") == 0  # everything saved was consumed
    return ledger


@pytest.mark.parametrize(
    "strategy, tensors, checkpoints, at_loss, peak", STRATEGY_TABLE, ids=[r[0] for r in STRATEGY_TABLE]
)
@pytest.mark.parametrize("fmt", ["bf16", "fp16"])
def test_the_ledger_holds_the_hand_derived_table_for_each_strategy(strategy, tensors, checkpoints, at_loss, peak, fmt):
    model = Llama(V, D, H, 4, L, d_ff=F, n_kv_heads=G, flash_block=3, **strategy_options(strategy))
    ledger = measured(model, fmt)
    allocs = [(e.name, e.nbytes) for e in ledger.timeline if e.action == "alloc" and e.kind == "activations"]
    unit = (lambda half: f"block0.{half}.") if model.unit == "sublayer" else (lambda half: "block0.")
    want = Counter((unit(half) + name, b) for name, b, half, *_ in [*tensors, *checkpoints])
    assert Counter((n, b) for n, b in allocs if n.startswith("block0.")) == want
    # the ends keep their caches under every strategy, as without checkpointing: no checkpoint of theirs
    outside = {
        "embed.input": EMBED,
        "head.final norm input": BLD2,
        "head.final norm rstd": STAT,
        "loss.probabilities": B * L * V * 4,
        "loss.labels": B * L * 8,
    }
    assert {n: b for n, b in allocs if not n.startswith("block")} == outside
    assert not any(word in n for n, _ in allocs for word in ("cos", "sin", "rope"))  # rotary keeps nothing
    loss_alloc = next(e for e in ledger.timeline if e.name == "loss.probabilities")
    assert loss_alloc.kind_total - loss_alloc.nbytes == at_loss
    assert ledger.peak("activations") == peak


# -- the data-less twin ------------------------------------------------------------------------------


@pytest.mark.slow
@given(
    strategy=st.sampled_from(tuple(STRATEGIES)),
    n=st.integers(1, 3),
    stage=st.integers(0, 3),
    heads=st.sampled_from([(2, 1), (2, 2), (4, 2), (4, 1)]),
    dh=st.sampled_from([2, 4]),
    n_layers=st.integers(1, 3),
    L_=st.integers(1, 6),
    B_=st.integers(1, 3),
    precision=st.sampled_from(["fp16-mixed", "bf16-mixed", "fp32"]),
    qkv_bias=st.booleans(),
    flash_block=st.integers(1, 4),
)
def test_the_meta_twin_records_what_the_real_llama_records(
    strategy, n, stage, heads, dh, n_layers, L_, B_, precision, qkv_bias, flash_block
):
    h, g = heads
    llama = Llama(
        9,
        2 * h * dh,
        h,
        n_layers,
        6,
        d_ff=6,
        n_kv_heads=g,
        head_dim=dh,
        qkv_bias=qkv_bias,
        flash_block=flash_block,
        **strategy_options(strategy),
    )
    rng = np.random.default_rng(L_)
    real = ZeroEngine(llama, Cluster(n), stage, Adam(), precision, checkpoint=llama.checkpointing)
    real.step([(rng.integers(0, 9, (B_, L_)), rng.integers(0, 9, (B_, L_))) for _ in range(n)])
    twin = MetaLlama(llama)
    meta = ZeroEngine(
        twin, Cluster(n, backend="meta", hosted="all"), stage, Adam(), precision, checkpoint=twin.checkpointing
    )
    meta.step(twin.batches(meta.cluster, B_, L_))
    for rank in meta.cluster.ranks:
        # every alloc and free in order — "block0.Q", "block0.K", "block0.gate", ... — same bytes, same phase
        assert ledger_events(rank) == ledger_events(real.cluster.ranks[rank.index])
        assert compute_events(meta.cluster, rank.index) == compute_events(real.cluster, rank.index)  # FLOPs, bytes
    assert any(e[2] == "activations" for e in ledger_events(meta.cluster.ranks[0]))


def test_a_tied_twin_counts_the_head_s_weight_once():
    config = read_hf_config(
        {
            "model_type": "llama",
            "hidden_size": 16,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "intermediate_size": 24,
            "num_hidden_layers": 1,
            "vocab_size": 50,
            "tie_word_embeddings": True,
        }
    )
    twin = MetaLlama.from_config(config, seq_len=8)
    untied = MetaLlama(Llama.from_config(config.with_(tied=False), seq_len=8))
    assert twin.num_params == config.num_params == untied.num_params - 50 * 16
    with pytest.raises(TypeError, match="twins a zerosim.models.Llama"):
        MetaLlama(twin)


# -- ZeRO ----------------------------------------------------------------------------------------------


@pytest.mark.slow
@given(
    n=st.integers(1, 4),
    stage=st.integers(0, 3),
    heads=st.sampled_from([(1, 1), (2, 1), (2, 2), (4, 2), (4, 1)]),
    dh=st.sampled_from([2, 4]),
    n_layers=st.integers(1, 2),
    L_=st.integers(1, 5),
    precision=st.sampled_from(["fp32", "fp16-mixed", "bf16-mixed"]),
    strategy=st.sampled_from(tuple(STRATEGIES)),
    qkv_bias=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_every_stage_equals_the_oracle_bitwise_on_llama(
    n, stage, heads, dh, n_layers, L_, precision, strategy, qkv_bias, seed
):
    h, g = heads
    rng = np.random.default_rng(seed)
    model = Llama(
        7,
        2 * h * dh,
        h,
        n_layers,
        5,
        d_ff=10,
        n_kv_heads=g,
        head_dim=dh,
        qkv_bias=qkv_bias,
        flash_block=2,
        **strategy_options(strategy),
    )
    params = model.init_params(rng)
    engine = ZeroEngine(
        model, Cluster(n), stage, Adam(lr=1e-2), precision, checkpoint=model.checkpointing, params=params
    )
    ref = Reference(model, Adam(lr=1e-2), precision, world_size=n, params=params)
    assert_steps_equal_the_oracle(engine, ref, lambda: [tokens(rng, 2, L_, 7) for _ in range(n)])


@pytest.mark.slow
def test_llama_learns_the_copy_task_through_zero_3():
    V_, n = 6, 3  # 5 symbols and the separator; strings of 3, so sequences of 6; the GPT's test, with GQA and RoPE
    assert_learns_to_copy(Llama(V_, 16, 4, 1, 2 * n, d_ff=32, n_kv_heads=2, rope_theta=100.0), V_, n)
