"""exact_matmul: every element the exact dot product rounded once to float32, checked against exact rational sums.

The reference below knows nothing of floating-point sums: Python's Fraction adds the K products exactly, and
`rounded_f32` rounds the rational to float32 by integer arithmetic (the quantum of its binade, round-half-even on
the integer count of quanta). Where the two agree on every element, including the hand-made ties and
cancellations of HARD, the product cannot depend on the order any BLAS sums in.
"""

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from helpers import bits
from hypothesis import given
from hypothesis import strategies as st

from zerosim.precision.arithmetic import exact_matmul

pytestmark = pytest.mark.pinned  # bits that must be the same on every machine: .ci/pinned runs them everywhere

F32_MAX_EXP, F32_MIN_NORMAL_EXP, F32_FRACTION_BITS = 128, -126, 23


def rounded_f32(x: Fraction) -> np.float32:
    """The rational x rounded once to nearest-even float32 (+0 for 0): the quantum of x's binade, counted."""
    if x == 0:
        return np.float32(0.0)
    m = abs(x)
    e = m.numerator.bit_length() - m.denominator.bit_length()  # 2**e <= m < 2**(e + 1), after the fix below
    if Fraction(2) ** e > m:
        e -= 1
    quantum = Fraction(2) ** (max(e, F32_MIN_NORMAL_EXP) - F32_FRACTION_BITS)
    n = round(m / quantum)  # Fraction's round: half to even
    value = n * quantum
    if value >= Fraction(2) ** F32_MAX_EXP:
        return np.float32(np.inf) if x > 0 else np.float32(-np.inf)
    out = np.float32(float(value))  # value has at most 24 significant bits: float() and float32 hold it exactly
    return out if x > 0 else -out


def reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(M, K) @ (K, N) by exact rational sums, each rounded once to float32."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    out = np.empty((a.shape[0], b.shape[1]), np.float32)
    for i in range(a.shape[0]):
        for j in range(b.shape[1]):
            out[i, j] = rounded_f32(sum((Fraction(float(x)) * Fraction(float(y)) for x, y in zip(a64[i], b64[:, j])),
                                        Fraction(0)))
    return out


T = 2.0**-24  # half of float32's spacing at 1: 1 + T is the midpoint between 1 and 1 + 2**-23
BIG = float(np.finfo(np.float32).max)  # (2 - 2**-23)·2**127, its spacing 2**104
HARD = {  # a row of a and a column of b (float32 values): what their exact dot product rounds to
    "midpoint: ties to even, down to 1": ([1.0, T], [1.0, 1.0], 1.0),
    "just above the midpoint: up, though a float64 sum lands on the midpoint": (
        [1.0, T, 2.0**-60], [1.0, 1.0, 1.0], 1 + 2.0**-23),
    "just below the midpoint: down": ([1.0, T, -(2.0**-60)], [1.0, 1.0, 1.0], 1.0),
    "midpoint of 1 + 2**-23 and 1 + 2**-22: ties to even, up": ([1.0 + 2.0**-23, T], [1.0, 1.0], 1 + 2.0**-22),
    "cancellation a float64 sum gets wrong left to right (2**60 + 1 is 2**60 there)": (
        [2.0**60, 1.0, -(2.0**60)], [1.0, 1.0, 1.0], 1.0),
    "an exact zero from opposite terms is +0": ([1.0, -1.0], [1.0, 1.0], 0.0),
    "products of -0 only: +0, as a GEMM's accumulator starts at +0": ([-0.0, -0.0], [1.0, 1.0], 0.0),
    "a product far below the smallest subnormal: -0 keeps its sign": ([-(2.0**-80)], [2.0**-80], -0.0),
    "the midpoint between 0 and the smallest subnormal ties to +0": ([2.0**-75], [2.0**-75], 0.0),
    "just above that midpoint: the smallest subnormal": ([2.0**-75, 2.0**-100], [2.0**-75, 2.0**-100], 2.0**-149),
    "the overflow threshold, halfway from the largest float32 to 2**128: ties to even, to inf": (
        [BIG, 2.0**103], [1.0, 1.0], np.inf),
    "just below the overflow threshold: the largest float32": ([BIG, 2.0**103, -1.0], [1.0, 1.0, 1.0], BIG),
}


