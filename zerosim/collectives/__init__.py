"""Ring reduce-scatter / all-gather / all-reduce / broadcast in NCCL's order, with naive twins.

The functions take a `Cluster` first; `Cluster` exposes the same functions as methods.
"""

from zerosim.collectives.naive import naive_all_gather, naive_all_reduce, naive_reduce, naive_reduce_scatter
from zerosim.collectives.ops import OPS, ReduceOp, get_op
from zerosim.collectives.ring import all_gather, all_reduce, broadcast, reduce_scatter
from zerosim.collectives.shards import ShardLayout

__all__ = [
    "OPS", "ReduceOp", "ShardLayout", "all_gather", "all_reduce", "broadcast", "get_op",
    "naive_all_gather", "naive_all_reduce", "naive_reduce", "naive_reduce_scatter", "reduce_scatter",
]
