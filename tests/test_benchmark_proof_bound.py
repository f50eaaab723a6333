"""benchmarks/proof_bound.py's engines stand in for a proof's cost only: the floor (benchmarks/peers.py
`floor_matmul`), its least test and its least decidable one ("two") must leave the floor's answer in the output (every
product rounded once from its float64 GEMM), or the rounds would time different work. Held on integer-valued
operands, whose float64 sums are exact in any order, so the expected output is the exact product rounded once
whatever the BLAS; with zero rows in a (the elements a test of c + E would move off +0) and the product shapes the
engine hands the kernel (a short K GEMM'd by blocks of rows, a long K, a transposed b, a strided output). ("form", the
present proof's first test, leaves its suspects as c - E rounded, as that test does before the proof mends them.) No
test here times anything (speed lives in benchmarks)."""

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import proof_bound  # noqa: E402


def _operands(m: int, k: int, n: int, transposed: bool):
    rng = np.random.default_rng(m * 7 + k + n)
    a = rng.integers(-64, 65, (m, k)).astype(np.float32)
    a[::5] = 0  # every fifth row zero: its c is +0, which c + 2E would not round to
    b = rng.integers(-64, 65, (n, k) if transposed else (k, n)).astype(np.float32)
    return a, (b.T if transposed else b)


@pytest.mark.parametrize("test", [None, "least", "two"])
@pytest.mark.parametrize("m, k, n, transposed", [
    (40, 32, 4100, False),  # a short K (a rank's dW), GEMM'd by blocks of 31 rows
    (24, 300, 50, True),  # a long K with the forward's transposed weight
])
def test_each_engine_leaves_the_floor_s_answer(test, m, k, n, transposed):
    a, b = _operands(m, k, n, transposed)
    exact = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)  # integer sums: exact in any order
    assert (exact[::5] == 0).all() and np.signbit(exact[::5]).sum() == 0
    product = proof_bound.floor_matmul if test is None else (
        lambda *ab, **out: proof_bound.bound_matmul(*ab, **out, test=test))
    got = product(a, b)
    np.testing.assert_array_equal(got.view(np.uint32), exact.view(np.uint32))
    packed = np.full((m, 2 * n), np.nan, np.float32)  # a strided output, as the ranks' packed gradients are
    product(a, b, out=packed[:, ::2])
    np.testing.assert_array_equal(packed[:, ::2].view(np.uint32), exact.view(np.uint32))
    assert np.isnan(packed[:, 1::2]).all()  # nothing written between
