"""exact_matmul's shortcut for 16- and 8-bit inputs (precision/arithmetic/_exact_matmul.py, `_unsure` and
`_settle`): the same bits as the exact rational sums rounded once, whether every element is certified by the bound
by rows and columns, a few are settled one by one, or the whole product goes the long way; and the products the
models make in training take the shortcut.

The reference is test_exact_matmul's: Python's Fraction sums the K products exactly, integer arithmetic rounds.
"""

import math
from unittest import mock

import ml_dtypes
import numpy as np
import pytest
from helpers import bits
from hypothesis import given
from hypothesis import strategies as st
from test_exact_matmul import reference

from zerosim.precision.arithmetic import _exact_matmul, _extents
from zerosim.precision.arithmetic import exact_matmul

BF16 = np.dtype(ml_dtypes.bfloat16)
pytestmark = pytest.mark.pinned  # bits that must be the same on every machine


def paths(a, b) -> str:
    """Which way exact_matmul takes for 16- or 8-bit a and b: "whole" (one bound over each operand, small products
    only), "certified" (the bound by rows and columns), "settled" (a few elements one by one) or "long"."""
    if a.size + b.size < _exact_matmul._WHOLE_FIRST:  # small: the whole bound, else the long way
        return "whole" if _extents.whole_bound_holds(a, b) else "long"
    facts_a, facts_b = _extents.extents(a, -1), _extents.extents(b, -2)
    if facts_a is None or facts_b is None:
        return "long"
    rows, columns = np.abs(a.astype(np.float64)).sum(-1) / facts_a[1], facts_b[0] / facts_b[1]
    where = _exact_matmul._unsure(rows, columns)
    n = 0 if where is None else len(where[0])
    return "certified" if n == 0 else "settled" if n <= a.shape[-2] * b.shape[-1] // 16 else "long"


def test_a_row_a_float64_sum_gets_wrong_in_any_order_is_not_certified():
    # 2**60 + 2**36 + 1 lies just above the float32 midpoint 2**60 + 2**36 (float32's spacing there is 2**37): it
    # rounds up. A float64 sum in any order loses the 1 (61 bits) and lands on the midpoint, which ties down to
    # 2**60. Every value is a bf16: the bound must see that this row's sums are not exact.
    row = np.array([[2.0**60, 2.0**36, 1.0]]).astype(BF16)
    ones = np.ones((3, 1)).astype(BF16)
    assert (row.astype(np.float64) @ ones.astype(np.float64)).astype(np.float32)[0, 0] == np.float32(2.0**60)
    assert exact_matmul(row, ones)[0, 0] == np.float32(2.0**60 + 2.0**37) == reference(row, ones)[0, 0]


def padded(a, b, k: int = 256) -> tuple:
    """a (..., M, K0) and b (..., K0, N) with zeros appended along K up to k: the same exact sums (a zero product
    adds nothing), but a product large enough (a.size + b.size >= `_WHOLE_FIRST`) to take the bound by rows and
    columns, so `reference` can still sum the K0 columns that matter."""
    a_pad = np.zeros(a.shape[:-1] + (k,), a.dtype)
    b_pad = np.zeros(b.shape[:-2] + (k, b.shape[-1]), b.dtype)
    a_pad[..., : a.shape[-1]], b_pad[..., : b.shape[-2], :] = a, b
    return a_pad, b_pad


def test_a_few_unsure_elements_are_settled_one_by_one_the_rest_certified(monkeypatch):
    # a (40, 256) @ (256, 40) bf16 product of moderate range (8 columns of a, rows of b, not zero), but row 3 and
    # column 5 hold the row above (a 2**60 spread): 79 of 1600 elements are unsure (under one in 16), settled one by
    # one; the element they share needs the exact sum (`_repair`)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((40, 8)).astype(BF16), rng.standard_normal((8, 40)).astype(BF16)
    a[3, :3] = [2.0**60, 2.0**36, 1.0]
    a[3, 3:] = 0
    b[:3, 5] = 1.0
    want = reference(a, b)
    a, b = padded(a, b)
    assert paths(a, b) == "settled"
    repaired, repair = [], _exact_matmul._repair
    monkeypatch.setattr(_exact_matmul, "_repair", lambda out, where, *rest: repaired.append(
        list(zip(*where))) or repair(out, where, *rest))
    got = exact_matmul(a, b)
    assert got[3, 5] == np.float32(2.0**60 + 2.0**37) and repaired == [[(3, 5)]]
    assert np.array_equal(bits(got), bits(want))


