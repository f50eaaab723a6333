"""The schedules' tables (zerosim/parallel/pipeline/_schedules.py) against hand tables of torch 2.13's own order, the
refusals torch makes, a table's own checks, and the activations in flight by hand (_costs.py) against the tables.

Each hand table is what torch 2.13.0 (torch/distributed/pipelining/schedules.py) runs on each rank, a row per rank,
"" an idle time step; the comment on each row says which lines of torch's code make it. (The parity lane,
tests/test_pipeline_parity.py, compares the same with torch itself, where torch is installed.)
"""

import itertools

import pytest

from zerosim.parallel.pipeline import SCHEDULES, Action, Table, make_table
from zerosim.parallel.pipeline._costs import in_flight

HAND = {
    # ScheduleGPipe._get_pipeline_order, P=2, M=3: [None] * r, M forwards, [None] * 3(P-1-r), M backwards
    ("gpipe", 2, 3, 1): [
        ["0F0", "0F1", "0F2", "", "", "", "0B0", "0B1", "0B2"],  # r=0: no idle, 3 F, 3(2-1-0)=3 idle, 3 B
        ["", "1F0", "1F1", "1F2", "1B0", "1B1", "1B2"],  # r=1: 1 idle, 3 F, 3(2-1-1)=0 idle, 3 B
    ],
    # Schedule1F1B, P=3, M=4: `_get_pipeline_order`'s time steps ([None]*r, P-1-r forwards, 2(P-1-r) idle, F/B pairs,
    # then None/B pairs); micro-batches in the order `_step_microbatches` runs them (warmup_chunks = min(M, P - r))
    ("1f1b", 3, 4, 1): [
        ["0F0", "0F1", "", "", "", "", "0F2", "0B0", "0F3", "0B1", "", "0B2", "", "0B3"],  # r=0: 2 F, 4 idle, 2 pairs
        ["", "1F0", "", "", "1F1", "1B0", "1F2", "1B1", "1F3", "1B2", "", "1B3"],  # r=1: 1 idle, 1 F, 2 idle, 3 pairs
        ["", "", "2F0", "2B0", "2F1", "2B1", "2F2", "2B2", "2F3", "2B3"],  # r=2: 2 idle, no warmup, 4 F/B pairs
    ],
    # ScheduleInterleaved1F1B, P=2, M=4, V=2 (stages 0, 2 on rank 0; 1, 3 on rank 1): rounds = max(1, 4 // 2) = 2,
    # m = 2; `_get_warmup_ops(multiply_factor=2)` = (V-1)·m + 2(P-1-r); post_warmup = V·P + 2(P-1-r) - (warmup + r);
    # `forward_stage_index(step)` = ((step // m) % V)·P + r; backward likewise from the last chunk; cooldown None/B
    ("interleaved-1f1b", 2, 4, 2): [
        # r=0: warmup 2+2=4 (0F0 0F1 2F0 2F1), post_warmup (4+2)-4=2 idle, 4 F/B pairs, 4 None/B
        ["0F0", "0F1", "2F0", "2F1", "", "", "0F2", "2B0", "0F3", "2B1", "2F2", "0B0", "2F3", "0B1", "", "2B2", "",
         "2B3", "", "0B2", "", "0B3"],
        # r=1: 1 idle, warmup 2+0=2 (1F0 1F1), post_warmup (4+0)-(2+1)=1 idle, 6 F/B pairs, 2 None/B
        ["", "1F0", "1F1", "", "3F0", "3B0", "3F1", "3B1", "1F2", "1B0", "1F3", "1B1", "3F2", "3B2", "3F3", "3B3", "",
         "1B2", "", "1B3"],
    ],
    # ScheduleInterleavedZeroBubble, P=2, M=4, V=2: `_get_warmup_ops(multiply_factor=1)` = (V-1)·m + (P-1-r),
    # post_warmup = P - r - 1, backward-input (I) in the pairs, a backward-weight (W) after each from the r-th pair on
    # (num_1f1b_microbatches = rank), the rest of the W at the end; then `_add_bubbles_to_actions` idles a forward
    # whose input was not made at an earlier time step
    ("zero-bubble", 2, 4, 2): [
        # r=0: warmup (2-1)·2 + 1 = 3 (0F0 0F1 2F0), post_warmup 2-0-1 = 1 idle, then F/I pairs each with a W
        # (op - warmup >= r = 0), then the cooldown's I and W; no bubble added (every input was made before)
        ["0F0", "0F1", "2F0", "", "2F1", "2I0", "2W0", "0F2", "2I1", "2W1", "0F3", "0I0", "0W0", "2F2", "0I1", "0W1",
         "2F3", "2I2", "2W2", "2I3", "2W3", "0I2", "0W2", "0I3", "0W3"],
        # r=1: 1 idle, warmup (2-1)·2 + 0 = 2 (1F0 1F1), post_warmup 0; the first pair has no W (r = 1), each later
        # one the W of the pair before it; the last W at the end
        ["", "1F0", "1F1", "3F0", "3I0", "3F1", "3I1", "3W0", "1F2", "1I0", "3W1", "1F3", "1I1", "1W0", "3F2", "3I2",
         "1W1", "3F3", "3I3", "3W2", "1I2", "3W3", "1I3", "1W2", "1W3"],
    ],
    # ScheduleInterleavedZeroBubble, P=2, M=1, V=2 (m = 1): where `_add_bubbles_to_actions` idles a forward
    ("zero-bubble", 2, 1, 2): [
        # r=0: warmup min((2-1)·1 + 1, 2) = 2 forwards (0F0 2F0), 1 idle, then each I with its W; 2F0 waits a step:
        # its input, 1F0, is made at step 1, not before
        ["0F0", "", "2F0", "", "2I0", "2W0", "0I0", "0W0"],
        # r=1: 1 idle, warmup 1 (1F0), then F/I pairs; 3F0 waits a step for 2F0, itself a step late
        ["", "1F0", "", "3F0", "3I0", "1I0", "3W0", "1W0"],
    ],
}


