"""Many dot products' exact sums, to twice float64's precision at once, before any is summed one by one.

The few elements whose float64 sum lies too near a float32 rounding boundary for its error bound (_exact_matmul.py
`_repair`) were each summed exactly by `math.fsum` over a Python list of its K products: ~60 µs apiece at K = 1024,
and a ZeRO step's fp32 products leave a few hundred. Their sums to about twice float64's precision come first, for all
of them at once: each element's K exact products (fp32 and narrower values multiply exactly in float64) are added in
a tree, pair by pair, by Knuth's TwoSum (t = x + y and e = (x - (t - z)) + (y - z), z = t - x: x + y = t + e
exactly, for any IEEE-754 float64 x and y without overflow; Knuth, TAOCP vol. 2, §4.2.2, Theorem B), and every
error term e is kept and added at the end. So Σ_k p_k = T + Σ e exactly, with T the tree's root, and only Σ e is
rounded: each |e| <= 2**-53·|t|, and a level's |t| add up to at most Σ|p| (times (1 + 2**-53) per level), so
Σ|e| <= L·2**-53·Σ|p| over the L = ⌈log2 K⌉ levels, and its float64 sum is within γ(K + L)·Σ|e| of the true one.
With the last add:

    |(T + Σe) - s| <= 2**-53·|T + Σe| + (K + L + 2)·(L + 1)·2**-104·Σ|p|

(over-stated twice, as _exact_matmul.py's bounds are). That is K·2**-98 of the sum of magnitudes at K = 1024 where
the float64 GEMM's bound was K·2**-52: every element then rounds to float32 by `certain_f32` but for exact float32
midpoints and sums within about 2**-52 of one, which `math.fsum` and rationals still settle, as before.
"""

from __future__ import annotations

import numpy as np

from zerosim.precision.arithmetic._scratch import scratch

_GATHERED = 1 << 16  # products held at a time (count x K): small temporaries, no fresh pages


def twice_precise_sums(products: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sums, errors) (count,) float64 for products (count, K), each row's terms exact and finite: |sums - Σ_k
    products| <= errors, elementwise; an exact zero sum is +0 with error 0. The tree's levels live in this thread's
    buffers (_scratch.py); a level of odd width passes its last term up as it is (x + 0 = x exactly: no error)."""
    count, k = products.shape
    magnitude = np.abs(products, out=scratch((count, k), 22)).sum(axis=1)  # (count,) Σ|p|, to within γ(K)
    level, levels, spilled = products, 0, np.zeros(count)
    while level.shape[1] > 1:
        width = level.shape[1]
        pairs = width // 2
        x, y = level[:, 0:2 * pairs:2], level[:, 1:2 * pairs:2]
        up = scratch((count, pairs + width % 2), 23 + levels % 2)  # each level's sums, two buffers in turn
        # (Σ|p| is summed already: its buffer 22 is free)
        t, z, e = up[:, :pairs], scratch((count, pairs), 25), scratch((count, pairs), 22)
        np.add(x, y, out=t)
        np.subtract(t, x, out=z)  # z = t - x
        np.subtract(x, np.subtract(t, z, out=e), out=e)  # x - (t - z)
        np.add(e, np.subtract(y, z, out=z), out=e)  # TwoSum's error term: (x - (t - z)) + (y - z)
        spilled += e.sum(axis=1)  # added as they come
        if width % 2:
            up[:, pairs] = level[:, width - 1]
        level, levels = up, levels + 1
    sums = level[:, 0] + spilled if k else np.zeros(count)  # spilled starts at +0: an exact zero sum is +0
    bound = (k + levels + 2) * (levels + 1) * 2.0**-104 * (1 + (k + 2) * 2.0**-52)
    return sums, np.abs(sums) * 2.0**-52 + magnitude * bound


def gathered_rows(k: int) -> int:
    """Elements whose k products to gather at a time (at least one): their temporaries stay small (memory fresh from
    the system costs a page fault per 4 kB, _scratch.py)."""
    return max(1, _GATHERED // max(k, 1))
