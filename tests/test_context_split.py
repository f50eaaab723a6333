"""How context parallelism cuts a sequence and schedules the ring, against the frameworks' own tables (issue 60):
the zigzag split is torch 2.13's head-tail load balancer and Transformer Engine's chunk assignment, the contiguous
split torch's DTensor Shard; each hop's block is Transformer Engine 2.18's section (diagonal, lower-triangle,
upper-triangle) or torch's causal behaviour (IS_CAUSAL, NOT_IS_CAUSAL, SKIP); backward's first writes are TE's copy_
branches. Lengths that do not split, and models the frameworks refuse, are refused with a clear error."""

import numpy as np
import pytest

from zerosim import Cluster, ZeroEngine, get_optimizer
from zerosim.models import GPT, Llama
from zerosim.parallel import ParallelDims
from zerosim.parallel.context import Block, ContextParallel, positions, ring_block, shard, unshard
from zerosim.parallel.tensor import TensorParallel

# (L, C) -> the token order of the ranks' shards, rank 0's first: what torch 2.13's
# _HeadTailLoadBalancer(L, C)._generate_indices() returns (run in the parity venv; _load_balancer.py)
HEAD_TAIL = {
    (8, 2): [0, 1, 6, 7, 2, 3, 4, 5],  # chunks of 2: rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2
    (16, 4): [0, 1, 14, 15, 2, 3, 12, 13, 4, 5, 10, 11, 6, 7, 8, 9],  # rank r: chunks r and 7 − r
    (8, 4): [0, 7, 1, 6, 2, 5, 3, 4],  # chunks of one token: rank r holds tokens r and 7 − r
}


@pytest.mark.parametrize("L, C", list(HEAD_TAIL))
def test_zigzag_is_torchs_head_tail_order(L, C):
    assert np.concatenate([positions(L, "zigzag", C, p) for p in range(C)]).tolist() == HEAD_TAIL[(L, C)]


