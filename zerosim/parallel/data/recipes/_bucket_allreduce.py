"""DeepSpeed ZeRO-1/2's default gradient reduction: each bucket all-reduced whole, in gradient-ready order.

DeepSpeed 0.16-0.19 (deepspeed/runtime/zero/config.py: `use_multi_rank_bucket_allreduce: bool = True`,
`reduce_scatter: bool = True`) reduces a ZeRO-1/2 gradient bucket in stage_1_and_2.py as follows:

    reduce_independent_p_g_buckets_and_remove_grads   each parameter's gradient, as backward makes it, is copied
                                                      into the ipg bucket behind the ones before it; the bucket
                                                      is reduced first when the next would pass reduce_bucket_size
    average_tensor                                    the bucket's slices, one per (parameter, owning rank),
                                                      merged while the owner repeats; `tensor.div_(N)` on the
                                                      whole bucket (16-bit; fp32 at stage 1 with grad_accum_dtype
                                                      fp32 since 0.19.8: `reduction_buffer_format`); with the
                                                      flag on every slice goes to bucket_key ("allreduce", group)
    allreduce_and_scatter                             the slices in bucket order, cut into calls once their
                                                      count passes numel_per_bucket (= reduce_bucket_size)
    allreduce_bucket                                  flatten the call's slices, cast to communication_data_type,
                                                      `dist.all_reduce` (SUM), copy back into the bucket
    allreduce_and_copy_with_multiple_ranks            each rank copies back only the slices it owns (0.19.8, with
                                                      grad_accum_dtype fp32: added as reduced, in the wire dtype,
                                                      to its fp32 partition, `_add_to_grad_partition_buffer`)

So an element is summed in the all-reduce's order over *the call's* buffer — NCCL's chunk map (`allreduce=
"nccl"`), gloo's (`"gloo"`) or zerosim's N equal shards (`"ring"`) of a buffer that holds the bucket's units in
the order backward finished them — not in its owner's ring order over the flat buffer. Where a bucket starts
and ends therefore changes bits (tests/test_bucket_allreduce.py). With the flag off the slices are
`dist.reduce`d to their owner instead: the recipe "deepspeed-zero12-reduce" (reduce.reduce_units).

The bucket is filled parameter by parameter (_param_buckets.py `ipg_buckets`), so a bound may fall between a layer's
bias and its weight, as DeepSpeed's does. Where zerosim differs: gradient-ready order is taken to be the reverse of
registration order (_param_buckets.py `ready_order`: autograd's for a chain of Linear layers); without a
reduce_bucket_size each unit's parameters are a bucket of their own (seed 004's schedule; DeepSpeed's default is 5e8
elements: `CommSchedule.deepspeed()`). Stage 1 without a bucket size reduces the whole buffer at the end of backward
in one bucket in flat order, as DeepSpeed's `reduce_gradients` walks the parameters when overlap_comm is off.

Letters: N ranks, m elements in one call, a parameter's range [a, b) in the flat buffer, s the shard size.
"""

from __future__ import annotations

from zerosim.cluster import Handle
from zerosim.collectives import (
    ShardLayout,
    all_reduce,
    gloo_all_reduce,
    gloo_ring,
    nccl_all_reduce,
    nccl_ring_allreduce_chunks,
)
from zerosim.parallel.data.recipes import _averaging as averaging
from zerosim.precision import get_format


def bucket_slices(layout, layers) -> list:
    """`range_slices` of a bucket of whole `layers` (in the order they joined it)."""
    return range_slices(layout, [layout.windows[x] for x in layers])


def range_slices(layout, ranges) -> list:
    """[(owner, a, b), ...]: the flat ranges [a, b) of a bucket (in the order they joined it), cut where the owner
    changes and merged while it repeats — average_tensor's `rank_and_offsets`."""
    out = []
    s = layout.shard_size
    for a, b in ranges:
        while a < b:
            owner = a // s
            stop = min(b, (owner + 1) * s)
            if out and out[-1][0] == owner and out[-1][2] == a:
                out[-1] = (owner, out[-1][1], stop)
            else:
                out.append((owner, a, stop))
            a = stop
    return out


def split_calls(slices: list, limit: int | None) -> list:
    """allreduce_and_scatter's rule: slices join a call until their count passes `limit` (the call then ends with
    the slice that passed it); None: one call."""
    calls, call, count = [], [], 0
    for piece in slices:
        call.append(piece)
        count += piece[2] - piece[1]
        if limit is not None and count > limit:
            calls.append(call)
            call, count = [], 0
    return calls + ([call] if call else [])


def call_chunks(m: int, n: int, itemsize: int, allreduce: str) -> tuple:
    """(chunks, direction): the all-reduce's chunk map over an m-element call as (c, start, stop) triples — chunk
    c's sum ends at rank c — and the ring's direction (1: from c+1 upwards, NCCL's and zerosim's; -1: gloo's)."""
    if allreduce == "nccl":
        loops = nccl_ring_allreduce_chunks(m, n, itemsize)
        return [(c, a, b) for loop in loops for c, (a, b) in enumerate(loop.chunks)], 1
    if allreduce == "gloo":
        return [(c, a, b) for c, (a, b) in enumerate(gloo_ring(m, n, itemsize).chunks)], -1
    shards = ShardLayout(m, n)
    return [(c, *shards.real_bounds(c)) for c in range(n)], 1


