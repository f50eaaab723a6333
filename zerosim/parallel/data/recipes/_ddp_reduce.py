"""DDP's gradient reduction at stage 0: one all-reduce per bucket, every rank keeping the whole result.

torch 2.13 (torch/csrc/distributed/c10d/reducer.cpp), per bucket of parameters (param_buckets.ddp_buckets):

    Reducer::mark_variable_ready_dense   each gradient, as it becomes ready, is copied into its place in the
                                         bucket's flat buffer with `at::mul_out(bucket_view, grad, 1/N)` (the
                                         `ddp` recipe's op: _recipes.py, before the wire)
    Reducer::mark_bucket_ready           buckets are launched in their order, each once all its gradients are in
    Reducer::run_allreduce_hook          one all-reduce (SUM) of the bucket's buffer: NCCL's chunk map
                                         (`allreduce="nccl"`), gloo's (`"gloo"`) or zerosim's N equal shards
                                         (`"ring"`) over *the bucket*, so where a bucket starts and ends decides
                                         which rank sums an element last, and its bits
    Reducer::finalize_bucket_dense       each gradient copied back out of the reduced buffer (every rank, all of it)

Letters: N ranks, m the bucket's elements; a parameter is (unit, a, b), its range [a, b) of the flat buffer.
"""

from __future__ import annotations

from zerosim.cluster import Handle
from zerosim.parallel.data.recipes import _averaging as averaging
from zerosim.parallel.data.recipes._bucket_allreduce import chunk_map_all_reduce, over_data_parallel


def ddp_all_reduce(ctx, params: list) -> Handle:
    """All-reduce one DDP bucket of `params` (in the bucket's order) over every local rank and write the result
    back into each rank's (Ψ,) gradient buffer, in place (module docstring). Returns the all-reduce's handle."""
    cluster, policy, recipe, ranks = ctx.cluster, ctx.policy, ctx.recipe, ctx.ranks
    params = [p for p in params if p[2] > p[1]]
    if not params:
        return Handle()
    n, m = ctx.mesh.world.size, sum(b - a for _, a, b in params)  # N: the data-parallel ranks
    bucket = []  # (m,) the gradient's dtype per rank: DDP's bucket buffer, parameters in the bucket's order
    for rank in ranks:
        buf = rank.ledger.alloc("grad bucket", m, rank.grads.array.dtype, "grads")
        at = 0
        for _, a, b in params:
            buf.array[at : at + b - a] = rank.grads.array[a:b]
            at += b - a
        bucket.append(buf)
    collective = chunk_map_all_reduce(recipe.allreduce)
    units = tuple(dict.fromkeys(x for x, _, _ in params))  # the units it holds, in the order they joined
    with cluster.trace.about(purpose="reduce grads", layers=units):
        out = collective(cluster, [buf.array for buf in bucket], op=averaging.reduce_op(policy, n, recipe),
                         wire=policy.reduce_format, tag=" + ".join(ctx.names[x] for x in units) + " grads",
                         **over_data_parallel(ctx))
    for rank, result, buf in zip(ranks, out, bucket):
        at = 0
        for _, a, b in params:  # finalize_bucket_dense: every rank takes every gradient back
            rank.grads.array[a:b] = averaging.after_reduce(result[at : at + b - a], policy, n, recipe)
            at += b - a
        buf.free()
    return out.handle
