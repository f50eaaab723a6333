"""Optimizers on flat shards, their state held in a rank's MemoryLedger.

    opt = get_optimizer("adam", lr=0.1)
    state = opt.init_state(rank.ledger, shard_size, prefix="layer0.")   # {name: Buffer}, kind optim:<name>
    opt.step(w_shard, g_shard, state, t)                                  # in place, t = 1, 2, ...

Elementwise optimizers (Adam, AdamW, SGD, Lion, Adan) give bitwise the same result on a whole
buffer as on any slicing of it, so ZeRO can shard them at every stage. Muon orthogonalises whole
matrices (`step_matrix`); under ZeRO 1-3 its momentum is sharded and the ranks bring each matrix together as
its `sharding` says (zerosim.parallel.data.muon). MuonAdamW is the reference's split (matrices on Muon, the rest
on AdamW).
"""

from zerosim.optim._adam import Adam, AdamW
from zerosim.optim._adan import Adan
from zerosim.optim._base import STEP_BLOCK, Optimizer, OptimizerRun, scalar, step_in_blocks
from zerosim.optim._by_matrix import step_by_matrix
from zerosim.optim._lion import Lion
from zerosim.optim._muon import AUX_NAMES, CUBIC, QUINTIC, SHARDINGS, Muon, MuonAdamW, newton_schulz
from zerosim.optim._sgd import SGD
from zerosim.optim._stored_state import check_stored, widened

OPTIMIZERS = {cls.name: cls for cls in (Adam, AdamW, SGD, Lion, Adan, Muon, MuonAdamW)}


def get_optimizer(name: str, **hyper) -> Optimizer:
    """Build optimizer `name` (one of OPTIMIZERS) with hyperparameters, e.g. get_optimizer("adam", lr=0.1)."""
    cls = OPTIMIZERS.get(name.lower() if isinstance(name, str) else name)
    if cls is None:
        raise ValueError(f"unknown optimizer {name!r}; known: {', '.join(OPTIMIZERS)}")
    known = tuple(cls.__dataclass_fields__)
    unknown = sorted(set(hyper) - set(known))
    if unknown:
        raise ValueError(f"{name} has no hyperparameter(s) {unknown}; it takes {list(known)}")
    return cls(**hyper)


__all__ = [
    "AUX_NAMES", "Adam", "AdamW", "Adan", "CUBIC", "Lion", "Muon", "MuonAdamW", "OPTIMIZERS", "Optimizer",
    "OptimizerRun", "QUINTIC",
    "SGD", "SHARDINGS",
    "STEP_BLOCK", "check_stored", "get_optimizer", "newton_schulz", "scalar", "step_by_matrix", "step_in_blocks",
    "widened",
]
