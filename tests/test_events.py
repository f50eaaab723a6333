"""The step as typed events: what the engine writes into `cluster.trace.log`, in which order.

The replay, the figures, the timeline and these tests read the log; expected sequences below are
written out by hand from seed 004 and the stage plans, not produced by the code under test.
"""

import numpy as np
import pytest

from zerosim import MLP, Adam, Cluster, TinyNet, ZeroEngine
from zerosim.cluster import Call, Compute, LedgerEvent, OptimizerStep, StepBoundary
from zerosim.models import make_regression

# Seed 004 with activation checkpointing, per GPU: forward layer1, relu, layer2; the loss; backward
# recomputes h (layer1) and a (relu) — not y, whose layer needs only its input; then backward layer2,
# relu, layer1 (the layer indices of TinyNet: 0 = layer1, 1 = relu, 2 = layer2).
SEED_004_COMPUTE = [("forward", 0), ("forward", 1), ("forward", 2), ("loss", -1),
                    ("recompute", 0), ("recompute", 1), ("backward", 2), ("backward", 1), ("backward", 0)]


def seed_run(stage, checkpoint=True, keep_values=False):
    cluster = Cluster(2, keep_values=keep_values)
    engine = ZeroEngine(TinyNet(), cluster, stage, Adam(lr=0.1), "fp16-mixed", checkpoint=checkpoint)
    start = len(cluster.trace.log)
    engine.step(TinyNet.seed_batches())
    return engine, cluster.trace.log[start:]


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_each_rank_computes_the_seed_004_sequence(stage):
    _, log = seed_run(stage)
    for rank in (0, 1):
        assert [(e.kind, e.layer) for e in log if isinstance(e, Compute) and e.rank == rank] == SEED_004_COMPUTE


@pytest.mark.parametrize("stage", [0, 3])
def test_the_step_is_layer_major_across_ranks(stage):
    # One op on every rank before the next op on any: GPU 0, GPU 1, GPU 0, GPU 1, ...
    _, log = seed_run(stage)
    computes = [e for e in log if isinstance(e, Compute)]
    assert [e.rank for e in computes] == [0, 1] * len(SEED_004_COMPUTE)
    assert [(e.kind, e.layer) for e in computes[::2]] == SEED_004_COMPUTE


def test_stage3_gathers_five_times_and_each_compute_waits_for_its_gather():
    # Seed 004 Stage 3: gather layer1 and layer2 in forward, layer1 again to recompute, layer2 and layer1
    # in backward: five all-gathers; the ReLU has no weights and is never gathered.
    _, log = seed_run(3)
    gathers = [e for e in log if isinstance(e, Call) and e.purpose == "gather params"]
    assert [g.layers for g in gathers] == [(0,), (2,), (0,), (2,), (0,)]
    assert all(g.collective == "all_gather" for g in gathers)
    position = {id(e): i for i, e in enumerate(log)}
    by_number = {g.call: g for g in gathers}
    for e in log:
        if isinstance(e, Compute) and e.layer in (0, 2):
            (needed,) = e.needs
            assert by_number[needed].layers == (e.layer,) and position[id(by_number[needed])] < position[id(e)]
        elif isinstance(e, Compute):
            assert e.needs == ()
    # each gathered copy is freed right after both ranks used it
    frees = [e for e in log if isinstance(e, LedgerEvent) and e.action == "free" and "(gathered)" in e.name]
    assert len(frees) == 5 * 2


@pytest.mark.parametrize("stage, purposes", [
    (0, {"reduce grads": 2}),  # one all-reduce of the whole gradient buffer: its two ring phases are two calls
    (1, {"reduce grads": 1, "refresh params": 1}),  # reduce-scatter, then all-gather the new params
    (2, {"reduce grads": 3, "refresh params": 1}),  # one reduce-scatter per layer with weights (3 Linear)
    (3, {"gather params": 6, "reduce grads": 3}),  # gather each Linear in forward and in backward
])
def test_collectives_per_stage(stage, purposes):
    model = MLP([4, 6, 5, 3])  # three Linear layers, two activations
    cluster = Cluster(3)
    engine = ZeroEngine(model, cluster, stage, Adam(lr=1e-2), "bf16-mixed")
    start = len(cluster.trace.log)
    engine.step(make_regression(np.random.default_rng(0), 3, 2, [4, 6, 5, 3]))
    calls = [e for e in cluster.trace.log[start:] if isinstance(e, Call)]
    got = {}
    for c in calls:
        got[c.purpose] = got.get(c.purpose, 0) + 1
    assert got == purposes
    assert all(c.step == 1 for c in calls)


