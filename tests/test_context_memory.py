"""Context parallelism's memory, by name in the ledger (issue 60, Build 4's first half): every activation a CP rank
keeps is L / C tokens long — the data-less twin (parallel/context/_meta.py) holds and sends exactly what the real
model does on small shapes, then accounts Llama 3 8B at 128k and 1M tokens on the meta backend without allocating:
each named buffer halves when C doubles, grows 8x with 8x the tokens, and equals the hand's bytes."""

import tracemalloc

import numpy as np
import pytest

from zerosim import Cluster, ZeroEngine, get_optimizer
from zerosim.models import GPT, Llama, MetaGPT, MetaLlama, read_hf_config, shipped_config
from zerosim.parallel.context import ContextParallel
from zerosim.parallel.tensor import TensorParallel


def ledger_and_sends(model, backend, style, stage=3, tp=1, sp=False):
    """Rank 0's ledger in order and every rank's bytes sent, for one step beside CP 2 (and TP `tp`: N = 4·tp, the TP
    rank's CP model, or the twin's; `sp`: with its sequence parallelism)."""
    whole = getattr(model, "gpt", model)
    tensor = None if tp == 1 else TensorParallel(model, tp=tp, sequence_parallel=sp, params=None if backend == "meta"
                                                 else whole.init_params(np.random.default_rng(0)))
    cp = ContextParallel(model, cp=2, style=style, tensor=tensor)
    cluster = Cluster(4 * tp, backend=backend, trace="call")
    for r in cluster.ranks:
        r.ledger.keep_timeline = True
    engine = ZeroEngine(cp.model, cluster, stage, get_optimizer("adam"), "bf16-mixed", parallelisms=cp.parallelisms)
    if backend == "numpy":
        rng = np.random.default_rng(0)
        engine.step(cp.batches(engine.dims, [(rng.integers(0, 16, (2, 8)),) * 2 for _ in range(2)]))
    else:
        engine.step(cp.model.batches(cluster, 2, 4))
    return [(e.action, e.name, e.nbytes) for e in cluster.ranks[0].ledger.timeline], cluster.trace.sent_totals(4 * tp)


@pytest.mark.parametrize("tp, sp", [(1, False), (2, False), (2, True)], ids=["cp", "cp+tp", "cp+tp+sp"])
@pytest.mark.parametrize("checkpoint", ["none", "block"])
@pytest.mark.parametrize("style", ["ring", "allgather", "torch"])
@pytest.mark.parametrize("family", ["gpt", "llama"])
def test_the_twin_holds_and_sends_what_the_real_model_does(family, style, checkpoint, tp, sp):
    """Every buffer rank 0's ledger allocates and frees, in order, by name and size, and every rank's bytes sent: the
    twin's as the real model's on real numbers; beside TP 2, the TP rank's CP twin (parallel/context/_meta.py beside
    parallel/tensor/_meta.py) as the real TP rank's CP model, with and without sequence parallelism."""
    if family == "gpt":
        real = GPT(vocab=16, d_model=8, n_heads=2, n_layers=2, seq_len=8, attention="flash", checkpoint=checkpoint)
        twin = MetaGPT(real)
    else:
        real = Llama(vocab=16, d_model=8, n_heads=4, n_kv_heads=2, n_layers=2, seq_len=8, d_ff=16,
                     attention="flash", checkpoint=checkpoint)
        twin = MetaLlama(real)
    assert ledger_and_sends(real, "numpy", style, tp=tp, sp=sp) == ledger_and_sends(twin, "meta", style, tp=tp, sp=sp)


