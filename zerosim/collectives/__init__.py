"""Ring reduce-scatter / all-gather / all-reduce / broadcast in NCCL's order, with naive twins;
NCCL's own all-reduce chunk map; the frameworks' divide factors.

The functions take a `Cluster` first; `Cluster` exposes the same functions as methods.
"""

from zerosim.collectives.divide_factors import FSDP2DivideFactors, fsdp2_divide_factors, torch_scalar_div, torch_scalar_mul
from zerosim.collectives.naive import naive_all_gather, naive_all_reduce, naive_reduce, naive_reduce_scatter
from zerosim.collectives.nccl_allreduce import NcclLoop, nccl_all_reduce, nccl_ring_allreduce_chunks
from zerosim.collectives.ops import OPS, ReduceOp, get_op
from zerosim.collectives.ring import all_gather, all_reduce, broadcast, reduce_scatter
from zerosim.collectives.shards import ShardLayout

__all__ = [
    "FSDP2DivideFactors", "NcclLoop", "OPS", "ReduceOp", "ShardLayout", "all_gather", "all_reduce", "broadcast",
    "fsdp2_divide_factors", "get_op", "naive_all_gather", "naive_all_reduce", "naive_reduce", "naive_reduce_scatter",
    "nccl_all_reduce", "nccl_ring_allreduce_chunks", "reduce_scatter", "torch_scalar_div", "torch_scalar_mul",
]
