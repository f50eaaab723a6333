"""The bubble on the timeline (zerosim/analysis/timeline): a pipeline run's compute events and point-to-point calls,
placed in time by their handles alone, idle each rank for exactly the fraction the closed forms say
(zerosim/parallel/pipeline/_costs.py: (P - 1)/(M + P - 1) for GPipe and 1F1B, Narayanan et al. 2021's
(P - 1)/(V·M + P - 1) interleaved, Qi et al. 2023's zero bubble), compared as exact rationals.

Every stage costs the same: each chunk's forward T_F / V, backward T_B / V (zero bubble: backward-input and
backward-weight), whole numbers of seconds so that the timeline's float sums are exact; communication is free (a
link of no latency and infinite bandwidth) and the activations' units cost nothing, so the bubble is the schedule's
alone. The bubble of rank r is 1 - (its compute time) / (the pipeline's span from the first forward to the last
backward).
"""

from fractions import Fraction

import numpy as np
import pytest

from zerosim import Cluster
from zerosim.analysis.costs import Link
from zerosim.cluster import Compute
from zerosim.analysis.timeline import Hardware, simulate
from zerosim.models import MLP, make_regression
from zerosim.optim import Adam
from zerosim.parallel.pipeline import PipelineEngine
from zerosim.parallel.pipeline._costs import bubble_fraction

# a link is born with a finite bandwidth (analysis/costs/_comm.py Link): 1e300 bytes/s makes any send 1e-290 s or
# less, which vanishes when added to a whole number of seconds (half an ulp of 1.0 is 1.1e-16): the bubble alone
FREE = Link("free", 1e300, 0.0, "no latency, a bandwidth no send takes time on: the bubble alone", 0.0)
PASSES = ("forward", "backward", "backward-input", "backward-weight", "loss")


class ChunkCosts:
    """Each Linear's forward f, backward b (split: b - w then w) seconds; the activations and the loss free."""

    def __init__(self, f: int, b: int, w: int = 0):
        self.f, self.b, self.w = f, b, w

    def compute(self, ev) -> float:
        if ev.kind == "loss" or not ev.name.startswith("fc"):
            return 0.0
        return float({"forward": self.f, "backward": self.b, "backward-input": self.b - self.w,
                      "backward-weight": self.w}[ev.kind])

    def optimizer(self, *args) -> float:
        return 0.0

    def call_bytes(self, call, sent: float) -> float:
        return sent  # every call's bytes as recorded


def measured_bubbles(schedule: str, P: int, M: int, V: int, costs: ChunkCosts) -> list:
    """Each rank's idle fraction of the pipeline's span, as exact rationals, from a real run's timeline."""
    widths = [4] * (P * V + 1)  # one Linear a stage: every stage the same
    cluster = Cluster(P)
    engine = PipelineEngine(MLP(widths), cluster, 1, Adam(lr=1e-2), "fp32", pp=P, schedule=schedule,
                            micro_batches=M, virtual_stages=V)
    engine.step([[make_regression(np.random.default_rng(k), 1, 2, widths)[0] for k in range(M)]])
    timeline = simulate(cluster.trace, Hardware("h100", FREE, "fp32"), costs=costs)
    tracks = [[i for i in timeline.track(r, "compute") if i.category in PASSES] for r in range(P)]
    first = min(Fraction(i.start) for t in tracks for i in t)
    span = max(Fraction(i.end) for t in tracks for i in t) - first
    return [1 - sum(Fraction(i.end) - Fraction(i.start) for i in t) / span for t in tracks]


@pytest.mark.parametrize("schedule, V, f, b, w", [
    ("gpipe", 1, 1, 2, 0),
    ("1f1b", 1, 1, 2, 0),
    ("interleaved-1f1b", 2, 1, 2, 0),
    ("interleaved-1f1b", 3, 1, 2, 0),
    ("zero-bubble", 1, 1, 2, 1),  # T_F = T_B = T_W: the paper's setting
    ("zero-bubble", 2, 1, 3, 1),  # T_W < T_B
])
def test_the_bubble_on_the_timeline_is_the_closed_form(schedule, V, f, b, w):
    for P, M in [(2, 2), (2, 4), (3, 3), (3, 6), (4, 4), (4, 8)]:
        got = measured_bubbles(schedule, P, M, V, ChunkCosts(f, b, w))
        want = bubble_fraction(schedule, P, M, V, V * f, V * b, V * w)  # a stage: V chunks
        assert got == [want] * P, (P, M, got, want)


def test_the_closed_forms_by_hand():
    # 1F1B and GPipe, P = 4, M = 8: (4 - 1)/(8 + 4 - 1) = 3/11, whatever T_F and T_B
    assert bubble_fraction("1f1b", 4, 8, 1, 1, 2) == bubble_fraction("gpipe", 4, 8, 1, 3, 5) == Fraction(3, 11)
    # interleaved, V = 2: (4 - 1)/(2·8 + 4 - 1) = 3/19
    assert bubble_fraction("interleaved-1f1b", 4, 8, 2, 2, 4) == Fraction(3, 19)
    # zero bubble, T_F = T_B(input) = T_W = 1 (T_B = 2 whole): idle (4 - 1)(1 + 1 - 1) = 3 of 8·3 + 3: 1/9
    assert bubble_fraction("zero-bubble", 4, 8, 1, 1, 2, 1) == Fraction(1, 9)