def test_an_element_the_rows_and_columns_leave_unsure_is_settled_by_its_own_sum_of_magnitudes(monkeypatch):
    # row 3 of a holds 2**40 and 1 (its quantum 2**-7), column 5 of b holds 1 and 2**40, where they never meet
    # (2**40·1 + 1·2**40 = 2**41, every partial sum a float64): the bound by rows and columns, Σ|a_3k|·max|b_k5| ~
    # 2**80, leaves (3, 5) unsure, and the 39 other elements of row 3 (zero: b's first two rows are 0 elsewhere) too,
    # with error bounds wider than float32's spacing; their own Σ_k|a_3k·b_kj| (2**41, and 0) settle all of them,
    # so none is summed one product at a time
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((40, 8)).astype(BF16), rng.standard_normal((8, 40)).astype(BF16)
    a[3] = 0
    a[3, :2] = [2.0**40, 1.0]
    b[:2] = 0
    b[:2, 5] = [1.0, 2.0**40]
    want = reference(a, b)
    a, b = padded(a, b)
    assert paths(a, b) == "settled"
    repaired, repair = [], _exact_matmul._repair
    monkeypatch.setattr(_exact_matmul, "_repair", lambda out, where, *rest: repaired.append(1) or repair(out, where,
                                                                                                       *rest))
    got = exact_matmul(a, b)
    assert got[3, 5] == np.float32(2.0**41) and not repaired
    assert np.array_equal(bits(got), bits(want))


def test_a_large_product_gives_plus_zero_for_exact_zeros_and_minus_zero_for_tiny_negative_sums():
    # the shortcut rounds c + 0 to float32 in one pass: a row of bf16 2**-80 against columns of -2**-80 sums to
    # -2**-152 (K = 256 products of -2**-160), far below float32's smallest subnormal: -0, as the exact sum rounds;
    # the other rows are zeros against the same columns, products of -0 only: an exact zero, +0 (module docstring)
    a, b = np.zeros((40, 256), BF16), np.full((256, 40), -(2.0**-80), BF16)
    a[0] = 2.0**-80
    assert paths(a, b) == "certified"
    got = exact_matmul(a, b)
    assert np.all(got == 0) and np.all(np.signbit(got[0])) and not np.any(np.signbit(got[1:]))


def test_a_proved_product_past_float32s_range_is_inf_never_nan_and_is_not_searched_for_nan(monkeypatch):
    # bf16's largest value 8 times over (8 x 3.39e38) sums past float32's largest: +inf, and -inf against a column
    # of -1, as the exact sums round; the bound by rows and columns proves it (finite operands), so no element can be
    # NaN and the output is not searched for one (_nan.py's pass, kept for the long way's NaN and inf operands)
    big = float(ml_dtypes.finfo(BF16).max)
    a, b = np.ones((40, 8), BF16), np.ones((8, 40), BF16)
    a[0], b[:, 1] = big, -1.0
    want = reference(a, b)
    a, b = padded(a, b)
    assert paths(a, b) == "certified"
    monkeypatch.setattr(_exact_matmul, "canonical_nans", mock.Mock(side_effect=AssertionError("searched")))
    got = exact_matmul(a, b)
    assert got[0, 0] == np.inf and got[0, 1] == -np.inf and not np.isnan(got).any()
    assert np.array_equal(bits(got), bits(want))


def test_rounding_makes_exact_zeros_plus_zero_on_either_side_of_the_smallest_subnormal_quanta():
    # _rounded_plus_zero: where every q_i·q_j reaches 2**-149 no nonzero sum rounds to zero, so +0 is added after the
    # float32 rounding; below, before it, in float64, so that a tiny negative sum still rounds to -0. A BLAS that
    # starts a sum from its first product gives -0 for products of -0 only (OpenBLAS gives +0, so this feeds c itself)
    c = np.array([[-0.0, 1.5, -0.0]])  # (1, 3): exact zeros as such a BLAS leaves them
    got = _exact_matmul._rounded_plus_zero(c.copy(), np.array([2.0**-75]), np.array([2.0**-74] * 3))  # 2**-149
    assert got.dtype == np.float32 and not np.any(np.signbit(got)) and got[0, 1] == 1.5
    c = np.array([[-0.0, -(2.0**-160), 2.0**-160]])  # quanta 2**-80·2**-80: sums this small can be nonzero
    got = _exact_matmul._rounded_plus_zero(c.copy(), np.array([2.0**-80]), np.array([2.0**-80] * 3))
    assert np.all(got == 0) and np.signbit(got).tolist() == [[False, True, False]]


