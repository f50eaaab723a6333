"""Muon's ways of sharding as plans: who gathers each whole matrix, who orthogonalises it, who receives the result.

Under ZeRO stages 1-3 (and FSDP2, HSDP, MiCS, hpZ: stage 3 with groups) each rank holds a shard of the reduced
gradient and of Muon's momentum B. Momentum and Nesterov input are elementwise, so every rank forms them on its shard
(U = G + mu*B, Moonshot's g'); only Newton-Schulz needs whole matrices. A plan says how U's pieces become whole
matrices and how the update's pieces come back. Letters: N ranks of a shard group, M a Muon matrix of n elements,
c_M(p) the elements of M rank p holds (its piece; Σ_p c_M(p) = n, or N·ceil(n/N) with per-parameter padding),
S(M) the ranks whose piece of M is not empty, o(M) its owner.

    plan          input reaches           computes      update reaches            follows
    gather        every rank (all-gather  every rank,   - (each keeps its slice)  the naive twin: redundant NS N-fold
                  of M, M by M)           every M
    owner         o(M) (all-to-all, a     o(M)          the holders of M's        torchtitan DistMuon (Owned, LPT over
                  bucket's matrices)                    pieces (all-to-all back)  NS FLOPs, buckets of whole units)
    round_robin   o(M) (all-to-all, N     o(M) = i mod  every rank (all-gather    KellerJordan/Muon muon.py (matrices
                  matrices a block)       N, by size    of whole updates)         sorted by size); DeepSpeed ZeRO-3
    distributed   every rank of S(M)      every rank    - (each keeps its slice)  Moonshot's Distributed Muon over
                  (all-to-all among S(M)) of S(M)                                 ZeRO-1's flat shards

Sources (read for these rows): torchtitan b5bcd76 torchtitan/distributed/flex_shard/dist_muon.py
(`_assign_balanced_owner_ranks`, `_balance_loads_across_partitions`, `_estimate_muon_compute_cost`,
`_prepare_muon_input`: momentum and Nesterov input on the storage shard, then the packed all-to-all to the owner,
`_execute_packed_all_to_all` in _optimizer_reshard_runtime.py, and mirrored routes back); KellerJordan/Muon 857d1ad
muon.py (`Muon.step`: params sorted by size, rank r steps params[base_i + r], then `dist.all_gather` of the
updated params in blocks of world size); DeepSpeed 0.19.5 runtime/zero/stage3.py `_apply_distributed_muon_update`
(ZeRO-3: the same round robin within each gradient bucket, the updates and momenta all-gathered) and
stage_1_and_2.py `get_flat_partition` (ZeRO-1/2: every rank whose partition touches a matrix runs muon_update on
the whole matrix, whose reduced gradient it was given whole: stage_1_and_2.py, `muon_copy_ranks`); "Muon is
Scalable" (arXiv 2502.16982) Algorithm 1: reduce-scatter G, momentum on the partition, "DP Gather" of g' into the
full matrix, Newton-Schulz, keep the local partition of the update, all-gather P.

Where zerosim's plan differs from the code it follows, the docs page (docs/muon.md) says how.
"""

from __future__ import annotations


from zerosim._dataclass import dataclass
from zerosim.optim import SHARDINGS


@dataclass(frozen=True)
class MuonPlan:
    """One way of bringing Muon's matrices together on sharded state (see the module docstring's table)."""

    name: str
    computes: str  # who runs Newton-Schulz on M: "every rank", "owner" o(M), "sharers" S(M)
    to_compute: str  # how U's pieces get there: "all_gather" (every rank), "all_to_all_v" (to the computing ranks)
    back: str | None  # how the update's pieces reach the holders: None (each computed its own), "all_to_all_v"
    #                   (the owner sends each holder its piece), "all_gather" (every rank receives whole updates)
    owners: str | None  # the assignment M -> o(M): "balanced" (LPT over NS FLOPs), "round_robin", None
    buckets: str  # what one collective carries: "matrix", "unit" (a model unit's matrices), "units of >= N matrices",
    #               "block" (N matrices in KellerJordan's muon.py order)
    layouts: tuple  # the layouts' partitions it applies to (GradientRecipe.partition)
    follows: str  # whose code it is, release and file

    def check(self, partition: str, stage_label: str) -> None:
        """A ValueError naming why, if this plan does not apply to shards cut as `partition`."""
        if partition not in self.layouts:
            raise ValueError(f"Muon sharding {self.name!r} runs on {' or '.join(self.layouts)} shards; "
                             f"{stage_label} here cuts them {partition!r}: "
                             + ("Moonshot's Distributed Muon gathers each matrix among the ranks whose flat shard "
                                "touches it, and per-parameter shards put a piece of every matrix on every rank "
                                "(that is sharding='gather')" if self.name == "distributed" else ""))


ALL_LAYOUTS = ("flat", "per-parameter", "per-parameter dim 0")

MUON_PLANS = {
    p.name: p
    for p in (
        MuonPlan("gather", "every rank", "all_gather", None, None, "matrix", ALL_LAYOUTS,
                 "the naive twin: every rank gathers and orthogonalises every matrix"),
        MuonPlan("owner", "owner", "all_to_all_v", "all_to_all_v", "balanced", "units of >= N matrices", ALL_LAYOUTS,
                 "torchtitan b5bcd76 flex_shard/dist_muon.py DistMuon (Owned compute layout)"),
        MuonPlan("round_robin", "owner", "all_to_all_v", "all_gather", "round_robin", "block", ALL_LAYOUTS,
                 "KellerJordan/Muon 857d1ad muon.py Muon.step; DeepSpeed 0.19.5 stage3.py "
                 "_apply_distributed_muon_update"),
        MuonPlan("distributed", "sharers", "all_to_all_v", None, None, "unit", ("flat",),
                 "Moonshot, Muon is Scalable (arXiv 2502.16982) Algorithm 1, Distributed Muon over ZeRO-1"),
    )
}
assert tuple(MUON_PLANS) == SHARDINGS, "optim.SHARDINGS names the plans: keep the two lists equal"


def check_matrix_optimizer(optimizer, plan, recipe) -> None:
    """Before anything is allocated: a Muon whose sharding does not apply to how `plan` and `recipe` cut the shards
    is refused, naming why (elementwise optimizers and unsharded state pass)."""
    if optimizer.elementwise:
        return
    if not plan.shards("optimizer"):  # whole matrices on every rank: no way of sharding applies, so none is taken
        if getattr(optimizer, "sharding", "gather") != "gather":
            raise ValueError(f"sharding={optimizer.sharding!r} (--muon-sharding) says how ZeRO stages 1-3 bring a "
                             f"sharded matrix together; at stage {plan.stage} every rank holds whole matrices, so it "
                             "would change nothing: drop it, or run stage 1, 2 or 3")
        return
    get_muon_plan(optimizer.sharding).check(recipe.partition, plan.label)


def get_muon_plan(name: str) -> MuonPlan:
    """The plan called `name` (one of MUON_PLANS), or a ValueError naming them."""
    if name not in MUON_PLANS:
        raise ValueError(f"unknown Muon sharding {name!r}; choose one of {tuple(MUON_PLANS)}")
    return MUON_PLANS[name]
