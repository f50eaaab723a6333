"""Stochastic rounding with integer operations on the bit pattern: the fast twin of `stochastic_reference`.

Stochastic rounding rounds |x| up to the next representable number with probability equal to the
distance from the number below, divided by the gap: its expectation is x itself. The naive twin
(zerosim/precision/cast/_reference.py) finds both neighbours lo <= |x| < hi and rounds up where
u < p_up = (|x| - lo) / (hi - lo). Its bits are the contract; this file reaches them faster.

Letters: n elements; W the working format (float32 when x and the target fit in it, else float64)
with F fraction bits; the target f has m fraction bits; d = F - m bits of x's fraction are dropped.

Where f's spacing is 2**d times x's own (x zero, or f.smallest_normal <= |x| <= f.max), the bit
pattern of x splits into kept bits (the pattern of lo, sign included) and the dropped integer
D < 2**d, and p_up = D / 2**d exactly. For an integer D, u < D / 2**d  <=>  floor(u * 2**d) < D  <=>
D + r >= 2**d with r = 2**d - 1 - floor(u * 2**d). So adding r to the pattern carries into the kept
bits exactly where the naive twin rounds up, and clearing the low d bits leaves the pattern of the
answer (a carry out of the fraction steps the exponent, as the next number up does). It is the usual
add-random-bits-and-truncate stochastic rounding, with the random bits taken from u so that the result
equals the naive twin's for the same uniforms. Elements outside that range (f's subnormals, beyond
f.max, inf, NaN) are few; the naive twin rounds them. (bf16's subnormals are float32's own, with the
same 16 dropped bits: in float32 the formula holds for them too.)
"""

from __future__ import annotations

import numpy as np

from zerosim.precision._formats import Format, get_format
from zerosim.precision.cast._reference import stochastic_reference

# Elements rounded at a time, between these bounds: a dozen NumPy calls per block, so a block must be
# long enough for their Python to vanish, and its scratch (12 bytes an element, made once per call) small
# enough that its page faults do too; an array gets about 16 blocks. Measured here (benchmarks/casts.py,
# stochastic ÷ nearest, in turns): fp32 -> bf16 at 2**22 4.3 in blocks of 2**15, 3.1 in blocks of 2**18;
# fp32 -> fp16 at 2**16 3.0 in two blocks, 4.7 in one.
BLOCK = 2**18
MIN_BLOCK = 2**15


def _carry_addends(u: np.ndarray, d: int, w: Format, v: np.ndarray, t: np.ndarray | None) -> np.ndarray | None:
    """(b,) r = 2**d - 1 - floor(u * 2**d) as W's unsigned integers for the block's uniforms `u`, made in
    the scratch buffers v (float64) and t (uint32, when d <= 31); None if some u is outside [0, 1)."""
    if not (u.min() >= 0.0 and u.max() < 1.0):  # NaN fails both; the naive twin decides such arrays
        return None
    v = np.multiply(u, 2.0**d, out=v[: u.shape[0]])  # (b,) float64 in [0, 2**d), exact: a power of two
    if d <= 31:
        # float64 -> int32 is one SIMD instruction (cvttpd2dq); it truncates, which is floor here.
        r = t[: u.shape[0]]
        np.copyto(r.view(np.int32), v, casting="unsafe")
        np.subtract(np.uint32(2**d - 1), r, out=r)
        if w.bits == 64:  # float64 -> fp32: widen into v's buffer
            np.copyto(v.view(np.uint64), r)
            r = v.view(np.uint64)
        return r
    # float64 -> int64 has no SIMD instruction before AVX-512, so make r in floating point and read it
    # from the bits: a float64 in [2**52, 2**53) holds the integer it exceeds 2**52 by in its low 52
    # bits. (Only W = float64 gets here: d > 31.)
    magic = 2.0**52
    np.floor(v, out=v)
    np.subtract(magic + (2**d - 1), v, out=v)  # exact: integers below 2**53
    r = v.view(np.uint64)
    np.subtract(r, np.float64(magic).view(np.uint64), out=r)
    return r


