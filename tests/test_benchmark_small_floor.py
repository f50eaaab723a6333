"""benchmarks/small_floor.py's contenders must do the work they stand for, or its floor would time less: its product is
the exact dot product rounded once to fp32 (held against sums made by hand, where a float64 GEMM alone is wrong), its
ring per layer gives the ring's sums (each chunk added by hand in the ring's order), its records keep what the ledgers
keep (the real `MemoryLedger` fed the same events), and its floors end on the default engine's masters. No test here
times anything (speed lives in benchmarks)."""

import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import small_floor  # noqa: E402

BF16 = np.dtype(ml_dtypes.bfloat16)


def _bits(x):
    return np.asarray(x, np.float32).view(np.uint32)


def test_the_product_settles_what_a_float64_sum_gets_wrong():
    one_ulp_up = np.nextafter(np.float32(1), np.float32(2))
    a = np.zeros((2, 3, 4), np.float32)  # (stack, M, K) of bf16 values
    a[0, 0] = [2.0**60, 1, -(2.0**60), 0]  # exact sum 1; float64, left to right: 2**60 + 1 = 2**60, then 0
    a[0, 1] = [1, 2.0**-24, 2.0**-60, 0]  # exact 1 + 2**-24 + 2**-60: just above the tie, so up to 1 + 2**-23;
    #                                       float64 drops 2**-60 and the tie goes to even, 1
    a[1, 0] = [3, -5, 7, 2]  # small integers: every sum exact anywhere
    a[1, 2] = [0.5, 0.25, -0.75, 0]  # an exact zero: +0
    b = np.ones((4, 2), np.float32)
    b[3, 1] = -4
    assert np.array_equal(a.astype(BF16).astype(np.float32), a) and np.array_equal(b.astype(BF16).astype(np.float32), b)
    got = small_floor.portable_matmul(a, b)
    expected = np.zeros((2, 3, 2), np.float32)  # worked by hand, row by row
    expected[0, 0] = [1, 1]
    expected[0, 1] = [one_ulp_up, one_ulp_up]
    expected[1, 0] = [3 - 5 + 7 + 2, 3 - 5 + 7 - 8]
    np.testing.assert_array_equal(_bits(got), _bits(expected))  # every zero +0 (no sign bit), 1 + 2**-23 exactly


def test_an_exact_sum_is_rounded_once_to_nearest_even_and_its_zero_keeps_its_sign():
    up = np.nextafter(np.float32(1), np.float32(2))  # 1 + 2**-23
    cases = [  # (terms, the float32 by hand)
        ([1.0, 2.0**-24], np.float32(1)),  # the tie between 1 and 1 + 2**-23: the even one, 1
        ([1.0 + 2.0**-23, 2.0**-24], np.float32(1 + 2.0**-22)),  # a tie above an odd one: up, to the even one
        ([1.0, 2.0**-24, 2.0**-80], up),  # just past the tie: up
        ([2.0**60, 1.0, -(2.0**60)], np.float32(1)),  # float64 left to right gives 0
        ([2.0**-200, -(2.0**-200)], np.float32(0.0)),  # an exact zero: +0
        ([-(2.0**-200)], np.float32(-0.0)),  # a negative sum below float32's smallest subnormal: -0
    ]
    for terms, expected in cases:
        np.testing.assert_array_equal(_bits(small_floor.rounded_exactly(terms)), _bits(expected), err_msg=str(terms))


def test_the_product_of_integer_operands_is_their_sum():
    rng = np.random.default_rng(5)
    a = rng.integers(-100, 101, (3, 6, 40)) * np.ldexp(1.0, rng.integers(-30, 30, (3, 6, 1)))  # rows scaled apart
    b = rng.integers(-100, 101, (40, 7)) * np.ldexp(1.0, rng.integers(-30, 30, (1, 7)))
    a, b = a.astype(np.float32), b.astype(np.float32)  # 7-bit integers times a power of two: bf16 values
    got = small_floor.portable_matmul(a, b)
    for s in range(3):  # each element summed in Python's integers, scaled back: exact, and a float32 (< 2**24 units)
        for i in range(6):
            for j in range(7):
                terms = [int(a[s, i, k] * 2.0**30) * int(b[k, j] * 2.0**30) for k in range(40)]
                assert got[s, i, j] == np.float32(sum(terms) * 2.0**-60)


def test_the_ring_per_layer_gives_every_chunk_the_ring_s_sum():
    widths, n = [5, 7, 3], 5
    params = np.zeros(5 * 7 + 7 + 7 * 3 + 3)
    ring = small_floor.Rings(widths, n, params)
    rng = np.random.default_rng(2)
    ring.grads[...] = rng.standard_normal(ring.grads.shape).astype(BF16)
    ring.reduce_scatter()
    s = ring.s
    for c in range(n):  # chunk c, rank c's: ((g[c+1] + g[c+2]) + ...) + g[c], each add in bf16 (ml_dtypes' own)
        acc = ring.grads[(c + 1) % n, c * s:(c + 1) * s] + ring.grads[(c + 2) % n, c * s:(c + 1) * s]
        for k in range(3, n + 1):
            acc = acc + ring.grads[(c + k) % n, c * s:(c + 1) * s]
        used = min(s, len(params) - c * s)  # the padding past the last layer is no layer's: never summed
        np.testing.assert_array_equal(ring.reduced[c * s:c * s + used].view(np.uint16), acc[:used].view(np.uint16))


