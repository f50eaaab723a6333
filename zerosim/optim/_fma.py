"""A fused multiply-add in fp32, for the optimizers whose kernels fuse (torch's CPU Adam, DeepSpeed's CPU Adam)."""

from __future__ import annotations

import numpy as np


def fma32(a, b, c) -> np.ndarray:
    """a*b + c rounded once to fp32 (a fused multiply-add), for fp32 arrays or scalars.

    The product of two fp32 numbers is exact in float64 (24 + 24 <= 53 bits). The sum is not, so
    TwoSum (Knuth) gives its exact error and the float64 sum is rounded *to odd* (toward zero, then
    the last bit set when anything was dropped); a round-to-odd value with >= p + 2 bits rounds to
    nearest correctly (Boldo & Melquiond, "When double rounding is odd", 2005).
    """
    p = np.multiply(np.asarray(a, np.float64), np.asarray(b, np.float64))  # exact
    c64 = np.asarray(c, np.float64)
    s = p + c64
    bv = s - p
    err = (p - (s - bv)) + (c64 - bv)  # s + err == p + c exactly (TwoSum)
    inexact = (err != 0) & np.isfinite(s)
    if np.any(inexact):
        overshot = inexact & ((err > 0) != (s > 0))  # |s| > |p + c|: step back toward zero
        s = np.where(overshot, np.nextafter(s, 0.0), s)
        s = (np.asarray(s).view(np.uint64) | inexact.astype(np.uint64)).view(np.float64)
    return np.asarray(s).astype(np.float32)
