"""fp32 products of at most `_SMALL` elements made whole (precision/arithmetic/_norm_bound.py `_small_product`): one
float64 GEMM, each element tested against its own norms' bound, the few in doubt settled as every fp32 product's are.
Every answer against the exact rational sums rounded once (test_exact_matmul's `reference`: Fraction sums, integer
rounding), under the machine's dgemm and under BLASes that sum in another order, that give -0 for zero sums, and
whose every sum is off by nearly the most any order allows. tests/test_exact_matmul_norms.py holds the blocks that
larger products take (it makes its small products go through them)."""

from contextlib import contextmanager

import numpy as np
import pytest
from helpers import bits
from hypothesis import given
from hypothesis import strategies as st
from test_exact_matmul import HARD, reference
from test_exact_matmul_norms import in_order_blas, minus_zero_blas, near_ties

from zerosim.precision.arithmetic import _norm_bound, exact_matmul

pytestmark = pytest.mark.pinned  # bits that must be the same on every machine


def worst_blas(a64, b64, out):
    """Each sum 0.9 of γ(K-1)·Σ_k |a_ik·b_kj| away from the float64 product, above and below in turns of two
    columns: the most any order of the adds allows (Higham, §3.1), nearly."""
    np.matmul(a64, b64, out=out)
    bound = (a64.shape[-1] - 1) * 2.0**-53 * (np.abs(a64) @ np.abs(b64))
    out += np.where(np.arange(out.shape[-1]) % 4 < 2, 0.9, -0.9) * bound


BLASES = {"dgemm": np.matmul, "in order": in_order_blas, "-0 sums": minus_zero_blas, "worst": worst_blas}


@contextmanager
def blas(name: str):
    """Products made by the BLAS named (BLASES), and counted: yields a list that holds one entry a small product."""
    made, gemm, small = [], _norm_bound._gemm, _norm_bound._small_product

    def counted(*args):
        made.append(args[0].shape)
        return small(*args)

    _norm_bound._gemm, _norm_bound._small_product = BLASES[name], counted
    try:
        yield made
    finally:
        _norm_bound._gemm, _norm_bound._small_product = gemm, small


@given(m=st.integers(1, 24), k=st.integers(1, 90), n=st.integers(1, 24), batch=st.integers(0, 3),
       seed=st.integers(0, 2**32 - 1), spread=st.integers(0, 40), zeros=st.floats(0, 0.7),
       name=st.sampled_from(sorted(BLASES)))
def test_small_fp32_products_equal_the_exact_sums_rounded_once(m, k, n, batch, seed, spread, zeros, name):
    # magnitudes 2**±spread apart so sums cancel, zeros (some -0) as a ReLU leaves them, a stack of products or one
    rng = np.random.default_rng(seed)
    lead = (batch,) if batch else ()
    a = rng.standard_normal(lead + (m, k)) * 2.0 ** rng.integers(-spread, spread + 1, size=lead + (m, k))
    b = rng.standard_normal(lead + (k, n))
    a[rng.random(a.shape) < zeros] = 0.0
    b[rng.random(b.shape) < zeros / 2] = -0.0
    a, b = a.astype(np.float32), b.astype(np.float32)
    with blas(name) as made:
        got = exact_matmul(a, b)
    assert made  # the small path made it
    want = np.stack([reference(a[i], b[i]) for i in range(batch)]) if batch else reference(a, b)
    assert np.array_equal(bits(got), bits(want))


@pytest.mark.parametrize("name", sorted(BLASES))
def test_near_ties_settle_under_every_blas(name):
    # sums on float32 midpoints, or 2**-45 or 2**-60 beside one, among ±1 that cancel: Σ|p| ~ K, the sum ~1.5, so
    # each element's own norms (Cauchy-Schwarz nearly tight for a row of ±1 and b of ones) bound its error barely
    rng = np.random.default_rng(21)
    a, b = near_ties(20, 40, rng), np.ones((40, 64), np.float32)
    b[:, 1::2] *= -1  # ties on both sides of zero
    with blas(name) as made:
        got = exact_matmul(a, b)
    assert made
    assert np.array_equal(bits(got), bits(np.tile(reference(a, b[:, :2]), (1, 32))))


