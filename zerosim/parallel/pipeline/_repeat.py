"""Actions that repeat, written again instead of run again: on the meta backend a stage's forward (or backward) of a
micro-batch does exactly what the same chunk's forward (backward) of micro-batch 1 did, on its own pipeline rank or on
another rank holding a stage of the same make, so the pipeline runs it once, records what it did, and writes the
record again for the others.

Letters: P pipeline ranks, M micro-batches, k one of them, c0 the first call number an action made.

Why it holds. On the meta backend (arrays without data) an action's work depends on the shapes it runs on, never on
the values: the same ops, the same allocations and frees in the same order, the same calls with the same sizes. A
405B model's middle stages are alike (the same units, but for their numbers), so their chunks' actions are too. What
differs from one action to the other is what the record leaves out and `replay` writes anew:

    the call numbers              its calls are numbered from the next free number: each recorded number moves by
                                  (c0 now) - (c0 then), and so do the handles that name them
    the handle it waited for      the activation (or gradient) received: each number of the recorded one is replaced
                                  by the number at its place in the handle received now
    the micro-batch               the `micro` of every call and compute event
    the rank and the units        on another pipeline rank: its ranks in place of the recorded ones (by position), its
                                  units' names in place of theirs (by position: "block9.attn" for "block2.attn"),
                                  in the compute events and the calls' tags ("block9.attn.hop0: K, V ..." for a CP
                                  ring's), and its stage's ranks in place of the recorded stage's at the ends of
                                  every send (those a representative stands for too: a CP ring's)
    the ledger                    only what its questions read: per kind the bytes it ends with and the most it held
                                  above where it started (MemoryLedger's peaks are maxima of running sums: the same
                                  allocations and frees from another start give the start plus the same maxima), and
                                  the count of events. Buffers born in a forward and freed in its backward, both
                                  written again, never enter `live`.

Micro-batch 0 always runs (its backward makes each stage's accumulation buffers; its first forward waits for the last
step's refresh), and so does micro-batch M - 1 where its backward differs (ZeroEngine.special_micro_step: buckets
closed at stages 0/1, HSDP's replicas). A forward written again has every backward of its micro-batch written again
(the buffers they would free were never made), so `plan` walks the table in the engine's order first: an action is
written again where a record of its make will exist by then, recorded where none exists yet, and a forward runs after
all where one of its backwards would find no record. A record that names a call made before its action (other than
what it waited for), or holds events besides calls and compute, is not written again.

Records carry from one run to another of the same job but for M (`Records`' `carried`: the planner's two steps on
a pipeline's line, analysis/costs `line_points`; `pipeline_run` checks every other argument): the second run's first
step writes every middle action again from the first's records and records none, its micro-batch 0 and special last
ones still run (they make its own buffers).

A run read for its time alone (`time_only`: the line's second point, whose ledgers no one reads) runs none of them.
A first step keeps its own records of what it ran whatever (`Records.kept`, by pipeline rank): each special action
(its micro-batch 0's, its special last one's) and each stage's step end (`STEP_END`: ZeroEngine.reduce, then
finish: the reductions, checks, optimizer steps and refresh), whose calls and events depend on the shapes alone, as
an action's do. Carried to the run of the same job but M, they and the middle records write its step whole
(`written`): every action again, each stage's `reduce` from the handle its last backward returned and its `finish`
from the handle that reduce returned, every call of the step's end labelled micro-batch M − 1, as the run labels
them. No buffer is made, so nothing a run's ledgers or losses hold is read of it; where any record is missing or
names a call outside its action, the step runs as above. tests/test_pipeline_repeat.py holds such a step's log,
closed forms, groups, bytes and timeline to the run of every action, for every schedule, ZeRO stage 1 and 3, TP 1
and 2, and CP 2 and 4.

Where it applies (`applies`): a cluster without values (the meta backend), a trace of calls (granularity "call"),
ledgers without a timeline (their events carry names and positions). Every other run runs every action.
tests/test_pipeline_repeat.py compares the two event by event, peak by peak and on the timeline, for every schedule,
ZeRO stage 1 and 3, TP 1 and 2, and CP 2 and 4 (its ring and its all-gather).
"""

