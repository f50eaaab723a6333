"""The Trace as data: recording hops and call summaries, and the questions asked of it."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from zerosim import Cluster, Trace, all_gather, broadcast, reduce_scatter
from zerosim.cluster import Call, Event


@pytest.mark.bad_input("cluster and backends")
def test_unknown_granularity_is_a_clear_error():
    with pytest.raises(ValueError, match="granularity 'step'"):
        Trace("step")
    with pytest.raises(ValueError, match="granularity"):
        Cluster(2, trace="everything")


def test_hop_granularity_records_one_event_per_send():
    t = Trace("hop")
    call = t.begin("reduce_scatter", "sum", 2, 8, "bf16", tag="layer 1")
    assert call == 0
    assert t.calls == [Call(0, "reduce_scatter", "sum", 2, 8, "bf16", "layer 1")]
    t.hop(call, 0, src=0, dst=1, chunk=1, elements=4, itemsize=2, dtype="bf16")
    t.hop(call, 0, src=1, dst=0, chunk=0, elements=4, itemsize=2, dtype="bf16")
    t.end(call)
    assert t.events == [
        Event(0, "reduce_scatter", 0, 0, 1, 1, 4, 8, "bf16", "layer 1"),  # bytes = elements * itemsize
        Event(0, "reduce_scatter", 0, 1, 0, 0, 4, 8, "bf16", "layer 1"),
    ]
    assert len(t) == 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.events[0].bytes = 0  # recorded data is not edited after the fact


def test_call_granularity_sums_each_sender_and_starts_afresh_per_call():
    t = Trace("call")
    a = t.begin("all_gather", "gather", 3, 9, "fp32")
    for step in range(2):
        for src in (2, 0, 1):
            t.hop(a, step, src, (src + 1) % 3, -1, elements=3, itemsize=4, dtype="fp32")
    assert t.events == []  # nothing is written until the call ends
    t.end(a)
    assert t.events == [Event(0, "all_gather", -1, r, -1, -1, 6, 24, "fp32", "") for r in range(3)]  # sorted by rank
    b = t.begin("broadcast", "copy", 3, 5, "fp16")
    t.hop(b, 0, 1, 2, -1, elements=5, itemsize=2, dtype="fp16")
    t.end(b)
    assert t.events[3:] == [Event(1, "broadcast", -1, 1, -1, -1, 5, 10, "fp16", "")]  # no leftovers from call 0


def test_select_and_byte_questions():
    t = Trace()
    x = t.begin("reduce_scatter", "sum", 2, 4, "fp32", tag="grads")
    t.hop(x, 0, 0, 1, 1, 2, 4, "fp32")
    t.hop(x, 0, 1, 0, 0, 2, 4, "fp32")
    y = t.begin("broadcast", "copy", 2, 4, "fp32", tag="params")
    t.hop(y, 0, 1, 0, -1, 4, 4, "fp32")
    assert [e.call for e in t.select(collective="broadcast")] == [1]
    assert len(t.select(tag="grads")) == 2 and len(t.select(call=0)) == 2 and t.select(tag="nope") == []
    assert t.bytes_sent(1) == 8 + 16 and t.bytes_sent(0) == 8
    assert t.bytes_received(0) == 8 + 16 and t.bytes_received(1) == 8
    assert t.bytes_sent(1, collective="reduce_scatter") == 8
    assert t.bytes_received(0, tag="params") == 16
    assert t.volume_by_collective() == {"reduce_scatter": 16, "broadcast": 16}
    t.clear()
    assert len(t) == 0 and t.calls == [] and t.volume_by_collective() == {}
    assert t.begin("all_gather", "gather", 2, 2, "fp32") == 0  # call numbers restart after clear


def test_collectives_label_events_with_their_tag_and_call():
    c = Cluster(3)
    x = [np.ones(6, np.float32) for _ in range(3)]
    reduce_scatter(c, x, tag="layer 2 grads")
    all_gather(c, [np.ones(2, np.float32)] * 3, tag="layer 2 params")
    assert {e.tag for e in c.trace.select(call=0)} == {"layer 2 grads"}
    assert {e.tag for e in c.trace.select(call=1)} == {"layer 2 params"}
    assert [call.tag for call in c.trace.calls] == ["layer 2 grads", "layer 2 params"]


def test_about_labels_the_calls_begun_in_its_block_nested_and_puts_back_what_was_there():
    """`Trace.about`: a call begun inside takes the block's labels (an inner block's over an outer's, field by field);
    after a block, or an exception out of one, the labels are what they were before it."""
    c, x = Cluster(2), [np.ones(4, np.float32)] * 2
    with c.trace.about(purpose="gather params", layers=(1,)):
        all_gather(c, x)  # call 0: the outer labels
        with c.trace.about(layers=(2, 3), step=4):
            all_gather(c, x)  # call 1: the inner layers and step, the outer purpose
        all_gather(c, x)  # call 2: the outer labels again
        with pytest.raises(KeyError):
            with c.trace.about(purpose="reduce grads"):
                raise KeyError("out of the block")
        all_gather(c, x)  # call 3: the outer labels, the exception's block gone
    all_gather(c, x)  # call 4: none
    got = [(call.purpose, call.layers, call.step) for call in c.trace.calls]
    assert got == [("gather params", (1,), 0), ("gather params", (2, 3), 4), ("gather params", (1,), 0),
                   ("gather params", (1,), 0), ("", (), 0)]  # Call's defaults: no purpose, no layers, step 0


@pytest.mark.parametrize("n", [2, 4, 5])
def test_all_gather_events_forward_shards_in_ring_order(n):
    """At step k rank r forwards shard (r - k) mod N: first its own, then what it just received."""
    c = Cluster(n)
    all_gather(c, [np.zeros(3, np.float16) for _ in range(n)])
    assert len(c.trace.events) == n * (n - 1)
    for e in c.trace.events:
        assert e.dst == (e.src + 1) % n
        assert e.chunk == (e.src - e.step) % n
        assert (e.elements, e.bytes, e.dtype) == (3, 6, "fp16")


def test_one_rank_records_the_call_but_sends_nothing():
    c = Cluster(1)
    reduce_scatter(c, [np.ones(5, np.float32)])
    broadcast(c, [np.ones(5, np.float32)], root=0)
    assert [k.collective for k in c.trace.calls] == ["reduce_scatter", "broadcast"]
    assert c.trace.events == [] and c.trace.bytes_sent(0) == 0


def test_kept_values_show_the_partial_sums_travelling_the_ring():
    """With keep_values the trace holds what crossed each link: at step k rank r sends the partial sum
    of chunk c = r-1-k, which by then holds x[c+1] + ... + x[r] (small integers: exact in any order)."""
    n, s = 4, 2
    xs = [np.arange(n * s, dtype=np.float32) * 10**r for r in range(n)]  # rank r's digit sits at 10**r
    c = Cluster(n, keep_values=True)
    reduce_scatter(c, xs)
    assert len(c.trace.events) == n * (n - 1)
    for e in c.trace.events:
        path = [(e.chunk + 1 + i) % n for i in range(e.step + 1)]  # ranks the partial has visited
        assert path[-1] == e.src
        want = sum(xs[j][e.chunk * s : (e.chunk + 1) * s] for j in path)
        np.testing.assert_array_equal(e.values, want)
    plain = Cluster(n)
    reduce_scatter(plain, xs)
    assert all(e.values is None for e in plain.trace.events)  # by default nothing is copied
