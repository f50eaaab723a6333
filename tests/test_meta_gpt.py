"""The GPT at seed 001's scale on the meta backend: its twin records what the real GPT records, and its
ledgers give seed 001 §5c/§5e/§6's numbers (7B shape: d = 4096, H = 32, 32 layers, L = 2048, B = 4, fp16).

First the twin is held to the real-data GPT on small shapes — every ledger event (activations by name
included) and every compute event (FLOPs, bytes read and written), at every stage — so the numbers
at 7B scale are the same code's, not a formula's. Then the 7B ledgers, exact bytes beside the seed's
rounded figures, each bookkeeping difference named on its row.
"""

import tracemalloc

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from zerosim import Adam, Cluster, ZeroEngine
from zerosim.analysis.costs import GB, get_preset
from zerosim.cluster import Compute
from zerosim.models import GPT
from zerosim.models.gpt import MetaGPT

SIMULATOR_ONLY = ("comm",)  # the ring's partial-sum scratch: the numpy simulator's own working memory


def ledger_events(rank):
    return [(e.action, e.name, e.kind, e.nbytes, e.phase) for e in rank.ledger.timeline if e.kind not in SIMULATOR_ONLY]


def compute_events(cluster, rank=None):
    return [e for e in cluster.trace.log if isinstance(e, Compute) and rank in (None, e.rank)]


# -- the twin against the real GPT --------------------------------------------------------------------

STRATEGIES = [  # (GPT options): seed 001's strategies, as `zerosim memory --checkpoint` names them
    dict(),  # none
    dict(checkpoint="block"),
    dict(unit="sublayer", checkpoint="subblock"),
    dict(attention="selective"),
    dict(checkpoint="every-k"),
    dict(attention="flash"),
]


@pytest.mark.slow
@given(
    options=st.sampled_from(STRATEGIES),
    n=st.integers(1, 3),
    stage=st.integers(0, 3),
    heads=st.sampled_from([1, 2]),
    n_layers=st.integers(1, 4),
    L=st.integers(1, 6),
    B=st.integers(1, 3),
    activation=st.sampled_from(["gelu", "relu"]),
    precision=st.sampled_from(["fp16-mixed", "bf16-mixed", "fp32"]),
    flash_block=st.integers(1, 4),
)
def test_the_meta_twin_records_what_the_real_gpt_records(
    options, n, stage, heads, n_layers, L, B, activation, precision, flash_block
):
    gpt = GPT(9, 4 * heads, heads, n_layers, 6, activation=activation, flash_block=flash_block, **options)
    rng = np.random.default_rng(L)
    real = ZeroEngine(gpt, Cluster(n), stage, Adam(), precision, checkpoint=gpt.checkpointing)
    real.step([(rng.integers(0, 9, (B, L)), rng.integers(0, 9, (B, L))) for _ in range(n)])
    twin = MetaGPT(gpt)
    for hosted in ("all", "representative"):  # every rank, and the one that stands for all (rank 0)
        meta = ZeroEngine(
            twin, Cluster(n, backend="meta", hosted=hosted), stage, Adam(), precision, checkpoint=twin.checkpointing
        )
        meta.step(twin.batches(meta.cluster, B, L))
        for rank in meta.cluster.ranks:
            # every alloc and free in order — "block0.P", "block0.x1", ... — with the same bytes, in the same phase
            assert ledger_events(rank) == ledger_events(real.cluster.ranks[rank.index])
            assert compute_events(meta.cluster, rank.index) == compute_events(real.cluster, rank.index)  # FLOPs, bytes
        assert any(e[2] == "activations" for e in ledger_events(meta.cluster.ranks[0]))


def test_the_twin_is_data_less_and_refuses_nonsense():
    twin = MetaGPT(GPT(9, 8, 2, 1, 6))
    engine = ZeroEngine(twin, Cluster(2, backend="meta", hosted="all"), 1, Adam())
    losses = engine.step(twin.batches(engine.cluster, 3))
    assert all(np.isnan(x) for x in losses)
    with pytest.raises(ValueError, match="longer than the model's seq_len = 6"):
        twin.check_batch(*twin.batches(engine.cluster, 2, seq_len=7)[0])
    with pytest.raises(TypeError, match="twins a zerosim.models.GPT"):
        MetaGPT(twin)
    with pytest.raises(ValueError, match="no such shape"):
        MetaGPT.from_preset(get_preset("llama-7b"))  # SwiGLU and RMSNorm blocks: not zerosim's GPT


