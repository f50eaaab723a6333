"""How large and how fine a 16- or 8-bit operand is, read from its bits: the facts exact_matmul's proofs rest on.

exact_matmul (_exact_matmul.py) proves that its float64 GEMM c = a @ b equals the exact sums s from two facts per
row of a and per column of b: the largest magnitude, and a quantum q, a power of two every element is a whole
multiple of (2**(e - p) for the smallest nonzero magnitude m·2**e, m in [0.5, 1), p the format's precision).

Both come from the bits, not the widened values: for a finite value of a sign-magnitude format the magnitude bits
(the sign bit cleared) order as the magnitudes do, so an integer max and an integer min of the nonzero bit patterns
(0 - 1 wraps to the top, out of the way) find the largest and the smallest, in a quarter of the bytes of float64
and a third of the passes (benchmarks/yardstick.py). NaN and inf sit above every finite pattern (bf16, fp16,
fp8_e5m2: exponent all ones; fp8_e4m3fn: 0x7F is NaN), so a non-finite largest value says one came in: no facts
(None), and the caller goes the long way, which handles them.

`whole_bound_holds` is the cheapest proof, one bound for the whole product: every partial sum of every element is a
whole multiple of q_a·q_b and at most K·max|a|·max|b|; below 2**52·q_a·q_b each is a float64 in any order the BLAS
picks, so c = s everywhere (2**52, not 2**53: a factor of two to spare covers rounding the bound itself). It is the
per-row-and-column bound of `_unsure` with Σ_k|a_ik| loosened to K·max|a| and the quanta taken over whole operands:
weaker, so it fails where the finer proof may still pass (then that one runs), never the other way. For the small
products of a small model it replaces about twenty NumPy calls (~45 µs) with five (~6 µs).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from zerosim.precision._formats import get_format, is_ml_dtype

_HEADROOM = 2.0**52
_FP16 = np.dtype(np.float16)  # with ml_dtypes' bf16 and fp8 (is_ml_dtype), the narrow formats


@functools.lru_cache(maxsize=None)
def _decoder(dtype: np.dtype) -> tuple:
    """(unsigned dtype of the same width, magnitude mask, value of every bit pattern (2**bits,) float64, precision,
    the multipliers `extent` reads both ends with (2, 1) of that dtype) for a 16- or 8-bit float dtype; built once
    per dtype (512 kB for a 16-bit one)."""
    bits = dtype.itemsize * 8
    uint = np.dtype(f"uint{bits}")
    with np.errstate(invalid="ignore"):  # the NaN patterns widen to NaN
        values = np.arange(2**bits, dtype=uint).view(dtype).astype(np.float64)  # (2**bits,) exact
    ends = np.array([[2], [2**bits - 2]], dtype=uint)  # (2, 1): times 2 and times -2, modulo 2**bits
    return uint, (1 << (bits - 1)) - 1, values, get_format(dtype).precision, ends


def narrow_host(x) -> bool:
    """True for a host NumPy array of a 16- or 8-bit float format (the only operands these facts are read from)."""
    return type(x) is np.ndarray and (x.dtype == _FP16 or is_ml_dtype(x.dtype))


def extent(x) -> tuple[float, float] | None:
    """(max|x|, q) over the whole of narrow host array x; None where x holds NaN or inf; (0.0, 1.0) if all zero."""
    uint, mask, values, precision, ends = _decoder(x.dtype)
    if x.size == 0:
        return 0.0, 1.0
    # both ends from one product and one max (for small operands the NumPy calls, not the bytes, are the cost):
    # a pattern s·2**(bits-1) + m times 2 is 2m modulo 2**bits (the sign bit falls off; m < 2**(bits-1)), in order
    # of magnitude; times -2 it is 2**bits - 2m, in reverse order, and a zero is 0, out of the max's way
    # same-width view: any strides; flattened in memory's order (a view where x is a permuted contiguous array, as a
    # transposed weight is: `reshape` would copy it column by column, 25 ms for a 2560 x 2048 bf16 W.T)
    top, bottom = (x.view(uint).ravel(order="K")[None] * ends).max(axis=1).tolist()
    largest = values[top >> 1]
    if not math.isfinite(largest):
        return None
    if largest == 0.0:
        return 0.0, 1.0
    smallest = values[(2 * (mask + 1) - bottom) >> 1]  # the smallest nonzero magnitude's pattern
    return float(largest), math.ldexp(1.0, math.frexp(smallest)[1] - precision)


def extent_of_pieces(flat: np.ndarray, sizes: list) -> list:
    """[`extent(piece)` for each piece], the same answers, where flat (sum(sizes),) narrow host array holds the
    pieces one after another, each nonempty: a few NumPy calls for the lot where `extent` makes five for each (64
    activations of 8 x 64 bf16: ~80 µs against ~230 µs). What `Arithmetic.prepare` measures the tensors every
    rank's next op reads with (_operand_cache.py `remember_extents`)."""
    uint, mask, values, precision, ends = _decoder(flat.dtype)
    starts = np.cumsum([0] + sizes[:-1])  # (pieces,) where each begins
    # each piece's two ends, as `extent` reads them: the largest of 2m and of -2m modulo 2**bits
    top, bottom = np.maximum.reduceat(flat.view(uint) * ends, starts, axis=1).astype(np.int64)  # (pieces,) each
    largest = values[top >> 1]  # (pieces,) float64
    smallest = values[(2 * (mask + 1) - bottom) >> 1]  # the smallest nonzero magnitude (-0.0 where all are zero)
    with np.errstate(invalid="ignore"):
        quantum = np.ldexp(1.0, np.frexp(smallest)[1] - precision)  # (pieces,) exact powers of two
    return [None if not math.isfinite(big) else (0.0, 1.0) if big == 0.0 else (big, q)
            for big, q in zip(largest.tolist(), quantum.tolist())]


