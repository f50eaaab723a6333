"""send_recv, one step of a ring (collectives/_send_recv.py), against its naive twin: every member's buffer lands on
the member `shift` places on, bit for bit, in any format and shape, over the world or groups, either way round; the
trace holds one send per rank of the whole buffer; what cannot be sent is refused before anything moves."""

import numpy as np
import pytest
from helpers import bits
from hypothesis import given, settings
from hypothesis import strategies as st

from zerosim import Cluster
from zerosim.cluster import Groups
from zerosim.collectives import naive_send_recv, send_recv
from zerosim.precision import cast


@settings(max_examples=40)
@given(n=st.integers(1, 8), size=st.sampled_from([1, 2, 4]), shift=st.integers(-3, 3),
       fmt=st.sampled_from(["fp32", "bf16", "fp16", "fp64"]), shape=st.sampled_from([(3,), (2, 3), (1, 2, 2)]),
       seed=st.integers(0, 9))
def test_send_recv_is_its_naive_twin(n, size, shift, fmt, shape, seed):
    if n % size:
        size = 1
    rng = np.random.default_rng(seed)
    xs = [cast(rng.standard_normal(shape), fmt) for _ in range(n)]
    groups = Groups.blocks(n, size, "ring") if size > 1 else None
    got = send_recv(Cluster(n), xs, group=groups, shift=shift)
    want = naive_send_recv(xs, None if groups is None else groups.members, shift)
    assert all(np.array_equal(bits(g), bits(w)) for g, w in zip(got, want)) and len(got) == n
    assert all(g is not x for g, x in zip(got, xs))  # each receive buffer is the receiver's own


def test_the_trace_holds_one_send_per_rank_of_the_whole_buffer():
    cluster = Cluster(4)
    out = send_recv(cluster, [np.full(5, r, np.float32) for r in range(4)], group=Groups("cp", ((0, 2), (1, 3))),
                    tag="K, V")
    events = cluster.trace.select("send_recv")
    assert [(e.src, e.dst, e.bytes) for e in events] == [(0, 2, 20), (1, 3, 20), (2, 0, 20), (3, 1, 20)]
    assert [o.tolist()[0] for o in out] == [2.0, 3.0, 0.0, 1.0] and len(out.handle) == 1


@pytest.mark.bad_input("collectives", unchanged=True)
@pytest.mark.parametrize("tensors, shift, match", [
    ([np.zeros(3, np.float32), np.zeros(4, np.float32)], 1, "every rank must pass the same shape"),
    ([np.zeros(3, np.float32), np.zeros(3, np.float16)], 1, "every rank must pass the same dtype"),
    ([np.zeros(3, np.float32)] * 2, 1.5, "shift must be an integer"),
    ([np.zeros(3, np.float32)], 1, "pass one array per local rank"),
], ids=["shape", "dtype", "shift", "count"])
def test_what_cannot_be_sent_is_refused(tensors, shift, match):
    cluster = Cluster(2)
    with pytest.raises(ValueError, match=match):
        send_recv(cluster, tensors, shift=shift)
    assert not cluster.trace.log  # nothing was recorded, nothing moved
