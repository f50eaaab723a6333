"""Bucketing and prefetch (parallel/data/_comm_schedule.py, parallel/data/_fetch.py): they change the calls, their
timing and the memory peak, never a bit of the result.

Letters: N ranks, P parameters, s = ceil(P/N), Ψ = N*s; a unit's window [a, b) in the flat buffer.
Every expected count and byte figure below is derived by hand in its row's comment.
"""

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_accumulation import bits, micro_batches  # the same bit view and per-rank micro-batches

from zerosim import MLP, Adam, Cluster, Reference, ZeroEngine
from zerosim.analysis.costs import Link
from zerosim.analysis.timeline import Device, Hardware, simulate
from zerosim.cluster import Compute
from zerosim.models import make_regression
from zerosim.parallel.data import CommSchedule, get_comm_schedule, get_plan
from zerosim.parallel.data._buckets import GradBucket
from zerosim.parallel.data._comm_schedule import allgather_pieces
from zerosim.precision import get_precision

SCHEDULES = st.one_of(
    st.builds(
        CommSchedule,
        reduce_bucket_size=st.one_of(st.none(), st.integers(1, 120)),
        allgather_bucket_size=st.one_of(st.none(), st.integers(1, 90)),
        prefetch_forward=st.integers(0, 3),
        prefetch_backward=st.integers(0, 3),
        prefetch_after_compute=st.booleans(),
        max_gathered_units=st.one_of(st.none(), st.integers(1, 3)),
    ),
    st.builds(
        CommSchedule.deepspeed,
        reduce_bucket_size=st.integers(1, 120),
        allgather_bucket_size=st.one_of(st.none(), st.integers(1, 90)),
        stage3_prefetch_bucket_size=st.integers(0, 100),
        stage3_max_live_parameters=st.integers(1, 200),
        stage3_max_reuse_distance=st.integers(0, 200),
    ),
    st.builds(
        CommSchedule.fsdp,
        backward_prefetch=st.sampled_from(["BACKWARD_PRE", "BACKWARD_POST", None]),
        forward_prefetch=st.booleans(),
        limit_all_gathers=st.booleans(),
    ),
)


@pytest.mark.slow
@settings(max_examples=60)
@given(
    widths=st.lists(st.integers(1, 6), min_size=2, max_size=5),
    n=st.integers(1, 6),
    k=st.integers(1, 2),
    stage=st.integers(0, 3),
    precision=st.sampled_from(["fp32", "fp16-mixed", "bf16-mixed"]),
    checkpoint=st.booleans(),
    comm=SCHEDULES,
    seed=st.integers(0, 2**16),
)
def test_any_schedule_leaves_every_bit_equal_to_the_oracle(widths, n, k, stage, precision, checkpoint, comm, seed):
    rng = np.random.default_rng(seed)
    model = MLP(widths)
    params = model.init_params(np.random.default_rng(seed + 1))
    policy = get_precision(precision)
    engine = ZeroEngine(model, Cluster(n), stage, Adam(lr=1e-2), policy, checkpoint=checkpoint, params=params,
                        accumulation_steps=k, comm=comm)
    ref = Reference(
        model,
        Adam(lr=1e-2),
        policy,
        world_size=n,
        params=params,
        accumulation_steps=k,
        reduce_every_micro_step=stage >= 2,
    )
    for _ in range(2):
        data = micro_batches(rng, n, k, 3, widths)
        assert engine.step(data) == ref.step(data)
    assert np.array_equal(bits(engine.full_master()), bits(ref.master()))
    for name, got in engine.full_optimizer_state().items():
        assert np.array_equal(bits(got), bits(ref.optimizer_state()[name])), name
    assert np.array_equal(bits(engine.full_params()), bits(ref.compute_params()))
    for rank in engine.cluster.ranks:  # nothing of the step stays behind: only the model states
        assert {id(b) for b in rank.ledger.live.values()} == {id(b) for b in rank.model_states()}


# ------------------------------------------------------------------------------------ which calls run

WIDTHS = [8, 32, 32, 8]  # units fc0 [0, 288), fc1 [288, 1344), fc2 [1344, 1608): 288, 1056, 264 elements; P = 1608


