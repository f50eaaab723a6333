"""The replicas agree: HSDP's and MiCS's all-reduce of a reduced shard over the replicate group.

Letters: N ranks, S ranks per shard group, R = N / S replicas of each shard, s the shard, K micro-steps; a unit
(or a bucket of units) occupies [q0, q1) of every rank's shard after its reduce-scatter.

    HSDP          FSDP2 torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py, `foreach_reduce`: the unit's
                  reduce-scatter over the shard group, then `dist.all_reduce(reduce_output, group=all_reduce_group,
                  op=all_reduce_op)` at reduce_dtype, then the post-divide and `.to(orig_dtype)`; each micro-step.
                  Divide factors `_get_gradient_divide_factors` with data_parallel_size = S·R: fp32/bf16 reduce
                  with NCCL's AVG on both (ReduceOp.AVG: x·fl(1/S), then x·fl(1/R)); fp16 pre-divides by a power
                  of two before the reduce-scatter, sums on both, post-divides by N/pre after the all-reduce.
    HSDP, no sync with `set_requires_all_reduce(False)` on every micro-batch but the last: `partial_reduce_output
                  += reduce_output` — the micro-steps' reduce-scatter outputs summed in reduce_dtype, nothing
                  divided after, no gradient kept — and on the last one `reduce_output += partial_reduce_output`,
                  then the all-reduce, post-divide and cast as above.
    MiCS          DeepSpeed deepspeed/runtime/zero/mics.py, `MiCS_Optimizer.partition_grads` ->
                  `allreduce_mics_shard_grads`: stage 3's reduce-scatter over the shard group (pre-divided by S,
                  `reduce_scatter_coalesced`) accumulated into the gradient partitions every micro-step; at the
                  accumulation boundary only (`is_gradient_accumulation_boundary()`), each bucket's partitions
                  `scale_tensors(..., param_repli_size)` (`t.div_(R)`, in the accumulation dtype) and
                  `dist.all_reduce_coalesced(..., group=param_repli_group)` (a SUM in that dtype).

Chunks: the all-reduce cuts a unit's piece of the shard by a fixed cut of the whole shard in R sub-shards
(`counts`: [q0, q1) ∩ sub-shard c), so every element keeps one owner whatever the bucketing, as zerosim's
buckets keep theirs (_comm_schedule.py). NOTE: NCCL cuts each all-reduce's own buffer (and picks rings or trees,
channels): for R = 2 every element is one addition, the same bits either way; for R >= 3 the order of the R−1
additions can differ from NCCL's.
"""

from __future__ import annotations

from collections.abc import Callable

from zerosim._dataclass import dataclass
from zerosim.cluster import Handle
from zerosim.collectives import ReduceOp, ShardLayout, add, all_reduce, get_op, premul_reciprocal
from zerosim.parallel.data._plan import REPLICATIONS
from zerosim.parallel.data.recipes import fsdp2_divide_factors, torch_scalar_div

PARTIAL = "hsdp partial sums"  # HSDP without all-reduce until the last micro-step: FSDP2's partial_reduce_output


def replicate_op(policy, recipe, shards: int, replicas: int) -> ReduceOp:
    """The replicate all-reduce's op for the recipe: FSDP2's all_reduce_op (AVG: x·fl(1/R) on the wire, or SUM),
    MiCS's `scale_tensors` (x.div_(R) on CUDA in the buffer's dtype, then SUM), or the seeds' SUM (finish divides
    by N·K)."""
    if recipe.reduction == "fsdp2":
        f = fsdp2_divide_factors(shards, policy.reduce_format.name, all_reduce_size=replicas)
        if f.all_reduce_op == "avg":
            return ReduceOp("fsdp2_avg", add, "NCCL AVG over the replicas: x * fl(1/R), then sum",
                            on_wire=premul_reciprocal)
        return get_op("sum")
    if recipe.reduction == "deepspeed-zero3":
        return ReduceOp("mics_predivide_sum", add, "scale_tensors: x.div_(R) on CUDA, then sum",
                        before_wire=lambda x, n: torch_scalar_div(x, n, "cuda"))
    return get_op("sum")


def sub_counts(q0: int, q1: int, shard: int, replicas: int) -> tuple:
    """Elements of [q0, q1) (shard coordinates) in each of the R sub-shards of a shard of `shard` elements."""
    cut = ShardLayout(shard, replicas)
    return tuple(max(0, min(q1, b) - max(q0, a)) for a, b in (cut.real_bounds(c) for c in range(replicas)))


