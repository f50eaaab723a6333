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

from zerosim._lazy import lazy_face, names_of

# each name of the face and the module that defines it, imported the first time it is asked for (zerosim/_lazy.py)
_NAMES = {
    "._adam": ("Adam", "AdamW"),
    "._adan": ("Adan",),
    "._base": ("STEP_BLOCK", "Optimizer", "OptimizerRun", "scalar", "step_in_blocks"),
    "._by_matrix": ("matrix_shape", "step_by_matrix"),
    "._lion": ("Lion",),
    "._muon": ("AUX_NAMES", "CUBIC", "QUINTIC", "SHARDINGS", "Muon", "MuonAdamW", "newton_schulz"),
    "._sgd": ("SGD",),
    "._stored_state": ("check_stored", "widened"),
}
_OPTIMIZERS = ("Adam", "AdamW", "SGD", "Lion", "Adan", "Muon", "MuonAdamW")  # OPTIMIZERS' classes, in its order
_name_of, __dir__ = lazy_face(__name__, _NAMES)


def __getattr__(name: str):
    """A name of the face on first use; OPTIMIZERS ({name: class}) imports every optimizer when first asked for."""
    if name == "OPTIMIZERS":
        value = globals()["OPTIMIZERS"] = {cls.name: cls for cls in map(_name_of, _OPTIMIZERS)}
        return value
    return _name_of(name)


def get_optimizer(name: str, **hyper):
    """Build optimizer `name` (one of OPTIMIZERS) with hyperparameters, e.g. get_optimizer("adam", lr=0.1)."""
    OPTIMIZERS = __getattr__("OPTIMIZERS")
    cls = OPTIMIZERS.get(name.lower()) if isinstance(name, str) else None  # a list or dict is no name (unhashable)
    if cls is None:
        raise ValueError(f"unknown optimizer {name!r}; known: {', '.join(OPTIMIZERS)}")
    known = tuple(cls.__dataclass_fields__)
    unknown = sorted(set(hyper) - set(known))
    if unknown:
        raise ValueError(f"{name} has no hyperparameter(s) {unknown}; it takes {list(known)}")
    return cls(**hyper)


__all__ = sorted(names_of(_NAMES) + ["OPTIMIZERS", "get_optimizer"])
