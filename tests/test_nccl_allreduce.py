"""NCCL's ring all-reduce chunk map (src/device/all_reduce.h: runRing), hand-derived, and the all-reduce on it.

The rows are worked out from the kernel's loop by hand:

    chunkCount = chunk_bytes / elem_size;  loopCount = N * chunkCount
    for each loop at elemOffset: rem = count - elemOffset
        if rem < loopCount: chunkCount = alignUp(divUp(rem, N), 16 / elem_size)
        chunk c = [elemOffset + c*chunkCount, + min(chunkCount, rem - c*chunkCount)), empty if negative

The naive twin below sums each chunk in the ring order the map implies, ((x[c+1] + x[c+2]) + ...) +
x[c], with NumPy's float16 addition (one correct rounding of the exact sum: float32 holds it).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from zerosim import Cluster, all_reduce
from zerosim.collectives.chunk_maps import NCCL_SIMPLE_CHUNK_BYTES, nccl_all_reduce, nccl_ring_allreduce_chunks

MAPS = [
    # (count, N, elem bytes, chunk bytes) -> [(loop offset, chunkCount, chunk ranges)]
    # 10 fp16 on 3 ranks, one 512-byte grain per chunk: loopCount 768 > 10, so the only loop is the last:
    # chunkCount = alignUp(divUp(10, 3) = 4, 8) = 8; chunk 1 gets min(8, 10 - 8) = 2; chunk 2 is empty
    ((10, 3, 2, 512), [(0, 8, ((0, 8), (8, 10), (10, 10)))]),
    # the same with 2-element chunks (smaller than NCCL's grain, to see two loops): loop 0 is full;
    # loop 1 at 6 has rem 4 < 6: chunkCount = alignUp(divUp(4, 3) = 2, 8) = 8, so chunk 0 takes all 4
    ((10, 3, 2, 4), [(0, 2, ((0, 2), (2, 4), (4, 6))), (6, 8, ((6, 10), (10, 10), (10, 10)))]),
    # 20 fp32 on 4 ranks, 16-byte chunks (4 elements): loop 0 covers 16; loop 1 at 16 has rem 4:
    # divUp(4, 4) = 1, aligned up to 16 bytes = 4 elements: chunk 0 = [16, 20)
    ((20, 4, 4, 16), [(0, 4, ((0, 4), (4, 8), (8, 12), (12, 16))), (16, 4, ((16, 20), (20, 20), (20, 20), (20, 20)))]),
    # 12 fp32 on 3 ranks, 16-byte chunks: exactly one full loop
    ((12, 3, 4, 16), [(0, 4, ((0, 4), (4, 8), (8, 12)))]),
    # 6 fp16 on 3 ranks, 2-element chunks: rem 6 == loopCount is not "<", so the chunks stay 2 elements
    # (the last-loop rule would have aligned them up to 8 and given chunk 0 all six)
    ((6, 3, 2, 4), [(0, 2, ((0, 2), (2, 4), (4, 6)))]),
    # 7 fp64 on 2 ranks, 512-byte chunks: divUp(7, 2) = 4, already a multiple of 16/8 = 2
    ((7, 2, 8, 512), [(0, 4, ((0, 4), (4, 7)))]),
    # 2**21 fp16 on 2 ranks with NCCL's default 2 MiB chunks: chunkCount 2**20, one full loop
    ((2**21, 2, 2, NCCL_SIMPLE_CHUNK_BYTES), [(0, 2**20, ((0, 2**20), (2**20, 2**21)))]),
    # one more element: a second loop of 1, its chunk aligned up to 8 elements but holding the 1 that exists
    ((2**21 + 1, 2, 2, NCCL_SIMPLE_CHUNK_BYTES),
     [(0, 2**20, ((0, 2**20), (2**20, 2**21))), (2**21, 8, ((2**21, 2**21 + 1), (2**21 + 1, 2**21 + 1)))]),
    ((0, 3, 2, 512), []),  # nothing to reduce: no loop
]


@pytest.mark.parametrize("args, expected", MAPS)
def test_chunk_map_rows(args, expected):
    loops = nccl_ring_allreduce_chunks(*args)
    assert [(lp.offset, lp.chunk_count, lp.chunks) for lp in loops] == expected


def test_reduce_steps_walk_the_ring():
    # N = 3: at reduce step s rank r adds its own copy of chunk (r - 2 - s) mod 3 (all_reduce.h: j = s + 2,
    # chunk ringIx + nranks - j); the last step (s = N - 2) reduces each rank's own chunk.
    (loop,) = nccl_ring_allreduce_chunks(10, 3, 2, 512)
    assert loop.reduce_steps == ((1, 2, 0), (0, 1, 2))


def naive_nccl_sum(xs: list) -> np.ndarray:
    """Each chunk of each loop summed in the ring order of its own map."""
    n, count = len(xs), xs[0].size
    out = np.empty(count, xs[0].dtype)
    for loop in nccl_ring_allreduce_chunks(count, n, xs[0].itemsize, CHUNK):
        for c, (a, b) in enumerate(loop.chunks):
            acc = xs[(c + 1) % n][a:b]
            for k in range(2, n + 1):  # ranks c+2, ..., c+N = c
                acc = acc + xs[(c + k) % n][a:b]
            out[a:b] = acc
    return out


CHUNK = 16  # bytes: 8 fp16 per chunk, so a few dozen elements already make several loops


@given(n=st.integers(1, 5), count=st.integers(0, 70), seed=st.integers(0, 2**16))
def test_equals_the_naive_twin(n, count, seed):
    rng = np.random.default_rng(seed)
    xs = [(rng.standard_normal(count) * 10.0 ** rng.integers(-3, 4, count)).astype(np.float16) for _ in range(n)]
    got = nccl_all_reduce(Cluster(n), xs, chunk_bytes=CHUNK)
    want = naive_nccl_sum(xs)
    for g in got:
        assert np.array_equal(g.view(np.uint16), want.view(np.uint16))


def test_differs_from_zerosims_default_all_reduce():
    # 10 fp16 on 3 ranks. zerosim cuts the padded buffer into [0,4) [4,8) [8,12): element 5 is in chunk 1 and
    # its sum starts at rank 2: (x2 + x0) + x1. NCCL's map puts it in chunk 0 = [0, 8): (x1 + x2) + x0.
    # With x0 = 1 and x1 = x2 = 2**-11 (half an fp16 ulp of 1): NCCL adds the two halves first,
    # 2**-10, exactly, then 1 + 2**-10 is exact; zerosim's 1 + 2**-11 is a tie that rounds to even, 1.0,
    # and so is the second. Addition is not associative, and the two maps order it differently.
    xs = [np.zeros(10, np.float16) for _ in range(3)]
    xs[0][5], xs[1][5], xs[2][5] = 1.0, 2.0**-11, 2.0**-11
    ours = all_reduce(Cluster(3), xs)[0][5]
    nccl = nccl_all_reduce(Cluster(3), xs, chunk_bytes=512)[0][5]
    assert (float(ours), float(nccl)) == (1.0, 1.0009765625)


def test_trace_records_each_phase_of_each_loop():
    cluster = Cluster(3)
    xs = [np.arange(10, dtype=np.float16) for _ in range(3)]
    nccl_all_reduce(cluster, xs, chunk_bytes=512, tag="g")
    calls = cluster.trace.select(collective="nccl_all_reduce")
    assert len({e.call for e in calls}) == 2  # one loop: its reduce-scatter phase and its all-gather phase
    # chunk sizes [8, 2, 0]. Reduce-scatter: rank r sends chunk r-1 then r-2 -> rank 0: 0 + 2, rank 1: 8 + 0,
    # rank 2: 2 + 8. All-gather: rank r forwards chunk r then r-1 -> rank 0: 8 + 0, rank 1: 2 + 8, rank 2: 0 + 2.
    sent = [sum(e.bytes for e in calls if e.src == r) for r in range(3)]
    assert sent == [(2 + 8) * 2, (8 + 10) * 2, (10 + 2) * 2]  # unbalanced, unlike zerosim's ring
    assert sum(sent) == 2 * (3 - 1) * 10 * 2  # still 2(N-1) x count elements in all
    assert all(rank.ledger.current(kind="comm") == 0 for rank in cluster.ranks)


def test_ops_shapes_and_one_rank():
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((2, 6)).astype(np.float32) for _ in range(3)]
    total = nccl_all_reduce(Cluster(3), xs, chunk_bytes=16)
    assert total[0].shape == (2, 6) and all(np.array_equal(t, total[0]) for t in total)
    avg = nccl_all_reduce(Cluster(3), xs, op="avg", chunk_bytes=16)
    assert np.array_equal(avg[0], total[0] / np.float32(3))  # "avg": the fp32 sum, then / N in fp32
    prem = nccl_all_reduce(Cluster(3), xs, op="avg_premul", chunk_bytes=16)  # NCCL's ncclAvg: x * fl32(1/3) first
    scaled = [x * np.float32(1 / 3) for x in xs]
    assert np.array_equal(prem[0], nccl_all_reduce(Cluster(3), scaled, chunk_bytes=16)[0])
    (alone,) = nccl_all_reduce(Cluster(1), [xs[0]])
    assert np.array_equal(alone, xs[0])


@pytest.mark.parametrize("args", [(-1, 2, 2), (10, 0, 2), (10, 2, 2, 3), (10, 2, 4, 512, 6), (10, 2, True)])
def test_bad_arguments(args):
    with pytest.raises(ValueError):
        nccl_ring_allreduce_chunks(*args)
