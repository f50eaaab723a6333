"""Ring reduce-scatter / all-gather / all-reduce / broadcast / all-to-all in NCCL's order, with naive twins.
Collectives know nothing about ZeRO.

    _calls.py       reduce_scatter, all_gather, all_reduce: checks, a trace call, staging, a phase, the results
    _ring.py        the ring's two phases hop by hop, in NCCL's order (reduce-scatter, all-gather)
    _fast.py        their in-process twin: the same adds in the same order, no Python step per hop
    _staging.py     inputs staged in the wire format; which phase moves the data; results with their handle
    _broadcast.py   a chain from the root
    _send_recv.py   one step of a ring: each member's buffer to the next (point-to-point sends, no sum)
    _all_to_all.py  every rank sends chunk k to the k-th member of its group
    _all_to_all_v.py  the same with uneven pieces (all_to_all_single with split sizes): a matrix to its owner
    _p2p.py         point to point between any pairs: send_pairs (a pipeline stage's activations to the next)
    _naive.py       the naive twins: everything in one place, summed in the ring's order or in float64
    _ops.py         reduction operators (sum, max, avg and its variants; a recipe's own ReduceOp)
    _shards.py      shard arithmetic, in one place: padding to a multiple of N, each rank's [start, stop)
    _checks.py      input checks every rank runs before any data moves
    _wire.py        what a payload is called on the wire, and its bytes per element
    chunk_maps/     other libraries' all-reduce orders: NCCL's own chunk map (runRing's loops), gloo's ring; a tree
    quantized/      payloads in fewer bits: qwZ's int8 and torchao's fp8 all-gathers, qgZ's int4 all-to-alls

Every function takes the `Cluster` first (as torch.distributed's take a process group) and one array per
local rank, and returns one array per local rank in a list that carries `.handle`: the calls it recorded.
"""

from zerosim._lazy import lazy_face, names_of

# each name of the face and the module that defines it, imported the first time it is asked for (zerosim/_lazy.py)
_NAMES = {
    "._all_to_all": ("all_to_all", "naive_all_to_all"),
    "._all_to_all_v": ("all_to_all_v", "naive_all_to_all_v"),
    "._broadcast": ("broadcast",),
    "._calls": ("all_gather", "all_reduce", "reduce_scatter"),
    "._naive": ("naive_all_gather", "naive_all_reduce", "naive_reduce", "naive_reduce_scatter"),
    "._ops": ("OPS", "ReduceOp", "add", "get_op", "premul_reciprocal"),
    "._p2p": ("naive_send_pairs", "send_pairs"),
    "._send_recv": ("naive_send_recv", "send_recv"),
    "._shards": ("ShardLayout",),
    "._staging": ("Collected",),
    "._wire": ("wire_itemsize",),
    ".chunk_maps": (
        "GlooRing", "NcclLoop", "gloo_all_reduce", "gloo_reduce_scatter", "gloo_ring", "nccl_all_reduce",
        "nccl_ring_allreduce_chunks", "ring_tree_crossover", "tree_all_reduce", "tree_all_reduce_time",
    ),
}
__getattr__, __dir__ = lazy_face(__name__, _NAMES)

__all__ = sorted(names_of(_NAMES))