@pytest.mark.parametrize("name", ["gpt2-small", "gpt2-xl", "gpt3-6.7b", "gpt3-175b"])
def test_a_gpt2_layout_preset_is_its_gpt_with_a_tied_head(name):
    preset = get_preset(name)
    model = MetaGPT.from_preset(preset)
    s = preset.shape
    assert model.num_params == preset.total  # V·d + n_ctx·d + layers·(12d² + 13d) + 2d: no second V·d
    assert model.num_params == GPT(s.vocab, s.d_model, s.n_heads, s.n_layers, s.n_ctx).num_params - s.vocab * s.d_model


# -- seed 001 at its 7B shape, from the meta ledgers ---------------------------------------------------

B, L, D, H, LAYERS, V = 4, 2048, 4096, 32, 32, 50257  # seed 001 §5c/§6; V: GPT-2's (and GPT-3's) vocabulary
BLD2 = B * L * D * 2  # one B·L·d tensor in fp16: 67,108,864 bytes
STAT = B * L * 4  # one fp32 LayerNorm statistic (B, L): 32,768 bytes


def step_7b(seq_len=L, **options):
    """One fp16-mixed step of the 7B-shaped GPT on one rank (stage 0: "a single GPU"), on the meta backend."""
    model = MetaGPT(GPT(V, D, H, LAYERS, seq_len, **options))
    engine = ZeroEngine(model, Cluster(1, backend="meta"), 0, Adam(), "fp16-mixed", checkpoint=model.checkpointing)
    engine.step(model.batches(engine.cluster, B))
    return model, engine.cluster.ranks[0].ledger


def saved(ledger, prefix=""):
    """{name: bytes} of every activation buffer allocated (names are unique within one micro-batch)."""
    return {
        e.name: e.nbytes
        for e in ledger.timeline
        if e.action == "alloc" and e.kind == "activations" and e.name.startswith(prefix)
    }


PER_TENSOR_7B = [
    # (ledger name, exact bytes, seed 001 §5e's row and its rounded figure)
    ("block0.block input", BLD2, "pre-attention LayerNorm input, B·L·d: 67.1 MB"),
    ("block0.LN1 mean", STAT, "not in the seed's table: LN1's mean, fp32 (its 'LayerNorm μ, σ²: 2BL' row; it says "
                              "recompute)"),
    ("block0.LN1 rstd", STAT, "LN1's 1/σ, fp32; the 'attention input X' is LN1's output, rebuilt: 'shared', 0 bytes"),
    ("block0.Q", BLD2, "Q, B·L·d (per head (B, H, L, d_h): the same elements)"),
    ("block0.K", BLD2, "K, B·L·d"),
    ("block0.V", BLD2, "V, B·L·d"),
    ("block0.P", B * H * L * L * 2, "P, B·H·L² = 1,073,741,824: 'approximately 1.07 GB per layer' (§6 writes 1072 MB; "
                                    "it is 1073.7)"),
    ("block0.attention output", BLD2, "O before the output projection, B·L·d; 'output projection input: O reshaped', 0 "
                                      "bytes"),
    ("block0.pre-FFN input", BLD2, "pre-FFN LayerNorm input, B·L·d"),
    ("block0.LN2 mean", STAT, "not in the seed's table, as LN1's"),
    ("block0.LN2 rstd", STAT, "the 'FFN input' is LN2's output, rebuilt: 'shared', 0 bytes"),
    ("block0.x1", 4 * BLD2, "FFN pre-activation, B·L·4d (GELU'(x1) needs it)"),
    ("block0.x2", 4 * BLD2, "FFN post-activation, B·L·4d (W2's input)"),
]


