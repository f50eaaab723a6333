"""Point to point between any pairs (zerosim/collectives/_p2p.py): `send_pairs` equals its naive twin on any pairing,
shapes and formats; each send is one event with its bytes, format and link tier; the receiver's copy is its own; bad
pairings are refused before anything is recorded."""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from zerosim import Cluster
from zerosim.collectives import naive_send_pairs, send_pairs

DTYPES = (np.float32, np.float16, ml_dtypes.bfloat16, np.float64)


@st.composite
def pairings(draw):
    """A world, some disjoint (sender, receiver) pairs, and what each sender sends."""
    n = draw(st.integers(2, 8))
    order = draw(st.permutations(range(n)))
    pairs = [(order[2 * i], order[2 * i + 1]) for i in range(draw(st.integers(1, n // 2)))]
    if draw(st.booleans()) and n >= 3:  # a chain: a rank may receive and send in one call (a middle stage)
        pairs = [(order[i], order[i + 1]) for i in range(draw(st.integers(1, n - 1)))]
    shape = draw(st.sampled_from([(3,), (2, 5), (1, 2, 3), (0,)]))
    dtype = draw(st.sampled_from(DTYPES))
    seed = draw(st.integers(0, 2**16))
    return n, pairs, shape, dtype, seed


@given(pairings())
def test_send_pairs_equals_its_naive_twin(case):
    n, pairs, shape, dtype, seed = case
    rng = np.random.default_rng(seed)
    to = dict(pairs)
    came = {dst: src for src, dst in pairs}
    sends = [rng.normal(size=shape).astype(dtype) if r in to else None for r in range(n)]
    cluster = Cluster(n)
    got = send_pairs(cluster, sends, [to.get(r) for r in range(n)], [came.get(r) for r in range(n)], tag="x")
    want = naive_send_pairs(sends, [to.get(r) for r in range(n)], [came.get(r) for r in range(n)])
    for r in range(n):
        if want[r] is None:
            assert got[r] is None
        else:
            assert got[r].dtype == want[r].dtype and got[r].shape == shape
            assert np.array_equal(got[r].view(np.uint8), want[r].view(np.uint8))  # every bit, NaN and -0 alike
            assert not np.shares_memory(got[r], sends[came[r]])  # the receiver's own copy
    (call,) = cluster.trace.calls
    assert call.collective == "send_recv" and call.world_size == 2 and got.handle == (call.call,)
    events = cluster.trace.select(call=call.call)
    assert sorted((e.src, e.dst) for e in events) == sorted(pairs)
    itemsize = np.dtype(dtype).itemsize
    assert all(e.elements == int(np.prod(shape)) and e.bytes == e.elements * itemsize for e in events)


def test_each_send_says_its_tier_and_format():
    cluster = Cluster(4, gpus_per_node=2)  # ranks 0, 1 on node 0; 2, 3 on node 1
    x = np.ones(6, ml_dtypes.bfloat16)
    out = send_pairs(cluster, [x, x, None, None], [1, 2, None, None], [None, 0, 1, None], tag="act")
    events = sorted(cluster.trace.select(call=out.handle[0]), key=lambda e: e.src)
    assert [(e.src, e.dst, e.tier, e.dtype, e.bytes) for e in events] == [
        (0, 1, "intra-node", "bf16", 12),  # within node 0: NVLink
        (1, 2, "inter-node", "bf16", 12),  # node 0 to node 1: InfiniBand
    ]
    assert cluster.trace.calls[-1].tier == "inter-node"  # the call is as slow as its slowest send
    assert cluster.trace.bytes_sent(1) == 12 and cluster.trace.bytes_received(2) == 12


def snapshot(cluster):
    return len(cluster.trace.calls), len(cluster.trace.events), [r.ledger.current() for r in cluster.ranks]


@pytest.mark.bad_input("collectives", unchanged=True)
@pytest.mark.parametrize("sends, to, came, words", [
    ([1, None, None], [1, None, None], [None, None, None], "rank 0 sends to rank 1, which receives nothing"),
    ([1, None, None], [1, None, None], [None, 2, None], "rank 0 sends to rank 1, which receives from rank 2"),
    ([None, None, None], [None, None, None], [None, 0, None], "rank 1 receives from rank 0, which sends nothing"),
    ([1, None, None], [0, None, None], [0, None, None], "rank 0 cannot send to itself"),
    ([1, None, None], [5, None, None], [None, 0, None], "send_to must be a rank 0..2, got 5"),
    ([None, None, None], [1, None, None], [None, 0, None], "rank 0 names send_to=1 but sends no array"),
    ([1, None], [1, None], [None, 0], "tensors must be a list with one entry per local rank"),
])
def test_bad_pairings_are_refused_before_anything_moves(sends, to, came, words):
    cluster = Cluster(3)
    arrays = [None if s is None else np.ones(2, np.float32) for s in sends]
    before = snapshot(cluster)
    with pytest.raises(ValueError, match=words):
        send_pairs(cluster, arrays, to, came)
    assert snapshot(cluster) == before
