"""The uneven all-to-all (torch's all_to_all_single with split sizes): against its naive twin, a hand table, the
trace's hops, groups, the wire format, and clear refusals."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from zerosim import Cluster
from zerosim.cluster import Groups
from zerosim.collectives import all_to_all_v, naive_all_to_all_v


def test_hand_table_on_three_ranks():
    # counts[p][q]: what rank p sends rank q. Rank 0 sends 1 element to itself and 2 to rank 1; rank 1 sends 3 to
    # rank 0 and 1 to rank 2; rank 2 sends 2 to rank 1 and 2 to itself.
    counts = [[1, 2, 0], [3, 0, 1], [0, 2, 2]]
    bufs = [np.arange(sum(r), dtype=np.float32) + 10 * i for i, r in enumerate(counts)]
    out = all_to_all_v(Cluster(3), bufs, counts)
    assert [o.tolist() for o in out] == [[0, 10, 11, 12], [1, 2, 20, 21], [13, 22, 23]]


@given(st.integers(1, 5).flatmap(lambda n: st.lists(st.lists(st.integers(0, 4), min_size=n, max_size=n),
                                                     min_size=n, max_size=n)))
def test_equals_the_naive_twin_and_the_trace_counts_every_element_sent(counts):
    n = len(counts)
    rng = np.random.default_rng(n)
    bufs = [rng.standard_normal(sum(row)).astype(np.float32) for row in counts]
    cluster = Cluster(n)
    out = all_to_all_v(cluster, bufs, counts, tag="t")
    for got, want in zip(out, naive_all_to_all_v(bufs, counts)):
        assert np.array_equal(got, want)
    sent = [0] * n
    for event in cluster.trace.events:
        sent[event.src] += event.bytes
    assert sent == [4 * (sum(row) - row[p]) for p, row in enumerate(counts)]  # all but what it keeps


def test_over_groups_and_in_a_narrower_wire():
    # two groups of two, (0, 2) and (1, 3): position p of each group; bf16 on the wire rounds once, as a cast
    groups = Groups("pairs", ((0, 2), (1, 3)))
    counts = [[1, 1], [1, 1]]
    bufs = [np.float32([1 + 2**-10, 2]) * (r + 1) for r in range(4)]
    out = all_to_all_v(Cluster(4), bufs, counts, group=groups, wire="bf16")
    assert str(out[0].dtype) == "bfloat16"
    assert [float(x) for x in out[0]] == [1.0, 3.0]  # rank 0 keeps its first, gets rank 2's first (3 + 3/1024 -> 3)
    assert [float(x) for x in out[2]] == [2.0, 6.0]  # rank 0's second, then its own second


def test_on_the_meta_backend_only_shapes_travel():
    from zerosim.precision.cast import MetaArray

    counts = [[0, 5], [2, 1]]
    cluster = Cluster(2, backend="meta", hosted="all")
    out = all_to_all_v(cluster, [MetaArray((5,), np.float32), MetaArray((3,), np.float32)], counts)
    assert [o.shape for o in out] == [(2,), (6,)]


@pytest.mark.bad_input("collectives")
@pytest.mark.parametrize("counts, bufs, message", [
    ([[1, 1]], [np.zeros(2), np.zeros(2)], "2 x 2 table"),
    ([[1, -1], [0, 0]], [np.zeros(0), np.zeros(0)], ">= 0"),
    ([[1, 1], [1, 1]], [np.zeros(2), np.zeros(3)], "rank 1 \\(position 1\\) must pass a flat buffer of 2"),
])
def test_refusals(counts, bufs, message):
    with pytest.raises(ValueError, match=message):
        all_to_all_v(Cluster(2), bufs, counts)