# Llama 3 8B (d 4,096, 32 query heads over 8 key/value heads of 128, FFN 14,336), B = 1, L = 32,768 beside CP 2 and
# TP 2 with sequence parallelism (Megatron's layout): one rank's L / C = 16,384 tokens, its SP shard 8,192; bf16 (2 B)
# activations, fp32 (4 B) norm statistics and LSE, int64 positions. Every tensor of block 0, by hand:
SP_BESIDE_CP = {
    "ln1.block input": 8192 * 4096 * 2,  # the norm's input: the SP shard of the residual stream
    "ln1.norm1 rstd": 8192 * 4,  # one fp32 a shard token
    "attn.qkv.attention input (sequence shard)": 8192 * 4096 * 2,  # the column GEMM's input, kept as its shard
    "attn.qkv.positions": 16384 * 8,  # the CP rank's tokens' positions, for rotary in backward
    "attn.out.attention output": 16384 * (32 // 2 * 128) * 2,  # the rank's H/T = 16 heads merged, L / C tokens
    "attn.out.Q": 16 * 16384 * 128 * 2,  # (B, H/T, L/C, d_h)
    "attn.out.K": 4 * 16384 * 128 * 2,  # (B, G/T, L/C, d_h): the last pair the ring held
    "attn.out.V": 4 * 16384 * 128 * 2,
    "attn.out.LSE": 16 * 16384 * 4,  # one fp32 a head and token
    "ln2.pre-FFN input": 8192 * 4096 * 2,  # the SP shard again
    "ln2.norm2 rstd": 8192 * 4,
    "mlp.FFN input (sequence shard)": 8192 * 4096 * 2,
    "mlp.gate": 16384 * (14336 // 2) * 2,  # the rank's F/T columns at L / C tokens
    "mlp.up": 16384 * (14336 // 2) * 2,
    "mlp.h": 16384 * (14336 // 2) * 2,
}


# torch's own ring keeps SDPA's inputs: the rank's K and V repeated to its H/T = 16 query heads (torchtitan 9dec370's
# Attention.forward calls repeat_kv before F.scaled_dot_product_attention), four times the ring's G/T = 4
TORCH_KV = {"attn.out.K": 16 * 16384 * 128 * 2, "attn.out.V": 16 * 16384 * 128 * 2}


@pytest.mark.parametrize("style", ["ring", "torch"])
def test_beside_sequence_parallelism_each_tensor_is_its_hand_size(style):
    """CP 2 × TP 2 with SP on the meta backend: what block 0 keeps, by name, equals the hand table above (the norms'
    inputs and the column GEMMs' kept inputs at L / (C·T) tokens, the heads' and columns' tensors at L / C tokens on
    H/T heads or F/T columns; torch's ring its K and V at every query head)."""
    L, C, T = 32768, 2, 2
    twin = MetaLlama.from_config(read_hf_config(shipped_config("llama-3-8b")), seq_len=L, checkpoint="none",
                                 attention="flash")
    cp = ContextParallel(twin, cp=C, style=style, tensor=TensorParallel(twin, T, sequence_parallel=True))
    cluster = Cluster(C * T, backend="meta", trace="call", timeline=False)
    ledger = cluster.ranks[0].ledger
    ledger.keep_timeline = True
    engine = ZeroEngine(cp.model, cluster, 3, get_optimizer("adam"), "bf16-mixed", parallelisms=cp.parallelisms)
    engine.step(cp.model.batches(cluster, 1, L // C))
    named = {}
    for e in ledger.timeline:
        if e.kind == "activations" and e.action == "alloc" and e.name.startswith("block0."):
            named[e.name.removeprefix("block0.")] = max(named.get(e.name.removeprefix("block0."), 0), e.nbytes)
    assert named == ({**SP_BESIDE_CP, **TORCH_KV} if style == "torch" else SP_BESIDE_CP)


def llama_3_8b_step(L: int, C: int, style: str = "ring", watch: bool = True):
    """({activation name: bytes}, the activations' peak, the host bytes the step allocated) of one Llama 3 8B step
    (B = 1, full activation checkpointing, flash attention) beside CP `C` on the meta backend (`watch`: count the host
    bytes, which slows the step)."""
    twin = MetaLlama.from_config(read_hf_config(shipped_config("llama-3-8b")), seq_len=L, checkpoint="block",
                                 attention="flash")
    cp = ContextParallel(twin, cp=C, style=style)
    cluster = Cluster(C, backend="meta", trace="call", timeline=False)
    ledger = cluster.ranks[0].ledger
    ledger.keep_timeline = True
    engine = ZeroEngine(cp.model, cluster, 3, get_optimizer("adam"), "bf16-mixed", parallelisms=(cp,))
    if watch:
        tracemalloc.start()
    engine.step(cp.model.batches(cluster, 1, L // C))
    host = tracemalloc.get_traced_memory()[1] if watch else None
    tracemalloc.stop()
    named = {}
    for e in ledger.timeline:
        if e.kind == "activations" and e.action == "alloc":
            named[e.name] = max(named.get(e.name, 0), e.nbytes)
    return named, ledger.peak("activations"), host


@pytest.mark.slow
def test_every_activation_is_l_over_c_by_name_at_128k_tokens():
    eight, peak8, _ = llama_3_8b_step(131072, 8, watch=False)
    sixteen, peak16, _ = llama_3_8b_step(131072, 16, watch=False)
    assert eight.keys() == sixteen.keys() and len(eight) > 400
    assert {n: b // 2 for n, b in eight.items()} == sixteen and peak8 == 2 * peak16
    # by hand, L_r = 131072 / 16 = 8192 tokens, B = 1, d = 4096, 32 heads and 8 K/V heads of 128, bf16 and fp32:
    assert sixteen["block0.attn.qkv.block input"] == 8192 * 4096 * 2  # the checkpointed block input (B, L_r, d)
    assert sixteen["block0.attn.qkv.positions"] == 8192 * 8  # int64, for rotary's backward
    assert sixteen["block0.attn.out.Q"] == 32 * 8192 * 128 * 2  # (B, H, L_r, d_h)
    assert sixteen["block0.attn.out.K"] == sixteen["block0.attn.out.V"] == 8 * 8192 * 128 * 2  # GQA: G heads
    assert sixteen["block0.attn.out.LSE"] == 32 * 8192 * 4  # fp32
    assert not any(".hop" in name for name in sixteen)  # the hops keep nothing
    assert peak8 > 12e9  # 12.8 GB of activations a rank at C = 8


@pytest.mark.slow
def test_a_million_tokens_on_16_ranks_allocates_nothing():
    million, peak, host = llama_3_8b_step(1 << 20, 16)
    L_r = (1 << 20) // 16  # 65,536 tokens a rank: the 128k test's names at 8x the bytes, by hand
    assert million["block31.attn.out.K"] == 8 * L_r * 128 * 2 and million["block31.attn.out.LSE"] == 32 * L_r * 4
    assert million["block31.attn.qkv.block input"] == L_r * 4096 * 2
    assert peak > 50e9 and host < 64e6  # 51.3 GB of activations a rank, accounted, not allocated
