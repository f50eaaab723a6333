"""The four ZeRO stages as plans: which buffers a rank holds whole or sharded, and which collective runs when.

Letters: P parameters, N ranks, s the shard (ceil(P/N) with the flat layout; Σ c_p with the per-parameter
ones: partition.py), Ψ = N*s the padded length, K = optimizer-state bytes per parameter (Adam: 8).

    stage  held as shards     each use of a unit    as backward ends a unit   end of backward   after the update
    0      -                   -                     -                         all-reduce        -
    1      master, optimizer   -                     -                         reduce-scatter    all-gather params
    2      + grads             -                     reduce-scatter its grads  -                 all-gather params
    3      + params            gather it, then free  reduce-scatter its grads  -                 -

Whatever a rank does not hold as a shard it holds whole (Ψ elements). `sizes` turns a plan and a layout
into every buffer's length — the one place the engine, its memory guard, the checkpoint code and
`zerosim.costs` read them from — so per-rank resting bytes follow (seed 001's table; the ledgers measure
them and the tests compare):

    stage 0   2Ψ params + 2Ψ grads + (4 + K)Ψ master & state        16Ψ for Adam
    stage 1   2Ψ params + 2Ψ grads + (4 + K)s                        4Ψ + 12Ψ/N
    stage 2   2Ψ params + 2s grads + (4 + K)s                        2Ψ + 14Ψ/N
    stage 3   2s params + 2s grads + (4 + K)s                        16Ψ/N

Stage numbers appear here and nowhere else in the engine: the rest of zero/ asks a plan what it shards.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

BUFFERS = ("params", "grads", "master", "optimizer")  # a rank's model states: 16-bit params, grads, fp32 master, state


@dataclass(frozen=True)
class Plan:
    """One stage: which model states each rank holds as a 1/N shard, and when it communicates."""

    stage: int
    sharded: tuple  # the BUFFERS each rank holds a shard of; the others it holds whole
    end_of_backward: str | None  # the gradients' collective when backward is done: "all_reduce", "reduce_scatter",
    #                              or None: reduce-scattered unit by unit as backward makes them
    refresh_after_update: bool  # all-gather the updated 16-bit shards so every rank holds the whole model again

    def shards(self, buffer: str) -> bool:
        """True when each rank holds only its shard of `buffer` (one of BUFFERS)."""
        if buffer in self.sharded:
            return True
        if buffer not in BUFFERS:
            raise ValueError(f"unknown buffer {buffer!r}; a rank's model states are {BUFFERS}")
        return False

    @functools.cached_property  # asked for every rank and layer: answered once (a frozen dataclass keeps a __dict__)
    def gathers_params(self) -> bool:
        """Stage 3: a unit's params are all-gathered before each use and freed after it."""
        return self.shards("params")

    @property
    def reduces_per_unit(self) -> bool:
        """Stages 2/3: a unit's gradients are reduce-scattered as soon as backward has made them."""
        return self.end_of_backward is None

    def end_reduction(self, elementwise_optimizer: bool = True) -> str | None:
        """The collective at the end of backward. A matrix optimizer (Muon) needs whole reduced matrices on every
        rank, so where the plan would reduce-scatter it all-reduces (zero/update.py)."""
        if self.end_of_backward == "reduce_scatter" and not elementwise_optimizer:
            return "all_reduce"
        return self.end_of_backward

    def sizes(self, whole, shard) -> dict:
        """{buffer: elements one rank holds}: `shard` for a sharded buffer, `whole` otherwise ("master" and
        "optimizer" cover the region the rank updates). Numbers of any kind: a layout's Ψ and s, or a formula's."""
        return {b: shard if self.shards(b) else whole for b in BUFFERS}

    def region(self, layout, rank: int) -> slice:
        """The part of the padded flat buffer `rank` updates (its master and optimizer state): its shard, or all."""
        return layout.own(rank) if self.shards("master") else slice(0, layout.padded)


PLANS = {
    0: Plan(0, (), "all_reduce", False),  # plain data parallel
    1: Plan(1, ("master", "optimizer"), "reduce_scatter", True),  # P_os
    2: Plan(2, ("grads", "master", "optimizer"), None, True),  # P_os+g
    3: Plan(3, ("params", "grads", "master", "optimizer"), None, False),  # P_os+g+p
}


def get_plan(stage) -> Plan:
    """The plan of ZeRO `stage` (0-3), or a ValueError naming the stages there are."""
    if type(stage) is not int or stage not in PLANS:
        raise ValueError(f"ZeRO stage must be one of {sorted(PLANS)}, got {stage!r}")
    return PLANS[stage]


def buffer_sizes(plan: Plan, layout) -> dict:
    """{buffer: elements} one rank of `plan` holds on `layout`: Ψ whole or s sharded."""
    return plan.sizes(layout.padded, layout.shard_size)
