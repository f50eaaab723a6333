"""A pipeline schedule as data: a table of actions, what each waits for, and what the table says by itself.

Letters: P pipeline ranks (the `pp` degree), V virtual stages per rank, S = P·V stages, M micro-batches per step.
Stage j (0..S-1, torch's `stage_index`) sits on rank j mod P and is that rank's chunk j // P (torch 2.13,
distributed/pipelining/_utils.py `generate_stage_to_rank_mapping(style="loop")`; Megatron-Core core_v0.19.0
transformer_block.py `get_num_layers_to_build`: "Stage 0: [0, 1] [4, 5] / Stage 1: [2, 3] [6, 7]").

    Action(rank, slot, kind, micro, stage)     one row: rank `rank` does `kind` on micro-batch `micro` of stage
                                               `stage` at time step `slot` (torch's `pipeline_order` position,
                                               idle steps counted)
    kind                                       "forward", "backward" (torch's F, B), or the zero-bubble split
                                               "backward-input" (I: the input's gradient, handed down the pipe)
                                               and "backward-weight" (W: the weights' gradient, kept on the rank)
    Table(name, pp, micro_batches, virtual, actions)

What an action waits for (`needs`): a forward, the same micro-batch's forward on the stage before; the first
backward of a micro-batch on the last stage, its own forward (the loss sits on the last stage); a backward (or
backward-input) elsewhere, the one on the stage after; a backward-weight, its own backward-input. A table must list
each (stage, micro-batch) forward and backward once, and each stage's backwards in micro-batch order (every torch
schedule does: `_step_microbatches` and `_get_1f1b_rank_ops` count `bwd_mb_index` up), so gradients accumulate in
the order a run without pipelining accumulates them (docs: parallel/pipeline's face).

`order()` is the order the engine runs the actions in: time step by time step, rank by rank, an action whose
input is not made yet waiting for it (torch's runtime waits on its receive the same way), so a table whose rows
are out of step still runs; one that can never finish is refused.
"""

from __future__ import annotations

import functools
from zerosim._dataclass import dataclass

FORWARD, BACKWARD, INPUT, WEIGHT = "forward", "backward", "backward-input", "backward-weight"
ACTION_KINDS = KINDS = (FORWARD, BACKWARD, INPUT, WEIGHT)
TORCH_LETTER = {FORWARD: "F", BACKWARD: "B", INPUT: "I", WEIGHT: "W"}  # torch's _ComputationType values


@dataclass(frozen=True, order=True)
class Action:
    """One row of a schedule's table (see the module docstring)."""

    rank: int  # the pipeline rank that runs it (its position in the pp group)
    slot: int  # the time step it sits at in torch's pipeline_order (idle steps counted)
    kind: str  # one of KINDS
    micro: int  # the micro-batch, 0..M-1
    stage: int  # the (virtual) stage, 0..S-1: rank = stage mod P, chunk = stage // P

    @property
    def key(self) -> tuple:
        """(stage, kind, micro): what the action is, whoever runs it and whenever."""
        return self.stage, self.kind, self.micro

    def __str__(self) -> str:  # torch's _Action repr: "2F0" is stage 2's forward of micro-batch 0
        return f"{self.stage}{TORCH_LETTER[self.kind]}{self.micro}"


