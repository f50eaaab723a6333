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


def counter_uniforms(seed: int, step: int, start: int, count: int) -> np.ndarray:
    """(count,) float64 uniforms in [0, 1) for elements start .. start+count-1 of step `step`."""
    with np.errstate(over="ignore"):  # uint64 arithmetic wraps on purpose
        base = np.uint64(seed % 2**64) * _GOLDEN + np.uint64(step % 2**64) * _STEP
        z = np.arange(start, start + count, dtype=np.uint64) + base + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) * 2.0**-53  # the top 53 bits: exact in float64
