"""Matrix products whose bits do not depend on the machine: each element the exact dot product, rounded once.

Letters: M rows, K the summed dimension, N columns; a (..., M, K), b (..., K, N), leading (batch) dims broadcast.

Why a BLAS product depends on the machine: sgemm sums each element's K products in an order of its kernel's
choosing (the register tile, AVX2 or AVX-512 or NEON lanes, K cut into blocks), and fp32 rounds after every add.
OpenBLAS's SkylakeX and Prescott kernels give other bits than its Haswell kernel in 16 % and 77 % of the elements
of 300 random fp32 products (benchmarks/portable_numbers.py); MKL, Accelerate and cuBLAS have orders of their own.

`exact_matmul` gives the same bits everywhere, in three steps:

1. Widen a and b to float64 and let the machine's dgemm form c = a @ b, in whatever order it likes. A product of
   two fp32 (or 16- or 8-bit) numbers is exact in float64 (24 + 24 significant bits <= 53; exponents far inside
   float64's range), so only the K - 1 adds round, and for any order, with or without FMA,
   |c - s| <= γ(K-1)·Σ_k |a_ik·b_kj|, where s is the exact sum, γ(n) = n·u / (1 - n·u), u = 2**-53 (Higham,
   "Accuracy and Stability of Numerical Algorithms", 2nd ed., §3.1); a second dgemm, |a| @ |b|, gives the sum of
   magnitudes. `_ERROR_PER_TERM` overstates γ twice over, which also covers that dgemm's own rounding. Where every
   product is a whole multiple of one power of two q (q_i·q_j: a's row and b's column, from their smallest
   elements and their format's precision) and Σ|a_ik·b_kj| < 2**53·q, every partial sum is a float64 and c = s
   exactly, in any order: 16-bit inputs mostly are, and there an exact float32 midpoint is a true tie.
2. Round c to float32 where c ± err round alike (_round_once.py `certain_f32`: rounding is monotone, so s rounds
   there too). That is every element but those whose exact value lies within err of a float32 rounding boundary:
   about K·2**-27 of the elements of well-conditioned data, more where the sum cancels.
3. Sum those few ("suspects") exactly on the host: `math.fsum` (Shewchuk's algorithm) gives s rounded once to
   float64, which rounds on to float32 correctly unless it is itself a float32 midpoint (float32's midpoints are
   float64 numbers, so only there can the second rounding go wrong); then the exact rational sum decides.

So every element is s rounded to nearest-even float32, whichever BLAS, kernel, thread count or device formed c.
An exact zero is +0 (a GEMM starts its accumulator at +0; a sum's sign of zero would otherwise depend on the
order). What it assumes: a dgemm that forms each element as a sum of its K products in some order (every BLAS in
use; none applies Strassen's algorithm to dgemm) and IEEE-754 float64 arithmetic, rounding to nearest. float64
inputs (zerosim's fp64 yardstick) go to the machine's dgemm as they are: their products are not exact.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from zerosim.precision.arithmetic._round_once import certain_f32, f32_of_fraction, widen64
from zerosim.precision.cast import has_values, namespace_of

# γ(K-1) <= (K - 1)·u·(1 + 2**-40) for any K a machine can hold; (K + 2)·2u over-states it at least twice, which also
# covers the relative rounding error (<= γ(K)) of computing Σ|a_ik·b_kj| itself by a dgemm
_ERROR_PER_TERM = 2.0**-52


def exact_matmul(a, b):
    """a (..., M, K) @ b (..., K, N) as float32 (..., M, N): each element the exact sum of its K products,
    rounded once to nearest-even float32 (+0 for an exact zero), the same bits on every machine.

    a and b hold fp32, fp16, bf16 or fp8 values, in their own dtype or widened to float32 (any dtype whose products
    are exact in float64). Meta arrays (no values) give the product's float32 shape; float64 inputs the machine's
    float64 product.
    """
    if a.dtype == np.float64 or b.dtype == np.float64:
        return a @ b
    if not (has_values(a) and has_values(b)):
        return a.astype(np.float32) @ b.astype(np.float32)
    ns = namespace_of(a)
    a64, b64 = widen64(a, ns), widen64(b, ns)  # exact, and so is every product of them
    c = a64 @ b64  # (..., M, N) float64, summed in the machine's order
    # -0 becomes +0 (a BLAS that starts a sum from its first product may give -0 for products of -0 only; OpenBLAS
    # gives +0): where Σ|products| is 0 every product is 0, an exact zero; a zero c anywhere else is a suspect
    c += 0.0
    k = a64.shape[-1]
    with np.errstate(invalid="ignore", over="ignore"):  # NaN or inf came in: certain_f32 leaves those alone
        size = np.abs(a64) @ np.abs(b64)  # (..., M, N) Σ_k |a_ik·b_kj|, to within γ(K)
        err = size * ((k + 2) * _ERROR_PER_TERM)  # (..., M, N) >= |c - s|
    out, suspects = certain_f32(c, err, ns)
    if not bool(suspects.any()):
        return out
    # Exact in any order where every product is a whole multiple of q = q_i·q_j and every partial sum stays below
    # 2**53·q: then c = s, and a suspect that is an exact float32 midpoint is a true tie, settled by ties-to-even
    # (16-bit inputs are mostly exact, and their sums often land on float32 midpoints)
    batch = c.shape[:-2]
    where = ns.to_host(suspects).nonzero()  # (..., i, j) index arrays of the suspects
    *lead, i, j = where
    q_a = np.broadcast_to(ns.to_host(_quantum(a64, ns.format_of(a).precision, axis=-1)), batch + a64.shape[-2:-1])
    q_b = np.broadcast_to(ns.to_host(_quantum(b64, ns.format_of(b).precision, axis=-2)), batch + b64.shape[-1:])
    with np.errstate(invalid="ignore", over="ignore"):
        q = q_a[(*lead, i)] * q_b[(*lead, j)]  # (suspects,)
        exact = ns.to_host(size)[where] * (1 + (k + 2) * _ERROR_PER_TERM) < q * 2.0**53
    if exact.all():
        return out
    return _repair(out, tuple(x[~exact] for x in where), a64, b64, ns)


def _quantum(x64, precision: int, axis: int):
    """(...,) float64 along `axis` of x64 (values of a format with `precision` significant bits): a power of two
    every element is a whole multiple of, 2**(e - precision + 1) for the smallest nonzero |x| in [2**e, 2**(e+1))
    (+inf where all are 0). Below the format's normal range the true quantum is larger: this stays a divisor."""
    smallest = np.where(x64 != 0, np.abs(x64), np.inf).min(axis=axis)  # NaN rows give NaN: never certified
    _, e = np.frexp(smallest)  # smallest = m·2**e, m in [0.5, 1)
    return np.where(np.isfinite(smallest), np.ldexp(1.0, e - precision), np.inf)