def reduce_calls(stage, n, comm):
    model = MLP(WIDTHS)
    cluster = Cluster(n, trace="call")
    engine = ZeroEngine(model, cluster, stage, Adam(lr=1e-3), "fp16-mixed", comm=comm)
    engine.step(make_regression(np.random.default_rng(0), n, 2, WIDTHS))
    return [(c.collective, c.elements, c.layers) for c in cluster.trace.calls if c.purpose == "reduce grads"]


# (stage, N, reduce_bucket_size, the reduce calls: (collective, elements, units in backward order))
BUCKET_ROWS = [
    # no bucket size: seed 004's one reduce-scatter per unit, in backward order
    (2, 4, None, [("reduce_scatter", 264, (4,)), ("reduce_scatter", 1056, (2,)), ("reduce_scatter", 288, (0,))]),
    # 1400: fc2 264; + fc1 = 1320 <= 1400 joins; + fc0 = 1608 > 1400, so [fc2, fc1] goes first, then fc0
    (2, 4, 1400, [("reduce_scatter", 1320, (4, 2)), ("reduce_scatter", 288, (0,))]),
    # 2000: all three fit, one call over the whole 1608
    (2, 4, 2000, [("reduce_scatter", 1608, (4, 2, 0))]),
    # 100: every unit is larger than the bucket: each goes alone, as DeepSpeed sends an oversize param alone
    (3, 4, 100, [("reduce_scatter", 264, (4,)), ("reduce_scatter", 1056, (2,)), ("reduce_scatter", 288, (0,))]),
    # stage 1, no bucket size: one reduce-scatter of the padded buffer, Ψ = 5·ceil(1608/5) = 5·322 = 1610
    (1, 5, None, [("reduce_scatter", 1610, ())]),
    # stage 1, 1400: the same groups; the padding [1608, 1610) travels with the first: [288, 1610) = 1322
    (1, 5, 1400, [("reduce_scatter", 1322, (4, 2)), ("reduce_scatter", 288, (0,))]),
    # stage 0, 2000: one bucket holding everything: [0, 1610), an all-reduce (its two phases)
    (0, 5, 2000, [("all_reduce", 1610, (4, 2, 0))] * 2),
    # stage 0, 300: fc2 alone (264 + 1056 > 300), fc1 alone, fc0 alone: 3 all-reduces, 2 phases each
    (0, 5, 300, [("all_reduce", 266, (4,))] * 2 + [("all_reduce", 1056, (2,))] * 2 + [("all_reduce", 288, (0,))] * 2),
]


@pytest.mark.parametrize("stage, n, size, expected", BUCKET_ROWS)
def test_buckets_decide_which_reduce_calls_run(stage, n, size, expected):
    assert reduce_calls(stage, n, CommSchedule(reduce_bucket_size=size)) == expected


def buckets_sent(sizes: list, limit) -> list:
    """The buckets GradBucket sends for units of these sizes, arriving in this order (units are adjacent windows)."""
    offsets = [0]
    for size in sizes:
        offsets.append(offsets[-1] + size)
    ctx = SimpleNamespace(layout=SimpleNamespace(windows=[(a, b) for a, b in zip(offsets, offsets[1:])]))
    sent = []
    bucket = GradBucket(ctx, limit, first=True, reduce_one=lambda c, unit, first: sent.append([unit]),
                        reduce_many=lambda c, units, first: sent.append(list(units)))
    for unit in range(len(sizes)):
        bucket.reduce(unit)
    bucket.flush()
    return sent


def test_a_bucket_is_sent_before_the_unit_that_would_overflow_it():
    # DeepSpeed's rule (stage_1_and_2.py): sizes 5, 5, 5 with limit 10 -> [0, 1] then [2]; 11 alone -> alone
    assert buckets_sent([5, 5, 5], 10) == [[0, 1], [2]]
    assert buckets_sent([3, 11, 3], 10) == [[0], [1], [2]]
    assert buckets_sent([3, 4], None) == [[0], [1]]
    assert buckets_sent([3, 0, 4], 100) == [[0, 2]]  # a unit without weights joins no bucket


