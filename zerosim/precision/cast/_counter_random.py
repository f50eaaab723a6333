"""Uniform random numbers that belong to an element, not to whoever computes it.

Stochastic rounding inside ZeRO must give the same bits however the flat buffer is sharded, or the
stages could not equal the single-device oracle. So the draw for element e at step t is a pure
function of (seed, t, e): SplitMix64 (Steele, Lea & Flood 2014, the generator that seeds Java's
SplittableRandom) applied to a counter, vectorised. Rank r computing its shard [a, b) gets exactly
the numbers the oracle gets for [a, b) of the whole vector.
"""

from __future__ import annotations

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_STEP = np.uint64(0xD1B54A32D192ED03)  # another odd constant, so (seed, step) pairs do not collide easily
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)  # SplitMix64's finaliser (Stafford's "Mix13")
_MIX2 = np.uint64(0x94D049BB133111EB)
_BLOCK = 2**14  # elements per block: its three uint64 temporaries stay in cache, and stay small


def counter_uniforms(seed: int, step: int, start: int, count: int) -> np.ndarray:
    """(count,) float64 uniforms in [0, 1) for elements start .. start+count-1 of step `step`."""
    # uint64 arithmetic wraps on purpose: Python integers taken modulo 2**64 give the same numbers
    base = (seed % 2**64 * int(_GOLDEN) + step % 2**64 * int(_STEP) + int(_GOLDEN)) % 2**64
    np.uint64(start)  # OverflowError for a start outside [0, 2**64), as np.arange(start, ..., uint64) gives
    out = np.empty(max(count, 0))  # (count,) float64
    b = min(out.shape[0], _BLOCK)
    offsets = np.arange(b, dtype=np.uint64)  # (b,) 0 .. b-1
    z = np.empty(b, np.uint64)  # (b,) the SplitMix64 state, then its output
    s = np.empty(b, np.uint64)  # (b,) shifted copies of z
    # NOTE: in place, block by block: fresh whole-array temporaries cost more in page faults than the
    # arithmetic. Every operation wraps modulo 2**64 exactly as the one-line formula would.
    for lo in range(0, out.shape[0], _BLOCK):
        m = min(_BLOCK, out.shape[0] - lo)
        zb, sb = z[:m], s[:m]
        np.add(offsets[:m], np.uint64((start + lo + base) % 2**64), out=zb)  # counter start+lo+i, plus base
        for shift, mult in ((30, _MIX1), (27, _MIX2)):  # z = (z ^ (z >> shift)) * mult
            np.right_shift(zb, np.uint64(shift), out=sb)
            np.bitwise_xor(zb, sb, out=zb)
            np.multiply(zb, mult, out=zb)
        np.right_shift(zb, np.uint64(31), out=sb)
        np.bitwise_xor(zb, sb, out=zb)
        np.right_shift(zb, np.uint64(11), out=zb)  # the top 53 bits: exact in float64
        ob = out[lo : lo + m]
        np.copyto(ob, zb.view(np.int64), casting="unsafe")  # below 2**53: int64 -> float64 is exact (and faster)
        np.multiply(ob, 2.0**-53, out=ob)
    return out
