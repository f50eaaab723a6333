"""How a sharded buffer is cut: one flat buffer in N equal shards (a parameter may straddle two), or per-parameter
chunks as DeepSpeed ZeRO-3 and FSDP2 cut them. The shard arithmetic itself is `zerosim.collectives.ShardLayout`'s.

    _flat.py        FlatLayout: P parameters in layer order, padded to N*s
    _partition.py   ParamLayout: per-parameter partitions (DeepSpeed's flat-per-tensor, FSDP2's dim-0 rows)
    _choose.py      layout_for: which layout a recipe shards by; a saved layout read back; owned_slices: every
                    rank's part of a range, as slices of its shard, found once
"""

from zerosim._lazy import lazy_face, names_of

# each name of the face and the module that defines it, imported the first time it is asked for (zerosim/_lazy.py)
_NAMES = {
    "._choose": ("from_description", "layout_for", "owned_slices"),
    "._flat": ("FlatLayout",),
    "._partition": ("ParamLayout",),
}
__getattr__, __dir__ = lazy_face(__name__, _NAMES)

__all__ = sorted(names_of(_NAMES))
