"""A ring phase recorded as one record at "call" granularity (cluster/_hops.py, `RingHops.whole`) against the ring
that writes each rank's summary itself (`Trace.hop` per rank, then `Trace.end`).

The naive twin is collectives/_ring.py (forced here by making the in-process shortcut unavailable), which adds each
rank's sends to its summary and lets `end` write one `Event` per rank; the clever one records the phase whole and
derives those events when they are read. Every event a user reads (its repr: every field), every log entry and
position, every byte answer, and what a window folds (its summary, the streamed log, the budget's count of entries)
must be the same: on the world's ring and on groups, with and without nodes, at uneven and empty chunks, N = 1..7.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_trace_hops import _ring_only  # noqa: E402 (tests/ is on the path)
from test_trace_hops import _run as _collectives  # the four collectives, each with its own tag, purpose and wire

from zerosim import MLP, Adam, Cluster, Groups, ZeroEngine
from zerosim.cluster import Call, Trace
from zerosim.models import make_regression

WIDTHS = [5, 7, 3]  # 66 parameters: stages 2 and 3 cut them unevenly over 4 ranks (17, 17, 8, 0 and 0, 0, 9, 15)


def _answers(trace, n) -> dict:
    """Everything a reader asks of the trace's sends: the counts first, which the trace answers from its records
    before anything reads `events`, then the byte answers and the events and log themselves."""
    out = {"len": len(trace), "entries": trace._entries_held(), "logged": trace.logged,
           "tier": list(trace.bytes_by_tier().items()), "volume": list(trace.volume_by_collective().items()),
           "totals": trace.sent_totals(n), "sent": [trace.bytes_sent(r) for r in range(n)],
           "gathered": [trace.bytes_sent(r, collective="all_gather") for r in range(n)],
           "tagged": [trace.bytes_sent(r, tag="grads") for r in range(n)], "summary": trace.summary()}
    held = trace.folded.calls
    out["by_call"] = [(trace.sent_by_rank(c), list(trace.bytes_by_tier(c).items()), len(trace.select(call=c)))
                      for c in range(held, held + len(trace.calls))]
    out["events"] = [repr(e) for e in trace.events]
    out["log"] = [repr(e) for e in trace.log]
    return out


def _twins(n, gpus_per_node, run, **cluster):
    """(the shortcut's Cluster, the ring's Cluster, what `run` returned on each), both at "call" granularity."""
    fast = Cluster(n, trace="call", gpus_per_node=gpus_per_node, **cluster)
    got = run(fast)
    with pytest.MonkeyPatch.context() as mp:
        _ring_only(mp)
        slow = Cluster(n, trace="call", gpus_per_node=gpus_per_node, **cluster)
        want = run(slow)
    return fast, slow, got, want


@given(n=st.integers(1, 7), seed=st.integers(0, 2**16), data=st.data(), grouped=st.booleans(),
       nodes=st.booleans())
def test_derived_summaries_equal_the_rings_own(n, seed, data, grouped, nodes):
    group = None
    if grouped and n in (4, 6):
        size = data.draw(st.sampled_from([2, n // 2] if n == 6 else [2]))  # rings of 2 and of 3
        group = Groups.blocks(n, size) if data.draw(st.booleans()) else Groups.strided(n, size)
    ring = group.size if group else n
    counts = tuple(data.draw(st.lists(st.integers(0, 4), min_size=ring, max_size=ring)))  # empty chunks too
    if sum(counts) == 0:
        counts = (1,) + counts[1:]
    # nodes that fill the world: of 1 GPU (every send between nodes), 2 or 3 (some within, some between), all N
    gpn = data.draw(st.sampled_from([g for g in (1, 2, 3, n) if n % g == 0])) if nodes else None
    fast, slow, got, want = _twins(n, gpn, lambda c: _collectives(c, n, seed, counts, group))
    assert fast.trace._records == (0 if n == 1 else 5)  # the shortcut recorded each of the 5 phases whole ...
    assert not slow.trace._records  # ... and the ring wrote every summary itself
    assert got == want  # the same bits
    assert _answers(fast.trace, n) == _answers(slow.trace, n)
    assert not fast.trace._records  # read: the records became their events


@settings(max_examples=10)
@given(keep=st.integers(1, 3), more=st.integers(1, 3), stage=st.sampled_from([2, 3, "hsdp"]),
       nodes=st.booleans(), n=st.sampled_from([4, 5]), streamed=st.booleans())
def test_a_window_folds_the_records_as_the_rings_summaries(tmp_path_factory, keep, more, stage, nodes, n, streamed):
    """Steps of an engine folded out of a window: counted from the records (or made event by event for a log file)
    into the same summary as the ring's events, key by key in the same order."""
    steps = keep + more  # `more` steps fold
    if stage == "hsdp":
        n, nodes = 4, True
    log = (lambda: tmp_path_factory.mktemp("log") / "trace.log") if streamed else (lambda: None)
    paths = []

    def run(cluster):
        model = MLP(WIDTHS)
        e = ZeroEngine(model, cluster, stage, Adam(lr=1e-2), "bf16-mixed", params=model.init_params())
        for s in range(steps):
            e.step(make_regression(np.random.default_rng(s), n, 2, WIDTHS))
        cluster.trace.flush_log()
        return e.full_master()

    def cluster_with_log(n, trace, gpus_per_node, keep_steps):
        paths.append(log())
        return Cluster(n, trace=trace, gpus_per_node=gpus_per_node, keep_steps=keep_steps, log_to=paths[-1])

    gpn = (2 if n == 4 else 1) if nodes else None
    fast = cluster_with_log(n, "call", gpn, keep)
    got = run(fast)
    with pytest.MonkeyPatch.context() as mp:
        _ring_only(mp)
        slow = cluster_with_log(n, "call", gpn, keep)
        want = run(slow)
    assert np.array_equal(got, want)
    a, b = fast.trace.folded, slow.trace.folded
    assert a.events == b.events > 0 and a.calls == b.calls and a.log == b.log
    for field in ("by_collective", "by_tier"):
        assert list(getattr(a, field).items()) == list(getattr(b, field).items()), field
    assert list(a.sent_items()) == list(b.sent_items()) and list(a.received_items()) == list(b.received_items())
    assert a.steps() == b.steps()
    assert _answers(fast.trace, n) == _answers(slow.trace, n)
    if streamed:
        assert paths[0].read_text() == paths[1].read_text()


