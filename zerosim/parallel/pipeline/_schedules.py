"""The schedules, each a table (_table.py) made by the rule torch 2.13 makes it, cited line by line.

Letters: P pipeline ranks, V virtual stages per rank, M micro-batches, r a rank (0..P-1).
All from torch 2.13.0, torch/distributed/pipelining/schedules.py:

    gpipe               ScheduleGPipe: every forward, then every backward (`_step_microbatches`; the time steps of
                        `_get_pipeline_order`: r idle steps, M forwards, 3(P-1-r) idle steps, M backwards)
    1f1b                Schedule1F1B: P - r forwards, then one backward and one forward in turn, then the rest of the
                        backwards (`_step_microbatches`: `warmup_chunks = min(M, P - stage_index)`); the time steps of
                        `_get_pipeline_order`, whose last rank numbers its forwards from 1 where its runtime runs
                        micro-batch 0 first (the order here is the runtime's)
    interleaved-1f1b    ScheduleInterleaved1F1B: V chunks a rank, `_get_warmup_ops` (multiply_factor 2) and
                        `_get_1f1b_rank_ops` (Narayanan et al. 2021, "depth first")
    zero-bubble         ScheduleInterleavedZeroBubble ("ZB1P" of Qi et al. 2023): the same warmup with
                        multiply_factor 1, backward split into backward-input and backward-weight, and
                        `_add_bubbles_to_actions`' idle steps

A new schedule is a new function here returning a `Table`, and a row in SCHEDULES.
"""

from __future__ import annotations

from collections import defaultdict

from zerosim._dataclass import dataclass
from zerosim.parallel.pipeline._table import BACKWARD, FORWARD, INPUT, WEIGHT, Action, Table