def test_batched_products_settle_their_few_unsure_elements_too():
    # leading dims broadcast as NumPy's matmul does (b has one fewer); the hard row sits in one batch element only
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((2, 3, 40, 8)).astype(BF16), rng.standard_normal((3, 8, 40)).astype(BF16)
    a[1, 2, 3, :3], a[1, 2, 3, 3:] = [2.0**60, 2.0**36, 1.0], 0
    b[2, :3, 5] = 1.0
    want = [[reference(a[i, h], b[h]) for h in range(3)] for i in range(2)]
    a, b = padded(a, b, k=64)  # 2·3·40·64 + 3·64·40 elements: the shortcut
    assert a.size + b.size >= _exact_matmul._WHOLE_FIRST
    got = exact_matmul(a, b)
    assert got.shape == (2, 3, 40, 40) and got[1, 2, 3, 5] == np.float32(2.0**60 + 2.0**37)
    for i in range(2):
        for h in range(3):
            assert np.array_equal(bits(got[i, h]), bits(want[i][h]))


@pytest.mark.parametrize("at_once", [None, 40 * 5], ids=["whole", "blocks of 5 rows"])
def test_a_batch_of_products_one_by_one_settles_each_ones_unsure_elements_as_that_product_alone(monkeypatch, at_once):
    # (3, 40, K) @ (3, K, 40), each product its own (the ranks' dW: `_shortcut_each`): product 1 holds the hard row
    # of the test above against a column of ones (79 unsure elements, one summed exactly), product 2 a row and a
    # column that leave elements unsure which their own sums of magnitudes settle, product 0 none; each against the
    # exact rational sums, and the hard element summed exactly in product 1 only; c made and rounded whole, or five
    # rows at a time (the hard rows 3 and 7 in the first and second block)
    if at_once:
        monkeypatch.setattr(_exact_matmul, "_ROUNDED_AT_ONCE", at_once)
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((3, 40, 8)).astype(BF16), rng.standard_normal((3, 8, 40)).astype(BF16)
    a[1, 3, :3], a[1, 3, 3:] = [2.0**60, 2.0**36, 1.0], 0
    b[1, :3, 5] = 1.0
    a[2, 7], b[2, :2] = 0, 0
    a[2, 7, :2], b[2, :2, 9] = [2.0**40, 1.0], [1.0, 2.0**40]
    want = [reference(a[p], b[p]) for p in range(3)]
    a, b = padded(a, b)
    repaired, repair = [], _exact_matmul._repair
    monkeypatch.setattr(_exact_matmul, "_repair", lambda out, where, *rest: repaired.append(
        list(zip(*where))) or repair(out, where, *rest))
    each = mock.Mock(wraps=_exact_matmul._shortcut_each)
    monkeypatch.setattr(_exact_matmul, "_shortcut_each", each)
    got = exact_matmul(a, b)
    assert each.call_count == 1 and got.shape == (3, 40, 40)
    assert got[1, 3, 5] == np.float32(2.0**60 + 2.0**37) and got[2, 7, 9] == np.float32(2.0**41)
    assert repaired == [[(3, 5)]]  # product 1's element, at its own (i, j) (its block's first five rows)
    for p in range(3):
        assert np.array_equal(bits(got[p]), bits(want[p]))


def test_a_training_step_in_bf16_proves_every_product_from_bits_or_sends_a_small_one_the_long_way(monkeypatch):
    # a ZeRO-3 step of a bf16 MLP on 2 ranks: every large product (forward, dx, dW of the first two layers) is proved
    # from its operands' bits, at most one element in 16 settled one by one, none the long way; a small one (the
    # last layer's) by one bound over each whole operand where it holds, else the long way (its second GEMM costs
    # less than facts by rows and columns); and the step still equals the oracle bit for bit
    from zerosim import MLP, Adam, Cluster, Reference, ZeroEngine
    from zerosim.models import make_regression

    taken, narrow_product = [], _exact_matmul._narrow_product

    def counted(a, b, once=False):
        out = narrow_product(a, b, once)
        small = a.size + b.size < _exact_matmul._WHOLE_FIRST
        taken.append((small, small and _extents.whole_bound_holds(a, b), out is not None))
        return out

    monkeypatch.setattr(_exact_matmul, "_narrow_product", counted)
    widths = [64, 256, 128, 32]
    model = MLP(widths)
    params = model.init_params(np.random.default_rng(0))
    batches = make_regression(np.random.default_rng(1), 2, 16, widths)
    engine = ZeroEngine(model, Cluster(2), 3, Adam(lr=1e-3), "bf16-mixed", params=params)
    oracle = Reference(model, Adam(lr=1e-3), "bf16-mixed", world_size=2, params=params)
    for _ in range(2):
        engine.step(batches)
        oracle.step(batches)
    large = [proved for small, _, proved in taken if not small]
    small = [(whole, proved) for is_small, whole, proved in taken if is_small]
    assert len(large) >= 2 * 2 * 3 * 2 and all(large)
    assert len(small) >= 2 * 2 * 3 and all(whole == proved for whole, proved in small)
    assert any(whole for whole, _ in small)
    assert np.array_equal(bits(engine.full_master()), bits(oracle.master()))


