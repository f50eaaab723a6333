"""What a TP rank holds, measured by the ledgers, against hand formulas (issue 38, must-show 3):

    activations per transformer layer = Korthikanti et al. 2022's Table 2 (34sbh + 5as²b and its TP, SP and selective
    variants) term by term, less the dropout terms zerosim does not model, plus the norms' fp32 statistics; the
    Llama's named tensors; the layer input full recomputation keeps; and Llama 3 70B at TP 8 x ZeRO-3 over 32
    data-parallel ranks (torchtitan's FSDP 32 x TP 8): the model states by kind, the TP bytes on NVLink and the FSDP
    bytes across nodes, each against its formula written out here.
"""

import math

import pytest
from helpers import tp_model_state_bytes

from zerosim.analysis.costs import measure_stage
from zerosim.models import GPT, Llama, MetaGPT, MetaLlama, read_hf_config, shipped_config
from zerosim.parallel.tensor._costs import (
    MEGATRON_TERMS,
    llama_layer_bytes,
    megatron_formula,
    megatron_layer_bytes,
    term_bytes,
    zerosim_layer_bytes,
)


def block_activations(model, t: int, sp: bool, B: int, L: int) -> dict:
    """{name: bytes} block 0 of one TP rank saved for backward (a meta step on t ranks, dp = 1)."""
    _, cluster, _ = measure_stage(model, t, 0, "adam", "bf16-mixed", micro_batch=(B, L), gpus_per_node=t, tp=t, sp=sp)
    return {e.name[len("block0."):]: e.nbytes for e in cluster.ranks[0].ledger.timeline
            if e.action == "alloc" and e.kind == "activations" and e.name.startswith("block0.")}


@pytest.mark.parametrize("selective", [False, True])
@pytest.mark.parametrize("sp", [False, True])
def test_table_2_is_the_sum_of_its_terms(sp, selective):
    """MEGATRON_TERMS adds up to the paper's printed closed forms (so the term table is the paper's)."""
    for s, b, h, a, t in [(2048, 4, 4096, 32, 8), (8192, 1, 8192, 64, 4), (512, 2, 1024, 16, 2)]:
        assert megatron_layer_bytes(s, b, h, a, t, sp, selective) == pytest.approx(
            megatron_formula(s, b, h, a, t, sp, selective), rel=1e-12)
    assert megatron_layer_bytes(2048, 1, 4096, 32) == 2048 * 4096 * (34 + 5 * 32 * 2048 / 4096)  # no parallelism


@pytest.mark.parametrize("attention", ["standard", "selective"])
@pytest.mark.parametrize("sp", [False, True], ids=["TP", "TP+SP"])
@pytest.mark.parametrize("t", [2, 4])
def test_a_gpt_layers_activations_are_megatrons_terms(t, sp, attention):
    s, b, a, h = 16, 2, 8, 64
    model = MetaGPT(GPT(vocab=64, d_model=h, n_heads=a, n_layers=2, seq_len=s, attention=attention))
    held = block_activations(model, t, sp, b, s)
    # each Megatron term zerosim holds is one (or two) of its buffers, byte for byte
    for term in MEGATRON_TERMS:
        if term.zerosim is None or (attention == "selective" and term.quadratic):
            continue
        names = [n.strip() for n in term.zerosim.split("+")]
        names = [n + " (sequence shard)" if sp and n in ("attn.attention input", "mlp.FFN input") else n for n in names]
        assert sum(held[n] for n in names) == term_bytes(term, s, b, h, a, t, sp), term.name
    selective = attention == "selective"
    stats = 4 * 4 * s * b / (t if sp else 1)  # LN1's and LN2's fp32 mean and rstd, per token
    dropout = sum(term_bytes(x, s, b, h, a, t, sp) for x in MEGATRON_TERMS
                  if x.zerosim is None and not (selective and x.quadratic))
    assert sum(held.values()) == zerosim_layer_bytes(s, b, h, a, t, sp, selective)
    assert sum(held.values()) == megatron_formula(s, b, h, a, t, sp, selective) - dropout + stats


