"""Communication volume read from the trace, checked against the ring's arithmetic done by hand.

Letters: N ranks, L elements per rank, s = ceil(L / N), padded length N*s, b bytes per wire element.

A ring reduce-scatter or all-gather runs N-1 steps and every rank sends one chunk of s elements per
step, so each rank sends (N-1) * s * b = (N-1)/N * (padded bytes); an all-reduce is both phases,
2(N-1)/N. Every send on a ring is somebody's receive, and each rank receives from exactly one
neighbour once per step, so per rank received == sent.
"""

from __future__ import annotations

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zerosim import Cluster, all_gather, all_reduce, broadcast, reduce_scatter

WORLD_SIZES = range(1, 17)
IN_DTYPES = {"fp64": np.float64, "fp32": np.float32, "fp16": np.float16}
WIRE_BYTES = {"fp64": 8, "fp32": 4, "bf16": 2, "fp16": 2, "fp8_e4m3": 1}  # itemsize of each wire format


def lengths_for(n: int) -> list:
    """Empty, shorter than N, exactly N, N +- 1, not divisible, and a couple of larger odd sizes."""
    return sorted({0, 1, max(n - 1, 0), n, n + 1, 3 * n + 2, 100, 257})


def phase_bytes(n: int, length: int, itemsize: int) -> int:
    """(N-1)/N of the padded buffer, in bytes: what each rank sends in one ring phase."""
    padded = n * -(-length // n)
    v = Fraction(n - 1, n) * padded * itemsize
    assert v.denominator == 1  # padded is a multiple of N, so this is a whole number of bytes
    return int(v)


@pytest.mark.parametrize("n", [pytest.param(n, marks=pytest.mark.slow) if n > 8 else n  # N > 8: ~1 s each
                               for n in WORLD_SIZES])
def test_each_rank_sends_n_minus_1_over_n_per_phase(n):
    for length in lengths_for(n):
        for in_name, wire in [("fp32", None), ("fp32", "bf16"), ("fp64", None), ("fp16", "fp32"), ("fp32", "fp8_e4m3")]:
            c = Cluster(n)  # a fresh trace each time keeps the event lists short
            x = [np.ones(length, dtype=IN_DTYPES[in_name]) for _ in range(n)]
            wire_name = wire or in_name
            b = WIRE_BYTES[wire_name]
            want = phase_bytes(n, length, b)

            call = len(c.trace.calls)
            shards = reduce_scatter(c, x, wire=wire)
            for r in range(n):
                assert c.trace.bytes_sent(r, call=call) == want, (n, length, wire_name, r)
                assert c.trace.bytes_received(r, call=call) == want
            assert all(e.dtype == wire_name for e in c.trace.select(call=call))
            info = c.trace.calls[call]
            assert (info.collective, info.world_size, info.elements, info.dtype) == (
                "reduce_scatter",
                n,
                n * -(-length // n),
                wire_name,
            )

            call = len(c.trace.calls)
            all_gather(c, shards)  # shards from reduce-scatter: the last ones short or empty, sent padded
            for r in range(n):
                assert c.trace.bytes_sent(r, call=call) == want
                assert c.trace.bytes_received(r, call=call) == want

            first = len(c.trace.calls)
            all_reduce(c, x, wire=wire)
            calls = range(first, len(c.trace.calls))
            assert len(calls) == 2  # reduce-scatter phase, then all-gather phase
            for r in range(n):
                sent = sum(c.trace.bytes_sent(r, call=k) for k in calls)
                assert sent == 2 * want  # 2(N-1)/N of the padded buffer
                assert sum(c.trace.bytes_received(r, call=k) for k in calls) == sent


@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_hop_events_follow_ring_steps(n):
    """N(N-1) sends per phase, one per rank per step, each one chunk of s elements to the next rank."""
    length = 3 * n + 1
    s = -(-length // n)
    c = Cluster(n)
    reduce_scatter(c, [np.zeros(length, np.float32) for _ in range(n)])
    events = c.trace.events
    assert len(events) == n * (n - 1)
    for k in range(n - 1):
        step = [e for e in events if e.step == k]
        assert sorted(e.src for e in step) == list(range(n))
        for e in step:
            assert e.dst == (e.src + 1) % n
            assert e.chunk == (e.src - 1 - k) % n  # NCCL order: the partial for chunk c leaves rank c+1 first
            assert (e.elements, e.bytes, e.dtype, e.collective) == (s, 4 * s, "fp32", "reduce_scatter")


@pytest.mark.parametrize("n", [2, 3, 7, 16])
def test_call_granularity_gives_the_same_totals(n):
    length = 2 * n + 3
    hop, call = Cluster(n, trace="hop"), Cluster(n, trace="call")
    x = [np.ones(length, ml_dtypes.bfloat16) for _ in range(n)]
    for cl in (hop, call):
        reduce_scatter(cl, x)
        all_gather(cl, [xi[:2] for xi in x])
        all_reduce(cl, x, wire="fp32")
    assert len(call.trace.calls) == len(hop.trace.calls) == 4
    for k in range(4):
        summary = call.trace.select(call=k)
        assert sorted(e.src for e in summary) == list(range(n))  # one event per rank per call
        assert all(e.step == -1 and e.dst == -1 and e.chunk == -1 for e in summary)
        for r in range(n):
            assert call.trace.bytes_sent(r, call=k) == hop.trace.bytes_sent(r, call=k) > 0
            mine = [e for e in summary if e.src == r][0]
            assert mine.elements == sum(e.elements for e in hop.trace.select(call=k) if e.src == r)
    with pytest.raises(ValueError, match="granularity"):
        call.trace.bytes_received(0)


@pytest.mark.parametrize("n", WORLD_SIZES)
def test_broadcast_sends_the_whole_buffer_n_minus_1_times(n):
    shape = (3, 5)
    count, itemsize = 15, 2
    c = Cluster(n)
    for root in range(n):
        call = len(c.trace.calls)
        broadcast(c, [np.zeros(shape, np.float16) for _ in range(n)], root=root)
        events = c.trace.select(call=call)
        assert len(events) == n - 1
        assert all(e.bytes == count * itemsize and e.elements == count for e in events)
        # a chain root -> root+1 -> ... -> root-1
        assert [(e.src, e.dst) for e in events] == [((root + k) % n, (root + k + 1) % n) for k in range(n - 1)]
        for r in range(n):
            assert c.trace.bytes_received(r, call=call) == (0 if r == root else count * itemsize)
            last = (root - 1) % n  # the end of the chain forwards nothing
            assert c.trace.bytes_sent(r, call=call) == (0 if (r == last or n == 1) else count * itemsize)


@st.composite
def counts_case(draw):
    n = draw(st.integers(1, 16))
    return n, draw(st.lists(st.integers(0, 20), min_size=n, max_size=n))


@settings(max_examples=max(60, settings.default.max_examples))
@given(counts_case())
def test_uneven_counts_volumes(case):
    """reduce-scatter-v: rank r forwards every chunk but its own (chunks r-1, r-2, ..., r+1), so it
    sends L - counts[r] elements. all-gather-v: rank r forwards shards r, r-1, ..., r+2, every shard
    but that of its successor, so it sends L - counts[r+1]."""
    n, counts = case
    length = sum(counts)
    c = Cluster(n)
    reduce_scatter(c, [np.ones(length, np.float32) for _ in range(n)], counts=counts)
    all_gather(c, [np.ones(k, np.float32) for k in counts], counts=counts)
    for r in range(n):
        assert c.trace.bytes_sent(r, call=0) == 4 * (length - counts[r]) * (n > 1)
        assert c.trace.bytes_sent(r, call=1) == 4 * (length - counts[(r + 1) % n]) * (n > 1)
        assert c.trace.bytes_received(r, call=0) == 4 * (length - counts[(r - 1) % n]) * (n > 1)  # what r-1 sent


def test_volume_by_collective_adds_every_rank():
    n, length = 4, 10  # s = 3, padded 12
    c = Cluster(n)
    x = [np.ones(length, np.float32) for _ in range(n)]
    reduce_scatter(c, x)
    all_reduce(c, x, wire="bf16")
    broadcast(c, x, root=1)
    assert c.trace.volume_by_collective() == {
        "reduce_scatter": n * 3 * 3 * 4,  # N ranks * (N-1) steps * s elements * 4 bytes
        "all_reduce": 2 * n * 3 * 3 * 2,  # two phases, bf16 on the wire
        "broadcast": (n - 1) * length * 4,  # N-1 links, whole buffer
    }
