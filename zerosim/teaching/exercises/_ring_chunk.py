"""Exercise: the ring reduce-scatter's chunk index — which chunk does rank r send at step k?

Graded by driving a ring with the learner's index (the partial sums travel, each rank adds its own copy
of the chunk that arrives, every add rounded to fp16) and comparing, case by case: what each rank may
send (only the partial sum it holds), which chunk each rank ends owning (chunk r, in NCCL's order), the
sums against the naive twin in ring order, bit for bit, and the sends against the package's own ring's
trace. The inputs make order matter: rank 0 holds 2048, the others 1 (fp16's spacing at 2048 is 2).
"""

from __future__ import annotations

import numpy as np

from zerosim.teaching.exercises._grading import Counterexample, Exercise

TASK = """\
In a ring reduce-scatter over N ranks, rank r sends to rank r+1 (mod N), N-1 times. At step 0 a rank
sends its own copy of one chunk; at every later step it sends the partial sum it just made (what arrived,
plus its own copy of that chunk). After the last step rank r must hold the whole sum of chunk r (NCCL's
order: the partial sum for chunk c starts at rank c+1). Write chunk_sent(rank, step, world_size): the
chunk rank `rank` sends at step `step` (0-based)."""

STUB = '''\
def chunk_sent(rank, step, world_size):
    """The chunk (0..world_size-1) that rank `rank` sends at ring step `step` (0..world_size-2) of a
    reduce-scatter, so that rank r ends owning the sum of chunk r."""
    raise NotImplementedError
'''

SOLUTION = '''\
def chunk_sent(rank, step, world_size):
    # the partial sum of chunk c starts at rank c+1 and moves one rank per step: at step k it leaves rank c+1+k
    return (rank - 1 - step) % world_size
'''

PLANTED = {
    "off by one": '''\
def chunk_sent(rank, step, world_size):
    return (rank - step) % world_size
''',
    "the wrong way round": '''\
def chunk_sent(rank, step, world_size):
    return (rank + 1 + step) % world_size
''',
}


def cases():
    for n in range(2, 7):
        yield {"what": f"N = {n} ranks, one fp16 element per chunk: rank 0 holds 2048, the others 1", "n": n}


def _ring(fn, xs: list, n: int) -> tuple:
    """Drive a reduce-scatter with `fn` as the chunk index; (sends [(step, src, chunk)], final chunk and sum per
    rank)."""
    chunks = [np.split(x, n) for x in xs]  # chunks[r][c]: rank r's own copy of chunk c, fp16
    held = [None] * n  # (chunk, partial sum) each rank holds after the last step it received in
    sends = []
    for k in range(n - 1):
        out = []
        for r in range(n):
            c = fn(r, k, n)
            if not isinstance(c, (int, np.integer)) or not 0 <= c < n:
                raise Counterexample(f"chunk_sent({r}, {k}, {n}) returned {c!r}; it must be a chunk number 0..{n - 1}")
            if k > 0 and c != held[r][0]:
                raise Counterexample(f"at step {k} rank {r} would send chunk {c}, but the partial sum it holds is "
                                     "chunk "
                                     f"{held[r][0]} (it arrived from rank {(r - 1) % n} at step {k - 1}); a rank can "
                                     "only "
                                     f"pass on the sum it made")
            out.append((c, chunks[r][c] if k == 0 else held[r][1]))
            sends.append((k, r, int(c)))
        for r, (c, partial) in enumerate(out):  # rank r+1 adds its own copy, rounded to fp16 as the wire is
            dst = (r + 1) % n
            held[dst] = (c, (partial.astype(np.float64) + chunks[dst][c].astype(np.float64)).astype(np.float16))
    return sends, held


def check(fn, case) -> None:
    from zerosim.cluster import Cluster
    from zerosim.collectives import naive_reduce_scatter, reduce_scatter

    n = case["n"]
    xs = [np.full(n, 2048, np.float16)] + [np.ones(n, np.float16) for _ in range(n - 1)]
    sends, held = _ring(fn, xs, n)
    for r, (c, total) in enumerate(held):
        if c != r:
            raise Counterexample(f"rank {r} ends holding the sum of chunk {c}, but in NCCL's order rank {r} owns chunk "
                                 f"{r} "
                                 f"(the partial sum for chunk c starts at rank c+1)")
        want = naive_reduce_scatter(xs)[r]  # the naive twin: gather everything, add in the ring's order
        if total.view(np.uint16).tolist() != want.view(np.uint16).tolist():
            raise Counterexample(f"rank {r}'s chunk sums to {float(total[0])!r}; the ring's order gives "
                                 f"{float(want[0])!r}")
    cluster = Cluster(n)
    reduce_scatter(cluster, xs)
    ring = sorted((e.step, e.src, e.chunk) for e in cluster.trace.events)
    if sorted(sends) != ring:  # cannot differ once the checks above pass; kept as the statement of the goal
        raise Counterexample(f"your sends {sorted(sends)} are not the package's ring's {ring}")


EXERCISE = Exercise("ring_chunk", "the ring reduce-scatter's chunk index: which chunk rank r sends at step k",
                    "chunk_sent", TASK, STUB, SOLUTION, PLANTED, cases, check,
                    grades=("zerosim.collectives", "zerosim.reference"))  # a ring's trace names every send
