"""A tensor-parallel rank's attention is timed at its L × L work (costs/_tensor_work.py): the time model charges the
rank's H/T heads the scores of every query against every key it sees, as it charges the unsplit block.

Until 2026-11-29 a TP rank's attention region (parallel/tensor's Attention and GQAttention) named its kernel `mode`
where the time model reads `attention` (costs/_kernel_work.py `attention_of`), so no TP step was charged attention at
all: a step of B = 4 sequences of 2,048 tokens took exactly the time of B = 1 of 8,192 (the same B·L), and every TP
row of `zerosim validate` ran fast by the attention's share.

Independent checks: the FLOPs by hand from the shapes (flash attention, causal: the S = QKᵀ and PV products, 2·L²·d_h
multiply-adds a head, half of them under the mask; backward 2.5 times the forward's), the unsplit unit's own through
the unsplit path, and the symptom itself.
"""

import pytest

from zerosim.analysis.costs._kernel_work import unit_work
from zerosim.analysis.costs._tensor_work import tp_unit_work
from zerosim.models import GPT, Llama, MetaGPT, MetaLlama
from zerosim.parallel.tensor import TensorParallel

T = 8


def llama(L):  # Llama 3 70B's attention: d 8192, 64 query heads over 8 key/value heads of 128
    return MetaLlama(Llama(vocab=128256, d_model=8192, n_heads=64, n_layers=1, seq_len=L, d_ff=28672, n_kv_heads=8,
                           head_dim=128, attention="flash"))


def gpt(L):  # GPT-3 175B's attention: d 12,288, 96 heads of 128
    return MetaGPT(GPT(vocab=50304, d_model=12288, n_heads=96, n_layers=1, seq_len=L, attention="flash"))


def attention(model, tp):
    local = TensorParallel(model, tp, sequence_parallel=True).local
    return next(u for u in local.layers if u.name == "block0.attn")


@pytest.mark.parametrize("make, heads, head_dim", [(llama, 64, 128), (gpt, 96, 128)], ids=["llama", "gpt"])
@pytest.mark.parametrize("B, L", [(1, 8192), (4, 2048)])
def test_a_tp_rank_is_charged_its_heads_attention_by_hand(make, heads, head_dim, B, L):
    unit = attention(make(L), T)
    forward = tp_unit_work(unit, B, L, "forward", "compiled", False, T, True)
    backward = tp_unit_work(unit, B, L, "backward", "compiled", False, T, True)
    # by hand: 4·B·H_r·L²·d_h for QKᵀ and PV over every score (2 FLOPs a multiply-add), half of it under the causal
    # mask; the flash backward's five products of that size against the forward's two: 2.5 times
    by_hand = 4 * B * (heads // T) * L * L * head_dim / 2
    assert forward.attention_fwd == by_hand and forward.attention_bwd == 0
    assert backward.attention_bwd == 2.5 * by_hand and backward.attention_fwd == 0


@pytest.mark.parametrize("make", [llama, gpt], ids=["llama", "gpt"])
def test_the_t_ranks_attention_is_the_unsplit_blocks(make):
    """T ranks of H/T heads each do the unsplit attention's work between them (through the unsplit path, which
    reads its own unit)."""
    B, L = 2, 4096
    model = make(L)
    block = model.layers[1].unit  # the first block, whole (its attention and FFN)
    unsplit = unit_work(block, (B, L, model.d_model), "forward", "compiled")
    rank = tp_unit_work(attention(model, T), B, L, "forward", "compiled", False, T, True)
    assert unsplit.attention_fwd > 0 and T * rank.attention_fwd == unsplit.attention_fwd


def test_a_longer_sequence_costs_more_than_as_many_tokens_in_shorter_ones():
    """The symptom: B = 1 × 8,192 tokens and B = 4 × 2,048 have the same B·L, but the long sequence's attention is
    4 times the four short ones' (L² a sequence)."""
    long = tp_unit_work(attention(llama(8192), T), 1, 8192, "forward", "compiled", False, T, True)
    short = tp_unit_work(attention(llama(2048), T), 4, 2048, "forward", "compiled", False, T, True)
    assert long.gemms == short.gemms and long.attention_fwd == 4 * short.attention_fwd > 0