@pytest.mark.parametrize("sp", [False, True], ids=["TP", "TP+SP"])
@pytest.mark.parametrize("t", [2, 4])
def test_a_llama_layers_named_tensors(t, sp):
    s, b, d, H, G, dh, F = 16, 2, 32, 8, 4, 8, 48
    model = MetaLlama(Llama(vocab=64, d_model=d, n_heads=H, n_kv_heads=G, head_dim=dh, n_layers=2, seq_len=s,
                            d_ff=F))
    held = block_activations(model, t, sp, b, s)
    cut = t if sp else 1
    assert held["attn.Q"] == held["attn.attention output"] == 2 * s * b * H * dh // t
    assert held["attn.K"] == held["attn.V"] == 2 * s * b * G * dh // t  # the rank's G/t key/value heads
    assert held["mlp.gate"] == held["mlp.up"] == held["mlp.h"] == 2 * s * b * F // t
    assert held["ln1.block input"] == held["ln2.pre-FFN input"] == 2 * s * b * d // cut
    assert held["ln1.norm1 rstd"] == held["ln2.norm2 rstd"] == 4 * s * b // cut
    assert held["attn.P"] == 2 * b * (H // t) * s * s
    assert sum(held.values()) == llama_layer_bytes(s, b, d, H, G, dh, F, t, sp)


@pytest.mark.parametrize("sp", [False, True], ids=["TP", "TP+SP"])
def test_full_recomputation_keeps_each_layers_input(sp):
    """Table 2's last row: 2sbh per layer (2sbh/t with SP), the block's input, while the loss runs."""
    s, b, h, t, layers = 16, 2, 32, 4, 3
    model = MetaGPT(GPT(vocab=64, d_model=h, n_heads=4, n_layers=layers, seq_len=s, checkpoint="block"))
    _, cluster, _ = measure_stage(model, t, 0, "adam", "bf16-mixed", micro_batch=(b, s), gpus_per_node=t, tp=t, sp=sp)
    live = {}
    for e in cluster.ranks[0].ledger.timeline:
        if e.kind == "activations":
            live[e.name] = e.nbytes if e.action == "alloc" else live.pop(e.name) * 0
        if e.name == "loss.labels" and e.action == "alloc":
            break
    kept = {n: v for n, v in live.items() if n.startswith("block") and v}
    assert set(kept) == {f"block{i}.ln1.block input" for i in range(layers)}
    assert all(v == megatron_layer_bytes(s, b, h, 4, t, sp, full=True) for v in kept.values())


# -- Llama 3 70B, torchtitan's FSDP 32 x TP 8 on 256 H100s ------------------------------------------------------------

LLAMA_70B = dict(d=8192, H=64, G=8, dh=128, F=28672, V=128256, layers=80)


def llama_70b_slice(t: int) -> int:
    """One TP rank's parameters of Llama 3 70B, by hand (_model.py's units; rows / cols cut by t, norms whole)."""
    d, H, G, dh, F, V, n = (LLAMA_70B[k] for k in ("d", "H", "G", "dh", "F", "V", "layers"))
    attention = d * (H // t) * dh + 2 * d * (G // t) * dh + (H // t) * dh * d  # q, k, v rows; o's columns
    mlp = 3 * (F // t) * d  # gate, up rows; down's columns
    return V // t * d + n * (attention + mlp + 2 * d) + d + V // t * d  # embedding rows, blocks, final norm, head


def sequence_parallel_share(local: int, dp: int) -> int:
    """The most norm weights one of the dp shards of a TP slice holds: the coalesced SP all-reduce's length. The slice
    is laid out embedding, then per block norm1, q/k/v/o, norm2, gate/up/down, then the final norm and the head."""
    d, n, t = LLAMA_70B["d"], LLAMA_70B["layers"], 8
    embedding = LLAMA_70B["V"] // t * d
    attention = d * (LLAMA_70B["H"] // t) * LLAMA_70B["dh"] * 2 + 2 * d * (LLAMA_70B["G"] // t) * LLAMA_70B["dh"]
    block = 2 * d + attention + 3 * (LLAMA_70B["F"] // t) * d
    norms = [embedding + i * block for i in range(n)] + [embedding + i * block + d + attention for i in range(n)]
    norms.append(embedding + n * block)  # the final norm
    shard = math.ceil(local / dp)
    return max(sum(max(0, min(a + d, (q + 1) * shard) - max(a, q * shard)) for a in norms) for q in range(dp))


def test_llama_70b_at_tp_8_and_zero_3_over_32_ranks():
    t, dp, s, b = 8, 32, 8192, 1
    config = read_hf_config(shipped_config("llama-3-70b"))
    model = MetaLlama.from_config(config, seq_len=s, checkpoint="block", attention="flash")
    row, cluster, engine = measure_stage(model, t * dp, 3, "adam", "bf16-mixed", micro_batch=(b, s),
                                         gpus_per_node=8, tp=t, sp=True)
    local = llama_70b_slice(t)
    # 70,553,706,496 / 8 = 8,819,213,312, plus 7/8 of the 161 norms' 1,318,912 weights every rank holds whole
    assert engine.model.num_params == local == 8_819_213_312 + 7 * 161 * 8192 // 8
    # the slice's model states, cut over the 32 ranks that hold it (seed 001 with Ψ = P_local, N = dp)
    hand = tp_model_state_bytes(local, dp, 3)
    assert row["resting"] == {"params": hand["params"], "grads": hand["grads"], "master": hand["master"],
                              "optim:m": hand["optim"] // 2, "optim:v": hand["optim"] // 2}
    # TP's collectives stay on a node, FSDP's cross nodes: per rank and step, the sequence-parallel activations
    # (X = b·s·d bytes in bf16, (t−1)/t of each sent): per block 4 forward, 4 again in recompute, and in backward 2
    # re-gathers of the kept inputs, 2 gradient all-gathers, 2 reduce-scatters; the embedding's reduce-scatter and
    # its gradient's all-gather; the final norm's and the head's all-gather (forward, backward's re-gather: the head
    # is not recomputed) and its gradient's reduce-scatter
    X = b * s * LLAMA_70B["d"] * 2
    M = b * s  # the loss's statistics: three all-reduces of M fp32 values
    tp_bytes = (LLAMA_70B["layers"] * 14 + 2 + 3) * X * (t - 1) // t + 3 * 2 * (t - 1) * math.ceil(M / t) * 4
    width = engine.cluster.ranks[0].grads.array.itemsize  # the reduced gradients' format
    sp_grads = 2 * (t - 1) * math.ceil(sequence_parallel_share(local, dp) / t) * width
    tiers = cluster.trace.bytes_by_tier()
    assert tiers["intra-node"] == pytest.approx(t * dp * (tp_bytes + sp_grads), rel=1e-9)
    # FSDP over dp = 32 ranks, one per node: each block gathered for forward, recompute and backward (bf16), its
    # gradient reduce-scattered (bf16), (dp − 1)/dp of each; the embedding and the head (its vocabulary rows and the
    # final norm's d weights, whole on each rank) are not recomputed: one gather less each
    embedding = LLAMA_70B["V"] // t * LLAMA_70B["d"]
    head = LLAMA_70B["V"] // t * LLAMA_70B["d"] + LLAMA_70B["d"]
    assert tiers["inter-node"] == pytest.approx(t * dp * 2 * (4 * local - embedding - head) * (dp - 1) / dp,
                                                rel=1e-9)
