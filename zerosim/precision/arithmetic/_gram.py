"""A Gram matrix a @ a.T, exact and rounded once, its doubtful elements settled once for each pair (i, j), (j, i).

Letters: a (M, K) float32 on the host; G = a @ a.T (M, M), G_ij = Σ_k a_ik·a_jk.

Newton-Schulz (optim/_muon.py) forms two Gram matrices an iteration, X X^T and A A^T of the symmetric A.
`exact_matmul(a, a.T)` already makes their float64 product by one syrk from one widened copy (half the FLOPs);
what it leaves are the elements its norm bound cannot round with certainty (_norm_bound.py), each settled on its
own from its K products. G_ij and G_ji are the same exact sum (each product exact in float64, a_ik·a_jk = a_jk·a_ik),
so they round to the same float32: of each pair in doubt one is settled, and copied across. Gram matrices of nearly
orthogonal rows, NS's own as it converges, leave hundreds such a product (their small off-diagonal sums against
their rows' norms). Every other step is `exact_matmul`'s fp32 path (_exact_matmul.py), called as it calls it; any
other input goes there whole. So the bits are exact_matmul's (tests/test_exact_gram.py).
"""

from __future__ import annotations

import numpy as np

from zerosim.precision.arithmetic._exact_matmul import _settle_by_magnitudes, _widened, exact_matmul
from zerosim.precision.arithmetic._norm_bound import rounded_by_norms
from zerosim.precision.cast import NUMPY


def exact_gram(a):
    """exact_matmul(a, a.T), bit for bit: a (M, K) @ a.T as float32 (M, M), each element the exact sum of its K
    products rounded once to nearest-even float32 (+0 for an exact zero)."""
    if not (type(a) is np.ndarray and a.ndim == 2 and a.dtype == np.float32):
        return exact_matmul(a, a.T)  # narrow formats, float64, meta and device arrays: the general path
    a64 = _widened(a, 6, True)  # the buffer exact_matmul widens its a into
    found = rounded_by_norms(a64, a64.T)  # one syrk, as exact_matmul makes it
    if found is None:  # NaN or inf came in: exact_matmul's long way makes the canonical NaN
        return exact_matmul(a, a.T)
    out, suspects = found
    if suspects is None:
        return out
    (i, j), y = suspects
    # one suspect of each pair {(i, j), (j, i)} settled where it lies (its c is the one `y` holds), then copied
    # across: a syrk's c is symmetric, so both are usually suspects; where a BLAS summed the two in different
    # orders, a mirror the bound found certain gets the same correct value again
    _, first = np.unique(np.minimum(i, j) * out.shape[0] + np.maximum(i, j), return_index=True)
    i, j = i[first], j[first]
    out = _settle_by_magnitudes(out, ((i, j), y[first]), a64, a64.T, NUMPY)
    out[j, i] = out[i, j]
    return out
