"""Ring reduce-scatter / all-gather / all-reduce / broadcast in NCCL's order, with naive twins;
NCCL's own all-reduce chunk map. Collectives know nothing about ZeRO.

    calls.py      reduce_scatter, all_gather, all_reduce: checks, a trace call, staging, a phase, the results
    ring.py       the ring's two phases hop by hop, in NCCL's order (reduce-scatter, all-gather)
    fast.py       their in-process twin: the same adds in the same order, no Python step per hop
    staging.py    inputs staged in the wire format; which phase moves the data; results with their handle
    broadcast.py  a chain from the root
    nccl_allreduce.py  NCCL's own all-reduce chunk map (runRing's loops)
    gloo.py       gloo's ring all-reduce (and ProcessGroupGloo's reduce-scatter): its segments, its order, its AVG
    naive.py      the naive twins: everything in one place, summed in the ring's order or in float64
    ops.py        reduction operators (sum, max, avg and its variants; a recipe's own ReduceOp)
    shards.py     shard arithmetic, in one place: padding to a multiple of N, each rank's [start, stop)
    checks.py     input checks every rank runs before any data moves

Every function takes the `Cluster` first (as torch.distributed's take a process group) and one array per
local rank, and returns one array per local rank in a list that carries `.handle`: the calls it recorded.
"""

from zerosim.collectives.naive import naive_all_gather, naive_all_reduce, naive_reduce, naive_reduce_scatter
from zerosim.collectives.nccl_allreduce import NcclLoop, nccl_all_reduce, nccl_ring_allreduce_chunks
from zerosim.collectives.gloo import GlooRing, gloo_all_reduce, gloo_reduce_scatter, gloo_ring
from zerosim.collectives.ops import OPS, ReduceOp, get_op
from zerosim.collectives.broadcast import broadcast
from zerosim.collectives.calls import all_gather, all_reduce, reduce_scatter
from zerosim.collectives.shards import ShardLayout
from zerosim.collectives.staging import Collected

__all__ = [
    "Collected", "GlooRing", "NcclLoop", "OPS", "ReduceOp", "ShardLayout", "all_gather", "all_reduce", "broadcast",
    "get_op", "gloo_all_reduce", "gloo_reduce_scatter", "gloo_ring", "naive_all_gather", "naive_all_reduce",
    "naive_reduce", "naive_reduce_scatter", "nccl_all_reduce", "nccl_ring_allreduce_chunks", "reduce_scatter",
]