def flat_chunks(call: list, n: int, itemsize: int, allreduce: str) -> tuple:
    """One call's chunk map in flat coordinates (the oracle's side): (c, start, stop) triples over the flat
    ranges the call's slices cover, and the direction."""
    chunks, direction = call_chunks(sum(b - a for _, a, b in call), n, itemsize, allreduce)
    out, pos, at = [], [], 0  # pos[i]: where slice i starts in the call's buffer
    for _, a, b in call:
        pos.append(at)
        at += b - a
    for c, lo, hi in chunks:
        for (_, a, b), p in zip(call, pos):
            x, y = max(lo, p), min(hi, p + b - a)
            if y > x:
                out.append((c, a + x - p, a + y - p))
    return out, direction


def chunk_map_all_reduce(allreduce: str):
    """The all-reduce whose chunk map `allreduce` names: "nccl", "gloo" or zerosim's "ring" (N equal shards)."""
    return {"nccl": nccl_all_reduce, "gloo": gloo_all_reduce}.get(allreduce, all_reduce)


def reduction_buffer_format(policy, held: bool):
    """The ipg bucket's format: DeepSpeed 0.19.8's `_gradient_reduction_buffer_dtype()` (runtime/zero/
    stage_1_and_2.py, used by `setup_buckets`): the gradient-accumulation dtype where stage 1 reduces the fp32
    accumulator itself (`use_grad_accum_attribute`: grad_accum_dtype differs from the 16-bit dtype and gradients
    are not partitioned), else the 16-bit dtype. Stage 2 (`held`) copies each micro-step's 16-bit gradient in.

    NOTE: DeepSpeed 0.19.6 allocated the bucket with `dtype=self.dtype` (16 bits) and read the accumulator through
    `get_gradient_for_reduction` as `param.grad_accum.to(self.dtype)`: the fp32 sum was rounded to 16 bits before
    `div_(N)`. zerosim follows 0.19.8 (docs/recipes.md has both, tests/test_bucket_allreduce.py a hand table)."""
    if held or policy.grad_accum is None:
        return policy.compute_format
    return get_format(policy.grad_accum)


def over_data_parallel(ctx) -> dict:
    """The keyword that runs a bucket's all-reduce over the data-parallel ranks: none for the world (so the call is
    the one it always was), `group=` beside tensor parallelism (where only the ring's chunk map runs: _groups.py)."""
    return {} if ctx.mesh.world.is_world else {"group": ctx.mesh.world}


def all_reduce_bucket(ctx, params: list, first: bool, limit: int | None, held: bool, free=()) -> Handle:
    """All-reduce a bucket of `params` ((unit, a, b) flat ranges, in the order they joined it) as DeepSpeed's default
    path does (module docstring), and accumulate each rank's owned slices into its gradients: its (s,) shard (`held`:
    stage 2, the units' gradients wait in their own buffers, "layer L grads") or its part of the (Ψ,) gradient buffer
    (stage 1). `free`: the units whose gradient buffers are freed once copied into the bucket (all theirs sent)."""
    from zerosim.parallel.data._reduce import grads_name  # _reduce.py dispatches here: import at call time

    cluster, layout, policy, recipe, ranks = ctx.cluster, ctx.layout, ctx.policy, ctx.recipe, ctx.ranks
    params = [p for p in params if p[2] > p[1]]
    if not params:
        return Handle()
    n, wire = ctx.mesh.world.size, policy.reduce_format  # N: the data-parallel ranks
    op, slices = averaging.reduce_op(policy, n, recipe), range_slices(layout, [(a, b) for _, a, b in params])
    m = sum(b - a for _, a, b in slices)
    fmt = reduction_buffer_format(policy, held)
    bucket = []  # (m,) `fmt` per rank: the ipg bucket, parameters in the order their gradients were ready
    for rank in ranks:
        buf = rank.ledger.alloc("grad bucket", m, fmt.dtype, "grads")
        at = 0
        for x, a, b in params:
            lo = layout.windows[x][0]
            buf.array[at : at + b - a] = rank.ledger.get(grads_name(x)).array[a - lo : b - lo] if held \
                else rank.grads.array[a:b]
            at += b - a
        bucket.append(buf)
        for x in free:
            rank.ledger.get(grads_name(x)).free()
    collective = chunk_map_all_reduce(recipe.allreduce)
    units = tuple(dict.fromkeys(x for x, _, _ in params))  # the units it holds, in the order they joined
    name = " + ".join(ctx.names[x] for x in units) + " grads"
    last, start = Handle(), 0
    for call in split_calls(slices, limit):
        size = sum(b - a for _, a, b in call)
        with cluster.trace.about(purpose="reduce grads", layers=units):
            out = collective(cluster, [buf.array[start : start + size] for buf in bucket], op=op, wire=wire, tag=name,
                             **over_data_parallel(ctx))
        for rank, result in zip(ranks, out):
            at, mine = 0, ctx.mesh.world.position(rank.index)  # its shard's position among the data-parallel ranks
            for owner, a, b in call:
                if owner == mine:  # allreduce_and_copy_with_multiple_ranks: only the owner copies back
                    piece = averaging.after_reduce(result[at : at + b - a], policy, n, recipe)
                    _keep(rank, layout, a, b, piece, first, held)
                at += b - a
        last, start = out.handle, start + size
    for buf in bucket:
        buf.free()
    return last


def _keep(rank, layout, a: int, b: int, piece, first: bool, held: bool) -> None:
    if held:  # stage 2: accumulated into the shard
        lo, hi = layout.owned_range(a, b, rank.index)
        averaging.accumulate(rank.grads.array[lo:hi], piece, first)
    else:  # stage 1: once, at the boundary, into the rank's own part of the gradient buffer
        averaging.accumulate(rank.grads.array[a:b], piece, True)
