"""Overlap, prefetch and latency on hand-made logs whose timelines are derived by hand.

A unit device (1 FLOP/s, 1 B/s of HBM) and unit links make every duration a small integer number of
seconds, so every expected time below is exact: c = a compute's FLOPs, g = a collective's
(N−1)·α + bytes/β. Each log lists, per layer, one Compute per rank and the Calls in the order a
rank's program issues them (the order the engine writes them).
"""

import pytest

from zerosim.analysis.costs import Link
from zerosim.analysis.timeline import Device, Hardware, simulate
from zerosim.cluster import Call, Compute, OptimizerStep

UNIT = Device("unit", 1.0, 1.0, 1.0, None, 1.0, "a test device: 1 FLOP/s, 1 B/s")
C = 4  # every compute: 4 FLOP at 1 FLOP/s = 4 s (no bytes)


def hw(bandwidth: float, alpha: float = 0.0) -> Hardware:
    return Hardware(UNIT, Link("unit link", bandwidth, alpha, "test"), "fp16")


def computes(layer: int, kind: str, n: int, needs=()):
    return [Compute(r, 1, 0, layer, f"L{layer}", kind, C, 0, 0, tuple(needs)) for r in range(n)]


def call(number: int, collective: str, n: int, elements: int, purpose: str, layer: int):
    # fp16: equal chunks of ceil(elements/N) elements, 2 bytes each, N−1 steps (no trace events given)
    return Call(number, collective, "sum", n, elements, "fp16", f"L{layer}", purpose, (layer,), 1, 0)


def backward_with_reduce_scatters(n: int, elements: int) -> list:
    """4 backward computes, each followed by the reduce-scatter of its layer's gradients (ZeRO-2)."""
    log = []
    for i, layer in enumerate((3, 2, 1, 0)):
        log += computes(layer, "backward", n)
        log.append(call(i, "reduce_scatter", n, elements, "reduce grads", layer))
    return log


# (elements per reduce-scatter, g seconds, step with overlap, exposed comm, derivation)
OVERLAP_ROWS = [
    # N = 2, 6 fp16 elements: 1 step × 3 elements × 2 B at 1 B/s = 6 s per reduce-scatter (g > c).
    # Backward i runs [4i, 4i+4]; RS1 [4,10], RS2 waits for RS1: [10,16], RS3 [16,22], RS4 [22,28].
    # Compute 16 + comm 24 = 40; the comm stream is busy [4,28] and compute [0,16]: 12 s overlap.
    (6, 6, 28, 12, "40 − 12 overlapped"),
    # 2 elements: 2 s per reduce-scatter (g < c). RS_i runs [4i, 4i+2] inside backward i+1, except
    # RS4 [16,18] after the last backward. Compute 16 + comm 8 = 24; overlapped 6 (RS1..RS3).
    (2, 2, 18, 2, "24 − 6 overlapped"),
]


@pytest.mark.parametrize("elements, g, step, exposed, why", OVERLAP_ROWS)
def test_overlap_is_real(elements, g, step, exposed, why):
    n, link = 2, hw(1.0)
    log = backward_with_reduce_scatters(n, elements)
    on = simulate(log, link, overlap=True)
    assert [iv.end - iv.start for iv in on.track(0, "comm")] == [g] * 4
    assert on.span == step
    compute, comm = 4 * C, 4 * g
    overlapped = compute + comm - step
    assert list(on.exposed_comm) == [exposed] * n  # = comm − overlapped
    assert comm - overlapped == exposed
    off = simulate(log, link, overlap=False)  # DeepSpeed's overlap_comm=False: one stream per rank
    assert off.span == compute + comm  # the sum: nothing overlaps
    assert list(off.exposed_comm) == [comm] * n


def forward_zero3(n: int, elements: int, prefetch: bool) -> list:
    """ZeRO-3 forward: a compute that needs no gather (an embedding, say), then 4 layers, each waiting
    for its all-gather. prefetch: the gather of layer i is issued one compute early in the log."""
    log, gathers = [], [call(i, "all_gather", n, elements, "gather params", i) for i in range(4)]
    if prefetch:
        log += [gathers[0]] + computes(-2, "forward", n)  # G0, then the embedding runs while G0 travels
        for i in range(4):
            if i + 1 < 4:
                log.append(gathers[i + 1])  # G(i+1) issued before layer i's compute
            log += computes(i, "forward", n, needs=(i,))
    else:
        log += computes(-2, "forward", n)
        for i in range(4):
            log += [gathers[i]] + computes(i, "forward", n, needs=(i,))
    return log


