"""One float64 product rounded to float32, its error bounded by its operands' norms instead of a second product.

Letters: M rows, K the summed dimension, N columns; a (..., M, K), b (..., K, N) float64 holding values whose products
are exact in float64 (fp32 and narrower), c = a @ b from the machine's dgemm.

The long way of _exact_matmul.py bounds each element's rounding error by γ(K-1)·Σ_k |a_ik·b_kj|, and forms that sum of
magnitudes by a second dgemm, |a| @ |b|: an fp32 product cost two GEMMs and a dozen passes over c. Cauchy–Schwarz
bounds the same sum by the norms, Σ_k |a_ik·b_kj| <= ||a_i||·||b_j|| (a row of a, a column of b), which cost one
pass over each operand; and ||b_j|| <= max_j ||b_j||, so one bound per row serves the whole row:

    E_i = (K + 4)·2**-52 · ||a_i|| · max_j ||b_j|| · (1 + 2**-20)

covers c's error (γ(K-1) <= (K-1)·2**-53·(1 + 2**-40), over-stated twice as `_ERROR_PER_TERM` is), the rounding of
c ± E_i in float64 (at most 2**-53·(|c| + E_i), and |c| <= ||a_i||·||b_j||·(1 + γ(K))), and the rounding of the
norms themselves (a square of a value of at most 24 significant bits is exact in float64; the sum of K squares is
within γ(K) of the true one, the square root and the products within a few units: (2K + 16)·2**-53 in all, below
2**-20 for any K under 2**31). For random data the norms over-state Σ|a·b| by about π/2, and the row's largest
column norm by a little more: still about K·2**-50 of |c|, far below float32's half-ulp of 2**-25·|c|.

Where c - E_i and c + E_i round to the same float32, the exact sum s (within E_i of c) rounds there too, since
rounding is monotone (_round_once.py `certain_f32`, with one error per row). The rest are the suspects, a few in a
million for well-conditioned data: the caller bounds each by its own Σ_k |a_ik·b_kj| and sums exactly those that
stay in doubt (_exact_matmul.py `_settle`). So one GEMM and five passes over c, in place of two GEMMs and a dozen.
"""

from __future__ import annotations

import numpy as np

from zerosim.precision.arithmetic._scratch import scratch as _scratch

_SLACK = 1 + 2.0**-20  # the norms' and E's own roundings, for K < 2**31 (module docstring)
SHORT_K = 64  # K at most this: the product's rows in blocks, each tested while it is in cache (its output is as
# large as its arithmetic: a dW over 32 rows of a micro-batch)
_BLOCK = 1 << 15  # elements of c per block


def rounded_by_norms(a64, b64):
    """(c rounded to float32, suspects), c = a64 @ b64 the exact sums' float64 approximation, each exact zero +0; or
    None where a or b holds NaN or inf (the caller's long way handles those). suspects: None where there are none,
    else (index arrays (..., i, j), their c values (count,)): the elements whose rounding the row's bound leaves in
    doubt. A 2-D product with a short K runs in blocks of rows, each GEMM'd and tested while it is in cache; every
    temporary lives in this thread's reused buffers (_scratch.py): memory fresh from the system costs a page fault
    per 4 kB, more than these passes."""
    rows = np.sqrt(np.einsum("...ik,...ik->...i", a64, a64))  # (..., M) ||a_i||, to within (K + 4)·2**-53
    columns = np.sqrt(np.einsum("...kj,...kj->...j", b64, b64))  # (..., N) ||b_j||
    widest = columns.max(axis=-1, initial=0.0)  # (...,) max_j ||b_j||
    if not (np.isfinite(rows).all() and np.isfinite(widest).all()):
        return None
    k = a64.shape[-1]
    error = rows * (np.asarray(widest)[..., None] * ((k + 4) * 2.0**-52 * _SLACK))  # (..., M) E_i, one per row
    shape = np.broadcast_shapes(a64.shape[:-2], b64.shape[:-2]) + (a64.shape[-2], b64.shape[-1])
    m, n = shape[-2:]
    out = np.empty(shape, np.float32)
    step = max(1, _BLOCK // max(n, 1)) if len(shape) == 2 and k <= SHORT_K else m  # rows at a time
    block = shape[:-2] + (min(step, m), n)
    buffers = (_scratch(block, 2), _scratch(block, 0), _scratch(block, 3, np.float32),
               _scratch(block, 4, np.float32), _scratch(block, 5, np.bool_))
    found, values = [], []
    for start in range(0, m, step):
        rows_here = slice(start, start + step)
        a_part = a64[..., rows_here, :]
        r = a_part.shape[-2]
        c, shifted, low, high, doubt = (x[..., :r, :] for x in buffers)
        np.matmul(a_part, b64, out=c)  # float64, summed in the machine's order
        c += 0.0  # -0 becomes +0: only a sum of zero products can be -0 (a BLAS starting from its first product)
        e = error[..., rows_here, None]  # (..., rows, 1)
        with np.errstate(over="ignore"):  # past float32's range: inf, as the exact sum rounds there too
            np.copyto(out[..., rows_here, :], c, casting="unsafe")
            np.copyto(low, np.subtract(c, e, out=shifted), casting="unsafe")  # c - E_i rounded
            np.copyto(high, np.add(c, e, out=shifted), casting="unsafe")  # c + E_i rounded
        np.not_equal(low.view(np.uint32), high.view(np.uint32), out=doubt)
        if doubt.any():
            flat = np.flatnonzero(doubt)  # one index array: faster than nonzero's one per axis
            values.append(c.reshape(-1)[flat])
            where = np.unravel_index(flat, doubt.shape)
            found.append(where[:-2] + (where[-2] + start, where[-1]))
    if not found:
        return out, None
    where = tuple(np.concatenate(x) for x in zip(*found))
    return out, _own_norms(where, np.concatenate(values), rows, columns, shape, (k + 4) * 2.0**-52 * _SLACK)


def _own_norms(where, y, rows, columns, shape, per_term):
    """(where, y) of the suspects still in doubt with their own column's norm, ||a_i||·||b_j||, in place of the
    row's widest: the row's bound is loose where b's column norms differ widely. None where none is left."""
    *lead, i, j = where
    batch = shape[:-2]
    own = (np.broadcast_to(rows, batch + rows.shape[-1:])[(*lead, i)]
           * np.broadcast_to(columns, batch + columns.shape[-1:])[(*lead, j)] * per_term)  # (count,)
    with np.errstate(over="ignore"):
        doubt = (y - own).astype(np.float32).view(np.uint32) != (y + own).astype(np.float32).view(np.uint32)
    return (tuple(x[doubt] for x in where), y[doubt]) if doubt.any() else None
