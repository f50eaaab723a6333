"""Other libraries' all-reduce orders: which elements each ring step reduces in NCCL's own all-reduce (its aligned
per-loop chunks, one channel) and in gloo's ring (torch's ProcessGroupGloo on CPU). The engine runs them where a
recipe names them (`allreduce="nccl"` / `"gloo"`); the simulator's own ring (one chunk per rank) is the default.

    _nccl.py   NcclLoop, nccl_ring_allreduce_chunks, nccl_all_reduce: NCCL's runRing loops (src/device/all_reduce.h)
    _gloo.py   GlooRing, gloo_ring, gloo_all_reduce, gloo_reduce_scatter: gloo's segments, its order, its AVG
    _tree.py   tree_all_reduce (a binary tree's order), its pipelined time and where it beats the ring (seed 001)
"""

from zerosim.collectives.chunk_maps._gloo import (
                                                  GLOO_MAX_SEGMENT_BYTES,
                                                  GlooRing,
                                                  gloo_all_reduce,
                                                  gloo_reduce_scatter,
                                                  gloo_ring,
)
from zerosim.collectives.chunk_maps._nccl import (
                                                  NCCL_SIMPLE_CHUNK_BYTES,
                                                  NcclLoop,
                                                  nccl_all_reduce,
                                                  nccl_ring_allreduce_chunks,
)
from zerosim.collectives.chunk_maps._tree import ring_tree_crossover, tree_all_reduce, tree_all_reduce_time, tree_levels

__all__ = ["GLOO_MAX_SEGMENT_BYTES", "GlooRing", "NCCL_SIMPLE_CHUNK_BYTES", "NcclLoop", "gloo_all_reduce",
           "gloo_reduce_scatter", "gloo_ring", "nccl_all_reduce", "nccl_ring_allreduce_chunks", "ring_tree_crossover",
           "tree_all_reduce", "tree_all_reduce_time", "tree_levels"]
