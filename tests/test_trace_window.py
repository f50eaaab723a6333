"""A long run's trace (cluster/_window.py): the last `keep_steps` steps' events and a summary of the rest, against
the same run holding everything (`keep_steps=None`, the naive twin): the same bits, the same whole-run byte answers,
the held log the full log's tail, call numbers and log positions absolute, and the streamed log file the full log."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zerosim import MLP, Adam, Cluster, ZeroEngine
from zerosim.analysis.timeline import Hardware, simulate
from zerosim.cluster import Call, Compute, StepBoundary
from zerosim.cluster._window import StepRuns
from zerosim.models import make_regression
from zerosim.models.meta import MetaModel

WIDTHS = [5, 7, 3]


def run(keep, steps, stage, granularity="hop", timeline=True, gpus_per_node=None, log_to=None, n=4, **engine):
    cluster = Cluster(n, trace=granularity, timeline=timeline, gpus_per_node=gpus_per_node, keep_steps=keep,
                      log_to=log_to)
    model = MLP(WIDTHS)
    e = ZeroEngine(model, cluster, stage, Adam(lr=1e-2), "bf16-mixed", params=model.init_params(), **engine)
    for s in range(steps):
        e.step(make_regression(np.random.default_rng(s), n, 2, WIDTHS))
    return cluster, e


def byte_answers(trace, n) -> dict:
    out = {"volume": trace.volume_by_collective(), "tier": trace.bytes_by_tier(), "totals": trace.sent_totals(n),
           "sent": [trace.bytes_sent(r) for r in range(n)], "steps": trace.summary()["by_step"],
           "by": [trace.bytes_sent(r, collective="all_gather") for r in range(n)],
           "tagged": [trace.bytes_sent(r, tag="fc0 grads") for r in range(n)]}
    if trace.granularity == "hop":
        out["received"] = [trace.bytes_received(r) for r in range(n)]
    return out


@settings(max_examples=12)
@given(keep=st.integers(1, 3), steps=st.integers(1, 6), stage=st.sampled_from([0, 1, 2, 3, "hsdp"]),
       granularity=st.sampled_from(["hop", "call"]), timeline=st.booleans())
def test_a_window_answers_as_the_whole_trace(keep, steps, stage, granularity, timeline):
    gpn = 2 if stage == "hsdp" else None
    whole, a = run(None, steps, stage, granularity, timeline, gpn)
    window, b = run(keep, steps, stage, granularity, timeline, gpn)
    assert np.array_equal(a.full_master(), b.full_master())
    assert byte_answers(whole.trace, 4) == byte_answers(window.trace, 4)
    full, held = [repr(e) for e in whole.trace.log], [repr(e) for e in window.trace.log]
    assert full[len(full) - len(held):] == held and window.trace.logged == len(full)
    assert [repr(e) for e in window.trace.events] == [repr(e) for e in whole.trace.events][
        len(whole.trace.events) - len(window.trace.events):]
    ends = [e for e in window.trace.log if type(e) is StepBoundary and e.what == "end"]
    assert len(ends) == min(keep, steps)  # the last k steps, whole
    for r_whole, r_window in zip(whole.ranks, window.ranks):  # each ledger's timeline: the same tail
        got = [repr(e) for e in r_window.ledger.timeline]
        assert [repr(e) for e in r_whole.ledger.timeline][r_window.ledger.timeline_folded:] == got
    first = window.trace.folded.calls
    if first:
        with pytest.raises(ValueError, match="folded out of the trace's window"):
            window.trace.call(first - 1)
        with pytest.raises(ValueError, match="folded out"):
            window.trace.bytes_sent(0, call=first - 1)
    assert all(window.trace.call(c.call) is c for c in window.trace.calls)  # numbers stay absolute


@pytest.mark.parametrize("stage", [2, 3, "hsdp"])
def test_a_ring_phase_folded_whole_counts_as_its_sends(stage):
    # a per-hop trace records a ring phase whole (RingHops) and, with no log file, folds it counted from that record:
    # uneven chunks (stages 2 and 3 shard this model's 66 elements as 17, 17, 8, 0 and 0, 0, 9, 15) and two tiers
    # (2 GPUs a node) give every rank its own count, which must be what its sends one by one add up to
    whole, _ = run(None, 4, stage, "hop", gpus_per_node=2)
    window, _ = run(1, 4, stage, "hop", gpus_per_node=2)
    folded = window.trace.folded
    assert folded.events > 0 and folded.by_tier["intra-node"] > 0 and folded.by_tier["inter-node"] > 0
    assert byte_answers(whole.trace, 4) == byte_answers(window.trace, 4)


@pytest.mark.parametrize("stage", [2, 3])
def test_a_ring_phase_folded_whole_without_nodes_counts_every_byte_within_one(stage):
    # a Cluster without gpus_per_node (the default) has one node: every send of a ring phase folded from its record
    # crosses the intra-node tier (Trace._tier), one tier for the whole phase, as the whole trace counts them
    whole, _ = run(None, 4, stage, "hop", n=8)
    window, _ = run(1, 4, stage, "hop", n=8)
    folded = window.trace.folded
    assert folded.events > 0 and dict(folded.by_tier) == {"intra-node": folded.by_tier["intra-node"]}
    assert byte_answers(whole.trace, 8) == byte_answers(window.trace, 8)


def test_memory_of_a_long_run_stays_bounded():
    cluster, _ = run(3, 40, 3, "call", timeline=True)
    per_step = len(run(None, 1, 3, "call", timeline=True)[0].trace.log)
    assert len(cluster.trace.log) <= 4 * per_step  # three steps and the step boundaries around them
    assert all(len(r.ledger.timeline) <= 3 * per_step for r in cluster.ranks)
    assert cluster.trace.folded.calls > 0 and cluster.trace.summary()["calls"] == 40 * len(cluster.trace.calls) // 3
    # the folded steps' bytes per step: one run for each stretch of consecutive steps that sent alike, and this
    # run's steps all send alike (the same shards, every step), so the 37 folded steps cost one run, not 37 entries
    per_step_bytes = cluster.trace.summary()["by_step"]
    folded_steps = list(per_step_bytes.items())[:37]
    assert len(per_step_bytes) == 40 and len({b for _, b in folded_steps}) == 1
    assert len(cluster.trace.folded.by_step.firsts) == 1


@settings(max_examples=60)
@given(st.lists(st.tuples(st.integers(0, 12), st.sampled_from([0, 1, 5, 7])), max_size=40))
def test_step_runs_are_the_dict_they_stand_for(adds):
    # against a plain dict: any order of steps, a step added again, zero bytes (the step is there all the same)
    runs, plain = StepRuns(), {}
    for step, nbytes in adds:
        runs.add(step, nbytes)
        plain[step] = plain.get(step, 0) + nbytes
    assert list(runs.items()) == sorted(plain.items()) and len(runs) == len(plain)
    spans = list(zip(runs.firsts, runs.lasts, runs.values))
    assert all(a <= b for a, b, _ in spans)
    # as few runs as the steps allow: two runs side by side differ in bytes or leave a step out between them
    assert all(b0 + 1 < a1 or v0 != v1 for (_, b0, v0), (a1, _, v1) in zip(spans, spans[1:]))


def test_positions_since_stay_absolute():
    cluster, e = run(1, 3, 2, "call")
    since = cluster.trace.logged
    e.step(make_regression(np.random.default_rng(9), 4, 2, WIDTHS))  # the step before folds at this one's end
    got = cluster.trace.of_type(Compute, since)
    assert got and all(c.step == 4 for c in got)


def test_the_streamed_log_is_the_whole_log(tmp_path):
    whole, _ = run(None, 5, 3, "hop")
    path = tmp_path / "trace.log"
    window, _ = run(2, 5, 3, "hop", log_to=path)
    window.trace.flush_log()
    events = {}
    for ev in whole.trace.events:
        events.setdefault(ev.call, []).append("  " + repr(ev))
    want = []
    for entry in whole.trace.log:
        want.append(repr(entry))
        if type(entry) is Call:
            want += events.get(entry.call, [])
    assert path.read_text().splitlines() == want


def test_a_window_simulates_and_its_first_step_waits_for_nothing_folded():
    window, _ = run(1, 4, 2, "call")
    t = simulate(window.trace, Hardware("h100", "nvlink4", "bf16"))
    assert set(t.step_times) == {4}


def test_closed_form_calls_fold_into_the_same_totals():
    model = MetaModel.from_params(10**6, layers=3)
    answers = []
    for keep in (None, 1):
        cluster = Cluster(64, backend="meta", trace="call", timeline=False, gpus_per_node=8, keep_steps=keep)
        engine = ZeroEngine(model, cluster, 3, Adam(), "bf16-mixed")
        for _ in range(3):
            engine.step(model.batches(cluster))
        t = cluster.trace
        answers.append((t.volume_by_collective(), t.bytes_by_tier(), t.sent_totals(64), t.bytes_sent(5),
                        t.bytes_sent(5, collective="reduce_scatter"), t.summary()["by_step"]))
        if keep == 1:  # a step's closed-form calls recur every step: the two folded steps are held as one, counted
            per_step = len(t.ring_calls)
            assert sum(entry[5] for entry in t.folded.closed.values()) == 2 * per_step
            assert len(t.folded.closed) <= per_step
    assert answers[0] == answers[1]


@pytest.mark.bad_input("cluster and backends")
@pytest.mark.parametrize("keep", [0, -1, 1.5, True, "all"])
def test_keep_steps_must_be_a_positive_integer(keep):
    with pytest.raises(ValueError, match="keep_steps must be a positive integer"):
        Cluster(2, keep_steps=keep)
