"""Shard arithmetic, in one place: padding a flat buffer to a multiple of N and cutting it in N.

A flat buffer of `length` elements is zero-padded to `padded = N * shard_size` with
`shard_size = ceil(length / N)`, and rank r owns the contiguous slice
`[r * shard_size, (r + 1) * shard_size)`. The padding sits at the end, so the last ranks' shards hold
fewer real elements (and when length < N some hold none). A parameter may straddle two shards.
Collectives and ZeRO engines both take their offsets from here.
"""

from __future__ import annotations

import functools
import itertools

import numpy as np

from zerosim._dataclass import dataclass
from zerosim.cluster import RunBounds, RunCounts


@dataclass(frozen=True)
class ShardLayout:
    """How a flat buffer of `length` elements is padded and cut into `world_size` equal shards."""

    length: int  # real elements in the flat buffer
    world_size: int  # N

    def __post_init__(self):
        if self.world_size < 1:
            raise ValueError(f"world_size must be >= 1, got {self.world_size}")
        if self.length < 0:
            raise ValueError(f"length must be >= 0, got {self.length}")

    @property
    def shard_size(self) -> int:
        """Elements per shard, padding included: ceil(length / N)."""
        return -(-self.length // self.world_size)

    @property
    def padded(self) -> int:
        """Length after zero padding: N * shard_size (a multiple of N)."""
        return self.shard_size * self.world_size

    @property
    def padding(self) -> int:
        return self.padded - self.length

    def bounds(self, rank: int) -> tuple:
        """[start, stop) of `rank`'s shard in padded coordinates."""
        s = self.shard_size
        return rank * s, (rank + 1) * s

    def real_bounds(self, rank: int) -> tuple:
        """[start, stop) of the real (unpadded) elements of `rank`'s shard; empty when all padding."""
        start, stop = self.bounds(rank)
        return min(start, self.length), min(stop, self.length)

    def real_size(self, rank: int) -> int:
        start, stop = self.real_bounds(rank)
        return stop - start

    def real_sizes(self) -> list:
        """Every shard's real elements, rank by rank (asked for once or twice a collective: cached per layout)."""
        return list(_real_sizes(self.length, self.world_size))

    def pad(self, flat: np.ndarray) -> np.ndarray:
        """A new array of `padded` elements: `flat` followed by zeros, in flat's dtype."""
        if flat.shape != (self.length,):
            raise ValueError(f"expected a flat buffer of {self.length} elements, got shape {flat.shape}")
        out = np.zeros(self.padded, dtype=flat.dtype)
        out[: self.length] = flat
        return out

    @classmethod
    def from_shard_sizes(cls, sizes) -> "ShardLayout":
        """The layout whose shards have these real sizes, or a ValueError that says what was expected."""
        sizes = [int(s) for s in sizes]
        if len(set(sizes)) == 1:  # equal shards: a buffer already padded to a multiple of N
            return cls(sizes[0] * len(sizes), len(sizes))
        layout = cls(sum(sizes), len(sizes))
        if sizes != layout.real_sizes():
            raise ValueError(
                f"mismatched shard sizes {sizes}: {len(sizes)} shards of a {layout.length}-element buffer must be "
                f"{layout.real_sizes()} (ceil(length/N) each, padding only at the end) or all equal"
            )
        return layout


def chunk_bounds(layout: ShardLayout, counts) -> tuple:
    """[start, stop) of each rank's chunk in the staged buffer: equal padded chunks, or `counts`.

    Cached per layout and per counts tuple: an engine asks for the same few layouts thousands of times
    (one per layer), and at N = 4096 building them is most of a meta step's work.
    """
    if counts is None:
        return _equal_bounds(layout.shard_size, layout.world_size)
    if isinstance(counts, RunCounts):  # a flat range's counts, run-length encoded: bounds answered from the runs
        return RunBounds(counts)
    return _bounds_of_counts(tuple(counts))


def counts_total(counts) -> int:
    """sum(counts), in O(1) for a RunCounts."""
    return counts.total if isinstance(counts, RunCounts) else sum(counts)


@functools.lru_cache(maxsize=4096)
def _real_sizes(length: int, n: int) -> tuple:
    """`ShardLayout(length, n).real_sizes()`, each rank's `real_size`, as a tuple."""
    layout = ShardLayout(length, n)
    return tuple(layout.real_size(r) for r in range(n))


@functools.lru_cache(maxsize=4096)
def _equal_bounds(shard_size: int, n: int) -> tuple:
    return tuple((c * shard_size, (c + 1) * shard_size) for c in range(n))


@functools.lru_cache(maxsize=4096)
def _bounds_of_counts(counts: tuple) -> tuple:
    offsets = [0, *itertools.accumulate(counts)]
    return tuple(zip(offsets[:-1], offsets[1:]))