@pytest.mark.parametrize("row, column, want", HARD.values(), ids=HARD.keys())
def test_hard_sums_round_once_to_what_the_rational_sum_rounds_to(row, column, want):
    a, b = np.array([row], np.float32), np.array(column, np.float32)[:, None]
    assert a[0].tolist() == row and b[:, 0].tolist() == column  # every value above is a float32
    got = exact_matmul(a, b)
    assert got.dtype == np.float32 and got.shape == (1, 1)
    assert bits(got) == bits(reference(a, b)) == bits(np.float32([[want]]))


def test_float64_alone_gets_the_hard_rows_wrong_so_the_repair_is_what_makes_them_right():
    # the reason for steps 2 and 3 of the module docstring: a float64 dgemm rounded to float32 misses these
    a = np.array([[1.0, T, 2.0**-60]], np.float32)
    assert (a.astype(np.float64) @ np.ones((3, 1))).astype(np.float32)[0, 0] == 1.0  # the midpoint, tied down
    assert exact_matmul(a, np.ones((3, 1), np.float32))[0, 0] == np.float32(1 + 2.0**-23)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16])
@given(m=st.integers(1, 5), k=st.integers(1, 40), n=st.integers(1, 5), seed=st.integers(0, 2**32 - 1),
       spread=st.integers(0, 40))
def test_random_products_equal_the_exact_rational_sums_rounded_once(dtype, m, k, n, seed, spread):
    rng = np.random.default_rng(seed)
    spread = min(spread, 10) if dtype is np.float16 else spread  # fp16 tops out at 65504
    scale = 2.0 ** rng.integers(-spread, spread + 1, size=(m, k))  # magnitudes 2**±spread apart: cancellations
    a = (rng.standard_normal((m, k)) * scale).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    assert np.array_equal(bits(exact_matmul(a, b)), bits(reference(a, b)))


def test_many_near_ties_all_round_as_the_rational_sums_do():
    # sums built to land within 2**-40 of a float32 midpoint, from either side: nearly every element is a suspect
    rng = np.random.default_rng(7)
    base = rng.uniform(1, 2, (64, 1)).astype(np.float32)
    half_ulp = np.spacing(base) / 2  # float32
    nudge = rng.choice([-1.0, 0.0, 1.0], size=(64, 1)) * 2.0**-40
    a = np.concatenate([base, half_ulp, nudge.astype(np.float32)], axis=1)  # (64, 3)
    b = np.ones((3, 2), np.float32)
    assert np.array_equal(bits(exact_matmul(a, b)), bits(reference(a, b)))


def test_batched_products_broadcast_as_numpy_matmul_does():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    b = rng.standard_normal((3, 5, 2)).astype(np.float32)  # one fewer leading dim: broadcast over the first
    got = exact_matmul(a, b)
    assert got.shape == (2, 3, 4, 2) and got.dtype == np.float32
    for i in range(2):
        for h in range(3):
            assert np.array_equal(bits(got[i, h]), bits(reference(a[i, h], b[h])))


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn])
@pytest.mark.parametrize("a_shape, b_shape", [((3, 0), (0, 4)), ((2, 3, 0), (0, 4)), ((0, 5), (5, 2)),
                                              ((3, 5), (5, 0))])
def test_an_empty_sum_is_plus_zero_and_empty_operands_give_numpy_s_shapes(dtype, a_shape, b_shape):
    """K = 0: each element sums no products, so its exact value is 0, which rounds to +0 (an fp32 product with K = 0
    raised from a reduction over K until 2026-11-26); an empty M or N: an empty array of numpy's shape. With `out`
    too, whatever it held before."""
    a, b = np.full(a_shape, -1.5, dtype), np.full(b_shape, 2.0, dtype)
    shape = np.matmul(np.zeros(a_shape), np.zeros(b_shape)).shape
    for out in (None, np.full(shape, np.nan, np.float32)):
        got = exact_matmul(a, b, out=out)
        assert got.shape == shape and got.dtype == np.float32
        assert np.array_equal(bits(got), np.zeros(shape, np.uint32))  # +0 everywhere: no sign bit, no NaN


