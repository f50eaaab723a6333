"""Bytes in the engines' trace equal the communication formulas (zerosim.analysis.costs._comm), stage by stage.

Letters: P parameters, N ranks, s = ceil(P/N), real_r = real (unpadded) elements of rank r's shard,
g / p = bytes per element of the gradient wire (reduce format) and of the 16-bit params.

What each rank r sends in one step, derived from the engines and the ring (each rank sends, per
phase, every chunk but one: reduce-scatter never sends its own chunk r, all-gather never sends
chunk r+1, the last to reach it):

  stage 0   all-reduce of the (N·s,) padded gradient buffer: 2 phases of (N−1)·s       2(N−1)s·g
  stage 1   reduce-scatter of the padded gradients, (N−1)·s, then all-gather of the
            (s,) param shards, (N−1)·s                                             (N−1)s·g + (N−1)s·p
            = costs.comm_volume(P, N, stage, padded=True): both move padded buffers.
  stage 2   one reduce-scatter per layer over its window [a, b) with counts = window ∩ shard:
            rank r sends Σ_layers (b − a − count_r) = P − real_r (the windows tile [0, P), so
            Σ count_r = real_r: no padding travels); then stage 1's padded all-gather.   (P − real_r)·g + (N−1)s·p
  stage 3   per layer: all-gather of the window in forward and again in backward, each
            P − real_{r+1} in total; the gradient reduce-scatter, P − real_r. No refresh.
                                                                              2(P − real_{r+1})·p + (P − real_r)·g

When N divides P every real_r = s = P/N and all four equal the formula per rank (2Ψ, 2Ψ, 2Ψ, 3Ψ times
(N−1)/N times the wire bytes). Otherwise stages 2 and 3 send unpadded windows, so a rank's bytes
depend on how much real data its neighbours' shards hold; summed over ranks, Σ_r (P − real_r) =
(N − 1)P exactly, so the stage-3 total is N times the unpadded formula 3P(N−1)/N, to the byte.
No activation checkpointing here: recomputation would gather each layer a third time.
"""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from zerosim import MLP, Adam, Cluster, MixedPrecision, ShardLayout, ZeroEngine
from zerosim.analysis.costs import Collective, comm_volume, get_preset, sent_bytes
from zerosim.models import make_regression
from zerosim.models.meta import MetaModel

PRECISIONS = {  # name -> (policy, g, p)
    "fp16-mixed": ("fp16-mixed", 2, 2),
    "bf16-mixed": ("bf16-mixed", 2, 2),
    "fp16, fp32 reduce": (MixedPrecision(compute="fp16", reduce="fp32"), 4, 2),
}


def expected_bytes(stage, P, N, r, g, p) -> int:
    """What rank r sends in one step (see the module docstring for the derivation)."""
    layout = ShardLayout(P, N)
    s, real = layout.shard_size, layout.real_size
    return {
        0: 2 * (N - 1) * s * g,
        1: (N - 1) * s * g + (N - 1) * s * p,
        2: (P - real(r)) * g + (N - 1) * s * p,
        3: 2 * (P - real((r + 1) % N)) * p + (P - real(r)) * g,
    }[stage]


def check_against_formulas(trace, stage, P, N, g, p):
    sent = trace.sent_totals(N)  # trace.bytes_sent(r) for every r, in one pass (events and closed-form summaries)
    assert sent[N - 1] == trace.bytes_sent(N - 1)
    assert sent == [expected_bytes(stage, P, N, r, g, p) for r in range(N)]
    if stage in (0, 1):  # padded buffers: the padded formula, per rank
        assert sent == [comm_volume(P, N, stage, grad_wire_bytes=g, param_wire_bytes=p, padded=True)] * N
    if stage == 2:  # the gather is padded, the per-layer reduce-scatter is not: exact over all ranks
        ag, rs = Collective("all_gather", "params", p, 1), Collective("reduce_scatter", "grads", g, 1)
        assert sum(sent) == N * sent_bytes(ag, P, N, padded=True) + N * sent_bytes(rs, P, N)
    if stage == 3:  # unpadded windows: N times the unpadded formula 3Ψ(N−1)/N, over all ranks...
        assert sum(sent) == (2 * p + g) * (N - 1) * P  # ...written without the division, so exact
        assert math.isclose(sum(sent), N * comm_volume(P, N, 3, grad_wire_bytes=g, param_wire_bytes=p))
    if P % N == 0:  # no padding at all: every rank sends exactly the formula
        assert sent == [comm_volume(P, N, stage, grad_wire_bytes=g, param_wire_bytes=p)] * N