# (shard size s, N, allgather_bucket_size, pieces): DeepSpeed's all_gather_dp_groups, max(1, s·N // size) pieces
PIECE_ROWS = [
    (402, 4, None, [(0, 402)]),  # no size: the whole shard in one call
    (402, 4, 500, [(0, 134), (134, 268), (268, 402)]),  # 402·4 // 500 = 3 pieces of 402 // 3 = 134
    (402, 4, 5000, [(0, 402)]),  # 1608 // 5000 = 0 -> max(1, 0) = 1
    (10, 3, 7, [(0, 2), (2, 4), (4, 6), (6, 10)]),  # 30 // 7 = 4 pieces of 10 // 4 = 2, the last takes the rest
]


@pytest.mark.parametrize("s, n, size, expected", PIECE_ROWS)
def test_allgather_pieces(s, n, size, expected):
    assert allgather_pieces(s, n, size) == expected


def test_the_refresh_gathers_in_pieces():
    model, n = MLP(WIDTHS), 4  # s = 402
    cluster = Cluster(n, trace="call")
    engine = ZeroEngine(model, cluster, 1, Adam(lr=1e-3), "bf16-mixed", comm=CommSchedule(allgather_bucket_size=500))
    engine.step(make_regression(np.random.default_rng(0), n, 2, WIDTHS))
    assert [c.elements for c in cluster.trace.calls if c.purpose == "refresh params"] == [4 * 134] * 3


# ------------------------------------------------------------------------------------ prefetch and memory

EQUAL = [16, 16, 16, 16, 16]  # four units of 16·16 + 16 = 272 elements: P = 1088, N = 4 -> s = 272
UNIT_BYTES = 272 * 2  # one gathered fp16 unit; the resting fp16 shard is the same 544 bytes


def stage3_params_peak(comm, checkpoint=False):
    """Rank 0's peak of kind "params" during forward/backward: its shard plus the gathered units live at once."""
    model, n = MLP(EQUAL), 4
    cluster = Cluster(n)
    engine = ZeroEngine(model, cluster, 3, Adam(lr=1e-3), "fp16-mixed", comm=comm, checkpoint=checkpoint)
    engine.step(make_regression(np.random.default_rng(0), n, 2, EQUAL))
    return cluster.ranks[0].ledger.peak("params")


# (schedule, gathered units live at the peak, why); uses: forward 0 1 2 3, backward 3 2 1 0
PEAK_ROWS = [
    (None, 1, "seed 004: gather right before a use, free right after"),
    (CommSchedule.fsdp(backward_prefetch=None), 1, "FSDP without prefetch frees after every use"),
    (CommSchedule.fsdp(forward_prefetch=True), 2, "FSDP: the unit in use and the one prefetched"),
    (CommSchedule(prefetch_forward=3), 4, "three ahead at unit 0, nothing capped: all four"),
    (CommSchedule(prefetch_forward=3, max_gathered_units=2), 2, "the same, capped at two gathered units"),
    (CommSchedule.deepspeed(), 4, "DeepSpeed's defaults: everything is reused within 1e9 elements, nothing freed"),
    # One element to prefetch: each walk stops after one gathered unit (272 >= 1), so the forward holds two.
    # At F3 the walk passes B3 (unit 3 live: not counted, but marked needed at B3, so not freed) and
    # gathers unit 2; at B3 it gathers unit 1: units 3, 2 and 1 live at once.
    (
        CommSchedule.deepspeed(stage3_prefetch_bucket_size=1, stage3_max_reuse_distance=0),
        3,
        "one element to prefetch, yet three live in backward: live units passed on the walk are not counted",
    ),
    # 273: at F0 units 1 (272 < 273, go on) and 2 (544, stop) are gathered: the unit that crosses the limit
    # still is. At F1 unit 3 (272, go on), then B3, B2, B1 are live and passed (marked needed: none freed
    # before its backward), and unit 0 is gathered for B0: all four live.
    (
        CommSchedule.deepspeed(stage3_prefetch_bucket_size=273, stage3_max_reuse_distance=0),
        4,
        "273 elements: the unit crossing the limit is gathered, and live units passed do not count",
    ),
    # max live 600: at F0 budget 600 - 272 = 328 gathers units 1 (272 < 328) and 2 (544): three live;
    # unit 0 freed. F1: budget 600 - 544 = 56 gathers unit 3; F3 and B3 have no budget; never more than three.
    (
        CommSchedule.deepspeed(
            stage3_prefetch_bucket_size=10**6, stage3_max_live_parameters=600, stage3_max_reuse_distance=0
        ),
        3,
        "max live 600 bounds the prefetch: min(600 - live, bucket)",
    ),
    (
        CommSchedule.deepspeed(stage3_prefetch_bucket_size=0, stage3_max_reuse_distance=544),
        1,
        "no prefetch; after forward 2 the reuse (backward 2) lies 272 + 272 = 544 elements on: not within 544, freed",
    ),
    (
        CommSchedule.deepspeed(stage3_prefetch_bucket_size=0, stage3_max_reuse_distance=545),
        2,
        "545: unit 2 is kept for its backward, and unit 3 joins it",
    ),
]


