"""Who orthogonalises which matrix: Newton-Schulz's FLOPs, the two assignments the frameworks use, their balance.

Letters: M a matrix of shape (rows, cols), s = min(rows, cols) and l = max(rows, cols), k Newton-Schulz steps,
N ranks. One step forms A = X X^T (s x l times l x s: 2 s^2 l FLOPs), A A (2 s^3) and (b A + c A A) X (2 s^2 l):

    flops(M) = 2 k s^2 (2 l + s)          torchtitan's cost model (`_estimate_muon_compute_cost`: k s^2 (2l + s)
                                          multiply-adds), the elementwise terms and the norm left out

balanced (torchtitan b5bcd76, flex_shard/dist_muon.py `_balance_loads_across_partitions`): within each bucket, the
matrices largest first (FLOPs, then bytes, then name), each to the rank whose (bucket FLOPs, bucket bytes,
cumulative FLOPs, rank) is smallest — a heap; across buckets the cumulative FLOPs break ties (an LPT heuristic,
"not an exact partition optimum"). round_robin (KellerJordan/Muon 857d1ad muon.py `Muon.__init__`): the matrices
sorted by `p.size()` descending (torch.Size compares as a tuple: rows first), the i-th to rank i mod N.

`balance` is the issue's measure: the busiest rank's FLOPs over the mean rank's.
"""

from __future__ import annotations

import heapq


def ns_flops(shape, steps: int) -> int:
    """2 k s^2 (2l + s): Newton-Schulz's matrix-product FLOPs on one (rows, cols) matrix (see the module docstring)."""
    s, l = sorted(int(n) for n in shape)
    return 2 * int(steps) * s * s * (2 * l + s)


def balanced(buckets: list, n: int) -> list:
    """torchtitan's LPT: `buckets` is [[(flops, bytes, key), ...], ...] in bucket order; returns per bucket the rank
    (0..n-1) of each matrix, in the bucket's order. The heap orders ranks by (this bucket's FLOPs, this bucket's
    bytes, cumulative FLOPs, rank)."""
    cumulative = [0] * n
    out = []
    for loads in buckets:
        heap = [(0, 0, cumulative[r], r) for r in range(n)]
        heapq.heapify(heap)
        order = sorted(range(len(loads)), key=lambda i: (-loads[i][0], -loads[i][1], loads[i][2]))
        got = [0] * len(loads)
        for i in order:
            flops, nbytes, _ = loads[i]
            primary, secondary, total, r = heapq.heappop(heap)
            got[i] = r
            heapq.heappush(heap, (primary + flops, secondary + nbytes, total + flops, r))
        for _, _, total, r in heap:
            cumulative[r] = total
        out.append(got)
    return out


def balanced_naive(buckets: list, n: int) -> list:
    """The naive twin of `balanced`: the same rule by scanning every rank for the smallest key, no heap."""
    cumulative = [0] * n
    out = []
    for loads in buckets:
        bucket = [[0, 0] for _ in range(n)]
        got = [0] * len(loads)
        for i in sorted(range(len(loads)), key=lambda i: (-loads[i][0], -loads[i][1], loads[i][2])):
            r = min(range(n), key=lambda r: (bucket[r][0], bucket[r][1], cumulative[r], r))
            got[i] = r
            bucket[r][0] += loads[i][0]
            bucket[r][1] += loads[i][1]
            cumulative[r] += loads[i][0]
        out.append(got)
    return out


def round_robin(shapes: list, n: int) -> tuple:
    """KellerJordan's muon.py assignment: (order, owners) — the matrices' indices sorted by shape descending (a stable
    sort, as Python's `sorted(params, key=lambda x: x.size(), reverse=True)`), and owners[i] = (place of i in it) mod
    n."""
    order = sorted(range(len(shapes)), key=lambda i: tuple(shapes[i]), reverse=True)
    owners = [0] * len(shapes)
    for place, i in enumerate(order):
        owners[i] = place % n
    return tuple(order), tuple(owners)


def loads(owners, flops, n: int) -> list:
    """FLOPs each of the n ranks orthogonalises, given each matrix's owner and FLOPs."""
    out = [0] * n
    for r, f in zip(owners, flops):
        out[r] += f
    return out


def balance(owners, flops, n: int) -> float:
    """The busiest rank's Newton-Schulz FLOPs over the mean rank's (1.0: perfect; n: one rank does all)."""
    per = loads(owners, flops, n)
    mean = sum(per) / n
    return max(per) / mean if mean else 1.0


def by_unit(mats) -> list:
    """The matrices grouped by model unit (layer), in model order."""
    buckets = {}
    for m in mats:
        buckets.setdefault(m.spec.layer, []).append(m)
    return list(buckets.values())


def units_of_at_least(mats, n: int) -> list:
    """Whole units joined in model order until a bucket holds at least n matrices (the last may hold fewer), so every
    owner of a bucket can have one: torchtitan's Kimi recipe groups layers into buckets the same way
    (models/kimi_k2_7/config_registry.py, `BucketConfig`); one unit a bucket leaves most of 64 ranks idle."""
    out = []
    for unit in by_unit(mats):
        if out and len(out[-1]) < n:
            out[-1] = out[-1] + unit
        else:
            out.append(list(unit))
    return out
