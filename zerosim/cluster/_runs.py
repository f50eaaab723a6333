"""Per-rank counts, run-length encoded: what a flat range of a sharded buffer looks like to N ranks, in O(1).

Letters: N ranks, s the shard size. The flat range [a, b) of a buffer cut into N shards of s elements gives rank r
the count |[a, b) ∩ [r·s, (r+1)·s)|: zeros, a partial head, whole shards of s, a partial tail, zeros — at most five
runs, whatever N is. A ZeRO-3 step asks for one such count vector per unit and per collective; as tuples they cost
O(N) each to build, hash, sum and keep (at N = 65,536 and 194 units, most of a meta step's time and memory). A
`RunCounts` holds the runs and answers the questions the collectives and the trace ask (length, one rank's count,
the total, the non-zero runs) from them; iterated, compared or hashed, it is the tuple it stands for.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence


class RunCounts(Sequence):
    """N counts as runs ((value, repeat), ...) from rank 0; equal to (and hashing as) the tuple they expand to."""

    __slots__ = ("runs", "total", "_n", "_hash")

    def __init__(self, runs):
        merged = []
        for value, repeat in runs:
            value, repeat = int(value), int(repeat)
            if repeat < 0:
                raise ValueError(f"a run repeats its value >= 0 times, got {repeat}")
            if repeat == 0:
                continue
            if merged and merged[-1][0] == value:
                merged[-1][1] += repeat
            else:
                merged.append([value, repeat])
        self.runs = tuple((v, r) for v, r in merged)  # canonical: no empty run, no two equal runs side by side
        self.total = sum(v * r for v, r in self.runs)
        self._n = sum(r for _, r in self.runs)
        self._hash = None

    @classmethod
    @functools.lru_cache(maxsize=4096)
    def of_range(cls, a: int, b: int, shard: int, n: int) -> "RunCounts":
        """|[a, b) ∩ [r·shard, (r+1)·shard)| for r = 0..n-1: a flat range's counts over n shards of `shard`. Made once
        per range (a RunCounts is never changed once made): every engine of the same model on the same ranks asks for
        the same units' ranges, step after step (the planner's memory runs, each a new engine)."""
        if b <= a or shard <= 0:
            return cls([(0, n)])
        first, last = a // shard, (b - 1) // shard
        if first == last:
            return cls([(0, first), (b - a, 1), (0, n - first - 1)])
        head, tail = (first + 1) * shard - a, b - last * shard
        return cls([(0, first), (head, 1), (shard, last - first - 1), (tail, 1), (0, n - last - 1)])

    def nonzero(self) -> list:
        """[(first index, value, repeat)] of the runs whose value is not 0."""
        out, at = [], 0
        for value, repeat in self.runs:
            if value:
                out.append((at, value, repeat))
            at += repeat
        return out

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i):
        if isinstance(i, slice):
            return tuple(self)[i]
        i = int(i)
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError("RunCounts index out of range")
        for value, repeat in self.runs:
            if i < repeat:
                return value
            i -= repeat
        raise AssertionError("unreachable: the runs cover every index")

    def __iter__(self):
        return itertools.chain.from_iterable(itertools.repeat(v, r) for v, r in self.runs)

    def __eq__(self, other):
        if isinstance(other, RunCounts):
            return self.runs == other.runs
        if isinstance(other, (tuple, list)):
            return len(other) == self._n and tuple(self) == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(tuple(self))  # as the tuple's: equal objects hash alike (computed once)
        return self._hash

    def __repr__(self) -> str:
        return f"RunCounts({list(self.runs)})"


class RunBounds(Sequence):
    """[start, stop) of each chunk when the chunks hold `counts` (a RunCounts) elements one after another: the
    collectives' chunk bounds (collectives/_shards.py `chunk_bounds`), answered from the runs."""

    __slots__ = ("counts",)

    def __init__(self, counts: RunCounts):
        self.counts = counts

    def __len__(self) -> int:
        return len(self.counts)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return tuple(self)[i]
        i = int(i)
        if i < 0:
            i += len(self.counts)
        if not 0 <= i < len(self.counts):
            raise IndexError("RunBounds index out of range")
        start = 0
        for value, repeat in self.counts.runs:
            if i < repeat:
                start += i * value
                return start, start + value
            start += value * repeat
            i -= repeat
        raise AssertionError("unreachable: the runs cover every index")

    def __iter__(self):
        offsets = list(itertools.accumulate(self.counts, initial=0))
        return zip(offsets[:-1], offsets[1:])

    def __eq__(self, other):
        if isinstance(other, RunBounds):
            return self.counts == other.counts
        if isinstance(other, (tuple, list)):
            return len(other) == len(self) and tuple(self) == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"RunBounds({self.counts!r})"