@pytest.mark.parametrize("comm, live, why", PEAK_ROWS)
def test_the_params_peak_grows_with_prefetch_as_computed(comm, live, why):
    assert stage3_params_peak(comm) == UNIT_BYTES + live * UNIT_BYTES, why


def test_prefetch_moves_gathers_earlier_in_the_log():
    # FSDP forward_prefetch: the gather of unit i+1 comes before unit i's forward compute on rank 0
    model, n = MLP(EQUAL), 2
    cluster = Cluster(n, trace="call")
    ZeroEngine(model, cluster, 3, Adam(lr=1e-3), "fp16-mixed", comm=CommSchedule.fsdp(forward_prefetch=True)).step(
        make_regression(np.random.default_rng(0), n, 2, EQUAL))
    order = []
    for ev in cluster.trace.log:
        if type(ev) is Compute and ev.rank == 0 and ev.kind == "forward" and ev.layer % 2 == 0:
            order.append(f"F{ev.layer // 2}")
        elif type(ev).__name__ == "Call" and ev.purpose == "gather params":
            order.append(f"G{ev.layers[0] // 2}")
    assert order[:8] == ["G0", "G1", "F0", "G2", "F1", "G3", "F2", "F3"]  # no G4: there is no unit 4


# ------------------------------------------------------------------------------------ time

UNIT_DEVICE = Device("unit", 1.0, 1.0, 1.0, None, 1e30, "1 FLOP/s; memory never the limit")


def stage3_timeline(comm, bandwidth, alpha):
    model, n = MLP(EQUAL), 2
    cluster = Cluster(n, trace="call")
    engine = ZeroEngine(model, cluster, 3, Adam(lr=1e-3), "fp16-mixed", comm=comm)
    engine.step(make_regression(np.random.default_rng(0), n, 2, EQUAL))
    return simulate(cluster.trace, Hardware(UNIT_DEVICE, Link("test", bandwidth, alpha, "test"), "fp16"))


def forward_gather_wait(result):
    """Seconds rank 0's forward computes of units 1..3 wait for their gathers (0 when prefetch hid them)."""
    forwards = [iv for iv in result.track(0, "compute") if iv.category == "forward"]
    by_layer = {iv.event.layer: iv for iv in forwards}
    return [by_layer[layer].start - by_layer[layer - 1].end for layer in (2, 4, 6)]  # after the ReLU before it


def test_prefetch_hides_every_forward_gather_when_links_are_fast():
    # A forward of unit i is 2·batch·16·16 = 1024 FLOP (plus the bias): ~1000 s on the unit device; a gather
    # of 136 elements per rank at 2 B each over 1e6 B/s is 0.27 ms: one unit ahead hides it entirely.
    waits = forward_gather_wait(stage3_timeline(CommSchedule.fsdp(forward_prefetch=True), 1e6, 0.0))
    assert waits == [0.0, 0.0, 0.0]
    unhidden = forward_gather_wait(stage3_timeline(None, 1e6, 0.0))
    assert all(w > 0 for w in unhidden)  # without prefetch each forward waits for its own gather


