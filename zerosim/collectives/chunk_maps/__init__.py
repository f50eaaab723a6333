"""Other libraries' all-reduce orders: which elements each ring step reduces in NCCL's own all-reduce (its aligned
per-loop chunks, one channel) and in gloo's ring (torch's ProcessGroupGloo on CPU). The engine runs them where a
recipe names them (`allreduce="nccl"` / `"gloo"`); the simulator's own ring (one chunk per rank) is the default.

    _nccl.py   NcclLoop, nccl_ring_allreduce_chunks, nccl_all_reduce: NCCL's runRing loops (src/device/all_reduce.h)
    _gloo.py   GlooRing, gloo_ring, gloo_all_reduce, gloo_reduce_scatter: gloo's segments, its order, its AVG
    _tree.py   tree_all_reduce (a binary tree's order), its pipelined time and where it beats the ring (seed 001)
"""

from zerosim._lazy import lazy_face, names_of

# each name of the face and the module that defines it, imported the first time it is asked for (zerosim/_lazy.py)
_NAMES = {
    "._gloo": ("GLOO_MAX_SEGMENT_BYTES", "GlooRing", "gloo_all_reduce", "gloo_reduce_scatter", "gloo_ring"),
    "._nccl": ("NCCL_SIMPLE_CHUNK_BYTES", "NcclLoop", "nccl_all_reduce", "nccl_ring_allreduce_chunks"),
    "._tree": ("ring_tree_crossover", "tree_all_reduce", "tree_all_reduce_time", "tree_levels"),
}
__getattr__, __dir__ = lazy_face(__name__, _NAMES)

__all__ = sorted(names_of(_NAMES))