def all_reduce_pieces(ctx, pieces: list, q: tuple, wire, tag: str) -> tuple:
    """All-reduce each local rank's piece [q0, q1) of its shard over its replicate group (one call for every
    group); returns (the reduced pieces, the handle)."""
    mesh, policy, recipe = ctx.mesh, ctx.policy, ctx.recipe
    if mesh.replicas == 1:  # one replica: nothing to agree on (DeepSpeed returns when param_repli_size <= 1)
        return list(pieces), Handle()
    op = replicate_op(policy, recipe, mesh.shard.size, mesh.replicas)
    counts = sub_counts(q[0], q[1], ctx.layout.shard_size, mesh.replicas)
    with ctx.cluster.trace.about(purpose="replicate grads"):
        out = all_reduce(ctx.cluster, pieces, op=op, wire=wire, tag=tag, counts=counts, group=mesh.replicate)
    return list(out), out.handle


def each_micro_step(ctx, pieces: list, q: tuple, first: bool, last: bool, tag: str) -> tuple:
    """HSDP: every micro-step's reduce-scatter output all-reduced over the replicas, at reduce_dtype. Returns
    (the pieces, the handle, whether the pieces are the first thing kept this step: `first`)."""
    return *all_reduce_pieces(ctx, pieces, q, ctx.policy.reduce_format, tag), first


def partial_sums(ctx, pieces: list, q: tuple, first: bool, last: bool, tag: str) -> tuple:
    """HSDP with `set_requires_all_reduce(False)` until the last micro-step: before it, each rank adds its
    reduce-scatter output into its partial sums (reduce dtype; the first assigns) and keeps nothing else
    (returns None); on the last, `reduce_output += partial` and the all-reduce. Returns (pieces or None, handle,
    True: the gradient is kept once, on the last micro-step, so that is its first)."""
    pieces, handle = _partial_sums(ctx, pieces, q, first, last, tag)
    return pieces, handle, True


def _partial_sums(ctx, pieces: list, q: tuple, first: bool, last: bool, tag: str) -> tuple:
    wire = ctx.policy.reduce_format
    if not last or not first:  # there is or will be a partial sum: one (s,) buffer per rank, each unit its piece
        for rank in ctx.ranks:
            if PARTIAL not in rank.ledger.live:
                rank.ledger.alloc(PARTIAL, ctx.layout.shard_size, wire.dtype, "grads", fill=0)  # (s,) reduce fmt
    sums = [rank.ledger.get(PARTIAL).array[q[0]:q[1]] if PARTIAL in rank.ledger.live else None for rank in ctx.ranks]
    if not last:
        for total, piece in zip(sums, pieces):
            if first:
                total[...] = piece  # partial_reduce_output = reduce_output
            else:
                total += piece  # partial_reduce_output += reduce_output: one rounding in reduce_dtype
        return None, Handle()
    if not first:
        for piece, total in zip(pieces, sums):
            piece += total  # reduce_output += partial_reduce_output
    return all_reduce_pieces(ctx, pieces, q, wire, tag)


def at_boundary(ctx, layers: tuple, q: tuple, tag: str) -> Handle:
    """MiCS at the accumulation boundary: each rank's accumulated gradient partition [q0, q1) divided by R and
    all-reduced over its replicate group in the accumulation dtype, written back in place."""
    places = [rank.grads.array[q[0]:q[1]] for rank in ctx.ranks]
    out, handle = all_reduce_pieces(ctx, places, q, None, tag)
    for place, reduced in zip(places, out):
        place[...] = reduced
    return handle


def kept_as_reduced(ctx, pieces: list, q: tuple, first: bool, last: bool, tag: str) -> tuple:
    """One copy of each shard (or MiCS, whose replicas agree at the boundary): the pieces kept as reduced."""
    return pieces, Handle(), first


@dataclass(frozen=True)
class Agreement:
    """How a plan's replicas agree on a reduced shard: right after each reduce-scatter (`after_scatter(ctx, pieces,
    q, first, last, tag) -> (pieces or None, handle, first)`) and, where they wait for the accumulation boundary,
    then (`at_boundary(ctx, layers, q, tag) -> handle`, on the last micro-step)."""

    after_scatter: Callable = kept_as_reduced
    at_boundary: Callable | None = None


AGREEMENTS = {  # Plan.replicate -> how its replicas agree (parallel/data/_plan.py REPLICATIONS names them)
    None: Agreement(),  # FULL_SHARD, hpZ, the flat stages: one copy of each shard
    "each micro-step": Agreement(each_micro_step),  # HSDP
    "last micro-step": Agreement(partial_sums),  # HSDP with set_requires_all_reduce(False) until the last
    "accumulated": Agreement(at_boundary=at_boundary),  # MiCS
}
assert tuple(AGREEMENTS) == REPLICATIONS, "parallel/data/_plan.py lists the agreements' names to check a plan"
