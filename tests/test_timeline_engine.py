"""The timeline on real engine logs: every rule of the simulation checked event by event, independently.

The checker below re-derives, from the log and the trace's per-rank bytes alone, when each interval
must start and how long it lasts: a compute starts when both its rank's previous compute and every
call it needs have ended, and lasts max(FLOPs/rate, bytes/HBM); a call starts, on every rank at once,
when every rank's compute before it in the log and the previous call have ended, and lasts
base + (N−1)·α + (busiest rank's bytes)/β, with NCCL's per-call base latency charged once per call (not again
for an all-reduce's second, gather, phase); tracks never overlap.
"""

from collections import defaultdict

import numpy as np
import pytest

from zerosim import MLP, Adam, Cluster, ZeroEngine
from zerosim.analysis.timeline import Hardware, simulate
from zerosim.cluster import Call, Compute, OptimizerStep
from zerosim.models.meta import MetaModel

REL = 1e-12  # sums of a few hundred float64 durations: relative rounding far below this


def mlp_run(stage: int, ranks: int = 4, trace: str = "call", steps: int = 2):
    cluster = Cluster(ranks, trace=trace)
    engine = ZeroEngine(MLP([16, 32, 32, 8]), cluster, stage, Adam())
    rng = np.random.default_rng(stage)
    for _ in range(steps):
        engine.step([(rng.standard_normal((4, 16)).astype(np.float32), rng.standard_normal((4, 8)).astype(np.float32))
                     for _ in range(ranks)])
    return cluster


def check_rules(trace, result, overlap: bool):
    n, link, device = result.world_size, result.hardware.link, result.hardware.device
    rate = device.rate(result.hardware.compute)
    sent = defaultdict(int)
    for e in trace.events:
        sent[(e.call, e.src)] += e.bytes
    calls = {iv.event.call: iv for iv in result.track(0, "comm")}
    for r in range(1, n):  # a call is one interval, at the same time, on every rank
        assert [(iv.start, iv.end) for iv in result.track(r, "comm")] == [(iv.start, iv.end) for iv in calls.values()]
    comp = {r: iter(result.track(r, "compute")) for r in range(n)}
    last_compute, last_call_end = [0.0] * n, 0.0
    for ev in trace.log:
        if isinstance(ev, (Compute, OptimizerStep)):
            iv = next(comp[ev.rank])
            assert iv.event is ev  # the compute track is the rank's program, in log order
            assert iv.start == max([last_compute[ev.rank]] + [calls[c].end for c in ev.needs])
            if isinstance(ev, Compute):
                roofline = max(ev.flops / rate, (ev.bytes_read + ev.bytes_written) / device.hbm)
                assert iv.end - iv.start == pytest.approx(roofline, rel=REL)
            last_compute[ev.rank] = iv.end
        elif isinstance(ev, Call):
            iv = calls[ev.call]
            assert iv.start == max(max(last_compute), last_call_end)
            busiest = max(b for (c, _), b in sent.items() if c == ev.call)
            base = 0.0 if ev.collective == "all_reduce" and ev.op == "gather" else link.base
            assert iv.end - iv.start == pytest.approx(base + (n - 1) * link.alpha + busiest / link.bandwidth, rel=REL)
            last_call_end = iv.end
            if not overlap:
                last_compute = [iv.end] * n
    for r in range(n):
        for stream in ("compute", "comm"):
            track = result.track(r, stream)
            assert all(a.end <= b.start for a, b in zip(track, track[1:]))  # ordered, never overlapping
        exposed = sum(b - a for a, b in result.exposed_intervals(r))
        assert exposed == pytest.approx(result.exposed_comm[r], rel=REL, abs=1e-18)
        assert 0.0 <= result.exposed_comm[r] <= result.comm_busy[r] * (1 + REL)


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
@pytest.mark.parametrize("overlap", [True, False])
def test_engine_logs_follow_every_rule(stage, overlap):
    cluster = mlp_run(stage)
    result = simulate(cluster.trace, Hardware("a100", "nvlink4"), overlap=overlap)
    check_rules(cluster.trace, result, overlap)
    busiest_compute = max(sum(iv.end - iv.start for iv in result.track(r, "compute")) for r in range(4))
    assert result.step_time >= busiest_compute  # a step is at least its busiest rank's compute
    if not overlap:  # one stream per rank, and every rank does the same work: the sum, exactly
        assert result.span == pytest.approx(result.compute_busy[0] + result.comm_busy[0], rel=REL)