@pytest.mark.parametrize("key", list(HAND), ids=lambda k: "-".join(map(str, k)))
def test_each_schedule_is_torchs_order_by_hand(key):
    schedule, P, M, V = key
    assert make_table(schedule, P, M, V).rows() == HAND[key]


def test_the_tables_name_torchs_classes():
    assert {s.name: s.torch_class for s in SCHEDULES.values()} == {
        "gpipe": "ScheduleGPipe", "1f1b": "Schedule1F1B", "interleaved-1f1b": "ScheduleInterleaved1F1B",
        "zero-bubble": "ScheduleInterleavedZeroBubble"}


@pytest.mark.bad_input("engine arguments")
@pytest.mark.parametrize("schedule, P, M, V, words", [
    ("1f1b", 4, 3, 1, "Number of microbatches (3) must be greater than or equal to the number of stages (4)"),
    ("interleaved-1f1b", 4, 9, 2, "requires the number of microbatches to be a multiple of the number of rounds (2)"),
    ("zero-bubble", 4, 9, 2, "Zero bubble requires the number of microbatches to be a multiple of the number of "
     "rounds (2), but got 9"),
    ("gpipe", 2, 4, 2, "Single stage schedule requires exactly 1 stage per rank"),
    ("1f1b", 2, 4, 3, "Single stage schedule requires exactly 1 stage per rank"),
    ("pipedream", 2, 4, 1, "unknown pipeline schedule 'pipedream'"),
    ("gpipe", 0, 4, 1, "pp must be a positive integer"),
    ("gpipe", 2, 0, 1, "micro_batches must be a positive integer"),
])
def test_what_torch_refuses_is_refused_in_its_words(schedule, P, M, V, words):
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
        make_table(schedule, P, M, V)


def test_fewer_micro_batches_than_stages_run_where_torch_runs_them():
    # GPipe and the interleaved schedules take M < P (torch: rounds = max(1, M // P) = 1 divides any M)
    for schedule in ("gpipe", "interleaved-1f1b", "zero-bubble"):
        table = make_table(schedule, 4, 2)
        assert len(table.order()) == len(table.actions)


