"""exact_gram(a) is exact_matmul(a, a.T) bit for bit: each element the exact sum of its products rounded once to
float32, each pair in doubt settled once and copied across (zerosim/precision/arithmetic/_gram.py)."""

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from zerosim.precision.arithmetic import exact_gram, exact_matmul
from zerosim.precision.arithmetic._norm_bound import rounded_by_norms


def _f32_nearest_even(x: Fraction) -> np.float32:
    """x rounded to nearest-even float32, by hand: the nearer of the two float32 around x (the even one on a tie);
    independent of zerosim's rounding code. Normal range only (the cases here stay inside it)."""
    if x == 0:
        return np.float32(0.0)
    guess = np.float32(float(x))  # within an ulp of the answer
    candidates = [np.nextafter(guess, np.float32(-np.inf)), guess, np.nextafter(guess, np.float32(np.inf))]
    return min(candidates, key=lambda c: (abs(Fraction(float(c)) - x), int(c.view(np.uint32)) & 1))


def _exact_gram_by_fractions(a: np.ndarray) -> np.ndarray:
    rows = [[Fraction(float(v)) for v in row] for row in a]
    return np.array([[_f32_nearest_even(sum(p * q for p, q in zip(r, s))) for s in rows] for r in rows], np.float32)


def _bits(x):
    return np.ascontiguousarray(x).view(np.uint32)


def test_a_pair_whose_float64_sum_rounds_wrong_is_settled_on_both_sides():
    # G_01 = 1 + 2**-24 + 2**-80 exactly: float64 holds 1 + 2**-24, a float32 midpoint that ties to 1.0, while the
    # exact sum lies above it and rounds to 1 + 2**-23; both (0, 1) and (1, 0) must get the exact sum's rounding
    a = np.array([[1.0, 1.0, 1.0], [1.0, 2.0**-24, 2.0**-80]], np.float32)
    want = _exact_gram_by_fractions(a)
    assert want[0, 1] == np.float32(1 + 2.0**-23) and np.float32(a.astype(np.float64)[0] @ a.astype(np.float64)[1]) == 1
    got = exact_gram(a)
    assert np.array_equal(_bits(got), _bits(want))
    assert np.array_equal(_bits(got), _bits(exact_matmul(a, a.T)))


def test_nearly_orthogonal_rows_against_exact_fractions():
    # Newton-Schulz's Gram matrices as it converges: rows nearly orthogonal, small off-diagonal sums against the
    # rows' norms, where the norm bound leaves elements in doubt (checked, so the settling runs)
    rng = np.random.default_rng(3)
    q, _ = np.linalg.qr(rng.standard_normal((48, 12)))
    a = (q.T + 1e-6 * rng.standard_normal((12, 48))).astype(np.float32)
    a64 = a.astype(np.float64)
    assert rounded_by_norms(a64, a64.T)[1] is not None  # some elements are in doubt
    assert np.array_equal(_bits(exact_gram(a)), _bits(_exact_gram_by_fractions(a)))


@pytest.mark.parametrize("shape", [(64, 256), (128, 128), (32, 512)])
def test_newton_schulz_iterates_match_exact_matmul(shape):
    # the products Newton-Schulz forms: X X^T and A A^T of a symmetric A, over iterations that orthogonalise X. How
    # many of their elements the norm bound leaves in doubt depends on the BLAS's order of adds (none, under
    # OpenBLAS's Prescott kernels, for two of these shapes): the pairs settled are held by the hand-made tie above
    rng = np.random.default_rng(shape[0])
    x = rng.standard_normal(shape).astype(np.float32)
    x /= np.float32(np.linalg.norm(x) + 1e-7)
    for _ in range(5):
        gram = exact_gram(x)
        assert np.array_equal(_bits(gram), _bits(exact_matmul(x, x.T)))
        square = exact_gram(gram)
        assert np.array_equal(_bits(square), _bits(exact_matmul(gram, gram.T)))
        x = np.float32(3.4445) * x + exact_matmul(np.float32(-4.7750) * gram + np.float32(2.0315) * square, x)


@pytest.mark.parametrize("case", ["zeros", "tiny", "huge", "nan", "inf", "bf16", "float64", "one_row"])
def test_other_inputs_match_exact_matmul(case):
    rng = np.random.default_rng(7)
    a = rng.standard_normal((6, 20)).astype(np.float32)
    if case == "zeros":
        a[2] = 0.0
        a[:, 3] = -0.0
    elif case == "tiny":
        a *= np.float32(2.0**-70)  # products near float32's subnormals
    elif case == "huge":
        a *= np.float32(2.0**70)  # sums past float32's range: inf
    elif case == "nan":
        a[1, 4] = np.nan
    elif case == "inf":
        a[3, 0] = np.inf
    elif case == "bf16":
        a = a.astype(ml_dtypes.bfloat16)
    elif case == "float64":
        a = a.astype(np.float64)
    elif case == "one_row":
        a = a[:1]
    got, want = exact_gram(a), exact_matmul(a, a.T)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert np.array_equal(got.view(np.uint8), want.view(np.uint8))