@pytest.mark.parametrize("stage", [2, 3])
def test_hop_and_call_granularity_give_the_same_timeline(stage):
    # per-rank bytes summed over hops equal the per-call summaries: the same busiest rank, the same times
    a = simulate(mlp_run(stage, trace="hop").trace, Hardware("h100", "ib_ndr"))
    b = simulate(mlp_run(stage, trace="call").trace, Hardware("h100", "ib_ndr"))
    assert a.call_bytes == b.call_bytes
    assert a.span == b.span and list(a.exposed_comm) == list(b.exposed_comm)


def test_zero2_reduce_scatters_overlap_backward():
    # Seed 004, stage 2: "while the first communication may still be in flight, the backward pass continues".
    # On a slow link the first reduce-scatter is still running when the next backward compute starts.
    cluster = mlp_run(2, steps=1)
    result = simulate(cluster.trace, Hardware("a100", "100gbe"))
    first_rs = next(iv for iv in result.track(0, "comm") if iv.category == "reduce grads")
    later = [iv for iv in result.track(0, "compute") if iv.category == "backward" and iv.start >= first_rs.start]
    assert later and later[0].start < first_rs.end  # backward computes while the gradients travel
    assert result.exposed_comm[0] < result.comm_busy[0]


def test_meta_backend_stage3_simulates():
    # A meta model (no values) on 64 ranks: the same rules hold on a log the size of a real run's
    model = MetaModel.from_params(64_000_000, layers=6)
    cluster = Cluster(64, backend="meta", hosted="all", trace="call", timeline=False)
    engine = ZeroEngine(model, cluster, 3, Adam())
    engine.step(model.batches(engine.cluster, batch=512))
    result = simulate(cluster.trace, Hardware("h100", "ib_ndr"))
    check_rules(cluster.trace, result, overlap=True)
    assert result.world_size == 64 and result.step_time > 0
    # the representative rank (the meta backend's default) stands for all 64: the same step, in O(layers)
    lone = Cluster(64, backend="meta", timeline=False)
    ZeroEngine(model, lone, 3, Adam()).step(model.batches(lone, batch=512))
    assert simulate(lone.trace, Hardware("h100", "ib_ndr")).step_time == result.step_time


def test_the_arithmetic_moves_no_time():
    # A time comes from each event's FLOPs and bytes, never from its values: notebook 05 runs its ZeRO-2 step's
    # products on the machine's sgemm (arithmetic="native") and prints the portable default's times. Its setup, smaller.
    from zerosim.models import make_regression
    from zerosim.precision import get_precision

    def timed(precision):
        widths = [64, 256, 256, 64]
        cluster = Cluster(4, trace="call")
        engine = ZeroEngine(MLP(widths), cluster, 2, Adam(lr=1e-3), precision)
        engine.step(make_regression(np.random.default_rng(0), 4, 128, widths))
        return simulate(cluster.trace, Hardware("h100", "nvlink4", "bf16")), engine.precision.compute_format.arithmetic

    portable, kernels = timed(get_precision("bf16-mixed"))
    native, other = timed(get_precision("bf16-mixed").with_(arithmetic="native"))
    assert (kernels, other) == ("portable", "native")  # two runs on two arithmetics, not one run twice
    assert portable.span == native.span and portable.step_time == native.step_time
    for got, want in ((native.compute_busy, portable.compute_busy), (native.comm_busy, portable.comm_busy),
                      (native.exposed_comm, portable.exposed_comm)):
        assert list(got) == list(want)
