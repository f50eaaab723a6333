"""fp32 products by one float64 GEMM whose error the operands' norms bound (precision/arithmetic/_norm_bound.py), the
few elements it leaves in doubt settled by their own sums of magnitudes, then by sums twice as precise
(_twice_precise.py), then one by one: every path the same bits as the exact rational sums rounded once.

The reference is test_exact_matmul's (Python's Fraction sums the K products exactly, integer arithmetic rounds) and,
for `twice_precise_sums`, Fraction sums of its terms.
"""

import threading
import warnings
from unittest import mock
from fractions import Fraction

import numpy as np
import pytest
from helpers import bits
from hypothesis import given
from hypothesis import strategies as st
from test_exact_matmul import HARD, reference

from zerosim.precision.arithmetic import _exact_matmul, _norm_bound, exact_matmul
from zerosim.precision.arithmetic._twice_precise import twice_precise_sums

pytestmark = pytest.mark.pinned  # bits that must be the same on every machine


@pytest.fixture(autouse=True, scope="module")
def _through_the_blocks():
    """Every product here made through the blocks, dead lines, bitmaps and groups of rows that a product of more
    than `_SMALL` elements takes, whatever its size (these tests make small ones, to read and to sum exactly): the
    small ones' own path is tests/test_exact_matmul_small.py's."""
    small, _norm_bound._SMALL = _norm_bound._SMALL, 0
    yield
    _norm_bound._SMALL = small


class Spy:
    """Counts the calls of `module.name` while installed."""

    def __init__(self, monkeypatch, module, name):
        self.calls, inner = 0, getattr(module, name)

        def counted(*args, **kwargs):
            self.calls += 1
            return inner(*args, **kwargs)

        monkeypatch.setattr(module, name, counted)


@given(m=st.integers(1, 6), k=st.integers(1, 90), n=st.integers(1, 6), seed=st.integers(0, 2**32 - 1),
       spread=st.integers(0, 40))
def test_fp32_products_by_one_gemm_equal_the_exact_sums_rounded_once(m, k, n, seed, spread):
    # K on both sides of SHORT_K (the blocked rows): magnitudes 2**±spread apart, so sums cancel
    rng = np.random.default_rng(seed)
    a = (rng.standard_normal((m, k)) * 2.0 ** rng.integers(-spread, spread + 1, size=(m, k))).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    assert np.array_equal(bits(exact_matmul(a, b)), bits(reference(a, b)))