@pytest.mark.filterwarnings("ignore:invalid value encountered in matmul")  # inf - inf: NumPy's own warning, as fp32's
def test_nan_and_inf_pass_through_as_any_order_gives_them():
    a = np.array([[np.inf, 1.0], [np.nan, 1.0], [np.inf, -np.inf]], np.float32)
    got = exact_matmul(a, np.ones((2, 1), np.float32))[:, 0]
    assert got[0] == np.inf and np.isnan(got[1]) and np.isnan(got[2])


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_on_a_device_the_same_bits(dtype):
    # the CuPy path (arrays stay on the device, subnormals widened by their bits, suspects settled on the host) run
    # through the NumPy stand-in for CuPy (precision/standin_array.py)
    from zerosim.precision.cast import numpy_standin

    ns, rng = numpy_standin(), np.random.default_rng(5)
    a, b = rng.standard_normal((2, 40, 33)).astype(dtype), rng.standard_normal((2, 33, 20)).astype(dtype)
    a[0, 0], b[0, :, 0] = 0, 1
    a[0, 0, :2] = [1.0, 2.0**-24]  # 1 + 2**-24: exactly a float32 midpoint (a true tie: to even, 1.0)
    got = exact_matmul(ns.from_host(a), ns.from_host(b))
    assert type(got).__name__ == "StandinArray"
    assert np.array_equal(bits(ns.to_host(got)), bits(exact_matmul(a, b))) and ns.to_host(got)[0, 0, 0] == 1.0


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, np.float16])
def test_narrow_products_whose_bound_by_lines_fails_round_as_the_rational_sums_do(dtype, monkeypatch):
    # Even rows of a spread over 2**±40 (fp16: ±10): the bound by rows and columns leaves more than one element in 16
    # unsure, so the narrow path takes one GEMM bounded by the norms and settles its suspects (_exact_matmul.py
    # `_narrow_by_norms`). Rows 1 and 3 hold three terms against b's first three rows, 2**15, 2**3, 2**-24 in its
    # first two columns: (2**15)**2 + (2**3)**2 = 2**30 + 2**6 is a float32 midpoint (its spacing there is 2**7), a
    # true tie, rounded to even (2**30) in row 3; row 1 adds (2**-24)**2 = 2**-48, which a float64 sum loses (below
    # 2**30 · 2**-53), so only an exact sum rounds it up to 2**30 + 2**7. The other odd rows are alike in magnitude.
    # Large enough (a and b over 2**14 elements) for the narrow path's facts, its suspects (rows 1 and 3) few enough.
    from zerosim.precision.arithmetic import _exact_matmul

    ran = []
    real = _exact_matmul._narrow_by_norms
    monkeypatch.setattr(_exact_matmul, "_narrow_by_norms", lambda *args: ran.append(1) or real(*args))
    rng = np.random.default_rng(11)
    m, k, n = 48, 700, 12
    spread = 10 if dtype is np.float16 else 40
    a = rng.standard_normal((m, k))
    a[::2] *= 2.0 ** rng.integers(-spread, spread + 1, size=(m // 2, k))
    a[1:4:2] = 0.0
    a[1:4:2, :3] = [2.0**15, 2.0**3, 2.0**-24]
    a[3, 2] = 0.0  # the exact tie
    b = rng.standard_normal((k, n))
    b[:3, :2] = np.array([2.0**15, 2.0**3, 2.0**-24])[:, None]
    a, b = a.astype(dtype), b.astype(dtype)
    got = exact_matmul(a, b)
    assert ran, "the product did not take the norms' way"
    assert (got[1, :2] == np.float32(2.0**30 + 2.0**7)).all() and (got[3, :2] == np.float32(2.0**30)).all()
    assert np.array_equal(bits(got), bits(reference(a, b)))


def test_small_stacked_products_made_several_at_a_time_settle_each_ones_unsure_elements(monkeypatch):
    # 40 products of (16, 8) @ (8, 40) bf16, as a ZeRO step's stacked dW of a small model: whole products 24 at a
    # time (_exact_matmul.py `_shortcut_stacked`, two groups). Products 5 and 31, one in each group, hold row 1 =
    # 2**15, 2**3, 2**-24 against b's first two columns alike: 2**30 + 2**6 is a float32 midpoint and the 2**-48 that
    # lifts it above is lost by a float64 sum, so only the settled element rounds up to 2**30 + 2**7 (the GEMM's c
    # rounded alone gives 2**30); their row 2, spread 2**±30, is settled from the group's c. Each product's bits are
    # the rational sums' (`reference`)
    from zerosim.precision.arithmetic import _exact_matmul

    groups, settled = [], []
    real_stacked, real_settle = _exact_matmul._shortcut_stacked, _exact_matmul._settle_product
    monkeypatch.setattr(_exact_matmul, "_shortcut_stacked", lambda *a: groups.append(a[-1]) or real_stacked(*a))
    monkeypatch.setattr(_exact_matmul, "_settle_product",
                        lambda out, c, p, *rest: settled.append(p) or real_settle(out, c, p, *rest))
    rng = np.random.default_rng(12)
    a, b = rng.standard_normal((40, 16, 8)), rng.standard_normal((40, 8, 40))
    for p in (5, 31):
        a[p, 1] = 0.0
        a[p, 1, :3] = [2.0**15, 2.0**3, 2.0**-24]
        b[p, :3, :2] = np.array([2.0**15, 2.0**3, 2.0**-24])[:, None]
        a[p, 2] *= 2.0 ** rng.integers(-30, 31, 8)  # spread wide: unsure, and settled from the GEMM's own c
    a, b = a.astype(ml_dtypes.bfloat16), b.astype(ml_dtypes.bfloat16)
    got = exact_matmul(a, b)
    assert groups == [24] and {5, 31} <= set(settled)
    for p in (5, 31):
        assert (got[p, 1, :2] == np.float32(2.0**30 + 2.0**7)).all()
    for p in (0, 5, 23, 24, 31, 39):  # each group's ends and the two products settled
        assert np.array_equal(bits(got[p]), bits(reference(a[p], b[p]))), p


@pytest.mark.parametrize("shared_b", [False, True], ids=["each its own b", "one b for all"])
def test_a_stacked_narrow_product_the_long_way_makes_in_pieces_equals_each_product_alone(shared_b):
    # 8 products of (40, 4) @ (4, 40) bf16, magnitudes 2**±40 apart within a line: the whole bound fails, so the long
    # way makes them, a few products at a time (12,800 output elements, more than it makes at once); rank 3 holds a
    # NaN (one canonical NaN out, in its own rows) and rank 6 an inf
    rng = np.random.default_rng(5)
    a = (rng.standard_normal((8, 40, 4)) * 2.0 ** rng.integers(-40, 41, size=(8, 40, 4))).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((1 if shared_b else 8, 4, 40)).astype(ml_dtypes.bfloat16)
    a[3, 7, 1], a[6, 2, 0] = np.nan, np.inf
    b_of = (lambda p: b[0]) if shared_b else (lambda p: b[p])
    got = exact_matmul(a, b[0] if shared_b else b)
    assert got.shape == (8, 40, 40)
    for p in range(8):
        if p in (3, 6):  # NaN and inf rows: as the product alone gives them
            assert np.array_equal(bits(got[p]), bits(exact_matmul(a[p], b_of(p))))
        else:
            assert np.array_equal(bits(got[p]), bits(reference(a[p], b_of(p)))), p