@given(
    widths=st.lists(st.integers(1, 9), min_size=2, max_size=4),
    n=st.integers(1, 7),
    stage=st.integers(0, 3),
    precision=st.sampled_from(sorted(PRECISIONS)),
    granularity=st.sampled_from(["hop", "call"]),
)
def test_numpy_trace_bytes_equal_the_formula(widths, n, stage, precision, granularity):
    policy, g, p = PRECISIONS[precision]
    model = MLP(widths)
    engine = ZeroEngine(model, Cluster(n, trace=granularity), stage, Adam(lr=1e-3), policy)
    engine.step(make_regression(np.random.default_rng(1), n, 2, widths))
    check_against_formulas(engine.cluster.trace, stage, model.num_params, n, g, p)


@pytest.mark.parametrize("name, n, stages", [
    ("zero-paper-7.5b", 64, (0, 1, 2, 3)),  # N divides Ψ: the formula per rank, 2Ψ(N−1)/N or 3Ψ(N−1)/N
    ("gpt2-xl", 96, (0, 1, 2, 3)),  # N does not divide Ψ
    ("gpt3-175b", 100, (3,)),  # benchmarks/meta.py runs it on 1024
])
def test_meta_trace_at_scale_equals_the_formula(name, n, stages):
    model = MetaModel.from_preset(get_preset(name), unit="block")
    for stage in stages:
        engine = ZeroEngine(model, Cluster(n, backend="meta", trace="call", timeline=False), stage, Adam())
        engine.step(model.batches(engine.cluster))
        assert not engine.cluster.trace.events and len(engine.cluster.trace.ring_calls) == len(
            engine.cluster.trace.calls
        )  # closed form
        check_against_formulas(engine.cluster.trace, stage, model.num_params, n, 2, 2)


def test_paper_volumes_for_7_5b_on_64():
    # 2Ψ and 3Ψ (times (N−1)/N, 2 bytes): 29.53 GB per rank at stages 0-2, 44.30 GB at stage 3
    assert comm_volume(7.5e9, 64, 1) == 2 * 7.5e9 * 2 * 63 / 64
    assert comm_volume(7.5e9, 64, 3) == 3 * 7.5e9 * 2 * 63 / 64


# The plan's collectives, written by hand (the ZeRO paper's section 7, seed 001 §10): what stage_collectives must
# read from each plan. One row per plan: (op, buffer) in the order a step runs them.
HAND = {
    0: [("all_reduce", "grads")],  # plain data parallel: one all-reduce, 2Ψ
    1: [("reduce_scatter", "grads"), ("all_gather", "params")],  # P_os: reduce-scatter, then the refresh, 2Ψ
    2: [("reduce_scatter", "grads"), ("all_gather", "params")],  # P_os+g: the same volume, 2Ψ
    3: [("all_gather", "params"), ("all_gather", "params"), ("reduce_scatter", "grads")],  # forward, backward: 3Ψ
    "no_reshard": [("all_gather", "params"), ("reduce_scatter", "grads")],  # kept until backward: 2Ψ
}


@pytest.mark.parametrize("stage", sorted(HAND, key=str))
def test_stage_collectives_are_read_from_the_plan(stage):
    from zerosim.analysis.costs import stage_collectives
    from zerosim.parallel.data import get_plan

    assert [(c.op, c.buffer) for c in stage_collectives(get_plan(stage))] == HAND[stage]
    if isinstance(stage, int):
        assert stage_collectives(stage) == stage_collectives(get_plan(stage))


def test_no_reshard_volume_from_its_plan_equals_its_trace():
    """FSDP2's reshard_after_forward=False gathers each unit once: the formula read from the engine's own plan says
    2Ψ(N−1)/N, and the engine's trace moves exactly that (N divides Ψ)."""
    from zerosim.analysis.costs import stage_collectives
    from zerosim.parallel.data import get_plan

    model, n = MetaModel.from_params(64 * 1024, layers=4), 8
    engine = ZeroEngine(model, Cluster(n, backend="meta", trace="call", timeline=False), "no_reshard", Adam())
    engine.step(model.batches(engine.cluster))
    sent = engine.cluster.trace.sent_totals(n)
    plan = get_plan("no_reshard")
    want = sum(sent_bytes(c, model.num_params, n) for c in stage_collectives(plan))
    assert sent == [want] * n == [2 * model.num_params * 2 * (n - 1) // n] * n


@pytest.mark.parametrize("strategy", ["hsdp", "mics", "hpz"])
def test_a_plan_over_groups_is_refused_by_the_one_ring_formula(strategy):
    from zerosim.analysis.costs import stage_collectives
    from zerosim.parallel.data import get_plan

    with pytest.raises(ValueError, match="runs its collectives over groups"):
        stage_collectives(get_plan(strategy))
