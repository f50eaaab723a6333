"""A Cluster made by hand holds a window of its last steps by default (cluster/_window.py WINDOW, 1024 steps at most,
in no more entries than its ranks' ledgers hold bytes, or FLOOR_BYTES, at least HELD_AT_LEAST steps): a long
run's trace stays bounded, and once it folds its lists keep absolute positions (a Tail), so what a notebook reads —
`since = len(cluster.trace.log)` before a step and `log[since:]` after it, `trace.calls[e.call]`, a ledger's
`by_phase(since)` — is what the same run holding every step (`keep_steps=None`, the naive twin) gives, and every
whole-run byte answer is the same. Until the window is passed the lists are the plain lists they always were.

The window is set to 3 steps here (the same code; 1024 steps would take a minute), and the real one is run past
once, slowly."""

from __future__ import annotations

import numpy as np
import pytest
from test_trace_window import WIDTHS, byte_answers

from zerosim import MLP, Adam, Cluster, TinyNet, ZeroEngine
from zerosim.cluster import _cluster, _window
from zerosim.models import make_regression

STEPS = 12


@pytest.fixture
def small_window(monkeypatch):
    monkeypatch.setattr(_cluster, "WINDOW", 3)
    monkeypatch.setattr(_window, "WINDOW", 3)


def run(cluster, steps=STEPS, stage=3):
    """Each step's (since, what log[since:] held after it, its calls by number, its events, rank 0's phases)."""
    model = MLP(WIDTHS)
    engine = ZeroEngine(model, cluster, stage, Adam(lr=1e-2), "bf16-mixed", params=model.init_params())
    trace, ledger, seen, held = cluster.trace, cluster.ranks[0].ledger, [], []
    for s in range(steps):
        since, first_call, first_event, at = len(trace.log), len(trace.calls), len(trace.events), len(ledger.timeline)
        engine.step(make_regression(np.random.default_rng(s), cluster.world_size, 2, WIDTHS))
        calls = [trace.calls[c] for c in range(first_call, len(trace.calls))]
        seen.append((since, [repr(e) for e in trace.log[since:]], [repr(c) for c in calls],
                     [repr(e) for e in trace.events[first_event:]], ledger.by_phase(at), ledger.live_at_peaks(at)))
        held.append((len(trace._log), len(trace._calls), len(trace._events), len(ledger._held)))
    return engine, seen, held


@pytest.mark.parametrize("granularity, stage", [("hop", 3), ("call", 2), ("hop", 0)])
def test_a_long_hand_made_run_is_bounded_and_reads_as_the_whole(small_window, granularity, stage):
    default = Cluster(4, trace=granularity)
    whole = Cluster(4, trace=granularity, keep_steps=None)
    e_default, seen_default, held = run(default, stage=stage)
    e_whole, seen_whole, _ = run(whole, stage=stage)
    assert np.array_equal(e_default.full_master(), e_whole.full_master())
    assert seen_default == seen_whole  # every step read by its absolute positions, as the whole trace reads it
    assert byte_answers(default.trace, 4) == byte_answers(whole.trace, 4)
    # bounded: past the window every step holds the same count of log entries, calls, sends and timeline events
    assert held[4:] == [held[4]] * (STEPS - 4) and held[4][0] < len(whole.trace.log) / 3
    assert default.trace.folded.calls > 0 and len(default.trace.log) == len(whole.trace.log)


def tinynet_steps(cluster, steps: int, stage: int):
    model = TinyNet()
    engine = ZeroEngine(model, cluster, stage, Adam(lr=1e-2), "fp32", params=model.init_params())
    for _ in range(steps):
        engine.step([[(np.ones((2, 2)), np.ones((2, 1)))] for _ in range(2)])
    return cluster


def test_a_folded_position_is_an_error_naming_the_window(small_window):
    cluster = tinynet_steps(Cluster(2), 5, 2)
    trace = cluster.trace
    first = trace.folded.log
    assert trace.log[first] is trace._log[0] and trace.log[-1] is trace._log[-1] and list(trace.log) == trace._log
    for bad in (lambda: trace.log[first - 1], lambda: trace.log[:first + 1], lambda: trace.calls[0],
                lambda: trace.events[0], lambda: cluster.ranks[0].ledger.timeline[0]):
        with pytest.raises(IndexError, match="folded out of the trace's window"):
            bad()