def test_seed_001s_per_layer_table_at_7b_from_the_meta_ledgers():
    tracemalloc.start()
    model, ledger = step_7b()
    _, allocated = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert allocated < 20e6  # bookkeeping only: the ledger below holds 176 GB
    assert saved(ledger, "block0.") == {name: nbytes for name, nbytes, _ in PER_TENSOR_7B}
    layer = saved(ledger, "block0.")
    # no P, no statistics
    linear = sum(b for name, b in layer.items() if name != "block0.P" and " LN" not in f" {name[7:]}")
    assert linear == 14 * B * L * D * 2 == 939_524_096  # "Linear terms: 14 × 4 × 2048 × 4096 × 2 ≈ 940 MB"
    assert layer["block0.P"] == 1_073_741_824  # "Attention matrix P: 4 × 32 × 2048² × 2 ≈ 1072 MB" (1073.7 MB)
    per_layer = sum(layer.values())
    assert per_layer == 939_524_096 + 1_073_741_824 + 4 * STAT == 2_013_396_992  # "Total per layer: ≈ 2 GB"
    # every block saves the same: 32 of them, 64,428,703,744 bytes, "≈ 64 GB"
    blocks = saved(ledger, "block")
    assert sum(blocks.values()) == LAYERS * per_layer == 64_428_703_744 and round(LAYERS * per_layer / GB) == 64


def test_seed_001s_grand_total_at_7b_from_the_meta_ledgers():
    model, ledger = step_7b()
    P = model.num_params
    # zerosim's GPT at d = 4096, 32 layers, V = 50,257, an untied head: P = 6,864,257,024, not the seed's round 7e9
    assert P == V * D + L * D + LAYERS * (12 * D * D + 13 * D) + 2 * D + V * D == 6_864_257_024
    states = {k: v for k, v in ledger.by_kind().items() if k != "activations"}  # the resting model states
    assert states == {"params": 2 * P, "grads": 2 * P, "master": 4 * P, "optim:m": 4 * P, "optim:v": 4 * P}
    assert sum(states.values()) == 16 * P == 109_828_112_384  # the seed's "16 × 7 × 10⁹ ≈ 112 GB" is 16 × 7e9
    # The activation peak is when the loss runs: all 32 layers, plus what the seed's per-layer table leaves out
    outside = {
        "embed.input": B * L * 8,  # the token ids, int64: 65,536
        "head.final LN input": BLD2, "head.LN mean": STAT, "head.LN rstd": STAT,  # the final LayerNorm's: 67,174,400
        "loss.probabilities": B * L * V * 4,  # softmax over the vocabulary, fp32 (B·L, V): 1,646,821,376
        "loss.labels": B * L * 8,  # the targets, int64
    }
    assert {k: v for k, v in saved(ledger).items() if not k.startswith("block")} == outside
    activations = LAYERS * 2_013_396_992 + sum(outside.values())
    assert ledger.peak("activations") == activations == 66_142_830_592
    # "Grand total on a single GPU: ≈ 176 GB" = 112 + 64. Measured: 109.83 GB of model states (P < 7e9: −2.17 GB)
    # + 66.14 GB of activations (+1.71 GB outside the layers, the loss's fp32 probabilities above all) = 175.97 GB,
    # the peak moment (the fp32 gradient "grad32" comes later, in the optimizer step, when activations are gone).
    assert ledger.peak() == 16 * P + activations == 175_970_942_976 and round(ledger.peak() / GB) == 176


L_SQUARED_ROWS = [
    # (L, P per layer, P over 32 layers, all activations of the 32 layers); seed 001 §5c and §6
    (2048, 1_073_741_824, 34_359_738_368, 64_428_703_744),  # "≈ 1.07 GB per layer", "≈ 34 GB", "≈ 64 GB"
    # L = 4096: P quadruples (4 × 1,073,741,824 exactly). The seed's "adding roughly 128 GB" is 32 × 4 × 1 GB, the
    # P term's new size in round numbers; the increase measured is 133.1 GB: P's own 3 × 34.4 = 103.1 GB and the
    # linear terms doubling, +30.1 GB.
    (4096, 4_294_967_296, 137_438_953_472, 197_576_884_224),
    # L = 8192: "≈ 17.2 GB per layer, × 32 layers ≈ 550 GB"; "the activation cost alone exceeds 550 GB": 670 GB
    (8192, 17_179_869_184, 549_755_813_888, 670_031_675_392),
]


