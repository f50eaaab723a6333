"""What tensor parallelism does to the arithmetic (issue 38, must-show 2), against float64:

    a row-parallel GEMM's partial sums, each rounded to fp16 on its rank, all-reduced in fp16 on the ring, where the
    unsplit GEMM keeps one fp32 accumulator and rounds once; and sequence parallelism's reduce-scatter along the
    sequence: which rank finishes which token's sum.

Hand tables (a comment per row), the implementation's bits against them, and a derived bound checked on drawn data:
with K/T products per rank summed in fp32 (u32) and rounded to the wire format (u), then T − 1 ring additions in it,

    |ŝ − y| ≤ Σ_r (γ_{K/T}(u32)·S_r + u·|p̃_r|) + γ_{T−1}(u)·Σ_r |p̂_r|

(S_r = Σ_{k ∈ r} |x_k W_k|, p̃_r the rank's fp32 sum, p̂_r it rounded; Higham, Accuracy and Stability, Lemma 3.1 and
eq. 4.3). Then the whole model in float64: a TP model is the unsplit model, its loss and gradient equal to within
float64's reassociation of the sums TP splits.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zerosim import Cluster
from zerosim.analysis.numerics import gamma
from zerosim.models import GPT, Llama, loss_and_grad
from zerosim.models.layers import tokens_linear_forward
from zerosim.parallel import ParallelDims
from zerosim.parallel.tensor import TensorParallel, padded_vocab, run_side, whole_flat
from zerosim.parallel.tensor._plan import sequence_parallel_windows
from zerosim.precision import cast, get_format
from zerosim.reference import TensorReference

U32 = 2.0**-24

# A 2-way row-parallel W (2, 4) on one token x = [1, 1, 1, 1], fp16: rank 0 holds W's columns 0-1, rank 1 columns 2-3.
ROW_PARALLEL = [  # W's row, rank 0's partial, rank 1's, the ring's fp16 sum, the unsplit GEMM, float64
    # 1024.5 is halfway between fp16's 1024 and 1025 (spacing 1 there): rank 0 rounds to even, 1024, and the ring's
    # 1024 + 0.5 is halfway again -> 1024; one fp32 accumulator over all four products holds 1025, which fp16 has
    ([1024, 0.5, 0.25, 0.25], 1024.0, 0.5, 1024.0, 1025.0, 1025.0),
    # every partial and every sum is a short binary fraction: TP, the unsplit GEMM and float64 agree exactly
    ([0.5, 0.25, -0.125, 2], 0.75, 1.875, 2.625, 2.625, 2.625),
    # cancellation: rank 0's 2049 rounds to 2048 (spacing 2 above 2048), rank 1's -2047 is exact; their sum 1 is
    # half the true 2, which the unsplit GEMM's fp32 accumulator keeps: TP's partials lose what a GEMM would not
    ([2048, 1, -2048, 1], 2048.0, -2047.0, 1.0, 2.0, 2.0),
]

# Sequence parallelism's reduce-scatter over T = 2 of (B, L, d) = (2, 2, 1) partial sums, fp16: rank r keeps sequence
# position r of *both* sequences (Megatron's [s, b, h] order), summed from position r + 1 round to r.
SP_PARTIALS = (np.array([[[1024.0], [3.0]], [[0.5], [2048.0]]]),  # rank 0's partials, (B, L, d)
               np.array([[[0.5], [-1.0]], [[0.25], [0.25]]]))  # rank 1's
SP_KEPT = [  # what each rank keeps, (B, L/T, d), against float64
    # rank 0: position 0 of sequences 0 and 1: 1024 + 0.5 = 1024.5, halfway -> 1024 (even); 0.5 + 0.25 exact
    (np.array([[[1024.0]], [[0.75]]]), np.array([[[1024.5]], [[0.75]]])),
    # rank 1: position 1 of both: 3 + (-1) = 2 exact; 2048 + 0.25 = 2048.25 rounds to 2048 (spacing 2)
    (np.array([[[2.0]], [[2048.0]]]), np.array([[[2.0]], [[2048.25]]])),
]


def tp_cluster(T: int, dp: int = 1):
    cluster = Cluster(T * dp, gpus_per_node=T)
    return cluster, ParallelDims(T * dp, tp=T).groups("tp")


def row_parallel(x, W, T, fmt):
    """Each rank's partial x W_rᵀ (the units' GEMM: fp32 sums, one rounding), then the ring all-reduce over the TP
    group: (the summed (B, D) on every rank, the partials)."""
    cluster, group = tp_cluster(T)
    k = W.shape[1] // T
    partials = [tokens_linear_forward(x[:, r * k:(r + 1) * k], W[:, r * k:(r + 1) * k], None, fmt) for r in range(T)]
    summed, _ = run_side("all-reduce", cluster, group, [p[None] for p in partials], "test")
    return summed[0][0], partials


def test_a_row_parallel_matmul_in_fp16_by_hand():
    f = get_format("fp16")
    x = cast(np.ones((1, 4)), f)
    W = cast(np.array([row for row, *_ in ROW_PARALLEL], np.float64), f)
    summed, (p0, p1) = row_parallel(x, W, 2, f)
    unsplit = tokens_linear_forward(x, W, None, f)
    for i, (_, want0, want1, ring, one_gemm, exact) in enumerate(ROW_PARALLEL):
        assert (float(p0[0, i]), float(p1[0, i])) == (want0, want1)
        assert float(summed[0, i]) == ring and float(unsplit[0, i]) == one_gemm
        assert float(x[0].astype(np.float64) @ W[i].astype(np.float64)) == exact
        bound = (gamma(2, U32) * np.abs(W[i, :2].astype(np.float64)).sum() + f.unit_roundoff * abs(want0)
                 + gamma(2, U32) * np.abs(W[i, 2:].astype(np.float64)).sum() + f.unit_roundoff * abs(want1)
                 + gamma(1, f.unit_roundoff) * (abs(want0) + abs(want1)))
        assert abs(ring - exact) <= bound  # the first row's error, 1, is within 0.1 % of its bound


def test_sequence_parallel_reduce_scatter_by_hand():
    f = get_format("fp16")
    cluster, group = tp_cluster(2)
    kept, _ = run_side("reduce-scatter", cluster, group, [cast(p, f) for p in SP_PARTIALS], "test")
    for got, (want, exact) in zip(kept, SP_KEPT):
        assert np.array_equal(got.astype(np.float64), want)
        assert np.all(np.abs(got.astype(np.float64) - exact) <= f.unit_roundoff * np.abs(exact))
    # a (B, L, d)-ordered reduce-scatter would hand rank 0 sequence 0 instead: both of its positions
    assert not np.array_equal(kept[0].astype(np.float64), SP_PARTIALS[0][:1] + SP_PARTIALS[1][:1])


@settings(max_examples=40)
@given(T=st.sampled_from([2, 4]), fmt=st.sampled_from(["fp16", "bf16"]), rows=st.integers(1, 3),
       cols=st.integers(1, 4), per_rank=st.integers(1, 8), seed=st.integers(0, 2**16))
def test_the_all_reduced_partials_stay_within_the_derived_bound(T, fmt, rows, cols, per_rank, seed):
    f = get_format(fmt)
    rng = np.random.default_rng(seed)
    K = per_rank * T
    x = cast(rng.standard_normal((rows, K)) * 4, f)
    W = cast(rng.standard_normal((cols, K)) * 4, f)
    summed, partials = row_parallel(x, W, T, f)
    x64, W64 = x.astype(np.float64), W.astype(np.float64)
    exact = x64 @ W64.T
    u, k = f.unit_roundoff, per_rank
    bound = gamma(T - 1, u) * sum(np.abs(p.astype(np.float64)) for p in partials)
    for r in range(T):
        part = slice(r * k, (r + 1) * k)
        S_r = np.abs(x64[:, part]) @ np.abs(W64[:, part]).T
        bound = bound + gamma(k, U32) * S_r + u * (1 + gamma(k, U32)) * np.abs(x64[:, part] @ W64[:, part].T) \
            + u * gamma(k, U32) * S_r
    assert np.all(np.abs(summed.astype(np.float64) - exact) <= bound)


# -- the whole model in float64 ---------------------------------------------------------------------------------------

def reassociation_bound(full, g64: np.ndarray, B: int, L: int) -> np.ndarray:
    """What reassociating sums may move a float64 gradient by, to first order: every output of the model depends on a
    chain of at most `depth` sums (each unit's forward and backward, the loss), each of at most `width` terms (the
    widest: d, F, V or the B·L tokens a weight gradient sums), and each reordered sum moves its result by at most
    γ_width(u64) times the sum of its terms' magnitudes; the gradients' largest magnitude stands for that sum (the
    terms here are of one sign-mixed scale). |Δ| ≤ 2·depth·γ_width(u64)·(|g| + max|g|)."""
    depth = 2 * len(full.layers) + 2
    width = max(full.d_model, getattr(full, "d_ff", 4 * full.d_model), full.vocab, B * L)
    return 2 * depth * gamma(width, 2.0**-53) * (np.abs(g64) + np.abs(g64).max())


@pytest.mark.parametrize("family", ["gpt", "llama"])
@pytest.mark.parametrize("T, sp", [(2, False), (2, True), (4, False), (4, True)])
def test_in_float64_a_tp_model_is_the_unsplit_model(family, T, sp):
    if family == "gpt":
        full = GPT(vocab=padded_vocab(21, T, 1), d_model=4 * T, n_heads=T, n_layers=2, seq_len=8)
    else:
        full = Llama(vocab=padded_vocab(21, T, 1), d_model=8, n_heads=2 * T, n_kv_heads=T, head_dim=4, n_layers=2,
                     seq_len=8, d_ff=3 * T)
    rng = np.random.default_rng(7)
    w = full.init_params(rng) * 4  # weights of a model some way into training: larger than the init's 0.02
    x, t = rng.integers(0, full.vocab, (2, 8)), rng.integers(0, full.vocab, (2, 8))
    loss64, g64 = loss_and_grad(full, w, x, t, "fp64")
    tp = TensorParallel(full, tp=T, sequence_parallel=sp, params=w)
    oracle = TensorReference(tp, __import__("zerosim").get_optimizer("sgd", lr=0.0), "fp64", T, 0)
    made = oracle.gradients(x, t)
    grads = [g[:tp.local.num_params].copy() for _, g in made]
    if sp:  # the norms' and biases' gradients are each rank's L/T tokens' share: their sum (the SP all-reduce)
        for lo, hi in sequence_parallel_windows(tp.local):
            total = sum(g[lo:hi] for g in grads)
            for g in grads:
                g[lo:hi] = total
    tp_loss, tp_grad = made[0][0], whole_flat(tp.local, grads, full)
    assert all(loss == tp_loss for loss, _ in made)  # every TP rank computes the one loss
    assert abs(tp_loss - loss64) <= 2 * len(full.layers) * gamma(full.vocab, 2.0**-53) * abs(loss64)
    assert np.all(np.abs(tp_grad - g64) <= reassociation_bound(full, g64, 2, 8))
