"""Ring collectives against things you can see: the naive twins, an independent ring-order sum written
here with NumPy's own dtype arithmetic, exact rational sums, and a hand-worked fp16 table row.

Letters: N ranks, L elements per rank, s = ceil(L / N) elements per (padded) chunk.

NOTE on the independent reference: NumPy adds float16 (and ml_dtypes adds bfloat16) by widening to
float32, adding, and rounding back. That is one correct rounding of the exact sum, because float32's
24 bits are at least 2p + 2 for p = 11 (fp16) and p = 8 (bf16), the condition under which double
rounding of a sum is innocuous (Figueroa, 1995). So `a + b` on 16-bit arrays is the hop NCCL does.
"""

from __future__ import annotations

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zerosim import Cluster, all_gather, all_reduce, broadcast, cast, reduce_scatter
from zerosim.collectives import naive_all_gather, naive_all_reduce, naive_reduce, naive_reduce_scatter
from zerosim.precision.arithmetic import _operand_cache

DTYPES = {
    "fp32": np.dtype(np.float32),
    "fp64": np.dtype(np.float64),
    "fp16": np.dtype(np.float16),
    "bf16": np.dtype(ml_dtypes.bfloat16),
}
UNIT_ROUNDOFF = {
    "fp64": Fraction(1, 2**53),
    "fp32": Fraction(1, 2**24),
    "bf16": Fraction(1, 2**8),
    "fp16": Fraction(1, 2**11),
}
UINT = {2: np.uint16, 4: np.uint32, 8: np.uint64}
OPS = ["sum", "max", "avg", "avg_predivide", "avg_premul"]
EXAMPLES = max(60, settings.default.max_examples)


# -- helpers -----------------------------------------------------------------------------------------


