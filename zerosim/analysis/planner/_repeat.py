"""A step of two micro-steps written from the record of a step of one, for the timeline: the planner's line through
K = 1 and K = 2 (_sweep.py `step_time`) without running the second step.

Letters: K micro-steps a step, n the calls one micro-step makes, c a call number.

Why it holds. On the meta backend (arrays without data) a micro-step's work depends on shapes alone. Where the
gradients are reduce-scattered unit by unit as backward makes them (stages 2 and 3: `Plan.reduces_per_unit`), a
micro-step makes the same calls and compute events whether or not it is the step's last; and in a fresh engine's
first step, micro-step 0 differs from micro-step 1 only in the ledger (its backward makes the accumulation buffers)
and in waiting for the last step's refresh (there is none). So the log of a step of two micro-steps is, event by
event, the log of a step of one with its micro-step written twice:

    StepBoundary "begin"           micro_steps 2 in place of 1
    micro-step 0                   as recorded
    micro-step 1                   micro-step 0's calls and compute events again: each call number c + n, each handle
                                   a compute waited for moved alike, `micro` 1
    the step's end                 a parallelism's once-a-step calls (c + n: SP's gradients' all-reduce), the
                                   optimizer step (its handles c + n), the refresh of stages 1/2 (c + n), every
                                   call `micro` K − 1 = 1 (as `ZeroEngine.reduce` and `finish` label them),
                                   StepBoundary "end" with micro_steps 2

and each call's closed-form ring (`Trace.ring_calls`: the meta backend records no ring's sends one by one), group
(`call_groups`) and point-to-point sends (`Trace.events`: context parallelism's ring hops) go with its new number. That
is what `simulate` reads, so its Timeline is the second step's to the bit.

Where it applies (`repeats`): a meta engine's first step of one micro-step, its ledgers' timelines aside, at a plan that
reduces unit by unit with nothing to agree across replicas (no HSDP, MiCS) and nothing gathered for the whole step
(`keeps_for_step`) or a piece kept over it (hpZ), with no parallelism beside but those whose micro-steps are alike
(`Parallelism.micro_steps_alike`: tensor and context parallelism, whose calls between units depend on shapes alone, and
TP's one call a step, SP's gradients, follows the micro-steps; not offload or PP), and no ZeRO++ wire or values; and
`twice` refuses (None) a log holding anything else than the calls and computes of a micro-step ("gather params", "reduce
grads", and those of the parallelisms beside, by their names) before the optimizer, or at its end anything but the
parallelisms' once-a-step calls (`Parallelism.step_end_tags`), the optimizer steps, the refresh and the boundary.
Anything else runs its second step. tests/test_plan.py holds the written log to the one a step of two micro-steps
records, event by event, and its timeline to the bit, for every checkpointing strategy at stages 2 and 3 under three
schedules (the seed's, FSDP's, DeepSpeed's with buckets and prefetch), bf16 and fp16, on one node and on four, over the
pure, stochastic-rounding and fp32 precisions, fp32 accumulation, SGD and AdamW (Muon's step ends in its own calls and
products, which are not written again), and beside tensor parallelism (with and without SP, async, both layouts) and
context parallelism (ring and all-gather, with TP); `cluster/_recording.py` writes a pipeline's repeated actions the
same way (call numbers moved by the calls made since).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from zerosim.cluster import Call, Compute, Event, OptimizerStep, StepBoundary

_new = object.__new__
MICRO_STEP = ("gather params", "reduce grads")  # the purposes of the calls a micro-step makes at stages 2/3
STEP_END = ("refresh params",)  # the purposes of the calls the step's end makes there (ZeroEngine.finish)


@dataclass(frozen=True)
class StepLog:
    """What `simulate` reads of a trace (zerosim.analysis.timeline): the log, the sends (none: every call is a ring
    in closed form), the calls' closed forms, groups and ranks, and the topology."""

    log: list
    events: list
    ring_calls: dict
    call_groups: dict
    gpus_per_node: int | None
    world_size: int | None
    call_ranks: dict = field(default_factory=dict)