def test_a_small_product_its_whole_bound_refuses_is_settled_by_the_whole_quanta_without_rounding_bounds(monkeypatch):
    # the whole bound multiplies the largest |a| by the largest |b| (and K): here they never meet in one product
    # (2**20 pairs with 2**-10 both ways), so it fails, 2**41 against 2**52·q_a·q_b = 2**18, while the largest
    # Σ|a·b|, 2**11 + 2**-10, lies far below 2**53·q_a·q_b = 2**19 (q = 2**-17 for both: the last bit of 2**-10 in
    # bf16). The long way then needs no rounding bounds at all; with one product of 2**19 it does
    a = np.array([[2.0**20, 2.0**-10], [1.0, 2.0**-9]]).astype(BF16)
    b = np.array([[2.0**-10, 2.0**-10], [2.0**20, 1.0]]).astype(BF16)
    assert not _extents.whole_bound_holds(a, b) and paths(a, b) != "whole"
    calls, certain = [], _exact_matmul.certain_f32
    monkeypatch.setattr(_exact_matmul, "certain_f32", lambda *args: calls.append(1) or certain(*args))
    assert np.array_equal(bits(exact_matmul(a, b)), bits(reference(a, b))) and not calls
    a[1, 1] = 0.5  # a[1, 1]·b[1, 0] = 2**19 alone: no longer below 2**53 whole quanta
    assert np.array_equal(bits(exact_matmul(a, b)), bits(reference(a, b))) and calls


@pytest.mark.parametrize("dtype", [BF16, np.float16, ml_dtypes.float8_e4m3fn])
@given(m=st.integers(1, 6), k=st.integers(1, 24), n=st.integers(1, 6), seed=st.integers(0, 2**32 - 1),
       spread=st.integers(0, 60), zeros=st.floats(0, 0.5))
def test_every_path_gives_the_exact_sums_rounded_once(dtype, m, k, n, seed, spread, zeros):
    # spreads from none (certified) to 2**±60 in bf16 (settled or the long way), with exact zeros in the rows
    rng = np.random.default_rng(seed)
    top = {np.dtype(np.float16): 7, np.dtype(ml_dtypes.float8_e4m3fn): 4}.get(np.dtype(dtype), spread)
    spread = min(spread, top)
    a = (rng.standard_normal((m, k)) * 2.0 ** rng.integers(-spread, spread + 1, (m, k))).astype(dtype)
    b = (rng.standard_normal((k, n)) * 2.0 ** rng.integers(-spread, spread + 1, (k, n))).astype(dtype)
    a[rng.random((m, k)) < zeros] = 0
    assert np.array_equal(bits(exact_matmul(a, b)), bits(reference(a, b)))


@given(seed=st.integers(0, 2**32 - 1), spread=st.integers(0, 130), zeros=st.floats(0, 1))
def test_the_quantum_is_the_last_bit_of_the_smallest_nonzero_value(seed, spread, zeros):
    # bf16 keeps 8 significant bits: the smallest nonzero |x| of a row (or column) = m·2**e, m in [0.5, 1), has its
    # last bit at 2**(e - 8); every larger bf16 value is a whole multiple of it; all zeros: +inf
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((5, 7)) * 2.0 ** rng.integers(-spread, spread + 1, (5, 7))).astype(BF16)
    x[rng.random((5, 7)) < zeros] = 0
    x64 = x.astype(np.float64)
    for axis in (-1, -2):
        q = _exact_matmul._quantum(np.abs(x64), 8, axis)
        for line, got in zip(np.moveaxis(x64, axis, -1), q):
            nonzero = [abs(float(v)) for v in line if v != 0]
            want = math.ldexp(1.0, math.frexp(min(nonzero))[1] - 8) if nonzero else math.inf
            assert got == want
        assert np.all(np.mod(x64, np.expand_dims(q, axis)) == 0)


@pytest.mark.filterwarnings("ignore:invalid value encountered in matmul")  # inf·0 in the dgemm, as fp32's gives
def test_nan_and_inf_rows_are_unsure_and_pass_through():
    a = np.ones((20, 4)).astype(BF16)
    a[2, 0], a[7, 1] = np.nan, np.inf
    got = exact_matmul(a, np.ones((4, 3)).astype(BF16))
    assert np.isnan(got[2]).all() and (got[7] == np.inf).all() and (np.delete(got, [2, 7], 0) == 4).all()