def make_inputs(seed: int, n: int, length: int, name: str) -> list:
    """One (L,) array per rank: normal values over six decades (so adds round), some exact zeros.
    |x| stays below ~500 so that fp16 sums of up to 8 terms cannot overflow."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, length)) * 10.0 ** rng.integers(-3, 3, (n, length))
    x[rng.random((n, length)) < 0.1] = 0.0
    return [np.ascontiguousarray(x[i]).astype(DTYPES[name]) for i in range(n)]


def real_bounds(length: int, n: int) -> list:
    """[start, stop) of each rank's real elements: chunks of s = ceil(L/N), padding only at the end."""
    s = -(-length // n)
    return [(min(c * s, length), min((c + 1) * s, length)) for c in range(n)]


def count_bounds(counts) -> list:
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(int)
    return [(int(offsets[c]), int(offsets[c + 1])) for c in range(len(counts))]


def ring_order(xs: list, bounds: list, combine=np.add) -> list:
    """Chunk c = ((x[c+1] + x[c+2]) + ...) + x[c], each + in the arrays' own dtype (one rounding)."""
    n, out = len(xs), []
    for c, (start, stop) in enumerate(bounds):
        acc = xs[(c + 1) % n][start:stop].copy()
        for k in range(2, n + 1):
            acc = combine(acc, xs[(c + k) % n][start:stop])
        assert acc.dtype == xs[0].dtype  # the reference never widens by accident
        out.append(acc)
    return out


def assert_same_bits(got, want) -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    u = UINT[got.dtype.itemsize]
    both_nan = np.isnan(got.astype(np.float64)) & np.isnan(want.astype(np.float64))
    same = (got.view(u) == want.view(u)) | both_nan
    assert same.all(), (
        f"{(~same).sum()} elements differ; first at {np.flatnonzero(~same)[:5]}: {got[~same][:5]} vs {want[~same][:5]}"
    )


def assert_lists_same_bits(got: list, want: list) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert_same_bits(g, w)


cases = st.tuples(st.integers(1, 8), st.integers(0, 70), st.sampled_from(list(DTYPES)), st.integers(0, 2**32 - 1))


# -- the ring's own consistency and its twins -----------------------------------------------------------


@settings(max_examples=EXAMPLES)
@given(cases, st.sampled_from(OPS))
def test_all_reduce_is_reduce_scatter_then_all_gather(case, op):
    n, length, name, seed = case
    xs = make_inputs(seed, n, length, name)
    whole = all_reduce(Cluster(n), xs, op=op)
    c = Cluster(n)
    gathered = all_gather(c, reduce_scatter(c, xs, op=op))
    assert_lists_same_bits(whole, gathered)


@settings(max_examples=EXAMPLES)
@given(cases, st.sampled_from(OPS), st.sampled_from([None, "bf16", "fp32"]))
def test_ring_equals_naive_twin_in_ring_order(case, op, wire):
    n, length, name, seed = case
    xs = make_inputs(seed, n, length, name)
    before = [x.copy() for x in xs]
    rs = reduce_scatter(Cluster(n), xs, op=op, wire=wire)
    ar = all_reduce(Cluster(n), xs, op=op, wire=wire)
    assert_lists_same_bits(rs, naive_reduce_scatter(xs, op=op, wire=wire, order="ring"))
    assert_lists_same_bits(ar, naive_all_reduce(xs, op=op, wire=wire, order="ring"))
    assert_lists_same_bits(xs, before)  # the ring never writes into its inputs
    for i in range(n):  # every rank owns its result: no two outputs (or an output and an input) alias
        for j in range(n):
            assert not np.shares_memory(ar[i], xs[j])
            assert i == j or not np.shares_memory(ar[i], ar[j])


@settings(max_examples=EXAMPLES)
@given(cases)
def test_ring_sum_equals_independent_ring_order_sum(case):
    n, length, name, seed = case
    xs = make_inputs(seed, n, length, name)
    want = ring_order(xs, real_bounds(length, n))
    assert_lists_same_bits(reduce_scatter(Cluster(n), xs), want)
    full = np.concatenate(want)
    assert_lists_same_bits(all_reduce(Cluster(n), xs), [full] * n)


# Hypothesis's derandomized examples favour small cases; this sweep covers every world size with
# lengths around the awkward boundaries (empty, shorter than N, N +- 1, not divisible, the largest).
SWEEP = [(n, length) for n in range(1, 9) for length in sorted({0, 1, max(n - 1, 0), n + 1, 2 * n + 3, 70})]


@pytest.mark.slow
@pytest.mark.parametrize("name", list(DTYPES))
def test_sweep_every_world_size_against_references(name):
    for n, length in SWEEP:
        xs = make_inputs(1000 * n + length, n, length, name)
        want = ring_order(xs, real_bounds(length, n))
        assert_lists_same_bits(reduce_scatter(Cluster(n), xs), want)
        assert_lists_same_bits(all_reduce(Cluster(n), xs), [np.concatenate(want)] * n)
        for op in OPS:
            assert_lists_same_bits(reduce_scatter(Cluster(n), xs, op=op), naive_reduce_scatter(xs, op=op))
            assert_lists_same_bits(all_reduce(Cluster(n), xs, op=op), naive_all_reduce(xs, op=op))


def gamma(k: int, u: Fraction) -> Fraction:
    """Higham's gamma_k = k u / (1 - k u): k roundings of relative error <= u compound to at most this."""
    return k * u / (1 - k * u)


@settings(max_examples=EXAMPLES)
@given(
    st.integers(1, 8),
    st.integers(0, 70),
    st.sampled_from(["fp32", "fp64"]),
    st.integers(0, 2**32 - 1),
    st.sampled_from([None, "bf16"]),
)
def test_ring_sum_is_within_recursive_summation_bound_of_exact_sum(n, length, name, seed, wire):
    """|ring - exact| <= gamma_{N-1} * sum|x_i|: each chunk is a recursive sum of N terms, N-1 adds,
    each rounding with relative error <= u (additions never lose anything to underflow).

    With wire="bf16" the inputs are first rounded to bf16: x_i(1 + d_i) + e_i with |d_i| <= u and
    |e_i| <= eta = half bf16's smallest subnormal. Carrying that through, the bound becomes
    gamma_N * sum|x_i| + 2 N eta (using (1 + u)(1 + gamma_{N-1}) <= 1 + gamma_N, and gamma_{N-1} < 1).

    The yardstick is the exact rational sum, not np.sum in float64: for fp64 inputs that sum is itself
    rounded, and even 8 fp32 terms spread over many binades can need more than float64's 53 bits.
    """
    xs = make_inputs(seed, n, length, name)
    out = np.concatenate(reduce_scatter(Cluster(n), xs, wire=wire))
    if wire is None:
        u, bound_factor, eta = UNIT_ROUNDOFF[name], gamma(n - 1, UNIT_ROUNDOFF[name]), Fraction(0)
    else:
        u = UNIT_ROUNDOFF[wire]
        bound_factor, eta = gamma(n, u), Fraction(2) ** -134
    assert out.dtype == DTYPES[wire or name] and out.shape == (length,)
    for j in range(length):
        terms = [Fraction(float(x[j])) for x in xs]
        exact, size = sum(terms), sum(abs(t) for t in terms)
        err = abs(Fraction(float(out[j])) - exact)
        assert err <= bound_factor * size + 2 * n * eta, (j, float(err), float(bound_factor * size))
    if n == 1 and wire is None:  # gamma_0 = 0: one rank's "sum" is its input, exactly
        assert_same_bits(out, xs[0])


# -- padding and uneven sizes ---------------------------------------------------------------------------


@settings(max_examples=EXAMPLES)
@given(cases)
def test_padding_never_leaks(case):
    n, length, name, seed = case
    xs = [-np.abs(x) - DTYPES[name].type(1) for x in make_inputs(seed, n, length, name)]  # every value < 0
    rs = reduce_scatter(Cluster(n), xs, op="max")
    s = -(-length // n)
    sizes = [max(0, min(s, length - r * s)) for r in range(n)]  # real elements in chunk r, by hand
    assert [len(r) for r in rs] == sizes
    if length < n:  # fewer elements than ranks: the last N - L ranks hold nothing
        assert sizes == [1] * length + [0] * (n - length)
    merged = np.concatenate(rs).astype(np.float64)
    assert (merged < 0).all()  # a zero of padding would win every max
    for out in all_reduce(Cluster(n), xs, op="max") + all_gather(Cluster(n), rs):
        assert out.shape == (length,)
        assert (out.astype(np.float64) < 0).all()


# -- the fp16 table row -------------------------------------------------------------------------------


def test_fp16_row_2048_plus_three_ones():
    """N = 4; rank 0 holds 2048 in every element, ranks 1-3 hold 1. Exact sum 2051 everywhere, but chunk
    c is summed ((x[c+1] + x[c+2]) + x[c+3]) + x[c], fp16's spacing in [2048, 4096) is 2, and 2049,
    2051 are midpoints that tie to the even neighbour (2048 = 1.0000000000b * 2**11 is even, 2050 odd,
    2052 even):

      chunk 0: ((1 + 1) + 1) + 2048 = 3 + 2048 = 2051 -> tie between 2050 and 2052 -> 2052
      chunk 1: ((1 + 1) + 2048) + 1 = 2050 (exact), + 1 = 2051 -> 2052
      chunk 2: ((1 + 2048) -> 2049 -> tie -> 2048) + 1 -> 2049 -> 2048, + 1 -> 2048
      chunk 3: ((2048 + 1) -> 2048) + 1 -> 2048, + 1 -> 2048
    """
    n, per_chunk = 4, 3
    xs = [np.full(n * per_chunk, 2048 if r == 0 else 1, dtype=np.float16) for r in range(n)]
    out = reduce_scatter(Cluster(n), xs)
    assert [float(o[0]) for o in out] == [2052.0, 2052.0, 2048.0, 2048.0]
    for o, v in zip(out, [2052, 2052, 2048, 2048]):
        assert_same_bits(o, np.full(per_chunk, v, dtype=np.float16))
    assert_same_bits(
        all_reduce(Cluster(n), xs)[3], np.repeat(np.array([2052, 2052, 2048, 2048], np.float16), per_chunk)
    )
    # float64 (or fp32) has room for 2051: the same inputs widened sum exactly
    assert [float(o[0]) for o in reduce_scatter(Cluster(n), xs, wire="fp32")] == [2051.0] * 4


# -- ops, each against its own independent computation ------------------------------------------------


@settings(max_examples=EXAMPLES)
@given(cases)
def test_max_is_the_elementwise_maximum(case):
    n, length, name, seed = case
    xs = make_inputs(seed, n, length, name)
    want = np.max(np.stack([x.astype(np.float64) for x in xs]), axis=0).astype(DTYPES[name]) if length else xs[0].copy()
    assert_same_bits(np.concatenate(reduce_scatter(Cluster(n), xs, op="max")), want)
    assert_lists_same_bits(all_reduce(Cluster(n), xs, op="max"), [want] * n)


@settings(max_examples=EXAMPLES)
@given(cases)
def test_avg_is_ring_sum_then_fp32_divide(case):
    n, length, name, seed = case
    xs = make_inputs(seed, n, length, name)
    wide = np.float64 if name == "fp64" else np.float32  # the seeds' protocol: divide in fp32 (fp64 stays fp64)
    chunks = ring_order(xs, real_bounds(length, n))
    want = [c.astype(wide) / wide(n) for c in chunks]
    assert_lists_same_bits(reduce_scatter(Cluster(n), xs, op="avg"), want)
    assert_lists_same_bits(all_reduce(Cluster(n), xs, op="avg"), [np.concatenate(want)] * n)


@settings(max_examples=EXAMPLES)
@given(cases)
def test_avg_predivide_divides_in_the_input_dtype_then_sums(case):
    n, length, name, seed = case
    xs = make_inputs(seed, n, length, name)
    t = DTYPES[name].type
    divided = [x / t(n) for x in xs]  # DeepSpeed: x / N in the gradient's dtype (one rounding, see NOTE)
    assert all(d.dtype == DTYPES[name] for d in divided)
    want = ring_order(divided, real_bounds(length, n))
    assert_lists_same_bits(reduce_scatter(Cluster(n), xs, op="avg_predivide"), want)


@settings(max_examples=EXAMPLES)
@given(cases)
def test_avg_premul_multiplies_by_rounded_reciprocal_then_sums(case):
    n, length, name, seed = case
    xs = make_inputs(seed, n, length, name)
    # NCCL: 1/N rounded to the wire dtype. For bf16 this goes float64 -> float32 -> bf16, which is one
    # correct rounding here: 1/N for N <= 8 is a power of two or has a periodic expansion (1/3 = 0.0101...,
    # 1/5, 1/6, 1/7) that float32 cannot round onto an exact bf16 midpoint.
    scale = np.array(1.0 / n).astype(DTYPES[name])
    premul = [x * scale for x in xs]
    assert all(p.dtype == DTYPES[name] for p in premul)
    want = ring_order(premul, real_bounds(length, n))
    assert_lists_same_bits(reduce_scatter(Cluster(n), xs, op="avg_premul"), want)


def test_three_averages_row_bf16():
    """N = 3, bf16, every rank holds x = 1.5390625 = 197/128 (1.1000101b). The exact average is x; the
    three protocols give three different answers (bf16 spacing: 2**-8 in [0.5, 1), 2**-7 in [1, 2),
    2**-6 in [2, 4), 2**-5 in [4, 8)):

      avg:            x + x = 394/128 = 3.078125 (exact); + x = 591/128 = 4.6171875 -> 147.75 * 2**-5
                      -> 148 * 2**-5 = 4.625; then fp32(4.625) / fp32(3)
      avg_predivide:  x / 3 = 197/384 = 131.33 * 2**-8 -> 131/256 = 0.51171875 = d; d + d = 131/128
                      (exact); + d = 393/256 = 196.5 * 2**-7, a tie -> 196/128 = 1.53125 (even)
      avg_premul:     1/3 -> 171/512 = 0.333984375 = s (1.0101010|1010... rounds up); x * s =
                      33687/65536 = 131.59 * 2**-8 -> 132/256 = 0.515625 = p; p + p = 132/128 (exact);
                      + p = 198/128 = 1.546875 (exact)
    """
    xs = [np.full(3, 1.5390625, ml_dtypes.bfloat16) for _ in range(3)]
    got = {op: np.concatenate(reduce_scatter(Cluster(3), xs, op=op)) for op in ("avg", "avg_predivide", "avg_premul")}
    assert got["avg"].dtype == np.float32
    assert got["avg"].tolist() == [float(np.float32(4.625) / np.float32(3))] * 3
    assert (
        got["avg_predivide"].dtype == ml_dtypes.bfloat16
        and got["avg_predivide"].astype(np.float64).tolist() == [1.53125] * 3
    )
    assert (
        got["avg_premul"].dtype == ml_dtypes.bfloat16
        and got["avg_premul"].astype(np.float64).tolist() == [1.546875] * 3
    )


@settings(max_examples=EXAMPLES)
@given(st.integers(1, 8), st.integers(0, 70), st.integers(0, 2**32 - 1))
def test_bf16_wire_on_fp32_inputs(n, length, seed):
    xs = make_inputs(seed, n, length, "fp32")
    on_wire = [x.astype(ml_dtypes.bfloat16) for x in xs]  # ml_dtypes float32 -> bf16: one rounding
    want = ring_order(on_wire, real_bounds(length, n))
    got = reduce_scatter(Cluster(n), xs, wire="bf16")
    assert all(g.dtype == ml_dtypes.bfloat16 for g in got)
    assert_lists_same_bits(got, want)
    assert_lists_same_bits(all_reduce(Cluster(n), xs, wire="bf16"), [np.concatenate(want)] * n)
    assert_lists_same_bits(all_gather(Cluster(n), [x[: length // n] for x in xs], wire="bf16"),
                           [np.concatenate([x[: length // n] for x in on_wire])] * n)


# -- uneven chunks: reduce-scatter-v and all-gather-v ------------------------------------------------------


@st.composite
def counts_case(draw):
    n = draw(st.integers(1, 8))
    counts = draw(st.lists(st.integers(0, 12), min_size=n, max_size=n))
    return n, counts, draw(st.sampled_from(list(DTYPES))), draw(st.integers(0, 2**32 - 1))


@settings(max_examples=EXAMPLES)
@given(counts_case())
def test_reduce_scatter_v_follows_counts(case):
    n, counts, name, seed = case
    length = sum(counts)
    xs = make_inputs(seed, n, length, name)
    got = reduce_scatter(Cluster(n), xs, counts=counts)
    assert [len(g) for g in got] == counts
    assert_lists_same_bits(got, ring_order(xs, count_bounds(counts)))  # chunk c walks the ring from c+1
    # With small integers every order of summation is exact, so the naive twin's full reduction,
    # cut by counts, must agree bit for bit as well.
    ints = [np.random.default_rng(seed + r).integers(-50, 50, length).astype(DTYPES[name]) for r in range(n)]
    full = naive_reduce(ints, order="ring")
    assert_lists_same_bits(
        reduce_scatter(Cluster(n), ints, counts=counts), [full[a:b] for a, b in count_bounds(counts)]
    )


@settings(max_examples=EXAMPLES)
@given(counts_case())
def test_all_gather_v_follows_counts(case):
    n, counts, name, seed = case
    shards = [make_inputs(seed + r, 1, counts[r], name)[0] for r in range(n)]
    got = all_gather(Cluster(n), shards, counts=counts)
    assert_lists_same_bits(got, naive_all_gather(shards))
    assert_lists_same_bits(got, [np.concatenate(shards)] * n)


@settings(max_examples=EXAMPLES)
@given(counts_case())
def test_a_shared_all_gather_hands_every_rank_one_immutable_copy_of_the_same_bits(case):
    n, counts, name, seed = case
    shards = [make_inputs(seed + r, 1, counts[r], name)[0] for r in range(n)]
    got = all_gather(Cluster(n), shards, counts=counts, shared=True)
    assert_lists_same_bits(got, all_gather(Cluster(n), shards, counts=counts))  # the same bits as without it
    owner = _operand_cache.immutable_owner(got[0])  # the one copy every rank views
    assert type(owner) is bytes and all(_operand_cache.immutable_owner(g) is owner for g in got)
    with pytest.raises(ValueError):
        got[0].flags.writeable = True  # over `bytes`: nobody can write it, so its address names its content
    kept = np.concatenate(shards)
    for s in shards:
        s[...] = 0  # the senders' later writes do not reach it
    assert_lists_same_bits(got, [kept] * n)


@pytest.mark.parametrize("step", [1, 2, 3])
def test_a_shared_all_gather_of_strided_shards_is_their_concatenation_in_one_immutable_copy(step):
    # contiguous shards are joined straight into the one bytes object (collectives/_fast.py `_frozen_join`); a strided
    # view (a column, every other element) cannot be read as one buffer, so the window is joined into an array and
    # frozen from it: both give the shards' concatenation, over bytes, one copy for every rank
    n = 4
    shards = [(np.arange(7 * step, dtype=np.float32) * (r + 1) - 3)[::step] for r in range(n)]
    got = all_gather(Cluster(n), shards, shared=True)
    assert_lists_same_bits(got, [np.concatenate(shards)] * n)
    owner = _operand_cache.immutable_owner(got[0])
    assert type(owner) is bytes and all(_operand_cache.immutable_owner(g) is owner for g in got)


@settings(max_examples=EXAMPLES)
@given(cases)
def test_all_gather_of_equal_or_layout_shards_is_concatenation(case):
    n, length, name, seed = case
    xs = make_inputs(seed, n, length, name)
    layout_shards = [xs[r][a:b] for r, (a, b) in enumerate(real_bounds(length, n))]  # last ones short/empty
    equal_shards = [x[: length // n] for x in xs]
    for shards in (layout_shards, equal_shards):
        got = all_gather(Cluster(n), shards)
        assert_lists_same_bits(got, [np.concatenate(shards)] * n)
        assert_lists_same_bits(got, naive_all_gather(shards))


# -- broadcast ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", range(1, 9))
@pytest.mark.parametrize("shape, name", [((), "fp32"), ((0,), "fp16"), ((7,), "bf16"), ((2, 3), "fp64")])
def test_broadcast_from_every_root(n, shape, name):
    for root in range(n):
        rng = np.random.default_rng(100 * n + root)
        xs = [rng.standard_normal(shape).astype(DTYPES[name]) for _ in range(n)]
        before = [x.copy() for x in xs]
        out = broadcast(Cluster(n), xs, root=root)
        assert len(out) == n
        assert_lists_same_bits(out, [before[root]] * n)
        assert_lists_same_bits(xs, before)  # neither the root's array nor the receive buffers are written
        for i in range(n):
            assert not np.shares_memory(out[i], xs[root])
            for j in range(i):
                assert not np.shares_memory(out[i], out[j])


# -- the front door -------------------------------------------------------------------------------------


def test_cluster_methods_pass_every_argument_through():
    n, xs = 3, make_inputs(9, 3, 10, "fp32")
    counts = [5, 0, 5]
    assert_lists_same_bits(
        reduce_scatter(Cluster(n), xs, op="avg_premul", wire="bf16"),
        reduce_scatter(Cluster(n), xs, op="avg_premul", wire="bf16"),
    )
    assert_lists_same_bits(reduce_scatter(Cluster(n), xs, counts=counts), ring_order(xs, count_bounds(counts)))
    assert_lists_same_bits(
        all_reduce(Cluster(n), xs, op="max", wire="fp16"), all_reduce(Cluster(n), xs, op="max", wire="fp16")
    )
    shards = [x[:4] for x in xs]
    assert_lists_same_bits(
        all_gather(Cluster(n), shards, wire="bf16"), [np.concatenate(shards).astype(ml_dtypes.bfloat16)] * n
    )
    assert_lists_same_bits(broadcast(Cluster(n), xs, root=2), [xs[2]] * n)


def test_all_reduce_keeps_any_shape():
    xs = [np.full((2, 3, 4), r + 1, dtype=np.float32) for r in range(4)]
    out = all_reduce(Cluster(4), xs)
    for o in out:
        assert o.shape == (2, 3, 4) and (o == 10).all()  # 1 + 2 + 3 + 4, exact
    scalars = all_reduce(Cluster(2), [np.float32(1.5), np.float32(2.25)])  # 0-d in, 0-d out
    assert all(o.shape == () and o.dtype == np.float32 and float(o) == 3.75 for o in scalars)  # exact in fp32


# ---------------------------------------------------------------- the chunk-order shortcut = the ring

@given(
    n=st.integers(1, 9),
    length=st.integers(0, 50),
    dtype=st.sampled_from(["fp32", "fp16", "bf16", "fp8_e5m2"]),
    op=st.sampled_from(["sum", "max", "avg", "avg_predivide", "avg_premul"]),
    uneven=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_the_chunk_order_shortcut_gives_the_rings_bits(n, length, dtype, op, uneven, seed):
    # Unless the trace keeps each hop's values, the numpy simulator adds chunk by chunk (collectives/_fast.py, the
    # ring's in-process twin) instead of hop by hop; the same additions in the same order must give the same bits,
    # and every rank the same bytes sent. Values spread over 2**-6..2**6 so that a different order would show.
    # (tests/test_trace_hops.py checks the hop events the shortcut records against the ring's own.)
    from zerosim.collectives import _fast as fast
    from zerosim.collectives import _ring as ring
    from zerosim.collectives._staging import phases

    rng = np.random.default_rng(seed)
    raw = rng.standard_normal((n, length)) * 2.0 ** rng.integers(-6, 7, (n, length))
    xs = [cast(row, dtype) for row in raw]
    counts = list(rng.multinomial(length, [1 / n] * n)) if uneven else None
    hop, call = Cluster(n, trace="hop", keep_values=True), Cluster(n, trace="call")
    assert phases(hop)[0] is ring.reduce_scatter_phase and phases(call)[0] is fast.reduce_scatter_phase
    for a, b in zip(reduce_scatter(hop, xs, op=op, counts=counts), reduce_scatter(call, xs, op=op, counts=counts)):
        assert a.dtype == b.dtype and np.array_equal(a.view(f"u{a.itemsize}"), b.view(f"u{b.itemsize}"))
    shards = [cast(rng.standard_normal(c if uneven else -(-length // n)), dtype) for c in (counts or [0] * n)]
    for a, b in zip(
        all_gather(hop, shards, counts=counts if uneven else None),
        all_gather(call, shards, counts=counts if uneven else None),
    ):
        assert np.array_equal(a.view(f"u{a.itemsize}"), b.view(f"u{b.itemsize}"))
    for r in range(n):
        assert hop.trace.bytes_sent(r) == call.trace.bytes_sent(r)


@given(n=st.integers(1, 9), length=st.integers(0, 40),
       dtype=st.sampled_from(["fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2"]),
       op=st.sampled_from(["sum", "max", "avg", "avg_predivide", "avg_premul"]), seed=st.integers(0, 2**16))
def test_the_native_ring_order_twin_gives_the_exact_twins_bits(n, length, dtype, op, seed):
    # naive_reduce(order="ring-native") adds with NumPy in the wire dtype (the oracle's fast mode, a speed
    # yardstick, and recipe_average's way); order="ring" forms each add exactly in float64 and rounds once: the same
    # bits (an fp32, fp16 or bf16 add rounds its exact sum once; fp8 sums saturate on both paths).
    rng = np.random.default_rng(seed)
    xs = [cast(row, dtype) for row in rng.standard_normal((n, length)) * 2.0 ** rng.integers(-6, 7, (n, length))]
    a, b = naive_reduce(xs, op=op, order="ring"), naive_reduce(xs, op=op, order="ring-native")
    assert a.dtype == b.dtype and np.array_equal(a.view(f"u{a.itemsize}"), b.view(f"u{b.itemsize}"))


@given(n=st.integers(3, 9), data=st.data(), dtype=st.sampled_from(["fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2"]),
       op=st.sampled_from(["sum", "max", "avg_premul"]), with_out=st.booleans(), seed=st.integers(0, 2**16))
def test_adding_a_ring_step_at_a_time_gives_the_chunk_by_chunk_bits(n, data, dtype, op, with_out, seed):
    # _fast.py's two ways to add up a reduce-scatter: one add per chunk per step (the naive twin) and one add per ring
    # step over every chunk (small chunks). Any chunk map (empty chunks, uneven sizes; side by side, as a reduce-
    # scatter's, which `_by_step` rotates in place, or with gaps, which it hands to the twin), any ring order (a
    # group's), into fresh arrays or the caller's `out`: the same bits, and each result its own array
    from zerosim.collectives import _fast as fast
    from zerosim.collectives import get_op
    from zerosim.precision import get_format

    rng = np.random.default_rng(seed)
    sizes = data.draw(st.lists(st.integers(0, 12), min_size=n, max_size=n))
    side_by_side = data.draw(st.booleans())
    gaps = [0] * n if side_by_side else data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    bounds, at = [], 0
    for size, gap in zip(sizes, gaps):
        at += gap
        bounds.append((at, at + size))
        at += size
    length = at + data.draw(st.integers(0, 3))
    if side_by_side and any(sizes):  # taken the rotating way, not handed to the twin
        assert fast._spans(tuple(bounds))[2]
    ring = tuple(rng.permutation(n).tolist())
    wire = get_format(dtype)
    staged = [cast(rng.standard_normal(length) * 2.0 ** rng.integers(-6, 7, length), dtype) for _ in range(n)]
    combine = get_op(op).combiner(wire)
    results = {}
    for how in (fast._by_chunk, fast._by_step):
        out = [np.full(b - a, np.nan).astype(wire.dtype) for a, b in (bounds[ring.index(r)] for r in range(n))] \
            if with_out else None
        got = [None] * n
        how(Cluster(n).backend.xp, combine, staged, ring, bounds, wire, out, got)
        results[how.__name__] = got
        if with_out:
            assert all(g is o for g, o in zip(got, out))
    for a, b in zip(results["_by_chunk"], results["_by_step"]):
        assert a.dtype == b.dtype and np.array_equal(a.view(np.uint8), b.view(np.uint8))
    views = [g for g in results["_by_step"] if g.size]
    assert all(g.base is None or g.base is not views[0].base for g in views[1:])  # no result shares another's memory


def test_the_bf16_wires_float32_add_gives_ml_dtypes_bits_for_every_pattern():
    # add_bf16 (collectives/_ops.py), the ring's add on a bf16 wire: float32 adds rounded once to bf16, against
    # ml_dtypes' own bf16 add (np.add, its naive twin), every one of the 65,536 patterns on either side of 96 others:
    # both zeros, the smallest subnormals, the largest finite values, both infinities, NaNs of both signs, 80 random.
    # The same bits, but where both are NaN of opposite signs: NaN there, its sign the machine's operand order's
    from zerosim.collectives._ops import add_bf16

    bf16 = np.dtype(ml_dtypes.bfloat16)
    every = np.arange(2**16, dtype=np.uint16)
    chosen = [0x0000, 0x8000, 0x0001, 0x8001, 0x007F, 0x0080, 0x7F7F, 0xFF7F, 0x7F80, 0xFF80, 0x7FC0, 0xFFC0,
              0x7F81, 0xFFFF, 0x3F80, 0xBF80]
    others = np.concatenate([np.array(chosen, np.uint16), np.random.default_rng(7).integers(0, 2**16, 80, np.uint16)])
    a = np.repeat(every, len(others)).view(bf16)  # (65,536 · 96,)
    b = np.tile(others, len(every)).view(bf16)
    with np.errstate(over="ignore", invalid="ignore"):
        for x, y in ((a, b), (b, a)):
            want, got = np.add(x, y).view(np.uint16), add_bf16(x, y).view(np.uint16)  # 6.3M elements: widened
            both_nan = np.isnan(x) & np.isnan(y)
            assert np.array_equal(want[~both_nan], got[~both_nan])
            assert np.isnan(got.view(bf16)[both_nan]).all()
        acc = a.copy()  # as the ring adds: the partial sum written over itself
        assert add_bf16(acc, b, out=acc) is acc
        assert np.array_equal(acc.view(np.uint16)[~both_nan], np.add(a, b).view(np.uint16)[~both_nan])


@settings(max_examples=EXAMPLES)
@given(n=st.integers(1, 6), data=st.data())
def test_checking_every_rank_at_once_finds_each_ranks_own_format_or_its_error(n, data):
    # collectives/_checks.py `check_inputs` looks at every rank in one pass where all pass host arrays of one dtype
    # (`_alike`), and rank by rank otherwise. Each rank's format is what `get_format` says of its own dtype, and a
    # rank whose array is not flat, or of a dtype no format has, is named in the error, whichever way was taken:
    # ranks of mixed dtypes and shapes here, so a pass that took one rank's format for all would show.
    from zerosim.collectives._checks import check_inputs
    from zerosim.precision import get_format

    names = data.draw(st.lists(st.sampled_from(["fp32", "fp16", "bf16", "int8"]), min_size=n, max_size=n))
    flat = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
    xs = [np.zeros(3 if f else (1, 3), DTYPES.get(name, np.int8)) for name, f in zip(names, flat)]
    cluster = Cluster(n)
    bad = [r for r, (name, f) in enumerate(zip(names, flat)) if not f or name == "int8"]
    if bad:
        with pytest.raises(ValueError, match=f"rank {bad[0]}"):
            check_inputs(cluster, xs, "all-gather")
        return
    got = check_inputs(cluster, xs, "all-gather")
    assert [r for r, _, _ in got] == list(range(n)) and all(a is x for (_, a, _), x in zip(got, xs))
    assert [fmt.name for _, _, fmt in got] == [get_format(name).name for name in names]
