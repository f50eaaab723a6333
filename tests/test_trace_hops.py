"""A ring phase recorded as one record (cluster/_hops.py) against the ring that records each hop as it sends it.

The naive twin is collectives/_ring.py run hop by hop (forced here by making the in-process shortcut unavailable);
the clever one records `RingHops` and derives the events when they are read. Every event a user reads — its repr,
which is every field — must be the same, in the same order, with the same results, on the world's ring and on
groups, with and without a node topology, at every chunk layout (uneven counts, empty chunks).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from zerosim import Cluster, Groups, all_gather, all_reduce, reduce_scatter
from zerosim.collectives import _calls, _ring


def _ring_only(monkeypatch):
    """Make every collective run collectives/_ring.py hop by hop, as it did before the shortcut recorded hops."""
    monkeypatch.setattr(_calls, "phases", lambda cluster: (_ring.reduce_scatter_phase, _ring.all_gather_phase))


def _run(cluster, n, seed, counts, group):
    """A reduce-scatter with counts (one per ring position) and one padded, an all-gather and an all-reduce; returns
    the results' bits."""
    rng = np.random.default_rng(seed)
    length = sum(counts)
    xs = [rng.standard_normal(length).astype(ml_dtypes.bfloat16) for _ in range(n)]
    out = []
    with cluster.trace.about(purpose="reduce grads", layers=(1,)):
        out += reduce_scatter(cluster, xs, tag="grads", counts=counts, group=group)
    out += reduce_scatter(cluster, [x[:length] for x in xs], op="avg", wire="fp32", group=group)
    out += all_gather(cluster, [x[:2] for x in xs], tag="params", group=group)
    out += all_reduce(cluster, [x[:5].astype(np.float16) for x in xs], group=group)
    return [np.asarray(a).view(np.uint8).tobytes() for a in out]


@given(n=st.integers(1, 7), seed=st.integers(0, 2**16), data=st.data(), grouped=st.booleans(),
       nodes=st.booleans())
def test_derived_hops_equal_the_rings_own(n, seed, data, grouped, nodes):
    group = None
    if grouped and n % 2 == 0 and n > 2:
        group = Groups.blocks(n, 2) if data.draw(st.booleans()) else Groups.strided(n, 2)
    ring = group.size if group else n
    counts = tuple(data.draw(st.lists(st.integers(0, 4), min_size=ring, max_size=ring)))  # empty chunks too
    if sum(counts) == 0:
        counts = (1,) + counts[1:]
    gpn = 2 if nodes and n % 2 == 0 else None
    fast = Cluster(n, gpus_per_node=gpn)
    got = _run(fast, n, seed, counts, group)
    assert fast.trace._records or n == 1  # the shortcut ran and recorded whole phases
    with pytest.MonkeyPatch.context() as mp:
        _ring_only(mp)
        slow = Cluster(n, gpus_per_node=gpn)
        want = _run(slow, n, seed, counts, group)
    assert not slow.trace._records  # the ring appended every hop itself
    assert got == want  # the same bits
    assert len(fast.trace) == len(slow.trace)  # counted without unfolding
    assert [repr(e) for e in fast.trace.events] == [repr(e) for e in slow.trace.events]
    assert [repr(e) for e in fast.trace.log] == [repr(e) for e in slow.trace.log]
    assert fast.trace.bytes_by_tier() == slow.trace.bytes_by_tier()
    assert fast.trace.volume_by_collective() == slow.trace.volume_by_collective()


def test_events_read_in_the_middle_of_a_run_stay_in_order():
    """Reading `events` unfolds what is recorded so far; later records unfold after it, in order."""
    c = Cluster(4)
    x = [np.arange(8, dtype=np.float32) for _ in range(4)]
    reduce_scatter(c, x, tag="a")
    first = list(c.trace.events)
    assert len(first) == 3 * 4 and {e.tag for e in first} == {"a"}
    all_gather(c, [np.ones(2, np.float32)] * 4, tag="b")
    assert c.trace.events[:12] == first and [e.tag for e in c.trace.events[12:]] == ["b"] * 12
    assert [(e.step, e.src, e.dst, e.chunk) for e in first[:4]] == [(0, 0, 1, 3), (0, 1, 2, 0), (0, 2, 3, 1),
                                                                      (0, 3, 0, 2)]  # rank r sends chunk r-1 first
    c.trace.clear()
    assert len(c.trace) == 0 and c.trace.events == []