def test_the_budget_counts_a_record_as_its_summaries():
    """The default window's budget (_window.py `fold_to_budget`) counts the entries held; at "call" granularity a
    phase recorded whole counts as the Events the ring's `end` appends, one a rank, before anything reads them."""
    def run(cluster):
        _collectives(cluster, 5, 0, (3, 0, 2, 1, 4), None)
        return cluster.trace._entries_held()

    fast, slow, got, want = _twins(5, None, run)
    assert len(fast.trace._events) == 5 and fast.trace._records == 5  # one entry a phase ...
    assert got == want == 5 * 5  # ... counted as 5 summaries each, as the ring's events are
    assert len(fast.trace.events) == got and fast.trace._entries_held() == got


def test_a_ring_of_one_records_nothing():
    fast, slow, got, want = _twins(1, None, lambda c: _collectives(c, 1, 3, (4,), None))
    assert got == want and len(fast.trace) == 0 and fast.trace.events == [] == slow.trace.events
    assert sum(type(e) is Call for e in fast.trace.log) == 5  # the calls, and no send
    assert [repr(e) for e in fast.trace.log] == [repr(e) for e in slow.trace.log]


@pytest.mark.parametrize("waiting", [1, 256])
def test_the_phases_a_summary_counts_for_later_add_to_the_rings_sums(monkeypatch, waiting):
    """A window's summary counts the ring phases it folds and adds their bytes to `sent` and `received` when they are
    read (`Summary.rings`), at once where more than RINGS_WAITING phases wait: the same sums, key by key in the same
    order, as the ring's events counted one by one, read after the last fold or after each."""
    from zerosim.cluster import _window

    monkeypatch.setattr(_window, "RINGS_WAITING", waiting)

    def run(cluster, read):
        e = ZeroEngine(MLP(WIDTHS), cluster, 3, Adam(lr=1e-2))
        for s in range(5):
            e.step(make_regression(np.random.default_rng(s), 4, 2, WIDTHS))
            if read:
                list(cluster.trace.folded.sent_items())
        return e.full_master()

    for read in (False, True):
        fast, slow, got, want = _twins(4, None, lambda c, read=read: run(c, read), keep_steps=1)
        a, b = fast.trace.folded, slow.trace.folded
        assert np.array_equal(got, want) and a.events == b.events > 0
        assert list(a.sent_items()) == list(b.sent_items()) and list(a.received_items()) == list(b.received_items())
        assert _answers(fast.trace, 4) == _answers(slow.trace, 4)