def test_within_the_window_the_lists_are_plain_lists():
    cluster = tinynet_steps(Cluster(2), 3, 3)
    t = cluster.trace
    assert cluster.trace.keep_steps == _window.WINDOW == 1024
    assert type(t.log) is list and type(t.calls) is list and type(t.events) is list
    assert type(cluster.ranks[0].ledger.timeline) is list


@pytest.mark.slow
def test_the_default_window_folds_past_1024_steps():
    cluster, whole = tinynet_steps(Cluster(2), 1030, 1), tinynet_steps(Cluster(2, keep_steps=None), 1030, 1)
    assert cluster.trace.folded.calls > 0 and whole.trace.folded.calls == 0
    assert len(cluster.trace.log) == len(whole.trace.log) and len(cluster.trace._log) < len(whole.trace.log) / 1.004
    assert [repr(e) for e in cluster.trace.log[-50:]] == [repr(e) for e in whole.trace.log[-50:]]
    assert byte_answers(cluster.trace, 2) == byte_answers(whole.trace, 2)


@pytest.fixture
def no_floor(monkeypatch):
    monkeypatch.setattr(_window, "FLOOR_BYTES", 0)


def test_a_small_models_window_holds_no_more_events_than_its_ranks_hold(no_floor):
    """A 5-7-3 MLP's ledgers peak at a few hundred bytes a rank, so with no floor (the same code; the floor's 8 MB
    would take ~1,000 of its steps to pass) its default window folds long before 1024 steps: it holds the fewest steps
    it may (HELD_AT_LEAST) or entries within SHARE times the ledgers' peaks, and every step still reads as the naive
    twin's."""
    default, whole = Cluster(4), Cluster(4, keep_steps=None)
    e_default, seen_default, held = run(default)
    e_whole, seen_whole, _ = run(whole)
    assert np.array_equal(e_default.full_master(), e_whole.full_master())
    assert seen_default == seen_whole and byte_answers(default.trace, 4) == byte_answers(whole.trace, 4)
    trace, steps_held = default.trace, len(default.trace._step_ends)
    budget = _window.SHARE * sum(r.ledger.peak() for r in default.ranks)  # a few kB: no floor
    entries = len(trace._log) * (1 + len(trace._events) / len(trace._log))
    assert trace.folded.calls > 0 and len(trace.log) == len(whole.trace.log)  # folded 1,012 steps before WINDOW
    assert steps_held == _window.HELD_AT_LEAST or (steps_held > _window.HELD_AT_LEAST and
                                                   entries * _window.ENTRY_BYTES <= budget)
    assert held[-1][0] * STEPS < len(whole.trace.log) * (_window.HELD_AT_LEAST + 1)  # about HELD_AT_LEAST steps' log


def test_a_small_run_within_the_floor_is_held_whole():
    """Below FLOOR_BYTES of entries (8 MB) the window holds every step, however little the ledgers hold: 30 steps of
    the 5-7-3 MLP on 4 ranks (~8,000 entries, ~2 MB) fold nothing."""
    cluster = Cluster(4)
    engine, seen, held = run(cluster, steps=30)
    assert cluster.trace.folded.log == 0 and type(cluster.trace.log) is list and held[-1][0] == len(cluster.trace.log)
    assert held[-1][0] * _window.ENTRY_BYTES < _window.FLOOR_BYTES


@pytest.mark.slow  # 60 steps on 4 ranks: ~1 s
def test_the_floor_holds_the_largest_whole_run_a_notebook_reads():
    """Notebook 06 reads its 60-step runs' whole traces (every LossScaleUpdate, GradClip): 10,908 entries (docs/speed.md
    section 4 quotes it), within the floor, so its default window folds nothing."""
    from zerosim import get_optimizer, get_precision

    widths = [16, 64, 64, 4]  # notebook 06's MLP, batches and scaler
    batches = make_regression(np.random.default_rng(0), 4 * 60, 16, widths)
    policy = get_precision("fp16-mixed").with_(loss_scale="torch", loss_scale_options={"growth_interval": 10})
    cluster = Cluster(4, trace="call")
    engine = ZeroEngine(MLP(widths), cluster, 2, get_optimizer("adam", lr=1e-2), policy,
                        params=MLP(widths).init_params(np.random.default_rng(1)), clip_grad=1.0)
    for s in range(60):
        engine.step(batches[s * 4:(s + 1) * 4])
    assert cluster.trace.folded.log == 0 and len(cluster.trace.log) == 10_908
    assert 10_908 * _window.ENTRY_BYTES < _window.FLOOR_BYTES