def _outside_carry_range(x: np.ndarray, f: Format, w: Format, scratch: np.ndarray | None) -> np.ndarray | None:
    """(b,) bool where the carry formula does not hold (see the module docstring), or None if nowhere.
    `scratch`: a (b,) W array this may overwrite, or None to allocate one if needed."""
    # Reductions answer for almost every block (NaN fails their comparisons); masks only when they fail.
    if f.min_exponent == w.min_exponent:  # bf16 and fp32 in float32, fp64 in float64: subnormals too
        if float(x.max()) <= f.max and float(x.min()) >= -f.max:
            return None
        slow = ~(np.abs(x, out=scratch) <= f.max)
    else:
        ax = np.abs(x, out=scratch)
        if float(ax.max()) <= f.max and float(ax.min()) >= f.smallest_normal:
            return None
        slow = ~(ax <= f.max)
        slow |= (ax < f.smallest_normal) & (ax != 0)  # zero rounds to itself in the formula too (D = 0)
    return slow if slow.any() else None


@np.errstate(over="ignore", invalid="ignore")  # inf/NaN in, or beyond f.max: the format's defined answers
def stochastic_fast(a: np.ndarray, f: Format, u: np.ndarray) -> np.ndarray:
    """`a` rounded stochastically into `f` with uniforms `u` (float64, a's shape): the same bits as
    `stochastic_reference(a, f, u)`."""
    w = get_format("fp32" if a.dtype.itemsize <= 4 and f.bits <= 32 else "fp64")
    d = w.mantissa_bits - f.mantissa_bits  # dropped fraction bits
    if a.size == 0:
        return stochastic_reference(a, f, u)
    x = np.asarray(a, dtype=w.dtype).reshape(-1)  # (n,) W, exact widening
    u = u.reshape(-1)  # (n,) float64
    if d == 0:  # every finite normal x is a number of f already
        out = x.astype(f.dtype)  # (n,) f
        _naive_where_outside(out, a.reshape(-1), x, f, w, u, scratch=None)
        return out.reshape(a.shape)
    out = np.empty(x.shape, f.dtype)  # (n,) f
    # NOTE: blocks, so that the temporaries stay small and are made once per call: fresh whole-array
    # temporaries for every step cost more in page faults than the arithmetic (benchmarks/casts.py).
    b = min(x.shape[0], max(MIN_BLOCK, min(BLOCK, x.shape[0] // 16)))
    v = np.empty(b)  # (b,) float64 scratch
    t = np.empty(v.shape, np.uint32) if d <= 31 else None  # (b,) uint32 scratch
    keep = ~np.array(2**d - 1, w.uint_dtype)  # mask of the kept bits
    a_flat = a.reshape(-1)  # (n,) for the naive twin, which must see the caller's dtype (NaN payloads)
    top_half = w.name == "fp32" and f.name == "bf16"
    for start in range(0, x.shape[0], b):
        blk = slice(start, start + b)
        res = _carry_addends(u[blk], d, w, v, t)
        if res is None:
            return stochastic_reference(a, f, u.reshape(a.shape))
        np.add(x[blk].view(w.uint_dtype), res, out=res)  # (b,) W bits, low d bits: D + r
        np.bitwise_and(res, keep, out=res)
        if top_half:  # bf16 is float32's top 16 bits: a shift, not ml_dtypes' slower rounding cast
            np.right_shift(res, 16, out=res)
            np.copyto(out[blk].view(np.uint16), res, casting="unsafe")
        else:
            np.copyto(out[blk], res.view(w.dtype), casting="unsafe")
        # exact where the formula holds (the low d bits are clear); junk for inf/NaN inputs and beyond
        # f.max, replaced here:
        _naive_where_outside(out[blk], a_flat[blk], x[blk], f, w, u[blk], scratch=res.view(w.dtype))
    return out.reshape(a.shape)


def _naive_where_outside(out: np.ndarray, a: np.ndarray, x: np.ndarray, f: Format, w: Format, u: np.ndarray,
                         scratch: np.ndarray | None) -> None:
    """Overwrite `out` with the naive twin's answer where the carry formula does not hold; all (b,)."""
    slow = _outside_carry_range(x, f, w, scratch)
    if slow is not None:
        out[slow] = stochastic_reference(a[slow], f, u[slow])