@dataclass(frozen=True)
class Table:
    """A schedule's actions for P ranks, M micro-batches, V virtual stages per rank; checked whole (see `check`)."""

    name: str
    pp: int  # P
    micro_batches: int  # M
    virtual: int  # V
    actions: tuple  # (Action, ...) in (rank, slot) order

    def __post_init__(self):
        object.__setattr__(self, "actions", tuple(sorted(self.actions, key=lambda a: (a.rank, a.slot))))
        self.check()

    @property
    def stages(self) -> int:
        """S = P·V: every stage of the model."""
        return self.pp * self.virtual

    @functools.cached_property  # asked for every action `order` waits on: read once
    def splits_backward(self) -> bool:
        """Whether the backward comes as backward-input and backward-weight (a zero-bubble table)."""
        return any(a.kind == INPUT for a in self.actions)

    def of_rank(self, rank: int) -> tuple:
        """Rank `rank`'s actions in its own order."""
        return tuple(a for a in self.actions if a.rank == rank)

    def rank_of(self, stage: int) -> int:
        return stage % self.pp

    def is_first(self, j: int) -> bool:
        """Whether stage j is the first (it reads the micro-batch)."""
        return j == 0

    def is_last(self, j: int) -> bool:
        """Whether stage j is the last (it runs the loss)."""
        return j == self.stages - 1

    def needs(self, action: Action) -> tuple:
        """The keys (stage, kind, micro) of the actions `action` waits for (see the module docstring)."""
        j, k = action.stage, action.micro
        back = INPUT if self.splits_backward else BACKWARD
        if action.kind == FORWARD:
            return ((j - 1, FORWARD, k),) if j > 0 else ()
        if action.kind == WEIGHT:
            return ((j, INPUT, k),)
        return ((j, FORWARD, k),) + (((j + 1, back, k),) if j < self.stages - 1 else ())

    def check(self) -> None:
        """Refuse a table that is not a schedule: a row on the wrong rank or outside the stages and micro-batches, an
        action missing or twice, two rows in one time step of a rank, or a stage's backwards out of micro-batch
        order."""
        S, M = self.stages, self.micro_batches
        seen, slots = set(), set()
        for a in self.actions:
            where = a.stage in range(S) and a.micro in range(M) and a.rank == self.rank_of(a.stage)
            if a.kind not in KINDS or not where:
                raise ValueError(f"{self.name}: row {a!r} is not an action of stage 0..{S - 1} on its rank "
                                 f"(stage mod {self.pp}) for micro-batch 0..{M - 1}")
            if a.key in seen or (a.rank, a.slot) in slots:
                raise ValueError(f"{self.name}: {a} is listed twice, or shares rank {a.rank}'s time step {a.slot}")
            seen.add(a.key)
            slots.add((a.rank, a.slot))
        kinds = (FORWARD, INPUT, WEIGHT) if self.splits_backward else (FORWARD, BACKWARD)
        missing = [f"{j}{TORCH_LETTER[k]}{m}" for j in range(S) for k in kinds for m in range(M)
                   if (j, k, m) not in seen]
        if missing or len(seen) != S * M * len(kinds):
            raise ValueError(f"{self.name}: every stage runs every micro-batch's {', '.join(kinds)} once; missing "
                             f"{', '.join(missing[:6])}{' ...' if len(missing) > 6 else ''}")
        for j in range(S):
            for kind in kinds[1:]:
                micros = [a.micro for a in self.of_rank(self.rank_of(j)) if a.stage == j and a.kind == kind]
                if micros != sorted(micros):
                    raise ValueError(f"{self.name}: stage {j}'s {kind} runs micro-batches {micros}; gradients "
                                     "accumulate in micro-batch order (as every torch schedule runs them)")

    @functools.cached_property
    def _order(self) -> tuple:
        return self._walk()

    def order(self) -> tuple:
        """The actions in the order the engine runs them (see `_walk`): made once a table."""
        return self._order

    def _walk(self) -> tuple:
        """The actions in the order the engine runs them: time step by time step, rank by rank, each rank's own
        order kept and an action waiting until what it needs is done (see the module docstring)."""
        queues = [list(self.of_rank(r)) for r in range(self.pp)]
        done, out = set(), []
        while any(queues):
            ran = []
            for q in queues:
                if q and all(n in done for n in self.needs(q[0])):
                    ran.append(q.pop(0))
            if not ran:
                stuck = ", ".join(str(q[0]) for q in queues if q)
                raise ValueError(f"{self.name}: the table cannot finish: {stuck} each wait for an action that never "
                                 "runs before them")
            done.update(a.key for a in ran)
            out += ran
        return tuple(out)

    def backward_order(self, stage: int) -> tuple:
        """The micro-batches in the order stage `stage`'s weight gradients accumulate (its backwards, or its
        backward-weights): what the oracle follows."""
        kind = WEIGHT if self.splits_backward else BACKWARD
        return tuple(a.micro for a in self.of_rank(self.rank_of(stage)) if a.stage == stage and a.kind == kind)

    def in_flight(self, rank: int) -> int:
        """The most micro-batch chunks whose activations rank `rank` holds at once: forwards run and not yet
        backward (or, split, not yet backward-input: zerosim's backward-input frees them; see _memory.py)."""
        held = peak = 0
        for a in self.of_rank(rank):
            held += 1 if a.kind == FORWARD else -1 if a.kind in (BACKWARD, INPUT) else 0
            peak = max(peak, held)
        return peak

    def rows(self) -> list:
        """Each rank's time steps as torch prints them: one list per rank of "2F0" strings and "" for an idle
        step (torch's _format_pipeline_order, without its column of step numbers)."""
        out = []
        for r in range(self.pp):
            mine = {a.slot: str(a) for a in self.of_rank(r)}
            out.append([mine.get(t, "") for t in range(max(mine) + 1 if mine else 0)])
        return out