def near_ties(rows: int, k: int, rng) -> np.ndarray:
    """(rows, k) float32: each row's sum (against a column of ones) lies on a float32 midpoint, or 2**-45 or 2**-60
    beside one, its other K - 3 terms ±1 cancelling in pairs (a 0 for an odd one out): Σ|p| ~ K, the sum ~1.5."""
    base = rng.uniform(1, 2, rows).astype(np.float32)
    nudge = rng.choice([-1.0, 0.0, 1.0], rows) * rng.choice([2.0**-45, 2.0**-60], rows)
    out = np.zeros((rows, k), np.float32)
    out[:, 0], out[:, 1], out[:, 2] = base, np.spacing(base) / 2, nudge.astype(np.float32)
    out[:, 3:3 + 2 * ((k - 3) // 2)] = np.tile([1.0, -1.0], (k - 3) // 2)
    return out


@pytest.mark.parametrize("k", [40, 200])  # blocked rows (K <= SHORT_K) and one block
def test_near_ties_in_every_block_settle_at_each_level(monkeypatch, k):
    rng = np.random.default_rng(11)
    monkeypatch.setattr(_norm_bound, "_BLOCK", 1 << 15)
    n = 4096 if k <= _norm_bound.SHORT_K else 8  # 32,768 / 4,096 = 8 rows a block: three blocks of 20 rows
    a = near_ties(20, k, rng)
    b = np.ones((k, n), np.float32)
    b[:, 1::2] *= -1  # every other column the negated sums: ties on both sides of zero
    magnitudes = Spy(monkeypatch, _exact_matmul, "_lines")  # the suspects' K products gathered, their Σ|a·b| tried
    twice = Spy(monkeypatch, _exact_matmul, "twice_precise_sums")
    one_by_one = Spy(monkeypatch, _exact_matmul, "exact_sum_f32")
    got = exact_matmul(a, b)
    want = reference(a, b[:, :2])  # every even column equals column 0, every odd one column 1
    assert np.array_equal(bits(got), bits(np.tile(want, (1, n // 2))))
    assert magnitudes.calls and twice.calls  # each level reached
    # exact midpoints and sums 2**-60 beside one: only these are summed one by one (2**-45 beside one: settled by
    # the sums twice as precise)
    assert one_by_one.calls == int(np.count_nonzero(np.abs(a[:, 2]) < 2.0**-50)) * n


def test_near_ties_in_every_block_of_a_batched_product_settle_where_they_lie(monkeypatch):
    # a stack of products tested a few rows at a time (4 of each product's 20): each block's suspects found by their
    # index in the block, which skips the other products' rows of the block; in each product a different order of
    # the rows, and b of both signs, so a suspect put in another row or product gives another sum
    rng = np.random.default_rng(12)
    monkeypatch.setattr(_norm_bound, "_BLOCK", 1 << 15)
    a = near_ties(20, 40, rng)
    a = np.stack([a, a[::-1]])  # (2, 20, 40)
    b = np.ones((2, 40, 4096), np.float32)  # 32,768 / (2 · 4,096) = 4 rows a block
    b[0, :, 1::2] *= -1
    b[1, :, :2048] *= -1
    got = exact_matmul(a, b)
    for p in range(2):
        want = reference(a[p], b[p][:, [0, 1, 2048, 2049]])  # the columns repeat in these four's patterns
        assert np.array_equal(bits(got[p][:, [0, 1, 2048, 2049]]), bits(want))
    assert np.array_equal(bits(got[0]), bits(np.tile(reference(a[0], b[0][:, :2]), (1, 2048))))
    assert np.array_equal(bits(got[1]), bits(np.repeat(reference(a[1], b[1][:, [0, 2048]]), 2048, axis=1)))


def test_suspects_their_sums_of_magnitudes_settle_leave_the_others_with_their_own_products():
    # one gather of each suspect's K products serves both later levels: even rows are near ties (they reach the sums
    # twice as precise), odd rows suspects of the norms' bound only (a huge a_ik where b is 0: ||a_i|| far above
    # Σ|a·b|), which their sums of magnitudes settle, between them in the same parts; a near tie handed another
    # element's products would round that sum
    rng = np.random.default_rng(16)
    a = near_ties(20, 200, rng)  # column 199 is 0
    a[1::2] = rng.standard_normal((10, 200)).astype(np.float32)
    a[1::2, 199] = 2.0**20
    b = np.ones((200, 64), np.float32)
    b[:, 1::2] *= -1
    b[199] = 0
    assert np.array_equal(bits(exact_matmul(a, b)), bits(reference(a, b)))


def test_suspects_on_strided_columns_are_gathered_in_column_order():
    # dx = dy @ W: b's columns strided, the suspects' columns gathered in sorted order, a part at a time (K = 200:
    # 327 a part); 1,280 near ties, each column its own power of two, so one mixed up gives another column's sum
    rng = np.random.default_rng(9)
    a = near_ties(20, 200, rng)
    scale = 2.0 ** rng.integers(-4, 5, 64)
    b = np.ones((200, 64), np.float32) * (scale * np.where(np.arange(64) % 2, -1, 1)).astype(np.float32)
    assert b.flags.c_contiguous  # its columns strided in the float64 copy too
    got = exact_matmul(a, b)
    want = reference(a, np.ones((200, 1), np.float32))  # each column of b is a power of two times the first
    assert np.array_equal(bits(got), bits((want * b[0].astype(np.float64)).astype(np.float32)))


def test_sparse_lines_whose_norms_overlap_nowhere_give_exact_zeros():
    # dW = dy.T @ x under ReLU masks: many elements sum only zero products; their norms do not show it
    rng = np.random.default_rng(3)
    dy = rng.standard_normal((32, 48)).astype(np.float32)
    x = rng.standard_normal((32, 300)).astype(np.float32)
    dy[rng.random(dy.shape) < 0.6] = 0
    x[rng.random(x.shape) < 0.6] = 0
    x[:, 7] = -0.0  # a column of -0: products of -0 only sum to +0
    got = exact_matmul(dy.T, x)
    assert np.array_equal(bits(got), bits(reference(dy.T, x)))
    assert not np.signbit(got[:, 7]).any()


def test_zeros_of_disjoint_lines_are_told_apart_from_zeros_that_cancel(monkeypatch):
    # dW = dy.T @ x under ReLU masks: thousands of zeros whose every product is 0, settled by bitmaps of where a and b
    # are nonzero; a zero that float64 reaches by cancelling (1 + 2**-60 - 1, summed in order) is not one of them
    rng = np.random.default_rng(4)
    a = rng.standard_normal((40, 32)).astype(np.float32)
    b = rng.standard_normal((32, 160)).astype(np.float32)
    a[:, 16:] = 0
    b[:16, :100] = 0  # columns 0-99 of b meet rows 1-39 of a nowhere: 3,900 exact zeros
    b[:, 3] = -0.0  # a column of -0: +0 too
    a[0, 16:19] = [1.0, 2.0**-60, -1.0]
    b[16:19, 5] = 1.0  # element (0, 5): s = 2**-60, its float64 sum 0 in order
    bitmaps = Spy(monkeypatch, _norm_bound, "nonzero_bits")
    got = exact_matmul(a, b)
    assert np.array_equal(bits(got), bits(reference(a, b)))
    assert bitmaps.calls and got[0, 5] == np.float32(2.0**-60)


def test_zeros_of_disjoint_lines_are_told_apart_in_each_product_of_a_batch():
    # a stack of products (the ranks' b, one a): each zero suspect's column looked up in its own product. Product 1
    # has 3,900 exact zeros of disjoint lines and one zero that float64 reaches by cancelling, at (0, 5), whose
    # column in product 0 meets row 0 of a nowhere: looked up there, it would pass for an exact zero
    rng = np.random.default_rng(13)
    a = rng.standard_normal((40, 32)).astype(np.float32)
    b = rng.standard_normal((2, 32, 160)).astype(np.float32)
    a[:, 16:] = 0
    b[1, :16, :100] = 0  # product 1: columns 0-99 meet rows 1-39 of a nowhere
    a[0, 16:19] = [1.0, 2.0**-60, -1.0]
    b[1, 16:19, 5] = 1.0  # product 1's (0, 5): s = 2**-60, its float64 sum 0 in order
    b[0, :19, 5] = 0  # product 0's column 5: nonzero only where row 0 of a is zero
    got = exact_matmul(a, b)
    assert got[1, 0, 5] == np.float32(2.0**-60)
    for p in range(2):
        assert np.array_equal(bits(got[p]), bits(reference(a, b[p])))


def minus_zero_blas(a, b, out):
    """A BLAS that starts each sum from its first product: -0 for a sum of -0 products, where OpenBLAS gives +0."""
    np.matmul(a, b, out=out)
    out[out == 0] = -0.0


def test_dead_rows_of_a_are_plus_zero_and_never_suspects(monkeypatch):
    # dW = dy.T @ x where a unit's ReLU is off for the whole micro-batch: a row of a all zero (or -0), whose E_i = 0;
    # the rows beside it share their block's largest E_i, under which c ± E of a zero c would round to both signs.
    # Under a BLAS that gives -0 for sums of zero products, and for b stacked as the ranks' operands are
    rng = np.random.default_rng(7)
    a = rng.standard_normal((40, 32)).astype(np.float32)
    b = rng.standard_normal((2, 32, 300)).astype(np.float32)
    a[[3, 17, 39]] = 0.0
    a[17] = -0.0
    monkeypatch.setattr(_norm_bound, "_gemm", minus_zero_blas)
    for got, b_ in [(exact_matmul(a, b[0]), b[0]), *zip(exact_matmul(a, b), b)]:
        assert np.array_equal(bits(got), bits(reference(a, b_)))  # +0 in each dead row: the exact sums
    seen = []  # the zero suspects: none in a dead row
    inner = _norm_bound.without_disjoint_zeros
    monkeypatch.setattr(_norm_bound, "without_disjoint_zeros", lambda flat, y, a64, b64, shape, *bits:
                        seen.append(flat // shape[-1]) or inner(flat, y, a64, b64, shape, *bits))  # their rows
    exact_matmul(a, b[0])
    assert seen and not np.isin(np.concatenate(seen), [3, 17, 39]).any()


def test_rows_whose_bounds_differ_share_the_largest(monkeypatch):
    # a block's rows tested against one E, its largest E_i, where the smallest live one is within _SPREAD of it: sums
    # 2**-25 past float32 midpoints, beside ±2**30 (a float64 sum summed in order loses the midpoint's last bit: c
    # 2**-25 short of it, on the other side) and beside ±2**21 (c exact), 2**9 apart in E_i: the smaller rows' E_i
    # for all would call the larger rows' c certain
    rng = np.random.default_rng(8)
    monkeypatch.setattr(_norm_bound, "_BLOCK", 1 << 15)
    a = np.zeros((20, 8), np.float32)
    a[:, :3] = near_ties(20, 3, rng)  # base, half its spacing, a nudge of 0 or ±2**-45 or ±2**-60
    a[:, 3] = 2.0 ** np.where(np.arange(20) % 2, 21, 30)
    a[:, 4] = -a[:, 3]
    a[:, 5] = 2.0**-25
    b = np.ones((8, 4096), np.float32)  # 8 rows a block
    b[:, 1::2] *= -1
    assert np.array_equal(bits(exact_matmul(a, b)), bits(np.tile(reference(a, b[:, :2]), (1, 2048))))


@pytest.mark.parametrize("k", [40, 200])  # blocked rows (K <= SHORT_K) and one block
def test_a_blas_whose_sums_are_off_by_nearly_the_most_any_order_allows_still_gives_the_exact_sums(monkeypatch, k):
    # the proof assumes only |c - s| <= γ(K-1)·Σ_k |a_ik·b_kj| (Higham, §3.1: any order of the adds): a BLAS whose
    # every sum is 0.9 of that away, on both sides in turn, pushes each near tie (a float32 midpoint, or 2**-45 or
    # 2**-60 beside one) across its midpoint. The norms' bound and the sums of magnitudes must each still call it a
    # suspect; half of either would let c's rounding stand (a row of ±1 and b of ones: Cauchy-Schwarz is nearly tight)
    rng = np.random.default_rng(15)
    a, b = near_ties(20, k, rng), np.ones((k, 64), np.float32)
    b[:, 1::2] *= -1

    def worst_blas(a64, b64, out):
        np.matmul(a64, b64, out=out)  # the exact sums but for the float64 rounding of the last add or two
        bound = (k - 1) * 2.0**-53 * (np.abs(a64) @ np.abs(b64))
        out += np.where(np.arange(out.shape[-1]) % 4 < 2, 0.9, -0.9) * bound

    monkeypatch.setattr(_norm_bound, "_gemm", worst_blas)
    assert np.array_equal(bits(exact_matmul(a, b)), bits(np.tile(reference(a, b[:, :2]), (1, 32))))


def test_a_long_k_is_bounded_as_one_gemm_over_its_longest_piece_plus_its_pieces():
    # K' = L + P - 1 for P pieces of at most L terms (γ(L-1) + γ(P-1) + γ(L-1)·γ(P-1) <= γ(L+P-2), Higham Lemma 3.3)
    assert _norm_bound._PIECE == 256  # the rows below are worked for pieces of 256

    def terms(k, m=128, n=64):
        return _norm_bound.summed_terms(np.zeros((m, k)), np.zeros((k, n)))

    assert terms(0) == 0  # no products: one (empty) GEMM
    assert terms(64) == 64  # a dW over 32-64 rows: one GEMM
    assert terms(512) == 512  # two pieces would cost more than they spare: one GEMM
    assert terms(513) == 173  # 3 pieces of 171: 171 + 3 - 1
    assert terms(1024) == 259  # 4 of 256: a 10M MLP's first layer's K
    assert terms(2560) == 265  # 10 of 256: its widest K, ~10x tighter than one GEMM
    assert terms(10**6) == 256 + 3907 - 1  # 3,907 pieces of <= 256 (3,906 · 256 = 999,936 < 10**6)
    assert _norm_bound.summed_terms(np.zeros((2, 128, 1024)), np.zeros((1024, 64))) == 259  # a batch: the same
    a = np.zeros((64, 2560))
    assert _norm_bound.summed_terms(a, a.T) == 2560  # a Gram matrix: one syrk
    assert _norm_bound.summed_terms(a, a.T.copy()) == 265  # the same values, not a's view: a GEMM in pieces


@given(m=st.integers(1, 5), k=st.integers(65, 160), n=st.integers(1, 5), batch=st.integers(0, 2),
       seed=st.integers(0, 2**32 - 1), spread=st.integers(0, 40), piece=st.integers(1, 60))
def test_fp32_products_summed_in_pieces_equal_the_exact_sums_rounded_once(m, k, n, batch, seed, spread, piece):
    # pieces of 1-60 terms (the GEMM split at every length, a last piece shorter), 2-D past SHORT_K and batches of
    # products: each element the exact sum rounded once, whatever the pieces
    rng = np.random.default_rng(seed)
    lead = (batch,) if batch else ()
    a = (rng.standard_normal(lead + (m, k)) * 2.0 ** rng.integers(-spread, spread + 1, size=lead + (m, k)))
    a, b = a.astype(np.float32), rng.standard_normal(lead + (k, n)).astype(np.float32)
    with mock.patch.object(_norm_bound, "_PIECE", piece):
        got = exact_matmul(a, b)
    for p in np.ndindex(*lead):
        assert np.array_equal(bits(got[p]), bits(reference(a[p], b[p])))


@pytest.mark.parametrize("k", [600, 599])  # 3 pieces of 200; of 199, 200 and 200 (the longest bounds them)
def test_pieces_whose_sums_are_each_off_by_nearly_the_most_their_order_allows_still_give_the_exact_sums(
        monkeypatch, k):
    # each piece's GEMM 0.9 of γ(L-1)·Σ_p |a_ik·b_kj| from its exact sum, all on the same side (alternating by
    # column): the pieces' errors add to ~0.9·(L-1)·u·Σ|a·b|, which the bound of one GEMM over K' = L + P - 1 terms
    # must cover; a bound for the pieces' count alone (or a piece's half) would let near ties round across their
    # midpoints (a row of ±1 and b of ones: Cauchy-Schwarz nearly tight)
    rng = np.random.default_rng(17)
    a, b = near_ties(20, k, rng), np.ones((k, 64), np.float32)
    b[:, 1::2] *= -1

    def worst_blas(a64, b64, out):
        np.matmul(a64, b64, out=out)
        bound = (a64.shape[-1] - 1) * 2.0**-53 * (np.abs(a64) @ np.abs(b64))  # this piece's own γ(L-1)·Σ_p
        out += np.where(np.arange(out.shape[-1]) % 4 < 2, 0.9, -0.9) * bound

    monkeypatch.setattr(_norm_bound, "_PIECE", 200)
    monkeypatch.setattr(_norm_bound, "_gemm", worst_blas)
    pieces = Spy(monkeypatch, _norm_bound, "_gemm")
    assert np.array_equal(bits(exact_matmul(a, b)), bits(np.tile(reference(a, b[:, :2]), (1, 32))))
    assert pieces.calls == 3  # one GEMM a piece (the suspects' gathered K products call no GEMM)


@pytest.mark.parametrize("name", [n for n in HARD if "overflow" in n])
def test_sums_near_float32s_overflow_round_there_without_a_warning(name):
    # a suspect past float32's range rounds to inf, as its exact sum does: no RuntimeWarning for the user to read
    row, column, want = HARD[name]
    a, b = np.array([row], np.float32), np.array(column, np.float32)[:, None]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = exact_matmul(a, b)
    assert bits(got) == bits(np.float32([[want]]))


def test_a_blas_whose_zero_sums_are_minus_zero_still_gives_plus_zero(monkeypatch):
    # a BLAS that starts each sum from its first product gives -0 for products of -0 only (OpenBLAS starts from +0):
    # every zero of c is then -0 here, exact zeros and cancellations alike, and each must come out as its exact sum
    rng = np.random.default_rng(6)
    a = rng.standard_normal((12, 40)).astype(np.float32)
    b = rng.standard_normal((40, 30)).astype(np.float32)
    a[:6, 20:] = 0
    b[:20, :10] = 0  # rows 0-5 and columns 0-9 meet nowhere: exact zeros
    a[6, :4] = [1.0, -1.0, 0.5, -0.5]
    a[6, 4:] = 0  # row 6 with any column: 1 - 1 + 0.5·b - 0.5·b sums to 0 where b's first four are equal
    b[:4, 12] = 2.0
    b[:, 20] = -0.0
    monkeypatch.setattr(_norm_bound, "_gemm", minus_zero_blas)
    assert np.array_equal(bits(exact_matmul(a, b)), bits(reference(a, b)))


def test_the_rows_bound_alone_would_round_near_ties_wrongly(monkeypatch):
    # the bound is what makes them right: with no error allowed, c rounds as float64 does and misses the ties
    rng = np.random.default_rng(5)
    a, b = near_ties(16, 40, rng), np.ones((40, 3), np.float32)
    assert np.array_equal(bits(exact_matmul(a, b)), bits(reference(a, b)))
    monkeypatch.setattr(_norm_bound, "SLACK", 0.0)  # E_i = 0: no suspects
    assert not np.array_equal(bits(exact_matmul(a, b)), bits(reference(a, b)))


@given(k=st.integers(1, 300), seed=st.integers(0, 2**32 - 1), spread=st.integers(0, 60))
def test_twice_precise_sums_lie_within_their_bound_of_the_exact_sums(k, seed, spread):
    rng = np.random.default_rng(seed)
    terms = rng.standard_normal((4, k)) * 2.0 ** rng.integers(-spread, spread + 1, size=(4, k))
    terms[1] = np.concatenate([terms[1][: k // 2], -terms[1][: k // 2], terms[1][2 * (k // 2):]])  # cancels
    sums, errors = twice_precise_sums(terms)
    for row, s, e in zip(terms, sums, errors):
        exact = sum((Fraction(float(t)) for t in row), Fraction(0))
        assert abs(Fraction(float(s)) - exact) <= Fraction(float(e))
        assert e <= 2.0**-52 * abs(float(s)) + 2.0**-80 * float(np.abs(row).sum())  # far inside the GEMM's bound


def test_twice_precise_sums_of_many_terms_all_near_the_largest_lie_within_their_bound():
    # the split's high parts summed exactly needs Σ|q| below σ: K = 1,024 terms all within 2**-20 of the largest,
    # one sign (Σ|q| at its most) and cancelling in pairs but for their low bits (Σ r all that is left)
    rng = np.random.default_rng(14)
    near = 3.0 * (1 + rng.integers(0, 2**20, size=(2, 1024)) * 2.0**-50)  # 52 significant bits: their sum rounds
    terms = np.stack([near[0], np.where(np.arange(1024) % 2, -near[1], near[1])])
    sums, errors = twice_precise_sums(terms)
    for row, s, e in zip(terms, sums, errors):
        exact = sum((Fraction(float(t)) for t in row), Fraction(0))
        assert abs(Fraction(float(s)) - exact) <= Fraction(float(e)) and e <= 2.0**-52 * abs(float(s)) + 2.0**-70 * 3


def test_twice_precise_zero_sums_are_plus_zero_with_no_error():
    terms = np.array([[-0.0, -0.0, -0.0], [1.5, -1.5, 0.0], [2.0**-1074, -(2.0**-1074), -0.0]])
    sums, errors = twice_precise_sums(terms)
    assert bits(sums).tolist() == bits(np.zeros(3)).tolist() and errors[0] == 0


def test_threads_multiplying_at_once_get_their_own_bits():
    # the rank pool's workers may multiply together: each thread's temporaries are its own (_scratch.py)
    rng = np.random.default_rng(8)
    pairs = [(near_ties(12, 40, rng), np.ones((40, 700), np.float32)) for _ in range(4)]
    want = [exact_matmul(a, b) for a, b in pairs]
    got = [None] * len(pairs)

    def run(i):
        for _ in range(3):
            got[i] = exact_matmul(*pairs[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(pairs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(np.array_equal(bits(g), bits(w)) for g, w in zip(got, want))
    first = exact_matmul(*pairs[0])
    exact_matmul(*pairs[1])  # the next product reuses the temporaries, never the output handed back
    assert np.array_equal(bits(first), bits(want[0]))


def test_a_gram_matrix_is_widened_once_and_exactly_symmetric(monkeypatch):
    # x @ x.T (Newton-Schulz's Gram matrix): b is a's transpose, so one float64 copy serves both (a BLAS then forms
    # it in half the FLOPs), and each element is its exact sum either way
    rng = np.random.default_rng(9)
    x = (rng.standard_normal((6, 70)) * 2.0 ** rng.integers(-20, 20, size=(6, 70))).astype(np.float32)
    widened = Spy(monkeypatch, _exact_matmul, "_widened")
    got = exact_matmul(x, x.T)
    assert widened.calls == 1
    assert np.array_equal(bits(got), bits(reference(x, x.T))) and np.array_equal(bits(got), bits(got.T))
    y = x.copy()
    assert np.array_equal(bits(exact_matmul(x, y.T)), bits(got)) and widened.calls == 3  # another matrix: two


def test_fp32_products_the_norms_answer_are_not_searched_for_nan_and_a_nan_operand_still_gives_the_canonical_one(
        monkeypatch):
    # finite fp32 operands: the norms' bound answers, and its sums are finite or past float32's range (inf, -inf
    # against a column of -1, as the exact sums round), never NaN: the output is not searched for one (_nan.py's
    # pass). A NaN operand (sign set, a payload) goes the long way, whose NaN comes out as the canonical one
    a, b = np.ones((40, 8), np.float32), np.ones((8, 40), np.float32)
    a[0], b[:, 1] = np.float32(3e38), -1.0
    want = reference(a, b)
    with monkeypatch.context() as patched:
        patched.setattr(_exact_matmul, "canonical_nans", lambda *_: pytest.fail("searched for NaN"))
        got = exact_matmul(a, b)
    assert got[0, 0] == np.inf and got[0, 1] == -np.inf and np.array_equal(bits(got), bits(want))
    a[1, 0] = np.uint32(0xFFC00001).view(np.float32)
    assert (bits(exact_matmul(a, b)[1]) == 0x7FC00000).all()


def test_lines_with_one_nonzero_are_exact_and_never_suspects(monkeypatch):
    # dW = dy.T @ x where a unit's ReLU is on for one row of the micro-batch: along a row of a (or a column of b) with
    # one nonzero, c sums one exact product and zeros, so c is the exact sum: rounded as it is, a zero made +0 (here
    # under a BLAS that gives -0 for sums of zero products), and none of its elements a suspect, though the norms'
    # bound leaves every zero there in doubt. The other rows (two nonzeros and more) meet those columns as usual
    rng = np.random.default_rng(21)
    a = rng.standard_normal((24, 32)).astype(np.float32)
    b = rng.standard_normal((32, 100)).astype(np.float32)
    b[rng.random(b.shape) < 0.5] = 0  # half of each column zero: zeros wherever a row meets only those
    one_rows, one_columns = [2, 11, 20], [5, 77]
    a[one_rows] = 0
    a[one_rows, [0, 9, 31]] = [3.0, -2.0**-20, 7.5]
    b[:, one_columns] = -0.0
    b[[4, 20], one_columns] = [1.5, -2.0**30]
    a[7, [4, 20]] = 0  # row 7 meets both of those columns' one nonzero at a zero: c = -0 there, the exact sum +0
    monkeypatch.setattr(_norm_bound, "_gemm", minus_zero_blas)
    seen = []
    inner = _norm_bound.without_disjoint_zeros
    monkeypatch.setattr(_norm_bound, "without_disjoint_zeros", lambda flat, y, *rest:
                        seen.append(flat) or inner(flat, y, *rest))
    got = exact_matmul(a, b)
    assert np.array_equal(bits(got), bits(reference(a, b)))
    assert (got[one_rows] == 0).any() and not np.signbit(got[one_rows][got[one_rows] == 0]).any()
    assert (got[7, one_columns] == 0).all() and not np.signbit(got[7, one_columns]).any()
    row, column = np.divmod(np.concatenate(seen), b.shape[1])
    assert len(row) and not np.isin(row, one_rows).any() and not np.isin(column, one_columns).any()


def test_a_line_with_two_nonzeros_is_not_exact(monkeypatch):
    # (1 + 2**-12)**2 = 1 + 2**-11 + 2**-24, a float32 midpoint, plus 2**-80: float64 rounds the sum back onto the
    # midpoint (one rounding, two nonzero products) and float32 then ties to even, down; the exact sum lies above it
    # and rounds up. Lines of one nonzero are exact; lines of two must meet the bound, or this element comes out wrong
    a = np.zeros((3, 32), np.float32)
    a[:, :2] = [1 + 2.0**-12, 2.0**-40]
    b = np.zeros((32, 4), np.float32)
    b[:2] = np.array([1 + 2.0**-12, 2.0**-40], np.float32)[:, None]
    want = np.float32(1 + 2.0**-11 + 2.0**-23)
    assert (exact_matmul(a, b) == want).all() and (reference(a, b) == want).all()
    monkeypatch.setattr(_norm_bound, "_EXACT_NONZEROS", 2)  # one unit too loose
    assert (exact_matmul(a, b) == np.float32(1 + 2.0**-11)).all()


def test_a_few_suspects_are_summed_one_by_one_at_once(monkeypatch):
    # suspects so few that their exact sums cost less than the ~15 NumPy calls of their sums of magnitudes (a rank's dW
    # leaves one or two): summed one by one, nothing gathered first, each the exact sum rounded once
    rng = np.random.default_rng(22)
    a, b = near_ties(3, 32, rng), np.ones((32, 2), np.float32)
    b[:, 1] = -1
    magnitudes = Spy(monkeypatch, _exact_matmul, "_lines")
    one_by_one = Spy(monkeypatch, _exact_matmul, "exact_sum_f32")
    assert np.array_equal(bits(exact_matmul(a, b)), bits(reference(a, b)))
    assert one_by_one.calls == 6 and not magnitudes.calls


def in_order_blas(a, b, out):
    """A BLAS that adds each element's K products left to right, from +0 (an order a dgemm may take): its float64 sum
    of 1, 2**-60 and -1 is 0, where the exact sum is 2**-60."""
    out[...] = 0.0
    for k in range(a.shape[-1]):
        out += a[..., :, k, None] * b[..., k, None, :]


def rows_of_few_nonzeros() -> tuple:
    """(a (40, 32), b (32, 48)) float32: a dW over a micro-batch of 32 under ReLU masks, each row of a holding 0 to 8
    nonzeros and the rows of each count scattered among the others; b half zeros, with a dead column (-0) and one of
    one nonzero. Rows 0-5 and columns 0-3 hold the hard cases named beside them."""
    rng = np.random.default_rng(31)
    a = np.zeros((40, 32), np.float32)
    for i in range(6, 40):
        held = rng.choice(32, rng.integers(0, 9), replace=False)  # 0 to 8 nonzeros
        a[i, held] = rng.standard_normal(len(held)) * 2.0 ** rng.integers(-8, 9, len(held))
    a[rng.random(a.shape) < 0.2] *= -1
    a[a == 0] = np.where(rng.random(np.count_nonzero(a == 0)) < 0.5, 0.0, -0.0)  # -0 among the zeros
    b = (rng.standard_normal((32, 48)) * (rng.random((32, 48)) < 0.5)).astype(np.float32)
    a[0, :2] = [1 + 2.0**-12, 2.0**-40]  # two nonzeros: (1 + 2**-12)**2 = 1 + 2**-11 + 2**-24, a float32 midpoint,
    b[:, 0], b[:2, 0] = 0.0, [1 + 2.0**-12, 2.0**-40]  # plus 2**-80: c lands on the midpoint, s lies above it
    a[1, 4:7] = [1.0, 2.0**-60, -1.0]  # three nonzeros: s = 2**-60, where c summed in order is 0
    b[:, 1], b[4:7, 1] = 0.0, 1.0
    a[2, 8:12] = [1.0, -1.0, 0.5, -0.5]  # four nonzeros that cancel exactly against column 2: +0
    b[8:12, 2] = 3.0
    a[3, 12:14] = [1.0, -1.0]  # two nonzeros that cancel exactly against column 2's equal pair: +0
    b[12:14, 2] = 0.25
    a[4, 20] = -2.0**-30  # one nonzero: c = a·b exactly, or -0 against b's zeros (+0 the exact sum)
    # (row 5 stays all zero, some -0: a dead row, +0 throughout)
    b[:, 3] = -0.0  # a dead column: +0 throughout
    b[20, 44] = 3.0  # column 44: one nonzero
    b[np.arange(32) != 20, 44] = -0.0
    return a, b


@pytest.mark.parametrize("blas", [np.matmul, in_order_blas, minus_zero_blas])
def test_rows_of_few_nonzeros_give_the_exact_sums_and_their_disjoint_zeros_are_no_suspects(monkeypatch, blas):
    # a short-K product's rows GEMM'd in groups by how many nonzeros they hold, each group's gathered in blocks of 4
    # (_BLOCK): rows of one nonzero rounded with no test, rows of 2-4 tested with their zeros of disjoint lines told
    # exact in the block. Each element must be its exact sum (Fraction sums), under BLASes that sum in any order or
    # give -0 for zero sums; a double-rounding trap in a row of two nonzeros and a float64 cancellation to 0 in a row
    # of three must stay suspects
    monkeypatch.setattr(_norm_bound, "_BLOCK", 4 * 48)
    monkeypatch.setattr(_norm_bound, "_gemm", blas)
    a, b = rows_of_few_nonzeros()
    seen = []  # the zero suspects the block tests leave
    inner = _norm_bound.without_disjoint_zeros
    monkeypatch.setattr(_norm_bound, "without_disjoint_zeros", lambda flat, y, *rest:
                        seen.append(flat[y == 0]) or inner(flat, y, *rest))
    got = exact_matmul(a, b)
    assert np.array_equal(bits(got), bits(reference(a, b)))
    assert got[0, 0] == np.float32(1 + 2.0**-11 + 2.0**-23) and got[1, 1] == np.float32(2.0**-60)
    assert bits(got[2:4, 2]).tolist() == [0, 0] and not bits(got[:, 3]).any()  # +0
    row, column = np.divmod(np.concatenate(seen), b.shape[1])
    few = (np.count_nonzero(a, axis=1) >= 2) & (np.count_nonzero(a, axis=1) <= 4)
    disjoint = ((a != 0).astype(int) @ (b != 0).astype(int)) == 0
    assert disjoint[few].sum() > 100 and not (few[row] & disjoint[row, column]).any()  # told in the block


@given(m=st.integers(1, 24), k=st.integers(1, 64), n=st.integers(1, 4), seed=st.integers(0, 2**32 - 1),
       held=st.integers(0, 6))
def test_sparse_short_products_equal_the_exact_sums_rounded_once(m, k, n, seed, held):
    # rows of a with up to `held` nonzeros (the groups of _short_product) against b half zeros, magnitudes 2**±30
    # apart so sums cancel, into an out of NaN
    rng = np.random.default_rng(seed)
    a = np.zeros((m, k), np.float32)
    for i in range(m):
        where = rng.choice(k, min(k, rng.integers(0, held + 1)), replace=False)
        a[i, where] = rng.standard_normal(len(where)) * 2.0 ** rng.integers(-30, 31, len(where))
    b = (rng.standard_normal((k, n)) * (rng.random((k, n)) < 0.5)).astype(np.float32)
    b[rng.random((k, n)) < 0.1] = -0.0
    out = np.full((m, n), np.nan, np.float32)  # an element left unwritten shows
    assert np.array_equal(bits(exact_matmul(a, b, out=out)), bits(reference(a, b)))


def test_rows_of_a_few_nonzeros_are_made_where_they_lie_whatever_their_counts():
    # rows 0 and 4 hold two nonzeros, row 1 three, row 3 four, row 2 six: the rows of a few nonzeros (0, 1, 3, 4)
    # are one block, gathered around row 2, each written to its own row of out (NaN until then) with its own
    # bitmaps; taken in order of their counts (0, 4, 1, 3) they would look like the run 0-3
    rng = np.random.default_rng(33)
    a = np.zeros((5, 8), np.float32)
    for row, held in enumerate([2, 3, 6, 4, 2]):
        a[row, rng.choice(8, held, replace=False)] = rng.standard_normal(held)
    b = (rng.standard_normal((8, 6)) * (rng.random((8, 6)) < 0.6)).astype(np.float32)
    out = np.full((5, 6), np.nan, np.float32)
    assert np.array_equal(bits(exact_matmul(a, b, out=out)), bits(reference(a, b)))


@pytest.mark.parametrize("k", [32, 100])  # a short K (rows in groups) and a long one (one GEMM)
@pytest.mark.parametrize("dead", [2, 40])  # few dead columns (set apart by index) and many (by masks)
def test_dead_columns_of_b_are_plus_zero_however_many(monkeypatch, k, dead):
    # dW = dy.T @ x where units of x are off for the whole micro-batch: columns of b all zero (some -0), under a BLAS
    # that gives -0 for sums of zero products; c ± E of their zeros would round to both signs
    monkeypatch.setattr(_norm_bound, "_gemm", minus_zero_blas)
    rng = np.random.default_rng(34)
    a = (rng.standard_normal((24, k)) * (rng.random((24, k)) < 0.5)).astype(np.float32)
    b = rng.standard_normal((k, 80)).astype(np.float32)
    gone = rng.choice(80, dead, replace=False)
    b[:, gone] = np.where(rng.random((k, dead)) < 0.5, 0.0, -0.0)
    seen = []  # the suspects: none in a dead column
    inner = _norm_bound.without_disjoint_zeros
    monkeypatch.setattr(_norm_bound, "without_disjoint_zeros", lambda flat, y, *rest:
                        seen.append(flat % 80) or inner(flat, y, *rest))
    got = exact_matmul(a, b)
    assert np.array_equal(bits(got), bits(reference(a, b))) and not bits(got[:, gone]).any()
    assert not np.isin(np.concatenate([np.zeros(0, np.intp), *seen]), gone).any()
