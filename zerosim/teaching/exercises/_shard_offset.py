"""Exercise: a shard's offset with padding — which elements of a flat buffer of L does rank r own?

Graded on every buffer length 0..12 and world size 1..5, smallest first: the learner's shard of the
full (naive, float64-free) reduction must be exactly what the package's ring reduce-scatter hands rank
r, which cuts with the one shard rule of the package (`ShardLayout`: ceil(L/N) per shard, padding at
the end), and the shards must tile [0, L) in rank order.
"""

from __future__ import annotations

import numpy as np

from zerosim.teaching.exercises._grading import WITHHELD, Counterexample, Exercise

TASK = """\
ZeRO pads a flat buffer of L elements with zeros to a multiple of N and cuts it into N equal shards of
s = ceil(L/N) elements: rank r owns [r*s, (r+1)*s) of the padded buffer. Padding is not data, so a rank's
real elements stop at L (the last ranks may own fewer, or none when L < N). Write shard_bounds(length,
world_size, rank): the [start, stop) of rank's real elements in the unpadded buffer."""

STUB = '''\
def shard_bounds(length, world_size, rank):
    """(start, stop): the real (unpadded) elements rank `rank` owns of a flat buffer of `length`
    elements cut into `world_size` equal padded shards."""
    raise NotImplementedError
'''

# No reference solution ships: this function is one of assignment 2's, whose reference stays with the
# instructor (course/instructor/a2/solution.py, outside the package), so no student-facing command prints it.
SOLUTION = ""

# The planted bugs' sources are withheld with the reference (they are the reference less one line): the
# instructor kit has them (course/instructor/exercises/shard_offset/, `zerosim exercise check --planted`
# finds them there when the kit is installed). Their names stay: they say what the grader catches.
PLANTED = dict.fromkeys(['floor instead of ceil', 'padding counted as data'], "")


def cases():
    for length in range(13):
        for n in range(1, 6):
            yield {"what": f"a buffer of {length} element{'' if length == 1 else 's'} on {n} "
                           f"rank{'' if n == 1 else 's'}",
                   "length": length, "n": n}


def check(fn, case) -> None:
    from zerosim.cluster import Cluster
    from zerosim.collectives import naive_reduce, reduce_scatter

    length, n = case["length"], case["n"]
    xs = [np.arange(length, dtype=np.float32) + 100 * r for r in range(n)]  # distinct values: a shifted cut shows
    full = naive_reduce(xs, order="float64")  # (L,) the whole reduction, no sharding involved
    got = reduce_scatter(Cluster(n), xs)  # the package's ring: rank r's real elements
    end = 0
    for r in range(n):
        bounds = fn(length, n, r)
        if not (
            isinstance(bounds, tuple) and len(bounds) == 2 and all(isinstance(b, (int, np.integer)) for b in bounds)
        ):
            raise Counterexample(f"shard_bounds({length}, {n}, {r}) returned {bounds!r}; it must be a pair of ints "
                                 "(start, stop)")
        start, stop = bounds
        if start != end or stop < start or stop > length:
            raise Counterexample(f"rank {r}'s shard is [{start}, {stop}); the shards must tile [0, {length}) in rank "
                                 "order "
                                 f"without the padding, so rank {r}'s must start at {end} and stop at most at {length}")
        if not np.array_equal(full[start:stop], got[r]):
            want = (start, start + got[r].shape[0])
            raise Counterexample(f"rank {r}'s shard is [{start}, {stop}), but the ring reduce-scatter gives rank {r} "
                                 "the elements "
                                 f"[{want[0]}, {want[1]}): shards are ceil({length}/{n}) = {-(-length // n)} long, "
                                 "padding at the end")
        end = stop
    if end != length:
        raise Counterexample(f"the shards end at element {end}; element{'s' if length - end > 1 else ''} "
                             f"{end}..{length - 1} belong to no rank")


EXERCISE = Exercise("shard_offset", "a shard's offset with padding: rank r's [start, stop) of a flat buffer",
                    "shard_bounds", TASK, STUB, SOLUTION, PLANTED, cases, check,
                    withheld=WITHHELD, grades=("zerosim.collectives", "zerosim.parallel", "zerosim.reference"))