def test_flops_and_bytes_of_a_linear_layer():
    # fc0 of MLP([3, 5, 2]) on B = 4 rows, bf16: forward x @ w.T + b is 2·B·D_in·D_out multiply-adds
    # plus B·D_out bias adds = 2·4·3·5 + 4·5 = 140; backward dx = dy @ w and dw = dy.T @ x are twice
    # that matmul, plus db: 2·120 + 20 = 260. Forward reads x (4·3·2 B) and w, b ((15 + 5)·2 B), writes y (4·5·2 B).
    model = MLP([3, 5, 2])
    cluster = Cluster(1)
    engine = ZeroEngine(model, cluster, 0, Adam(), "bf16-mixed")
    engine.step(make_regression(np.random.default_rng(0), 1, 4, [3, 5, 2]))
    fc0 = {e.kind: e for e in cluster.trace.of_type(Compute) if e.name == "fc0"}
    assert fc0["forward"].flops == 140 and fc0["backward"].flops == 260
    assert fc0["forward"].bytes_read == 4 * 3 * 2 + 20 * 2 and fc0["forward"].bytes_written == 4 * 5 * 2
    # backward reads dy (4·5·2), w and b (20·2) and its saved input (4·3·2); writes dx (4·3·2) and dw, db (20·2)
    assert fc0["backward"].bytes_read == 40 + 40 + 24 and fc0["backward"].bytes_written == 24 + 40


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_one_optimizer_step_per_rank_over_its_region_after_the_last_reduction(stage):
    model = MLP([4, 6, 3])  # P = 24 + 6 + 18 + 3 = 51 on N = 4: s = 13, padded 52
    cluster = Cluster(4)
    engine = ZeroEngine(model, cluster, stage, Adam(), "fp16-mixed")
    start = len(cluster.trace.log)
    engine.step(make_regression(np.random.default_rng(0), 4, 2, [4, 6, 3]))
    log = cluster.trace.log[start:]
    steps = [e for e in log if isinstance(e, OptimizerStep)]
    want = [(r, 0, 52) for r in range(4)] if stage == 0 else [(r, 13 * r, 13 * r + 13) for r in range(4)]
    assert [(e.rank, e.start, e.stop) for e in steps] == want
    last_reduce = max(e.call for e in log if isinstance(e, Call) and e.purpose == "reduce grads")
    assert all(max(e.needs) == last_reduce for e in steps)
    assert isinstance(log[0], StepBoundary) and log[0].what == "begin" and log[-1].what == "end"


def test_the_log_is_the_same_on_every_run():
    logs = []
    for _ in range(2):
        cluster = Cluster(3)
        engine = ZeroEngine(MLP([4, 6, 3]), cluster, 3, Adam(), "bf16-mixed", checkpoint=True)
        for s in range(2):
            engine.step(make_regression(np.random.default_rng(s), 3, 2, [4, 6, 3]))
        logs.append(cluster.trace.log)
    assert len(logs[0]) > 100 and logs[0] == logs[1]  # every event, field by field, in the same order


def test_values_are_kept_only_when_asked():
    _, log = seed_run(1)
    assert all(e.values is None for e in log if isinstance(e, (Compute, OptimizerStep)))
    _, log = seed_run(1, keep_values=True)
    loss = [e for e in log if isinstance(e, Compute) and e.kind == "loss"]
    assert [e.values["loss"] for e in loss] == [10.125, 15.125]  # seed 004: 0.5·(0.5 − 5)², 0.5·(1.5 − 7)²


def _each(*pairs):  # an op made rank by rank: every pair on rank 0, then on rank 1, then on rank 2
    return [(action, name, [r]) for r in range(3) for action, name in pairs]


# ZeRO-3, MLP [4, 6, 2] (fc0, act0, fc1) on 3 ranks, bf16-mixed: a step's ledger events as the log holds them, written
# out from seed 004's stage-3 plan; consecutive events of one name and action grouped, with their ranks in log order.
# Every rank's event of an op comes before the next op's (rank order), each gathered window, gradient and fp32
# gradient adopted and freed rank 0, 1, 2.
ZERO3_LEDGER_RUNS = [
    ("alloc", "layer 0 params (gathered)", [0, 1, 2]),  # forward: fc0's window gathered
    ("alloc", "fc0.input", [0, 1, 2]),  # fc0 keeps its input
    ("free", "layer 0 params (gathered)", [0, 1, 2]),  # and its window is released
    ("alloc", "act0.input", [0, 1, 2]),  # the ReLU keeps its input
    ("alloc", "layer 2 params (gathered)", [0, 1, 2]),  # fc1 the same
    ("alloc", "fc1.input", [0, 1, 2]),
    ("free", "layer 2 params (gathered)", [0, 1, 2]),
    *_each(("alloc", "loss.y - t"), ("free", "loss.y - t")),  # the loss, rank by rank
    ("alloc", "layer 2 params (gathered)", [0, 1, 2]),  # backward: fc1's window gathered again
    *_each(("free", "fc1.input"), ("alloc", "layer 2 grads")),  # its input let go, its gradients kept, rank by rank
    ("free", "layer 2 params (gathered)", [0, 1, 2]),
    ("free", "layer 2 grads", [0, 1, 2]),  # sent (reduce-scatter): freed
    ("free", "act0.input", [0, 1, 2]),  # the ReLU's backward
    ("alloc", "layer 0 params (gathered)", [0, 1, 2]),  # fc0 the same
    *_each(("free", "fc0.input"), ("alloc", "layer 0 grads")),
    ("free", "layer 0 params (gathered)", [0, 1, 2]),
    ("free", "layer 0 grads", [0, 1, 2]),
    ("alloc", "grad32", [0, 1, 2]),  # each rank's fp32 gradient shard for the update
    ("free", "grad32", [0, 1, 2]),  # and freed after it
]


@pytest.mark.parametrize("stack_ranks", [True, False])
def test_a_zero3_step_s_ledger_events_come_op_by_op_in_rank_order(stack_ranks):
    import itertools

    cluster = Cluster(3, stack_ranks=stack_ranks)
    engine = ZeroEngine(MLP([4, 6, 2]), cluster, 3, Adam(lr=1e-3), "bf16-mixed")
    start = len(cluster.trace.log)
    engine.step(make_regression(np.random.default_rng(0), 3, 4, [4, 6, 2]))
    events = [e for e in cluster.trace.log[start:] if isinstance(e, LedgerEvent)]
    runs = [(action, name, [e.rank for e in group])
            for (action, name), group in itertools.groupby(events, key=lambda e: (e.action, e.name))]
    assert runs == ZERO3_LEDGER_RUNS