def test_zigzag_holds_transformer_engines_chunks():
    """TE 2.18 `get_seq_chunk_ids_for_reordering_after_attn(cp_size)`: chunk_ids[2r] = r, chunk_ids[2r + 1] = 2·cp −
    r − 1 — for cp = 4, [0, 7, 1, 6, 2, 5, 3, 4], written out by hand from that loop."""
    te = [0, 7, 1, 6, 2, 5, 3, 4]
    ours = [int(pos[0]) // 3 for p in range(4) for pos in np.split(positions(24, "zigzag", 4, p), 2)]
    assert ours == te


def test_contiguous_is_an_even_cut_and_shards_go_back_whole():
    assert [positions(12, "contiguous", 3, p).tolist() for p in range(3)] == [[0, 1, 2, 3], [4, 5, 6, 7],
                                                                              [8, 9, 10, 11]]
    x = np.arange(2 * 12).reshape(2, 12)
    for split in ("zigzag", "contiguous"):
        assert np.array_equal(unshard([shard(x, split, 3, p) for p in range(3)], split), x)


# Transformer Engine 2.18 AttnFuncWithCPAndKVP2P.forward, causal, cp = 4: step i on rank r is "diagonal" if i == 0,
# "lower-triangle" if i <= rank (Q both halves x K/V first half), else "upper-triangle" (Q second half x K/V both)
D, LO, UP = Block((0, 1), (0, 1), True), Block((0, 1), (0,), False), Block((1,), (0, 1), False)
TE_SECTIONS = [
    [D, UP, UP, UP],  # rank 0: every other rank's K/V is later in its first chunk's future
    [D, LO, UP, UP],  # rank 1: step 1 holds rank 0's (before it), steps 2, 3 ranks 3, 2's (after)
    [D, LO, LO, UP],  # rank 2
    [D, LO, LO, LO],  # rank 3: every other rank's first chunk is before both of its own
]
# torch 2.13 _is_causal_behavior(rank, 4, i, True) with _cp_options.enable_load_balance = False (run in the parity
# venv): IS_CAUSAL at i = 0, NOT_IS_CAUSAL where the source rank (rank − i) mod 4 < rank, SKIP otherwise
C, F = Block((0,), (0,), True), Block((0,), (0,), False)
TORCH_BEHAVIOUR = [
    [C, None, None, None],  # rank 0: IS_CAUSAL, SKIP, SKIP, SKIP
    [C, F, None, None],  # rank 1: IS_CAUSAL, NOT_IS_CAUSAL, SKIP, SKIP
    [C, F, F, None],  # rank 2
    [C, F, F, F],  # rank 3
]


def _forward_only(block):
    return None if block is None else Block(block.q, block.k, block.causal)


@pytest.mark.parametrize("split, table", [("zigzag", TE_SECTIONS), ("contiguous", TORCH_BEHAVIOUR)])
def test_each_hops_block_is_the_frameworks_section(split, table):
    assert [[_forward_only(ring_block(split, True, 4, r, i)) for i in range(4)] for r in range(4)] == table


def test_without_the_mask_every_hop_is_all_of_q_and_kv():
    """TE: section "all" when not causal; torch: NOT_IS_CAUSAL."""
    assert {_forward_only(ring_block("zigzag", False, 4, r, i)) for r in range(4) for i in range(4)} == {
        Block((0, 1), (0, 1), False)}


# Backward, cp = 2, causal zigzag (TE's backward: step i handles K/V of rank (r + 1 + i) mod 2, i.e. forward hop
# j = 1 − i; forward hops from 1 down to 0). Which halves each step copies in (copy_) rather than adds (add_):
FIRST = {  # (rank, hop j) -> (dQ halves copied, dK/dV halves copied)
    (0, 1): ((1,), (0, 1)),  # rank 0, step 0, "upper": dq[:, 1].copy_(dq_); i == 0: dk.copy_(dk_)
    (0, 0): ((0,), (1,)),  # rank 0, step 1, diagonal: i == cp-rank-1 -> dq[:, 0].copy_, dq[:, 1].add_; rank == 0:
    #                       dk[:, 0].add_ (rank 1 wrote it), dk[:, 1].copy_
    (1, 1): ((0, 1), (0,)),  # rank 1, step 0, "lower" with rank == cp-1: dq.copy_(dq_); dk[:, 0].copy_
    (1, 0): ((), ()),  # rank 1, step 1, diagonal: dq.add_ (both written), dk.add_ (rank 0 wrote both halves)
}


@pytest.mark.parametrize("rank, hop", list(FIRST))
def test_backward_copies_where_transformer_engine_copies(rank, hop):
    block = ring_block("zigzag", True, 2, rank, hop)
    assert (block.first_dq, block.first_dkv) == FIRST[(rank, hop)]


# -- what does not split, and what the frameworks refuse -----------------------------------------------------------
def flash_gpt(**kw):
    return GPT(vocab=16, d_model=8, n_heads=2, n_layers=1, seq_len=16, **({"attention": "flash"} | kw))


@pytest.mark.bad_input("engine steps", unchanged=True)
@pytest.mark.parametrize("split, C, L, rule", [("zigzag", 2, 6, "2 · cp = 4"), ("zigzag", 4, 12, "2 · cp = 8"),
                                                ("contiguous", 4, 6, "cp = 4"), ("contiguous", 3, 7, "cp = 3")])
def test_a_length_that_does_not_split_is_refused_before_anything_runs(split, C, L, rule):
    cp = ContextParallel(flash_gpt(), cp=C, split=split)
    engine = ZeroEngine(cp.model, Cluster(C), 1, get_optimizer("adam"), "bf16-mixed", parallelisms=(cp,))
    before, logged = engine.full_master().copy(), len(engine.cluster.trace.log)
    with pytest.raises(ValueError, match=rf"{L} tokens does not split {split} over cp = {C} ranks: its length must be "
                                         rf"a multiple of {rule}"):
        engine.step(cp.batches(engine.dims, [(np.zeros((1, L), int),) * 2]))
    assert np.array_equal(engine.full_master(), before) and engine.iteration == 0
    assert len(engine.cluster.trace.log) == logged  # nothing ran: not a step boundary


@pytest.mark.bad_input("engine steps", unchanged=True)
@pytest.mark.parametrize("split, L, rule", [("zigzag", 12, "2 · cp · tp = 8"), ("contiguous", 6, "1 · cp · tp = 4")])
def test_beside_sequence_parallelism_each_ranks_tokens_must_split_over_tp_too(split, L, rule):
    """With TP's sequence parallelism each CP rank's L / C tokens are cut again over its TP group: torchtitan's
    seq_len_divisor = tp · cp · 2 (zigzag). Refused before anything runs, as a length CP alone cannot split."""
    full = Llama(vocab=16, d_model=8, n_heads=2, n_layers=1, seq_len=16, attention="flash")
    cp = ContextParallel(full, cp=2, split=split, tensor=TensorParallel(full, tp=2, sequence_parallel=True))
    engine = ZeroEngine(cp.model, Cluster(4), 1, get_optimizer("adam"), "bf16-mixed", parallelisms=cp.parallelisms)
    before, logged = cp.tensor.whole_params(engine.ctx).copy(), len(engine.cluster.trace.log)
    with pytest.raises(ValueError, match=rf"{L} tokens does not split {split} over cp = 2 ranks: its length must be "
                                         rf"a multiple of {rule}"):
        engine.step(cp.batches(engine.dims, [(np.zeros((1, L), int),) * 2]))
    assert np.array_equal(cp.tensor.whole_params(engine.ctx), before) and engine.iteration == 0
    assert len(engine.cluster.trace.log) == logged


@pytest.mark.bad_input("engine arguments")
@pytest.mark.parametrize("make, error, match", [
    (lambda: ContextParallel(flash_gpt(attention="standard"), cp=2), ValueError, "attention='flash'"),
    (lambda: ContextParallel(flash_gpt(), cp=0), ValueError, "cp must be a positive integer"),
    (lambda: ContextParallel(flash_gpt(), cp=2, style="p2p"), ValueError, r"style must be one of \('ring', "),
    (lambda: ContextParallel(flash_gpt(), cp=2, split="round-robin"), ValueError, r"split must be one of"),
    (lambda: ContextParallel(flash_gpt(checkpoint="op-sac"), cp=2), ValueError, "op-sac"),
    (lambda: ContextParallel(flash_gpt(), cp=2, style="torch", causal=False), ValueError,
     "style 'torch' with split 'zigzag' needs causal attention"),  # torch: "Load balancing requires is_causal=True"
], ids=["standard attention", "cp 0", "style", "split", "op-sac", "torch's balancing unmasked"])
def test_what_the_frameworks_refuse_is_refused(make, error, match):
    with pytest.raises(error, match=match):
        make()


@pytest.mark.bad_input("engine arguments")
def test_a_cp_degree_that_does_not_divide_the_world_is_refused():
    cp = ContextParallel(flash_gpt(), cp=3)
    with pytest.raises(ValueError, match="context parallelism of degree 3 beside tp = 1 does not divide the 4 "
                                         "ranks: cp · tp must divide"):
        ZeroEngine(cp.model, Cluster(4), 1, get_optimizer("adam"), "bf16-mixed", parallelisms=(cp,))


def test_the_cp_groups_and_the_fsdp_mesh_are_torchtitans():
    """N = 8, cp 2, tp 2: CP groups are pairs two apart (TP innermost), "fsdp" folds dp_shard × cp (torchtitan's
    build_mesh), and the flat stages shard over it."""
    dims = ParallelDims(8, cp=2, tp=2)
    assert dims.groups("cp").members == ((0, 2), (1, 3), (4, 6), (5, 7))
    assert dims.groups("fsdp").members == ((0, 2, 4, 6), (1, 3, 5, 7))
    cp = ContextParallel(flash_gpt(), cp=2)
    engine = ZeroEngine(cp.model, Cluster(4), 3, get_optimizer("adam"), "bf16-mixed", parallelisms=(cp,))
    assert engine.groups.shard.members == ((0, 1, 2, 3),)
