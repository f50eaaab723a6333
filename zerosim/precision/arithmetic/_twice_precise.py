"""Many dot products' exact sums, to about twice float64's precision at once, before any is summed one by one.

The few elements whose float64 sum lies too near a float32 rounding boundary for its error bound (_exact_matmul.py
`_repair`) were each summed exactly by `math.fsum` over a Python list of its K products: ~60 µs apiece at K = 1024,
and a ZeRO step's fp32 products leave a few hundred. Their sums to about twice float64's precision come first, for
all of them at once, by splitting each term in two (Rump, Ogita and Oishi, "Accurate floating-point summation part I:
faithful rounding", SIAM J. Sci. Comput. 31(1), 2008, §3, ExtractVector): with σ a power of two,

    q = (σ + p) - σ,    r = p - q    (both in float64)

For |p| <= σ/2, σ + p lies in [σ/2, 3σ/2], where float64's spacing is 2**-53·σ or 2**-52·σ and the subtraction of
σ is exact (Sterbenz): q is a whole multiple of 2**-53·σ, and r, the rounding error of σ + p, is a float64 of at most
2**-53·σ, so q + r = p exactly. With σ >= 2·(K + 2)·max_k |p_k| (a row's K terms), Σ|q| <= K·(max|p| + 2**-53·σ) < σ:
every partial sum of the q, in any order, is a whole multiple of 2**-53·σ below σ = 2**53 of them, a float64, so the
float64 sum T of the q is exact. Then Σ p = T + Σ r exactly, and only Σ r (terms of at most 2**-53·σ) rounds:
within γ(K - 1)·Σ|r| of its float64 sum. With the last add:

    |(T + Σr) - s| <= 2**-53·|T + Σr| + (K + 2)·2**-53·Σ|r|

(each over-stated twice, as _exact_matmul.py's bounds are: that covers the rounding of Σ|r| and of the bound itself).
Σ|r| <= K·2**-53·σ <= K·(K + 2)·2**-51·max|p|: the second term is about K³·2**-104 of max|p| at worst, where the
float64 GEMM's bound was K·2**-52 of Σ|p|; for most rows far less (a term below 2**-53·σ is its own r, and the r's
are spread below that bound). Every element then rounds to float32 by `certain_f32` but for exact float32 midpoints
and sums within about 2**-52 of one, which `math.fsum` and rationals still settle, as before. Seven passes over the
terms, where a tree of TwoSums (Knuth, TAOCP vol. 2, §4.2.2) took about 20 NumPy calls at each of its ⌈log2 K⌉ levels.
Products of formats of 32 bits or fewer are float64s of at least 2**-298, so no σ reaches float64's subnormals: every
step above is exact.
"""

from __future__ import annotations

import numpy as np

from zerosim.precision.arithmetic._scratch import scratch

_GATHERED = 1 << 16  # products held at a time (count x K): small temporaries, no fresh pages


def twice_precise_sums(products: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sums, errors) (count,) float64 for products (count, K), each row's terms exact and finite, of formats of 32
    bits or fewer multiplied (every nonzero |p| >= 2**-298): |sums - Σ_k products| <= errors, elementwise; an exact
    zero sum is +0 with error 0 ((σ + p) - σ of a zero is +0, and so is T; r of a zero is ±0, and +0 + -0 = +0). The
split terms live in this thread's buffers (_scratch.py)."""
    count, k = products.shape
    largest = np.abs(products, out=scratch((count, k), 22)).max(axis=1, initial=0.0)  # (count,) max_k |p|
    # σ = 2**e > the float64 product 2·(K + 2)·max|p|, so >= the exact one (rounding is monotone, σ a float64);
    # σ = 1 for a row of zeros
    _, e = np.frexp(largest * (2 * k + 4))
    sigma = np.ldexp(1.0, e)[:, None]  # (count, 1)
    q = np.add(sigma, products, out=scratch((count, k), 23))
    np.subtract(q, sigma, out=q)  # q: whole multiples of 2**-53·σ
    r = np.subtract(products, q, out=scratch((count, k), 24))  # exact: p = q + r
    sums = q.sum(axis=1) + r.sum(axis=1)  # Σq exact (any order); Σr and the last add round
    spread = np.abs(r, out=r).sum(axis=1)  # Σ|r|
    return sums, np.abs(sums) * 2.0**-52 + spread * ((k + 2) * 2.0**-52)


def gathered_rows(k: int) -> int:
    """Elements whose k products to gather at a time (at least one): their temporaries stay small (memory fresh from
    the system costs a page fault per 4 kB, _scratch.py)."""
    return max(1, _GATHERED // max(k, 1))