def _repair(out, where, a64, b64, ns):
    """`out` with the elements at index arrays `where` replaced by their exact sums rounded once (on the host: they
    are few)."""
    batch = out.shape[:-2]
    a_h = np.broadcast_to(ns.to_host(a64), batch + a64.shape[-2:])  # views: batch dims broadcast, nothing copied
    b_h = np.broadcast_to(ns.to_host(b64), batch + b64.shape[-2:])
    values = [exact_sum_f32((a_h[(*lead, i)] * b_h[(*lead, slice(None), j)]).tolist())  # K exact products each
              for *lead, i, j in zip(*where)]
    host = out if ns.is_numpy else ns.to_host(out)
    host[where] = values
    return host if ns.is_numpy else ns.from_host(host)


def exact_sum_f32(terms: list) -> np.float32:
    """The exact sum of float `terms` rounded once to nearest-even float32 (+0 for an exact zero)."""
    s = math.fsum(terms)  # the exact sum rounded once to float64 (0 only for an exact zero)
    if s == 0.0:
        return np.float32(0.0)
    with np.errstate(over="ignore"):
        nearest = np.float32(s)  # right unless s is a float32 midpoint that the exact sum is not
    if not _is_f32_midpoint(s):
        return nearest
    rest = math.fsum(terms + [-s])  # exact sum - s, rounded: its sign says on which side of the midpoint it lies
    if rest == 0.0:
        return nearest  # a true tie: float32's ties-to-even settled it
    return np.float32(f32_of_fraction(Fraction(s) + Fraction(rest)))  # s ± a little: rounds away from the tie


def _is_f32_midpoint(s: float) -> bool:
    """True where s lies halfway between two neighbouring float32 (or between the largest and the overflow)."""
    e = math.frexp(abs(s))[1] - 1  # 2**e <= |s| < 2**(e + 1)
    t = s / math.ldexp(1.0, max(e, -126) - 24)  # s in half-quanta of float32 at that binade: exact
    return t == math.floor(t) and int(t) % 2 == 1