def test_prefetch_hides_every_gather():
    # N = 4, 4 fp16 elements: 3 steps × 1 element × 2 B = 6 B at 2 B/s = 3 s per gather, α = 0: g = 3 < c = 4.
    # Prefetch: G0 [0,3] under the embedding [0,4]; G(i+1) is issued when compute i−1 ends, at 4 + 4i,
    # and ends at 7 + 4i, before layer i+1 starts at 8 + 4i. Step = 5 computes = 20 s; nothing exposed.
    n, link = 4, hw(2.0)
    pre = simulate(forward_zero3(n, 4, prefetch=True), link)
    assert [(iv.start, iv.end) for iv in pre.track(0, "comm")] == [(0, 3), (4, 7), (8, 11), (12, 15)]
    assert pre.span == 5 * C
    assert list(pre.exposed_comm) == [0.0] * n
    # Without prefetch each gather is issued only when the compute before it ends: 5 computes + 4 gathers.
    plain = simulate(forward_zero3(n, 4, prefetch=False), link)
    assert plain.span == 5 * C + 4 * 3
    assert list(plain.exposed_comm) == [4 * 3.0] * n


def test_latency_makes_hiding_impossible():
    # The same gathers with α = 2 s per ring step: g = 3·2 + 6 B / 2 B/s = 9 s > c = 4 s. The comm stream
    # is then the bottleneck: G0 [0,9], G1 [9,18], G2 [18,27], G3 [27,36]; layer i starts when G_i ends,
    # at 9(i+1), and the last ends at 4g + c = 40. Compute overlaps comm for 4c (embedding, layers 0-2),
    # so exposed = 4g − 4c = 4·(9 − 4) = 20 s on every rank, though bandwidth alone (3 s) would hide.
    n, link = 4, hw(2.0, alpha=2.0)
    g = 3 * 2.0 + 6 / 2.0
    pre = simulate(forward_zero3(n, 4, prefetch=True), link)
    assert [(iv.start, iv.end) for iv in pre.track(0, "comm")] == [(0, 9), (9, 18), (18, 27), (27, 36)]
    assert pre.span == 4 * g + C == 40
    assert list(pre.exposed_comm) == [4 * (g - C)] * n == [20.0] * n


def test_optimizer_step_waits_for_the_reduction_it_needs():
    # One backward (4 s), its reduce-scatter (6 fp16 elements over 2 ranks: 6 s, [4,10]), then each rank's
    # Adam step over 2 elements: 40 B/element (fp16) × 2 / 8 B/s = 10 s, from the end of the RS: [10,20].
    n = 2
    device = Device("unit", 1.0, 1.0, 1.0, None, 8.0, "8 B/s of HBM")
    log = computes(0, "backward", n) + [call(0, "reduce_scatter", n, 6, "reduce grads", 0)]
    log += [OptimizerStep(r, 1, 2 * r, 2 * r + 2, "adam", needs=(0,)) for r in range(n)]
    result = simulate(log, Hardware(device, Link("unit", 1.0, 0.0, ""), "fp16"))
    for r in range(n):
        step = result.track(r, "compute")[-1]
        assert (step.start, step.end, step.category) == (10.0, 20.0, "optimizer step")


def test_a_call_waits_for_the_slowest_rank():
    # Rank 1's compute is twice as long (8 s): the all-gather after it starts at 8 on both ranks.
    log = [Compute(0, 1, 0, 0, "L0", "forward", 4, 0, 0), Compute(1, 1, 0, 0, "L0", "forward", 8, 0, 0),
           call(0, "all_gather", 2, 2, "gather params", 1)]
    result = simulate(log, hw(1.0))
    assert [(iv.start, iv.end) for iv in result.track(0, "comm")] == [(8.0, 10.0)]  # 1 step × 1 element × 2 B


def test_step_times_from_consecutive_steps():
    # Two steps of the overlap log (g = 2). Step 1 ends with its last reduce-scatter, [16,18]. Step 2's
    # first backward needs nothing, so it starts when rank's compute stream frees, at 16, under that
    # reduce-scatter; step 2's last reduce-scatter ends at 16 + 18 = 34. Step times: 18, then 34 − 18 = 16.
    one = backward_with_reduce_scatters(2, 2)
    two = [
        ev.__class__(**{**ev.__dict__, "step": 2, **({"call": ev.call + 4} if isinstance(ev, Call) else {})})
        for ev in one
    ]
    result = simulate(one + two, hw(1.0))
    assert result.step_times == {1: 18.0, 2: 16.0}
    assert result.step_time == 16.0


def test_errors_name_the_problem():
    n = 2
    with pytest.raises(ValueError, match="needs call 5, which is not earlier in the log"):
        simulate(computes(0, "forward", n, needs=(5,)), hw(1.0))
    with pytest.raises(ValueError, match="different world sizes"):
        simulate([call(0, "all_gather", 2, 2, "", 0), call(1, "all_gather", 4, 4, "", 0)], hw(1.0))
    with pytest.raises(ValueError, match="appears twice"):
        simulate([call(0, "all_gather", 2, 2, "", 0), call(0, "all_gather", 2, 2, "", 0)], hw(1.0))
    with pytest.raises(ValueError, match="rank 2 is outside"):
        simulate([call(0, "all_gather", 2, 2, "", 0)] + computes(0, "forward", 4), hw(1.0))
    with pytest.raises(TypeError, match="Hardware"):
        simulate([], "h100")
    with pytest.raises(TypeError, match="Trace"):
        simulate(42)