def repeats(engine) -> bool:
    """Whether `engine`'s (a ZeroEngine that has run one step of one micro-step) second micro-step would write its
    first again (see the module docstring)."""
    plan, cluster = engine.plan, engine.cluster
    trace = cluster.trace
    return (not cluster.backend.holds_values and trace.granularity == "call" and not trace.keep_values
            and trace.folded.calls == 0 and not trace.call_ranks and engine.accumulation_steps == 1
            and engine.iteration == 1 and plan.reduces_per_unit and plan.replicate is None
            and plan.after_forward in ("free", "keep") and all(m.micro_steps_alike for m in engine.parallelisms.members)
            and engine.ctx.wire is None)


def twice(trace, beside=()) -> StepLog | None:
    """The trace of a step of two micro-steps, written from `trace` (one step of one micro-step, of an engine that
    `repeats`); None where its log holds what is not written again here. `beside`: the engine's parallelisms (each one
    whose micro-steps are alike: tensor and context parallelism), whose calls of a micro-step are written again as
    data parallelism's, and whose calls once a step (`Parallelism.step_end_tags`) stand at its end."""
    log = trace.log
    begin = log[0] if log else None
    if type(begin) is not StepBoundary or begin.what != "begin" or begin.micro_steps != 1:
        return None
    purposes = (*MICRO_STEP, *(m.name for m in beside))
    once = {tag for m in beside for tag in m.step_end_tags}
    end = 1
    while end < len(log) and (type(log[end]) is Compute or type(log[end]) is Call and log[end].purpose in purposes
                              and log[end].tag not in once):
        end += 1
    micro, tail = log[1:end], log[end:]
    if not micro or any(e.micro != 0 for e in micro) or not _step_end(tail, once):
        return None
    lo = sum(type(e) is Call for e in micro)  # calls 0 .. n - 1 are micro-step 0's; the step's end follows
    if any(type(e) is Call and e.call >= lo for e in micro) or any(e.call < lo for e in tail if type(e) is Call):
        return None

    def moved(needs) -> tuple:
        return tuple([c + lo for c in needs])

    def again(e):
        if type(e) is StepBoundary:
            return StepBoundary(e.step, e.what, 2)
        copy = _new(type(e))
        if type(e) is Call:  # the step's end is labelled the last micro-step's (ZeroEngine.reduce and finish)
            copy.__dict__.update(e.__dict__, call=e.call + lo, micro=1)
        elif type(e) is Compute:
            copy.__dict__.update(e.__dict__, needs=type(e.needs)(moved(e.needs)), micro=1)
        else:  # an OptimizerStep: it waits for the last micro-step's reductions
            copy.__dict__.update(e.__dict__, needs=moved(e.needs))
        return copy

    if any(type(e) is not Event for e in trace.events):  # a record of sends alike (a pipeline's), not written here
        return None
    written = [again(log[0]), *micro, *(again(e) for e in micro), *(again(e) for e in tail)]
    return StepLog(written, _sends_twice(trace.events, lo), _both(trace.ring_calls, lo), _both(trace.call_groups, lo),
                   trace.gpus_per_node, trace.world_size)


def _sends_twice(events: list, lo: int) -> list:
    """The sends recorded one by one (point-to-point calls: context parallelism's ring) of the step of two
    micro-steps: micro-step 0's as recorded, then every one moved by n (micro-step 1's, the step's end's after), in
    the order the calls were made."""
    def moved(e):
        copy = _new(type(e))
        copy.__dict__.update(e.__dict__, call=e.call + lo)
        return copy

    return [*(e for e in events if e.call < lo), *(moved(e) for e in events)]


def _step_end(tail, once=()) -> bool:
    """Whether `tail` (the log after the micro-step) is what a step's end writes again here: the optimizer steps, the
    refresh's calls and the parallelisms' calls tagged `once`, then the "end" boundary."""
    if not tail or type(tail[-1]) is not StepBoundary or tail[-1].what != "end" or tail[-1].micro_steps != 1:
        return False
    return all(type(e) is OptimizerStep and e.where == "device"
               or type(e) is Call and (e.purpose in STEP_END or e.tag in once) for e in tail[:-1])


def _both(by_call: dict, lo: int) -> dict:
    """{call: x} of the step of two micro-steps: micro-step 0's entries as recorded, then every entry moved by n
    (micro-step 1's, and the step's end's after it)."""
    return {**{c: x for c, x in by_call.items() if c < lo}, **{c + lo: x for c, x in by_call.items()}}