def test_without_the_bound_the_near_ties_round_wrongly(monkeypatch):
    # the bound is what makes them right: with E = 0 no element is in doubt, and c rounds as float64 does
    rng = np.random.default_rng(22)
    a, b = near_ties(16, 40, rng), np.ones((40, 3), np.float32)
    monkeypatch.setattr(_norm_bound, "SLACK", 0.0)
    with blas("dgemm") as made:
        got = exact_matmul(a, b)
    assert made and not np.array_equal(bits(got), bits(reference(a, b)))


@pytest.mark.parametrize("name", sorted(BLASES))
def test_zero_rows_and_columns_and_cancellations_are_plus_zero_or_their_exact_sums(name):
    # a row of a and a column of b all zero or -0 (E_ij = 0: c is the exact +0 once made +0), rows and columns that
    # meet nowhere (E_ij > 0, c = 0: in doubt, settled to +0), a sum float64 reaches by cancelling (1 + 2**-60 - 1 in
    # order: 0, the exact sum 2**-60), and a double-rounding trap of two products: (1 + 2**-12)**2 = 1 + 2**-11 +
    # 2**-24, a float32 midpoint, plus 2**-80 (float64 rounds back onto the midpoint, which ties down; the exact sum
    # rounds up)
    rng = np.random.default_rng(23)
    a = rng.standard_normal((12, 40)).astype(np.float32)
    b = rng.standard_normal((40, 30)).astype(np.float32)
    a[2] = -0.0
    b[:, 20] = 0.0
    a[:6, 20:] = 0
    b[:20, :10] = 0  # rows 0-5 and columns 0-9 meet nowhere
    a[6] = 0
    a[6, 16:19] = [1.0, 2.0**-60, -1.0]
    b[16:19, 25] = 1.0
    a[7] = 0
    a[7, :2] = [1 + 2.0**-12, 2.0**-40]
    b[:2, 11] = [1 + 2.0**-12, 2.0**-40]
    with blas(name) as made:
        got = exact_matmul(a, b)
    assert made
    assert np.array_equal(bits(got), bits(reference(a, b)))
    assert got[6, 25] == np.float32(2.0**-60) and got[7, 11] == np.float32(1 + 2.0**-11 + 2.0**-23)
    assert not bits(got[2]).any() and not bits(got[:, 20]).any() and not bits(got[:6, :10]).any()  # +0


@pytest.mark.parametrize("name", sorted(HARD))
def test_the_hard_cases_of_every_product(name):
    # test_exact_matmul's table: cancellations, ties, subnormal results, sums past float32's range (inf)
    row, column, want = HARD[name]
    a, b = np.array([row], np.float32), np.array(column, np.float32)[:, None]
    with np.errstate(over="ignore"), blas("dgemm") as made:
        got = exact_matmul(a, b)
    assert made and bits(got) == bits(np.float32([[want]]))


def test_nan_and_inf_operands_go_the_long_way():
    # the norms are not finite: `rounded_by_norms` answers None before the small path, and the long way gives the
    # canonical NaN and the infinities
    a = np.ones((3, 4), np.float32)
    b = np.ones((4, 2), np.float32)
    a[0, 1], b[2, 1] = np.nan, np.inf
    with np.errstate(invalid="ignore"), blas("dgemm") as made:
        got = exact_matmul(a, b)
    assert not made
    assert np.isnan(got[0]).all() and np.isinf(got[1:, 1]).all() and (got[1:, 0] == 4).all()


def test_into_a_strided_out():
    # a rank's dW inside the ranks' packed gradients: the rounded sums written where out lies
    rng = np.random.default_rng(24)
    a = rng.standard_normal((8, 16)).astype(np.float32)
    b = rng.standard_normal((16, 12)).astype(np.float32)
    packed = np.full((2, 12, 8), np.nan, np.float32)
    out = packed[1].T  # (8, 12), strided
    with blas("dgemm") as made:
        got = exact_matmul(a, b, out=out)
    assert made and got is out
    assert np.array_equal(bits(packed[1].T), bits(reference(a, b))) and np.isnan(packed[0]).all()


def test_larger_products_take_the_blocks():
    a = np.ones((128, 8), np.float32)
    b = np.ones((8, _norm_bound._SMALL // 128 + 1), np.float32)
    with blas("dgemm") as made:
        got = exact_matmul(a, b)
    assert not made and (got == 8).all()