@settings(max_examples=60, deadline=None)
@given(data=st.data(), nodes=st.booleans(), granularity=st.sampled_from(["call", "hop"]))
def test_sends_alike_recorded_whole_equal_a_hop_each(data, nodes, granularity):
    """`Trace.hops_alike` (the sends of the ranks a meta backend's representative stands for, collectives/_p2p.py)
    against `hop` per send: the same summaries in rank order, where the record's ranks follow the call's other senders
    (placed after their summaries) and where they do not (its sends added to theirs), one record a call or two; and
    what `sent_in_calls` says of each call (its busiest rank, its senders) is what the events say. At "hop"
    granularity every send is its own event either way."""
    n, calls = 12, []
    for _ in range(data.draw(st.integers(1, 4))):
        hosted = data.draw(st.lists(st.integers(0, n - 1), max_size=3, unique=True))
        alike = sorted(data.draw(st.lists(st.integers(0, n - 1), min_size=1, unique=True)))  # some hosted too
        cut = data.draw(st.integers(0, len(alike) - 1))  # two records where cut > 0, the second's ranks first
        records = [alike[cut:], alike[:cut]] if cut else [alike]
        calls.append(([(r, data.draw(st.integers(0, 9))) for r in hosted], records, data.draw(st.integers(0, 9))))

    def run(whole: bool):
        trace = Trace(granularity, gpus_per_node=4 if nodes else None, world_size=n)
        for k, (hosted, records, elements) in enumerate(calls):
            call = trace.begin("send_recv", "pairs", 2, elements, "bf16", f"stage {k}")
            for src, count in hosted:
                trace.hop(call, 0, src, (src + 5) % n, -1, count, 2, "bf16")
            for ranks in records:
                peers = tuple((r + 5) % n for r in ranks)
                if whole:
                    trace.hops_alike(call, tuple(ranks), peers, elements, 2, "bf16")
                else:
                    for r, p in zip(ranks, peers):
                        trace.hop(call, 0, r, p, -1, elements, 2, "bf16")
            trace.end(call)
        return trace

    recorded, hop_each = run(True), run(False)
    assert _per_call(*recorded.sent_in_calls()) == _per_call(*hop_each.sent_in_calls())
    assert not hop_each.sent_in_calls()[1]  # nothing recorded whole: every send an event
    assert _answers(recorded, n) == _answers(hop_each, n)


def _per_call(sent: dict, whole: list) -> tuple:
    """({call: the most bytes one rank sent}, {call: the ranks that sent}) from `Trace.sent_in_calls`."""
    most, senders = {}, {}
    for (call, src), b in sent.items():
        most[call] = max(most.get(call, -1), b)
        senders.setdefault(call, set()).add(src)
    for call, ranks, b in whole:
        most[call] = max(most.get(call, -1), b)
        senders.setdefault(call, set()).update(ranks)
    return most, senders
