"""The four ZeRO stages as plans: what each shards, and what it gathers, reduces and refreshes.

Letters: P parameters, N ranks, s = ceil(P/N) elements per shard, Ψ = N*s the padded flat length,
K = optimizer-state bytes per parameter (Adam with an fp32 master: 4 + 8 = 12).

    stage   shards               per unit in forward/backward        after backward     after the update
    0       nothing              -                                   all-reduce grads   -
    1       optimizer state      -                                   reduce-scatter     all-gather params
    2       + gradients          reduce-scatter the unit's grads     -                  all-gather params
    3       + parameters         gather the unit's params before     -                  -
                                 each use, free after; reduce-scatter
                                 its grads after backward

Per-rank resting bytes follow (seed 001's table; the ledger measures them, tests compare):

    stage 0   2Ψ params + 2Ψ grads + (4 + K)Ψ master & state        16Ψ for Adam
    stage 1   2Ψ params + 2Ψ grads + (4 + K)s                        4Ψ + 12Ψ/N
    stage 2   2Ψ params + 2s grads + (4 + K)s                        2Ψ + 14Ψ/N
    stage 3   2s params + 2s grads + (4 + K)s                        16Ψ/N

Rank r owns flat elements [r*s, (r+1)*s) at every stage (flat.py); a unit (one model layer) may
straddle shards, so its per-unit collectives move window ∩ shard_r for each rank r.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Plan:
    """One stage: which of the model states it shards (each implies the ones before it)."""

    stage: int
    shards_optimizer: bool  # each rank keeps master and optimizer state for its shard only
    shards_grads: bool  # each rank keeps gradients for its shard only: reduce-scatter per unit in backward
    shards_params: bool  # each rank keeps 16-bit params for its shard only: gather a unit before each use

    def final_reduction(self, elementwise_optimizer: bool = True) -> str | None:
        """The gradient collective at the end of backward: "all_reduce", "reduce_scatter", or None
        (stages 2/3 reduced unit by unit already). A matrix optimizer (Muon) at stage 1 needs whole
        reduced matrices on every rank, so it all-reduces (zero/update.py)."""
        if self.shards_grads:
            return None
        if not self.shards_optimizer or not elementwise_optimizer:
            return "all_reduce"
        return "reduce_scatter"

    @property
    def refreshes_params(self) -> bool:
        """Stages 1/2: every rank updated only its shard, so the new 16-bit params are all-gathered."""
        return self.shards_optimizer and not self.shards_params


PLANS = {
    0: Plan(0, shards_optimizer=False, shards_grads=False, shards_params=False),  # plain data parallel
    1: Plan(1, shards_optimizer=True, shards_grads=False, shards_params=False),  # P_os
    2: Plan(2, shards_optimizer=True, shards_grads=True, shards_params=False),  # P_os+g
    3: Plan(3, shards_optimizer=True, shards_grads=True, shards_params=True),  # P_os+g+p
}
