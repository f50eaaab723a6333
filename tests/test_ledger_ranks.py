"""n ledgers' adopts and frees in one call (cluster/_ledger.py `adopt_ranks`, `free_ranks`) and their events recorded
rank by rank (cluster/_trace.py `Trace.record_ranks`), against the general path they batch: each ledger's own
`adopt` / `free` with its sink, and `Trace.record`, called rank after rank. The same buffers, totals, peaks,
timelines and log, compared exactly (the events' tuples, the log pickled to bytes)."""

import pickle

import numpy as np
import pytest

from zerosim.cluster import ComputeFields, LedgerError, MemoryLedger, Trace, adopt_ranks, free_ranks


def _ledgers(trace, n, timeline=True, recycled=None):
    sink = trace._log.append if timeline else None  # as a Cluster wires its ranks' ledgers (cluster/_cluster.py)
    out = [MemoryLedger(i, keep_timeline=timeline, sink=sink, recycle=None if recycled is None else recycled.append)
           for i in range(n)]
    for i, ledger in enumerate(out):  # a history of its own before: different totals and peaks on each rank
        ledger.phase_label = "forward"
        ledger.alloc("weights", (3 + i,), np.float32, "params")
        if i % 2:
            ledger.free("weights")
    return out


def _state(ledgers):
    return [(sorted((k, b.kind, b.shape, b.nbytes, b.owned) for k, b in led.live.items()), dict(led._current),
             dict(led._peak), led._total, led._peak_total, led._seq, list(led._held)) for led in ledgers]


def _arrays(n, rows):
    rng = np.random.default_rng(0)
    return [rng.standard_normal((rows + i % 3, 4)).astype(np.float32) for i in range(n)]


@pytest.mark.parametrize("timeline", [True, False])
def test_adopt_and_free_ranks_leave_each_ledger_and_the_log_as_the_rank_by_rank_calls_do(timeline):
    n = 5
    batched_trace, loop_trace = Trace(), Trace()
    batched, loop = _ledgers(batched_trace, n, timeline), _ledgers(loop_trace, n, timeline)
    xs, gs = _arrays(n, 2), _arrays(n, 3)
    entries = [ComputeFields((i, 1, 0, 0, "fc0", "forward", 10 * i, 4, 8, (), None)) for i in range(n)]

    # the general path, rank after rank: rank i's adopts and frees, its Compute, one more adopt after it
    what, kept = "input", []  # each name made afresh on each rank, as a `Pass` names what it keeps
    for i, led in enumerate(loop):
        kept.append(led.adopt(f"fc0.{what}", xs[i], "activations"))
        led.free(kept[i])
        loop_trace.record(entries[i])
        led.adopt("layer 0 grads", gs[i], "grads")
    # the batch: every rank's adopts, then frees, then the one after; the log written in rank order at the end
    bufs, adopted = adopt_ranks(batched, [f"fc0.{what}" for _ in range(n)], xs, "activations")
    freed = free_ranks(bufs)
    _, after = adopt_ranks(batched, ["layer 0 grads"] * n, gs, "grads")
    batched_trace.record_ranks([adopted, freed, entries, after], [led.sink for led in batched])

    assert _state(batched) == _state(loop)
    assert [b.freed for b in bufs] == [b.freed for b in kept] == [True] * n
    assert pickle.dumps(batched_trace.log) == pickle.dumps(loop_trace.log)
    assert (adopted[0] is None) is not timeline  # no timeline: nothing to record


def test_an_owned_buffer_freed_together_goes_back_to_its_ledger_s_storage():
    batched_recycled, loop_recycled = [], []
    batched = _ledgers(Trace(), 3, recycled=batched_recycled)
    loop = _ledgers(Trace(), 3, recycled=loop_recycled)
    owned = [led.alloc("scratch", (4,), np.float32, "comm") for led in batched]
    free_ranks(owned)
    for led in loop:
        led.free(led.alloc("scratch", (4,), np.float32, "comm"))
    assert len(batched_recycled) == len(loop_recycled) == 3 + 1  # and rank 1's weights, freed before
    assert _state(batched) == _state(loop)


def test_a_sink_that_is_not_the_log_gets_its_rank_s_events_in_rank_order():
    trace, seen = Trace(), [[], [], []]
    ledgers = [MemoryLedger(i, sink=seen[i].append) for i in range(3)]  # each rank's sink its own
    ledgers[1].keep_timeline = False  # no event of rank 1: None in its column
    _, events = adopt_ranks(ledgers, ["a", "a", "a"], _arrays(3, 1), "activations")
    entries = [ComputeFields((i, 1, 0, 0, "fc0", "forward", 1, 1, 1, (), None)) for i in range(3)]
    trace.record_ranks([events, entries], [led.sink for led in ledgers])
    assert seen == [[events[0]], [], [events[2]]] and events[1] is None
    assert [e.rank for e in trace.log] == [0, 1, 2]  # the Compute entries alone reach the log


@pytest.mark.bad_input("cluster and backends")
def test_a_name_already_live_or_a_buffer_freed_already_is_refused_as_by_adopt_and_free():
    ledgers = _ledgers(Trace(), 2)
    with pytest.raises(LedgerError, match="rank 0: a buffer named 'weights' is already live"):
        adopt_ranks(ledgers, ["weights", "weights"], _arrays(2, 1), "params")
    bufs, _ = adopt_ranks(ledgers, ["x", "x"], _arrays(2, 1), "activations")
    free_ranks(bufs)
    with pytest.raises(LedgerError, match="rank 0: buffer 'x' is not live"):
        free_ranks(bufs)
