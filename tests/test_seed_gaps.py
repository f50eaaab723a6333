"""The seed items that were missing, now computed (docs/seeds.md lists where each is live), each against a hand
derivation: seed 001's tree all-reduce (order and time), its recompute table and retention contract, Adam's
signal-to-noise reading, and the second-order optimizers it names (Shampoo / K-FAC) against ZeRO's shards."""

import math

import numpy as np
import pytest

from zerosim.analysis.costs import LINKS, lifetimes, recompute_table, second_order_memory, seed001_p_multiply_adds
from zerosim.analysis.numerics import adam_snr
from zerosim.analysis.timeline import ring_collective_time
from zerosim.collectives import ring_tree_crossover, tree_all_reduce, tree_all_reduce_time
from zerosim.models import GPT, MLP
from zerosim.models.gpt import MetaGPT


def test_the_tree_adds_children_into_their_parent_in_order_and_every_rank_gets_the_roots_sum():
    # 5 ranks: 0 <- (1, 2), 1 <- (3, 4). fp16 spacing is 2 at 2048: node 1 = (1 + x3) + x4, node 0 = (x0 + n1) + x2
    xs = [np.float16([2048.0]), np.float16([1.0]), np.float16([1.0]), np.float16([1.0]), np.float16([1.0])]
    r16 = lambda v: float(np.float16(v))  # noqa: E731  (one rounding to fp16 per add: every value here is exact)
    node1 = r16(r16(1.0 + 1.0) + 1.0)  # 3
    root = r16(r16(2048.0 + node1) + 1.0)  # 2051 -> 2052 (tie to even), + 1 = 2053 -> 2052
    out = tree_all_reduce(xs)
    assert [float(o[0]) for o in out] == [root] * 5 == [2052.0] * 5
    assert all(o.dtype == np.float16 for o in out)
    ints = [np.float32(np.arange(6) * (r + 1)) for r in range(7)]  # exact sums: the tree's order changes nothing
    assert np.array_equal(tree_all_reduce(ints)[3], np.arange(6) * 28.0)


def test_the_trees_time_and_where_it_beats_the_ring():
    ib = LINKS["ib_ndr"]
    # 1024 ranks: 10 levels up and down; a plain binary tree's inner node takes in 2Ψ and sends 2Ψ
    # and the call's base once, NCCL 2.30.7's Simple tree and ring alike (tuning.cc: baseLatencies 8.4 µs)
    assert ib.base == 8.4e-6
    assert tree_all_reduce_time(1e6, 1024, ib) == pytest.approx(ib.base + 2 * 10 * ib.alpha + 4e6 / ib.bandwidth,
                                                                rel=1e-15)
    assert tree_all_reduce_time(1e9, 1, ib) == 0.0
    for n in (8, 64, 1024):
        star = ring_tree_crossover(n, ib)
        assert tree_all_reduce_time(star, n, ib) == pytest.approx(ring_collective_time("all_reduce", star, n, ib),
                                                                  rel=1e-12)
        assert tree_all_reduce_time(star / 2, n, ib) < ring_collective_time("all_reduce", star / 2, n, ib)
        assert tree_all_reduce_time(star * 2, n, ib) > ring_collective_time("all_reduce", star * 2, n, ib)


def test_seed_001s_recompute_table_from_the_ledger_and_the_layers_flop_counts():
    B, L, d, H = 2, 64, 32, 4
    dh, rows = d // H, B * L
    table = {r.activation: r for r in recompute_table(B, L, d, H)}
    p = table["attention probabilities P"]
    assert p.stored == B * H * L * L * 2  # fp16 P: B·H·L² elements
    assert p.flops == 2 * B * H * L * L * dh + 6 * B * H * L * L  # S = QKᵀ (2·L²·d_h per head) + the softmax's 6
    assert table["FFN pre-activation x1"].flops == 2 * rows * d * 4 * d + rows * 4 * d  # X·W1ᵀ + b1
    assert table["attention Q, K, V"].stored == 3 * rows * d * 2
    assert table["FFN post-activation x2"].flops == 8 * rows * 4 * d  # GELU's tanh form: 8 FLOPs an element
    assert seed001_p_multiply_adds() == 4 * 32 * 2048**2 * 128 == 68_719_476_736  # seed 001's "≈ 70 GFLOP"


def test_the_retention_contract_first_in_last_out():
    life = lifetimes(MetaGPT(GPT(11, 16, 4, 4, 8)), 2, 8)
    inputs = [life[f"block{i}.block input"] for i in range(4)]
    assert all(a[0] < b[0] and a[1] > b[1] for a, b in zip(inputs, inputs[1:]))  # born in order, freed in reverse
    assert life["embed.input"] == (0.0, 1.0) and all(0 <= b < f <= 1 for b, f in life.values())


def test_adams_ratio_goes_to_snr_over_root_one_plus_snr_squared():
    r = adam_snr(snrs=(0.1, 1.0, 10.0), steps=3000, repeats=2048, seed=1)
    limit = r.snr / np.sqrt(1 + r.snr**2)
    assert np.array_equal(r.limit, limit)
    stderr = r.spread / math.sqrt(2048)
    assert np.all(np.abs(r.ratio - limit) < 5 * stderr + 2e-3), (r.ratio, limit)
    # one coordinate: m̂ is an EMA of ~19 draws, so its noise is σ·√((1 − β₁)/(1 + β₁)) over √v̂ ≈ σ
    assert r.spread[0] == pytest.approx(math.sqrt(0.1 / 1.9), rel=0.1)


def test_shampoos_factors_and_the_matrices_zeros_shards_split():
    mlp = MLP([4, 3, 2])  # fc0 w (3, 4) b (3,), fc1 w (2, 3) b (2,): P = 23
    r = second_order_memory(mlp, 2)
    assert (r.matrices, r.params, r.factors, r.adam) == (2, 23, 4 * (9 + 16) + 4 * (4 + 9), 8 * 23)
    assert r.largest[1:] == (3, 4, 100) and r.split == 0  # s = 12: w0 is [0, 12), w1 [15, 21) in shard 1
    assert second_order_memory(mlp, 3).split == 2  # s = 8: w0 [0, 12) and w1 [15, 21) both cross a boundary


def test_adams_step_does_not_change_when_every_gradient_is_scaled():
    """Seed 001: Adam's normalisation "is invariant to the overall scale of the loss" (exactly, with ε = 0: m̂ and √v̂
    scale alike; a power of two keeps every rounding)."""
    from zerosim.optim import Adam

    rng = np.random.default_rng(3)
    grads = [rng.standard_normal(64).astype(np.float32) for _ in range(5)]
    steps = []
    for scale in (1.0, 2.0**10):
        w = np.zeros(64, np.float32)
        state = {"m": np.zeros_like(w), "v": np.zeros_like(w)}
        for t, g in enumerate(grads, 1):
            Adam(lr=1e-2, eps=0.0).step(w, g * np.float32(scale), state, t)
        steps.append(w)
    assert np.array_equal(steps[0], steps[1])
