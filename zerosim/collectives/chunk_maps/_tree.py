"""A tree all-reduce's order and time: what seed 001's "tree-based all-reduces ... better latency scaling" means.

Letters: N ranks, Ψ bytes of the buffer, α seconds per step, β bytes/s per direction.

The tree here is a plain binary tree rooted at rank 0 (rank r's children are 2r + 1 and 2r + 2): each rank adds its
children's partial sums to its own, left child first, rounding to the wire format after every add, and sends the
result to its parent; the root's sum is then broadcast down the same tree. NCCL's tree is a double binary tree
(two trees with complementary leaves, each carrying half the buffer, pipelined in chunks: src/graph/trees.cc,
ncclGetDtree) and sums in another order again; this is the shape of the idea, not NCCL's bits.

Time, pipelined over small chunks: ⌈log₂ N⌉ levels each way, so 2·⌈log₂ N⌉·α of latency against the ring's
2(N−1)·α. Bytes: an inner node takes in both children's partial sums on its one incoming link (2Ψ) and sends the
result down to both (2Ψ), so 4Ψ/β against the ring's 2(N−1)/N·Ψ/β — twice, which is what NCCL's double binary
tree removes (each rank is an inner node of one tree only, each tree carries half: ≈ 2Ψ/β, seed 001's "same
asymptotic volume"). So

    tree   base + 2·⌈log₂ N⌉·α + 4Ψ/β          ring   base + 2(N−1)·α + 2(N−1)/N·Ψ/β

(base: the call's latency, the same for both with NCCL's Simple protocol)

and the tree wins below Ψ* = 2α·((N−1) − ⌈log₂ N⌉)·β / (4 − 2(N−1)/N): small messages on many ranks, where NCCL's
tuner picks it; the ring above.
"""

from __future__ import annotations

import math

import numpy as np

from zerosim.precision import cast, format_of, get_format


def tree_all_reduce(tensors, wire=None) -> list:
    """Every rank's copy of the sum of `tensors` (one flat array per rank) added up a binary tree rooted at rank 0:
    node r's partial = (own + left child's) + right child's, each add rounded once to `wire` (default the inputs'
    format). Returns N equal arrays (the broadcast down copies the root's bits)."""
    n = len(tensors)
    fmt = get_format(wire) if wire is not None else format_of(tensors[0])
    xs = [cast(np.asarray(t), fmt) for t in tensors]

    def partial(r: int) -> np.ndarray:
        acc = xs[r]
        for child in (2 * r + 1, 2 * r + 2):
            if child < n:
                acc = cast(acc.astype(np.float64) + partial(child).astype(np.float64), fmt)  # one rounding per add
        return acc

    total = partial(0)
    return [total.copy() for _ in range(n)]


def tree_levels(n: int) -> int:
    """⌈log₂ N⌉: the edges from the root to the deepest leaf."""
    return math.ceil(math.log2(n)) if n > 1 else 0


def tree_all_reduce_time(buffer_bytes: float, n: int, link) -> float:
    """A pipelined binary-tree all-reduce of Ψ bytes over N ranks: base + 2·⌈log₂ N⌉·α + 4Ψ/β (module docstring).

    `base`: the link's per-call latency, charged once as the ring's is. NCCL 2.30.7's Simple protocol charges the
    tree and the ring the same base, 8.4 µs (src/graph/tuning.cc, ncclTunerConstantsDefaults.baseLatencies), so it
    cancels out of the crossover."""
    if n < 2:
        return 0.0
    return link.base + 2 * tree_levels(n) * link.alpha + 4 * buffer_bytes / link.bandwidth


def ring_tree_crossover(n: int, link) -> float:
    """Ψ* in bytes: below it the tree's all-reduce is faster than the ring's, above it slower (equal times)."""
    if n < 2:
        return 0.0
    return 2 * link.alpha * ((n - 1) - tree_levels(n)) * link.bandwidth / (4 - 2 * (n - 1) / n)