@pytest.mark.parametrize("seq_len, p_layer, p_all, layers_all", L_SQUARED_ROWS)
def test_the_l_squared_rows_from_the_meta_ledgers(seq_len, p_layer, p_all, layers_all):
    _, ledger = step_7b(seq_len)
    held = saved(ledger, "block")
    assert held["block0.P"] == B * H * seq_len**2 * 2 == p_layer
    assert sum(b for name, b in held.items() if name.endswith(".P")) == p_all
    assert sum(held.values()) == layers_all == LAYERS * (14 * B * seq_len * D * 2 + p_layer + 4 * B * seq_len * 4)


def test_the_l_squared_increase_is_what_the_seeds_128_gb_rounds():
    _, short = step_7b(2048)
    _, long = step_7b(4096)
    grown = sum(saved(long, "block").values()) - sum(saved(short, "block").values())
    p_grown = 3 * 34_359_738_368  # P: 4× as large, so 3× its old size more
    linear_grown = 14 * B * 2048 * D * 2 * LAYERS + 4 * STAT * LAYERS  # the linear terms (and LN statistics) double
    assert grown == p_grown + linear_grown == 133_148_180_480  # "adding roughly 128 GB" = 32 × 4 × 1 GB, rounded


LAYER_7B = 2_013_396_992  # one block's saved tensors, above
IDS, LOSS = B * L * 8, B * L * V * 4 + B * L * 8  # the token ids; the loss's probabilities and labels
HEAD = BLD2 + 2 * STAT  # the final LayerNorm's input and statistics
STRATEGY_PEAKS_7B = [
    # (GPT options, peak activation bytes at 7B, where the peak is), each derived by hand
    (dict(), IDS + 32 * LAYER_7B + HEAD + LOSS, "when the loss runs: every layer's tensors: 66.1 GB"),
    # selective: every layer but P; P (1 GB per layer) is rebuilt from Q and K in each block's backward
    (dict(attention="selective"), IDS + 32 * (LAYER_7B - 1_073_741_824) + HEAD + LOSS, "at the loss: 31.8 GB"),
    # flash: no P; an fp32 log-sum-exp (B, H, L) per layer instead, 1 MB
    (dict(attention="flash"), IDS + 32 * (LAYER_7B - 1_073_741_824 + B * H * L * 4) + HEAD + LOSS, "at the loss: 31.9 "
                                                                                                   "GB"),
    # block: 31 block inputs and block 31's whole tensors (its input among them) in its backward: 4.09 GB; the
    # seed's "32·BLd + 14·BLd + BHL²" counts block 31's input twice and leaves out the ids and LN statistics
    (dict(checkpoint="block"), IDS + 31 * BLD2 + LAYER_7B, "block 31's backward: 4.1 GB"),
    # subblock: 64 sub-block inputs and the head's tensors (not checkpointed: the frameworks wrap the blocks only):
    # the loss moment beats every FFN half's backward (4.8 GB)
    (dict(unit="sublayer", checkpoint="subblock"), IDS + 64 * BLD2 + HEAD + LOSS, "at the loss: 6.0 GB"),
    # every-k, k = round(√32) = 6: groups of 6 blocks; group 4 (blocks 24-29) rebuilt beside the 4 earlier
    # groups' inputs: 12.3 GB (the last group holds only blocks 30 and 31)
    (dict(checkpoint="every-k"), IDS + 4 * BLD2 + 6 * LAYER_7B, "group 4's backward: 12.3 GB"),
]


@pytest.mark.parametrize("options, peak, where", STRATEGY_PEAKS_7B)
def test_each_strategys_peak_at_7b_from_the_meta_ledgers(options, peak, where):
    _, ledger = step_7b(**options)
    assert ledger.peak("activations") == peak