def extents(x, axis: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(max|x|, q) along `axis` of narrow host array x, float64 arrays of x's shape without that axis (q = +inf
    where every element is 0); None where x holds NaN or inf."""
    return extents_along(x, (axis,))[0]


def extents_along(x, axes: tuple) -> list:
    """`extents(x, axis)` for each of `axes`, the magnitude bits read once for all of them."""
    uint, mask, values, precision, _ = _decoder(x.dtype)
    if len(axes) == 1 and x.ndim > 1 and abs(x.strides[axes[0]]) < max(abs(d) for d in x.strides):
        # the one axis outermost in the copy: NumPy reduces along an inner axis one line at a time (~20 µs of the
        # rows of a (512, 32) bf16 stack), along the outermost one whole rows of the others at a time (~2)
        axis = axes[0] % x.ndim
        bits = x.view(uint).transpose((axis, *range(axis), *range(axis + 1, x.ndim)))  # np.moveaxis, less Python
        magnitude = np.bitwise_and(bits, mask, out=np.empty(bits.shape, uint))  # the one copy of x made here
        axes = (0,)
    else:
        magnitude = x.view(uint) & mask  # same-width view: any strides; the one copy of x made here
    largest = [values[magnitude.max(axis=axis)] for axis in axes]  # (...,) float64 per axis
    if not all(np.isfinite(line).all() for line in largest):
        return [None] * len(axes)
    magnitude -= 1  # zeros wrap to the top (uint arithmetic): a min skips them. In place: a weight matrix's second
    # temporary of its size cost more than its arithmetic (fresh pages, the kernel zeroing them)
    found = []
    for axis, top in zip(axes, largest):
        smallest = values[magnitude.min(axis=axis) + 1]  # (...,) all-zero lines wrap back to pattern 0: 0.0
        _, e = np.frexp(smallest)
        found.append((top, np.where(smallest > 0, np.ldexp(1.0, e - precision), np.inf)))
    return found


def whole_bound_holds(a, b, extent_of=extent) -> bool:
    """True where every element of a (..., M, K) @ b (..., K, N) sums exactly in float64 in any order, shown by one
    bound over each whole operand (narrow host arrays only: see `narrow_host`). False says nothing either way.
    `extent_of`: `extent`, or a memo of it (_operand_cache.py)."""
    ea = extent_of(a)
    if ea is None:
        return False
    eb = extent_of(b)
    if eb is None:
        return False
    return a.shape[-1] * ea[0] * eb[0] < _HEADROOM * ea[1] * eb[1]