def test_latency_makes_hiding_impossible():
    # α = 1e4 s per ring step, N = 2: each gather takes >= 1e4 s, ten times a ~1e3 s forward: prefetch one
    # ahead still leaves each forward waiting for most of its gather.
    waits = forward_gather_wait(stage3_timeline(CommSchedule.fsdp(forward_prefetch=True), 1e6, 1e4))
    assert all(w > 5e3 for w in waits)


# ------------------------------------------------------------------------------------ names and errors

@pytest.mark.parametrize("stage, overlap", [
    (0, False),  # DeepSpeedZeroConfig.overlap_comm_valid: `stage == ZeroStageEnum.weights` when the key is absent
    (1, False),  # stage_1_and_2.py reduces each bucket on the compute stream (reduce_ipg_grads) without overlap_comm
    (2, False),
    (3, True),  # stage3.py: the reduce-scatters on their own stream
])
def test_deepspeeds_overlap_comm_follows_the_stage_as_its_config_does(stage, overlap):
    plan = get_plan(stage)
    assert CommSchedule.deepspeed().under(plan).overlap_comm is overlap
    assert ZeroEngine(MLP([4, 8, 4]), Cluster(2), stage=stage, optimizer=Adam(lr=1e-3),
                      comm=CommSchedule.deepspeed()).comm.overlap_comm is overlap  # the engine runs it so
    for said in (True, False):  # a schedule that says it is taken as it says, at every stage
        assert CommSchedule.deepspeed(overlap_comm=said).under(plan).overlap_comm is said
        assert CommSchedule(overlap_comm=said).under(plan).overlap_comm is said


def test_names_give_the_presets():
    assert get_comm_schedule(None) == CommSchedule() == get_comm_schedule("seed")
    assert get_comm_schedule("deepspeed") == CommSchedule(
        framework="deepspeed",  # whose defaults: a memory report reads it for DeepSpeed's bucket buffers
        overlap_comm=None,  # DeepSpeed's default by stage: on at stage 3 only (DeepSpeedZeroConfig.overlap_comm_valid)
        reduce_bucket_size=500_000_000,
        prefetch_bucket_size=50_000_000,
        max_live_parameters=1_000_000_000,
        max_reuse_distance=1_000_000_000,
    )
    assert get_comm_schedule("fsdp") == CommSchedule(prefetch_backward=1, max_gathered_units=2, framework="fsdp")
    # Megatron-Core's overlap_grad_reduce buckets: max(40000000, 1000000 * dp_size), at dp <= 40 the floor
    assert get_comm_schedule("megatron") == CommSchedule(reduce_bucket_size=40_000_000, framework="megatron")


@pytest.mark.bad_input("engine arguments")
@pytest.mark.parametrize("make, words", [
    (lambda: CommSchedule(reduce_bucket_size=0), "reduce_bucket_size must be a positive integer"),
    (lambda: CommSchedule(allgather_bucket_size=2.5), "allgather_bucket_size must be a positive integer"),
    (lambda: CommSchedule(prefetch_forward=-1), "prefetch_forward must be a number of units"),
    (lambda: CommSchedule(overlap_comm="yes"), "overlap_comm must be True, False or None"),
    (lambda: CommSchedule(prefetch_after_compute=None), "prefetch_after_compute must be True or False"),
    (lambda: CommSchedule.fsdp(backward_prefetch="BACKWARD_SOON"), "backward_prefetch must be one of"),
    (lambda: CommSchedule.deepspeed(reduce_bucket_size=5.5e3 + 0.5), "reduce_bucket_size must be a whole number"),
    (lambda: get_comm_schedule("nemo"), "one of 'seed', 'deepspeed', 'fsdp', 'megatron'"),
    (lambda: ZeroEngine(MLP([2, 2]), Cluster(2), 3, Adam(), comm="zero++"), "one of 'seed', 'deepspeed', 'fsdp'"),
])
def test_bad_knobs_are_named(make, words):
    with pytest.raises(ValueError, match=words):
        make()