def test_a_slower_link_only_adds_to_the_bubble():
    # the same 1F1B run with activations crossing NVLink: each stage waits a little longer for its input
    free = measured_bubbles("1f1b", 2, 4, 1, ChunkCosts(1, 2))
    widths = [4] * 3
    cluster = Cluster(2)
    engine = PipelineEngine(MLP(widths), cluster, 1, Adam(lr=1e-2), "fp32", pp=2, micro_batches=4)
    engine.step([[make_regression(np.random.default_rng(k), 1, 2, widths)[0] for k in range(4)]])
    calls = [c for c in cluster.trace.calls if c.collective == "send_recv"]
    assert len(calls) == 2 * 4  # each micro-batch's activation forward and its gradient back
    timeline = simulate(cluster.trace, Hardware("h100", "nvlink4", "fp32"), costs=ChunkCosts(1, 2))
    busy = timeline.compute_busy
    assert all(b == 4 * 3 for b in busy)  # 4 micro-batches × (1 + 2) seconds each
    assert timeline.span > (4 + 2 - 1) * 3 and free == [Fraction(1, 5)] * 2


def test_zero_bubbles_split_backward_costs_what_one_backward_costs():
    """backward-input and backward-weight (models/_run.py) are charged half a Linear's backward FLOPs each (dx and dW
    are products of one size), their sum the fused backward's; the same run, the same bits, either way."""
    widths = [4, 6, 6, 3]
    flops = {}
    for schedule in ("1f1b", "zero-bubble"):
        cluster = Cluster(2)
        engine = PipelineEngine(MLP(widths), cluster, 1, Adam(lr=1e-2), "fp32", pp=2, schedule=schedule,
                                micro_batches=2, virtual_stages=1)
        engine.step([[make_regression(np.random.default_rng(k), 1, 2, widths)[0] for k in range(2)]])
        flops[schedule] = {}
        for e in cluster.trace.of_type(Compute):
            if e.name.startswith("fc") and e.kind != "forward":
                flops[schedule].setdefault((e.rank, e.micro, e.name), {})[e.kind] = e.flops
    for key, split in flops["zero-bubble"].items():
        fused = flops["1f1b"][key]["backward"]
        assert split == {"backward-input": fused // 2, "backward-weight": fused - fused // 2}, key


def stage_run(P: int, D: int, stage: int = 1):
    """P stages of one Linear each over D data-parallel ranks each (a stage a node), 4 micro-batches, 1F1B; the
    timeline with the chunk costs above and NVLink within, InfiniBand across the stages."""
    widths = [4] * (P + 1)
    cluster = Cluster(P * D, gpus_per_node=D)
    engine = PipelineEngine(MLP(widths), cluster, stage, Adam(lr=1e-2), "fp32", pp=P, micro_batches=4)
    engine.step([[make_regression(np.random.default_rng(k + 10 * d), 1, 2, widths)[0] for k in range(4)]
                 for d in range(D)])
    return cluster, simulate(cluster.trace, Hardware("h100", "nvlink4", "fp32", inter_link="ib_ndr"),
                             costs=ChunkCosts(1, 2))


def test_a_stages_collectives_start_when_its_own_ranks_reach_them():
    """Megatron's distributed optimizer (ZeRO-1) on 2 stages: the last stage's backwards end first (1F1B), and its
    gradients' reduce-scatter starts right then, while the first stage still computes; before, every call waited
    for every rank."""
    cluster, timeline = stage_run(2, 2)
    last_backward = [max(i.end for i in timeline.track(r, "compute") if i.category == "backward") for r in range(4)]
    assert last_backward[2] < last_backward[0]  # stage 1 (ranks 2, 3) is done before stage 0 (ranks 0, 1)
    reduce = {r: [i for i in timeline.track(r, "comm") if i.category == "reduce grads"] for r in range(4)}
    assert len(reduce[0]) == len(reduce[2]) == 1 and reduce[0][0].event.call != reduce[2][0].event.call
    assert reduce[2][0].start == last_backward[2]  # issued as stage 1's ranks reach it, its link free
    assert reduce[0][0].start == last_backward[0]


def test_each_rank_counts_only_the_calls_it_takes_part_in():
    """4 stages: a send from stage 0 to stage 1 is on ranks 0 and 1's communication streams, not on rank 3's; each
    rank's busy communication is the sum of its own calls (one stream, NVLink only: no two of a rank's calls overlap
    in time... but sends to and from it may: so the union)."""
    cluster, timeline = stage_run(4, 1, stage=0)
    for r in range(4):
        mine = timeline.track(r, "comm")
        sends = [i for i in mine if i.event.collective == "send_recv"]
        stages = {int(t) for i in sends for t in i.event.tag.split(" ")[1:4:2]}  # "stage 0 -> 1 micro-batch ..."
        assert stages <= {r - 1, r, r + 1} and r in stages, (r, stages)
        assert len(sends) == 2 * 4 * (1 if r in (0, 3) else 2)  # each micro-batch's activation and gradient, a side
        spans = sorted((i.start, i.end) for i in mine)
        merged = []
        for a, b in spans:
            if merged and a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        assert timeline.comm_busy[r] == pytest.approx(sum(b - a for a, b in merged), rel=1e-12)