@pytest.mark.bad_input("engine arguments")
@pytest.mark.parametrize("rows, words", [
    ([Action(0, 0, "forward", 0, 0)], "missing 0B0"),  # an action missing
    ([Action(0, 0, "forward", 0, 0), Action(0, 0, "backward", 0, 0)], "shares rank 0's time step 0"),
    ([Action(1, 0, "forward", 0, 0), Action(1, 1, "backward", 0, 0)], "not an action of stage"),  # wrong rank
    ([Action(0, 0, "forward", 0, 0), Action(0, 1, "forward", 1, 0), Action(0, 2, "backward", 1, 0),
      Action(0, 3, "backward", 0, 0)], "runs micro-batches \\[1, 0\\]"),  # backwards out of micro-batch order
])
def test_a_table_that_is_not_a_schedule_is_refused(rows, words):
    M = 1 + max(a.micro for a in rows)
    with pytest.raises(ValueError, match=words):
        Table("hand", 1, M, 1, tuple(rows))


def test_a_table_that_cannot_finish_is_refused():
    # rank 0 runs stage 0's backward before stage 1 (rank 1) ran its forward, which waits for rank 0's forward: fine;
    # but rank 1 runs its backward before its forward, which its own backward waits for: stuck
    rows = (Action(0, 0, "forward", 0, 0), Action(0, 1, "backward", 0, 0), Action(1, 0, "backward", 0, 1),
            Action(1, 1, "forward", 0, 1))
    with pytest.raises(ValueError, match="cannot finish: 0B0, 1B0 each wait"):
        Table("stuck", 2, 1, 1, rows).order()


def test_what_each_action_waits_for_by_hand():
    table = make_table("zero-bubble", 2, 2, 2)  # 4 stages; backward split into I and W
    assert table.needs(Action(0, 0, "forward", 1, 0)) == ()  # the first stage reads the data
    assert table.needs(Action(1, 0, "forward", 1, 1)) == ((0, "forward", 1),)  # the stage before's output
    assert table.needs(Action(1, 0, "backward-input", 1, 3)) == ((3, "forward", 1),)  # the last stage: its loss
    assert table.needs(Action(0, 0, "backward-input", 1, 2)) == ((2, "forward", 1), (3, "backward-input", 1))
    assert table.needs(Action(0, 0, "backward-weight", 1, 2)) == ((2, "backward-input", 1),)
    plain = make_table("1f1b", 2, 2)
    assert plain.needs(Action(0, 0, "backward", 0, 0)) == ((0, "forward", 0), (1, "backward", 0))


def test_the_order_keeps_every_ranks_own_order_and_every_dependency():
    for schedule, P, M, V in [("1f1b", 4, 6, 1), ("interleaved-1f1b", 3, 4, 2), ("zero-bubble", 4, 5, 2)]:
        table = make_table(schedule, P, M, V)
        order = table.order()
        seen = set()
        for a in order:
            assert all(n in seen for n in table.needs(a)), a
            seen.add(a.key)
        for r in range(P):
            assert [a for a in order if a.rank == r] == list(table.of_rank(r))


@pytest.mark.parametrize("schedule", list(SCHEDULES))
def test_the_activations_in_flight_by_hand_are_the_tables(schedule):
    # _costs.py's formulas (GPipe M; 1F1B min(P - r, M); interleaved Megatron's warmup + 1; zero bubble's) against
    # the most chunks each rank of the table holds, over every shape torch runs
    checked = 0
    for P, M, V in itertools.product(range(1, 6), range(1, 11), range(1, 4)):
        if SCHEDULES[schedule].default_virtual == 1 and V > 1:
            continue
        try:
            table = make_table(schedule, P, M, V)
        except ValueError:
            continue
        for r in range(P):
            assert table.in_flight(r) == in_flight(schedule, P, M, V, r), (P, M, V, r)
            checked += 1
    assert checked > 100


def test_in_flight_by_hand_on_named_rows():
    # 1F1B on 4 stages holds 4, 3, 2, 1 micro-batches (torch: warmup_chunks = min(M, P - r)), whatever M
    assert [in_flight("1f1b", 4, 32, 1, r) for r in range(4)] == [4, 3, 2, 1]
    # GPipe holds every micro-batch on every stage
    assert [in_flight("gpipe", 4, 32, 1, r) for r in range(4)] == [32] * 4
    # interleaved, P=4, V=2, M=8 (m = 4): Megatron's warmup (4-1-r)·2 + (2-1)·4, one more: 11, 9, 7, 5 chunks
    assert [in_flight("interleaved-1f1b", 4, 8, 2, r) for r in range(4)] == [11, 9, 7, 5]
