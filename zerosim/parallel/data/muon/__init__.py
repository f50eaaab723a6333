"""Muon under ZeRO stages 1-3, FSDP2 and the many-node strategies: its ways of sharding as plans.

    plan = get_muon_plan("owner")          # who gathers each matrix, who orthogonalises it, who receives the result
    ZeroEngine(model, cluster, 3, Muon(sharding="owner"), "bf16-mixed")

The optimizer's arithmetic is zerosim.optim's (Muon: momentum, Nesterov input, Newton-Schulz, the update); this
folder is its communication: who gathers what, who computes, who receives.

    _plans.py    MuonPlan and MUON_PLANS: gather-everywhere, owner-per-matrix (balanced / round robin), Moonshot's
                 Distributed Muon, each with the code it follows
    _owners.py   Newton-Schulz's FLOPs; torchtitan's balanced assignment (and its naive twin), KellerJordan's muon.py
                 round robin; the balance (busiest owner's FLOPs over the mean)
    _pieces.py   where each matrix lies on the shards: the piece every position holds
    _step.py     the sharded step: shards -> whole matrices -> Newton-Schulz -> slices back, every buffer in the ledger
    _bytes.py    hand formulas of the extra bytes each rank sends and holds per plan (the tests check the trace and
                 the ledgers against them)

docs/muon.md is the user's page.
"""

from zerosim._lazy import lazy_face, names_of

# each name of the face and the module that defines it, imported the first time it is asked for (zerosim/_lazy.py)
_NAMES = {
    "._bytes": ("extra_bytes_held", "extra_bytes_sent"),
    "._owners": (
        "balance", "balanced", "balanced_naive", "by_unit", "loads", "ns_flops", "round_robin", "units_of_at_least",
    ),
    "._pieces": ("Matrix", "aux_params", "muon_matrices"),
    "._plans": ("MUON_PLANS", "MuonPlan", "check_matrix_optimizer", "get_muon_plan"),
    "._step": ("muon_update",),
}
__getattr__, __dir__ = lazy_face(__name__, _NAMES)

__all__ = sorted(names_of(_NAMES))