from __future__ import annotations

import re

from zerosim.cluster import Handle, Recording

RUN, RECORD, REPLAY = "run", "record", "write again"
FIRST, LAST = "first", "last"  # a special action's micro-batch: 0, or the last where it differs (`special`)
STEP_END = ("reduce", "finish")  # the parts of a stage's step end (ZeroEngine.reduce, ZeroEngine.finish)
_NUMBER = re.compile(r"\d+")


def applies(cluster) -> bool:
    """Whether `cluster`'s actions may be written again (see the module docstring)."""
    trace = cluster.trace
    return (not cluster.backend.holds_values and trace.granularity == "call" and not trace.keep_values
            and not any(r.ledger.keep_timeline for r in cluster.ranks))


def make_of(part, layout) -> tuple:
    """What makes one pipeline rank's actions alike another's: its units by kind and name but for their numbers,
    their sizes, whether it holds the first or the last stage, and its data-parallel `layout`'s sizes."""
    units = tuple((type(u).__name__, _NUMBER.sub("#", u.name), b - a)
                  for u, (a, b) in zip(part.layers, (part.layer_window(i) for i in range(len(part.layers)))))
    return units, part.first, part.last, layout.padded, layout.shard_size


def plan(order, makes: list, pp: int, micro_batches: int, special, held=()) -> dict:
    """{action: RUN, RECORD or REPLAY} for the actions in the engine's `order`, rank r's actions alike another's
    where `makes[r]` are equal; `special(r, k)`: whether micro-batch k runs on rank r whatever (the module
    docstring); `held`: the keys recorded already (by an earlier run of the same job: `Records`' `carried`)."""
    forced = set()  # (stage, micro) whose forward must run: a backward of theirs would find no record
    while True:
        out, recorded, again, missing = {}, set(held), set(), None
        for a in order:
            key, mine = (makes[a.rank], a.stage // pp, a.kind), (a.stage, a.micro)
            if a.micro == 0 or special(a.rank, a.micro):
                out[a] = RUN
            elif a.kind == "forward":
                out[a] = REPLAY if key in recorded and mine not in forced else RECORD if key not in recorded else RUN
                if out[a] == REPLAY:
                    again.add(mine)
            elif mine in again:
                out[a] = REPLAY
                if key not in recorded:
                    missing = mine
                    break
            else:
                out[a] = RUN if key in recorded else RECORD
            if out[a] == RECORD:
                recorded.add(key)
        if missing is None:
            return out
        forced.add(missing)


def _numbered(makes) -> list:
    """Each rank's make as a small number, equal where the makes are equal: a make (every unit of the rank) is hashed
    once here, not in every action's key (a 64-micro-batch step's ~6,000 actions)."""
    seen = {}
    return [seen.setdefault(m, len(seen)) for m in makes]


class Records:
    """One step's records by (make, chunk, kind), and the plan of which action runs, records or is written again.

    `carried`: the Records of an earlier run of the same job but for its micro-batches a step (another M: the
    planner's two steps on a pipeline's line, analysis/costs `line_points`), after its first step; where its ranks'
    makes are these, its records stand for this run's first step, whose middle actions are then all written again
    (none recorded anew). A record is made of shapes alone (the module docstring), and a middle action does not
    depend on M (the table runs it between the same neighbours); micro-batch 0 and the special last ones run here
    as ever, making this run's own buffers. Later steps record their own."""

    def __init__(self, on: bool, order=(), makes=(), pp: int = 1, micro_batches: int = 1, special=None,
                 carried: "Records | None" = None, time_only: bool = False):
        self.on, self.order, self.micro_batches, self.special = on, tuple(order), micro_batches, special
        self.raw, self.makes, self.pp = tuple(makes), _numbered(makes), pp
        same = on and carried is not None and carried.on and carried.raw == self.raw and carried.pp == pp \
            and carried.steps == 1
        self.carried = dict(carried.held) if same else {}
        # each rank's own records, by rank: its special actions' (micro-batch 0's, the special last one's) and its
        # step's end (`end`), kept by a first step that runs them, for a run read for its time alone (`time_only`)
        self.carried_kept = dict(carried.kept) if same else {}
        self.time_only, self.written = time_only, False
        self.steps, self.held, self.kept, self.plan, self._own = 0, {}, {}, {}, None

    def clear(self) -> None:
        """A step begins: its records (the carried ones for the first step) and its plan (the one with nothing
        recorded yet made once). A first step read for its time alone (`time_only`) whose carried records hold every
        action's and every rank's step end writes them all again (`written`): none runs."""
        self.held, self.carried = self.carried, {}
        kept, self.carried_kept, self.kept = self.carried_kept, {}, {}
        self.steps += 1
        self.written = False
        if not self.on:
            return
        if self.time_only and self.steps == 1 and self._complete(kept):
            self.kept, self.written = kept, True
            self.plan = dict.fromkeys(self.order, REPLAY)
            return
        if self.held:
            self.plan = plan(self.order, self.makes, self.pp, self.micro_batches, self.special, tuple(self.held))
            return
        if self._own is None:
            self._own = plan(self.order, self.makes, self.pp, self.micro_batches, self.special)
        self.plan = self._own

    def _role(self, a) -> str | None:
        """FIRST for micro-batch 0's action, LAST for the special last one's (`special`), else None (a middle one)."""
        return FIRST if a.micro == 0 else LAST if self.special(a.rank, a.micro) else None

    def _kept_key(self, a) -> tuple:
        return a.rank, a.stage // self.pp, a.kind, self._role(a)

    def _complete(self, kept: dict) -> bool:
        """Whether `kept` and the records held write this step whole: every action's record, usable, and each pipeline
        rank's step end (`end`)."""
        if not kept:
            return False
        for a in self.order:
            rec = kept.get(self._kept_key(a)) if self._role(a) is not None else self.held.get(self.key(a))
            if rec is None or not rec.usable:
                return False
        return all(kept.get((part, r)) is not None and kept[(part, r)].usable for r in range(self.pp)
                   for part in STEP_END)

    def end(self, part: str, r: int, trace, ranks, names: tuple, waited: Handle):
        """A `Recording` to run pipeline rank r's step's end `part` ("reduce", "finish") inside, where a first step
        keeps its own records; else None."""
        if not self.on or self.steps != 1 or self.written:
            return None
        rec = self.kept[(part, r)] = Recording(trace, ranks, names, waited)
        return rec

    def ended(self, part: str, r: int):
        """The record pipeline rank r's step's end `part` is written from (`written`)."""
        return self.kept[(part, r)]

    def what(self, a) -> str:
        return self.plan.get(a, RUN)

    def key(self, a) -> tuple:
        return self.makes[a.rank], a.stage // self.pp, a.kind

    def record(self, a, trace, ranks, names: tuple, waited: Handle):
        """A `Recording` to run action `a` inside, where the plan records it, or where a first step keeps a special
        action's own (`kept`); else None."""
        if self.what(a) == RECORD:
            rec = self.held[self.key(a)] = Recording(trace, ranks, names, waited)
            return rec
        if self.on and self.steps == 1 and not self.written and self._role(a) is not None:
            rec = self.kept[self._kept_key(a)] = Recording(trace, ranks, names, waited)
            return rec
        return None

    def find(self, a):
        """The record action `a` is written from (the plan says it is)."""
        rec = self.kept.get(self._kept_key(a)) if self.written and self._role(a) is not None else \
            self.held.get(self.key(a))
        if rec is None or not rec.usable:
            raise RuntimeError(f"{a}: planned to be written again, but its record "
                               f"{'is missing' if rec is None else 'names calls outside its action'}")
        return rec