def _positive(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def _rows(name: str, pp: int, m: int, v: int, per_rank: list) -> Table:
    """A Table from each rank's time steps: (kind, micro, stage) or None for an idle step."""
    actions = [Action(r, t, *step) for r, steps in enumerate(per_rank) for t, step in enumerate(steps) if step]
    return Table(name, pp, m, v, tuple(actions))


# -- single-stage schedules: one stage a rank -------------------------------------------------------------
def gpipe(pp: int, micro_batches: int, virtual: int = 1) -> Table:
    """ScheduleGPipe (schedules.py: `_step_microbatches` runs `forward_one_chunk(i)` for i in range(M), then
    `backward_one_chunk(i)` for i in range(M); `_get_pipeline_order` pads r idle steps before and 3(P-1-r)
    between)."""
    _single_stage("gpipe", virtual)
    rows = []
    for r in range(pp):
        rows.append([None] * r + [(FORWARD, i, r) for i in range(micro_batches)] + [None] * (3 * (pp - 1 - r))
                    + [(BACKWARD, i, r) for i in range(micro_batches)])
    return _rows("gpipe", pp, micro_batches, 1, rows)


def one_f_one_b(pp: int, micro_batches: int, virtual: int = 1) -> Table:
    """Schedule1F1B (schedules.py). Its __init__ refuses fewer micro-batches than stages ("Number of microbatches
    ({n_microbatches}) must be greater than or equal to the number of stages ({num_stages})."); `_step_microbatches`
    runs min(M, P - r) forwards, then backward and forward in turn ("1B1F"), then the last backwards; the time steps
    are `_get_pipeline_order`'s (r idle, P-1-r forwards, 2(P-1-r) idle, forward/backward pairs, then idle/backward
    pairs)."""
    _single_stage("1f1b", virtual)
    if micro_batches < pp:
        raise ValueError(f"1f1b: Number of microbatches ({micro_batches}) must be greater than or equal to the number "
                         f"of stages ({pp}) (torch 2.13 Schedule1F1B); gpipe and interleaved-1f1b run with fewer")
    rows = []
    for r in range(pp):
        warm = pp - 1 - r
        steps = [None] * r + [(FORWARD, i, r) for i in range(warm)] + [None] * (2 * warm)
        f, b = warm, 0
        while f < micro_batches:  # one forward, one backward
            steps += [(FORWARD, f, r), (BACKWARD, b, r)]
            f, b = f + 1, b + 1
        while b < micro_batches:  # cooldown: an idle step, then a backward
            steps += [None, (BACKWARD, b, r)]
            b += 1
        rows.append(steps)
    return _rows("1f1b", pp, micro_batches, 1, rows)


def _single_stage(name: str, virtual: int) -> None:
    if virtual != 1:
        raise ValueError(f"{name} runs one stage a rank (torch's PipelineScheduleSingle); torchtitan refuses more: "
                         "'Single stage schedule requires exactly 1 stage per rank' (pipeline_parallel.py, "
                         "_get_pipeline_metadata). Use interleaved-1f1b or zero-bubble for virtual stages")


# -- multi-stage schedules: V chunks a rank, looped ---------------------------------------------------------
TORCH_WORDS = {"interleaved-1f1b": ("Interleaved 1F1B", "ScheduleInterleaved1F1B"),
               "zero-bubble": ("Zero bubble", "ScheduleInterleavedZeroBubble")}  # each refusal's first words


def _rounds(name: str, pp: int, m: int) -> int:
    """Micro-batches per round: torch's `number_of_rounds = max(1, M // P)`, `microbatches_per_round = M // rounds`,
    and its refusal of an M that the rounds do not divide."""
    rounds = max(1, m // pp)
    if m % rounds:
        who, cls = TORCH_WORDS[name]
        raise ValueError(f"{name}: {who} requires the number of microbatches to be a multiple of the number of rounds "
                         f"({rounds}), but got {m}. (torch 2.13 {cls}: rounds = max(1, M // P) with P = {pp})")
    return m // rounds


def _warmup_ops(r: int, v: int, per_round: int, pp: int, m: int, factor: int) -> int:
    """torch's `_get_warmup_ops`: (V-1)·per_round on the last rank, `factor` more a hop back, at most M·V."""
    return min((v - 1) * per_round + factor * (pp - 1 - r), m * v)


def _rank_ops(r: int, pp: int, m: int, v: int, per_round: int, zero_bubble: bool) -> list:
    """torch's `_calculate_single_rank_operations` of ScheduleInterleaved1F1B / ScheduleInterleavedZeroBubble with
    `_get_1f1b_rank_ops`: warmup forwards, idle steps until the first backward can arrive, forward/backward pairs
    (zero bubble: backward-input, and a backward-weight from the rank-th pair on), cooldown backwards."""
    warmup = _warmup_ops(r, v, per_round, pp, m, 1 if zero_bubble else 2)
    ops_total = v * m
    fwd_bwd = ops_total - warmup
    cooldown = ops_total - fwd_bwd

    def forward_stage(step):
        return ((step // per_round) % v) * pp + r

    def backward_stage(step):
        return (v - 1 - ((step - warmup) // per_round) % v) * pp + r

    fwd, bwd, wgt = defaultdict(int), defaultdict(int), defaultdict(int)
    steps = [None] * r
    post_warmup = pp - r - 1 if zero_bubble else (v * pp + 2 * (pp - 1 - r)) - (warmup + r)
    back = INPUT if zero_bubble else BACKWARD
    backward_ops, weights = [], 0
    for op in range(warmup + fwd_bwd + cooldown):
        if op < warmup:
            j = forward_stage(op)
            steps.append((FORWARD, fwd[j], j))
            fwd[j] += 1
            if op == warmup - 1:
                steps += [None] * post_warmup
            continue
        if op < warmup + fwd_bwd:
            j = forward_stage(op)
            steps.append((FORWARD, fwd[j], j))
            fwd[j] += 1
        elif not zero_bubble:
            steps.append(None)  # cooldown: an idle step to stay in line with the ranks still in 1F1B
        j = backward_stage(op)
        steps.append((back, bwd[j], j))
        bwd[j] += 1
        backward_ops.append(op)
        if zero_bubble and op - warmup >= r:  # num_1f1b_microbatches = rank: then a weight step after each
            j = backward_stage(backward_ops[weights])
            steps.append((WEIGHT, wgt[j], j))
            wgt[j] += 1
            weights += 1
    while zero_bubble and weights < len(backward_ops):
        j = backward_stage(backward_ops[weights])
        steps.append((WEIGHT, wgt[j], j))
        wgt[j] += 1
        weights += 1
    return steps


def interleaved_1f1b(pp: int, micro_batches: int, virtual: int = 2) -> Table:
    """ScheduleInterleaved1F1B (schedules.py, torch 2.13): V stages a rank (stage j on rank j mod P), the rounds
    refusal, then `_calculate_single_rank_operations` for every rank. V defaults to torchtitan's 2
    (pipeline_parallel.py: 'For multi-stage schedules, default is 2 virtual stages per rank')."""
    per_round = _rounds("interleaved-1f1b", pp, micro_batches)
    rows = [_rank_ops(r, pp, micro_batches, virtual, per_round, False) for r in range(pp)]
    return _rows("interleaved-1f1b", pp, micro_batches, virtual, rows)


def zero_bubble(pp: int, micro_batches: int, virtual: int = 2) -> Table:
    """ScheduleInterleavedZeroBubble (schedules.py, torch 2.13; Qi et al. 2023 "Zero Bubble Pipeline Parallelism",
    its ZB1P): the interleaved warmup with multiply_factor 1, backward-input in the 1F1B pairs, a backward-weight
    after each from the rank-th pair on, then `_add_bubbles_to_actions`: an idle step wherever a forward's input
    (or the first backward's loss) is not made at an earlier time step."""
    per_round = _rounds("zero-bubble", pp, micro_batches)
    rows = [_rank_ops(r, pp, micro_batches, virtual, per_round, True) for r in range(pp)]
    return _rows("zero-bubble", pp, micro_batches, virtual, _add_bubbles(rows, pp * virtual))


def _add_bubbles(rows: list, stages: int) -> list:
    """torch's `_add_bubbles_to_actions`: walk every rank's steps in lockstep; a forward whose input (stage - 1's
    forward of the micro-batch), or a full backward whose gradient, was not seen at an earlier step waits an idle
    step. (torch's `need_bubble` checks F and B only: a backward-input or -weight never waits here.)"""

    def waits(step, seen):
        kind, micro, j = step
        if kind == FORWARD:
            return j != 0 and (j - 1, FORWARD, micro) not in seen
        if kind == BACKWARD:
            if j == stages - 1:
                return (j, FORWARD, micro) not in seen
            return (j + 1, BACKWARD, micro) not in seen
        return False

    seen, out, at = set(), [[] for _ in rows], [0] * len(rows)
    while any(at[r] < len(rows[r]) for r in range(len(rows))):
        now = set()
        for r, steps in enumerate(rows):
            if at[r] >= len(steps):
                continue
            step = steps[at[r]]
            if step is not None and waits(step, seen):
                out[r].append(None)
                continue
            out[r].append(step)
            at[r] += 1
            if step is not None:
                now.add((step[2], step[0], step[1]))
        seen |= now
    return out


@dataclass(frozen=True)
class Schedule:
    """A schedule by name: the function that makes its table, and the virtual stages a rank runs by default."""

    name: str
    make: object  # (pp, micro_batches, virtual) -> Table
    default_virtual: int
    torch_class: str  # its class in torch.distributed.pipelining.schedules


SCHEDULES = {s.name: s for s in (
    Schedule("gpipe", gpipe, 1, "ScheduleGPipe"),
    Schedule("1f1b", one_f_one_b, 1, "Schedule1F1B"),  # torchtitan's default schedule (configs.py: "1F1B")
    Schedule("interleaved-1f1b", interleaved_1f1b, 2, "ScheduleInterleaved1F1B"),
    Schedule("zero-bubble", zero_bubble, 2, "ScheduleInterleavedZeroBubble"),
)}
DEFAULT_SCHEDULE = "1f1b"


def get_schedule(name: str) -> Schedule:
    if name not in SCHEDULES:
        raise ValueError(f"unknown pipeline schedule {name!r}; choose one of {', '.join(SCHEDULES)}")
    return SCHEDULES[name]


def make_table(schedule: str, pp: int, micro_batches: int, virtual: int | None = None) -> Table:
    """The table of `schedule` (a name of SCHEDULES) for P = `pp` ranks, M micro-batches and V virtual stages a rank
    (default: the schedule's), refused where torch refuses it."""
    s = get_schedule(schedule)
    pp, m = _positive(pp, "pp"), _positive(micro_batches, "micro_batches")
    v = _positive(s.default_virtual if virtual is None else virtual, "virtual_stages")
    return s.make(pp, m, v)