EVENTS = [("alloc", "w", "params", 64), ("alloc", "x", "activations", 16), ("free", "w", "params", 64),
          ("alloc", "g", "grads", 64), ("alloc", "w", "params", 64), ("free", "x", "activations", 16),
          ("free", "g", "grads", 64), ("alloc", "y", "activations", 0), ("free", "w", "params", 64),
          ("free", "y", "activations", 0)]


@pytest.mark.parametrize("twice", [False, True])
def test_the_records_keep_what_the_ledgers_keep(twice):
    from zerosim.cluster import MemoryLedger

    n = 3
    records = small_floor.Records(n, EVENTS, computes=2 * n)
    ledgers = [MemoryLedger(r) for r in range(n)]
    for _ in range(2 if twice else 1):
        records.per_rank()
        records.batched()
        for action, name, kind, nbytes in EVENTS:  # the engine's order: an op's event on every rank, rank by rank
            for ledger in ledgers:
                if action == "alloc":
                    ledger.adopt(name, np.empty(nbytes, np.uint8), kind)
                else:
                    ledger.free(name)
    for r, ledger in enumerate(ledgers):
        assert records.timelines[r] == [(e.seq, e.action, e.name, e.kind, e.nbytes, e.total, e.kind_total, "", r)
                                        for e in ledger.timeline]
        for kind, k in records.kinds.items():
            assert records.current[r].get(kind, 0) == records.sums[k, r] == ledger.current(kind)
            assert records.peak[r].get(kind, 0) == records.peaks[k, r] == ledger.peak(kind)
        assert records.total[r] == records.totals[r] == ledger.current()
        assert records.peak_total[r] == records.peak_totals[r] == ledger.peak() == 144  # g, w, x: 64 + 64 + 16
        assert records.seq[r] == ledger._seq
    assert records.count == len(EVENTS) * (2 if twice else 1)
    log = [e for e in records.log if e[0] != "compute"]
    assert len(log) == (n + 1) * len(records.timelines[0]) and len(records.log) - len(log) == (2 * n + 2) * (
        2 if twice else 1)


def test_the_floors_end_on_the_default_engine_s_masters():
    from zerosim.models import make_regression

    widths, n = [6, 10, 4], 4
    batches = make_regression(np.random.default_rng(1), n, 4, widths)
    runs = small_floor.contenders(widths, n, batches)
    for _ in range(2):
        for run in runs.values():
            run.step(batches)
    master = runs["engine"].full_master()
    for name in ("portable", "rings", "floor", "batched", "unrecorded"):
        np.testing.assert_array_equal(runs[name].full_master().view(np.uint32), master.view(np.uint32), err_msg=name)
    # a rank's events a step, counted by hand: forward 9 (each layer's gathered window and inputs kept, its window
    # freed; the loss's y - t kept and freed), backward 11 (each layer gathered, its input freed, its gradients kept,
    # the window and gradients freed; the ReLU's input freed), the fp32 gradient kept and freed 2
    assert len(runs["floor"].records.events) == 9 + 11 + 2


def test_the_unrecorded_engine_keeps_no_record_and_switches_the_bookkeeping_back_on():
    from zerosim import MLP, Adam, Cluster, ZeroEngine
    from zerosim.cluster import _ledger
    from zerosim.models import make_regression

    widths, n = [6, 10, 4], 4
    batches = make_regression(np.random.default_rng(1), n, 4, widths)
    params = MLP(widths).init_params()
    run = small_floor.Unrecorded(widths, n, params)
    noted = _ledger._noted
    ledgers = [rank.ledger for rank in run.engine.cluster.ranks]
    made = [(ledger._seq, ledger.current()) for ledger in ledgers]  # the model states it was made with, counted
    run.step(batches)
    assert _ledger._noted is noted  # only while it steps: the default engine beside it keeps every record
    assert [(ledger._seq, ledger.current()) for ledger in ledgers] == made  # the step counted no alloc or free
    assert all(ledger.timeline == [] for ledger in ledgers)
    assert not any(type(e).__name__ == "Compute" for e in run.engine.cluster.trace.log)  # the stacked ops logged none
    # the same engine with its records, beside it: the records cost time, never a bit
    recorded = ZeroEngine(MLP(widths), Cluster(n), 3, Adam(lr=1e-3), small_floor.policy("portable"), params=params)
    recorded.step(batches)
    assert max(ledger.peak() for ledger in (rank.ledger for rank in recorded.cluster.ranks)) > 0
    assert any(type(e).__name__ == "Compute" for e in recorded.cluster.trace.log)
    np.testing.assert_array_equal(run.full_master().view(np.uint32), recorded.full_master().view(np.uint32))
