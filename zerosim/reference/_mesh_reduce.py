"""The oracle's side of HSDP and MiCS: N gradients reduced in two levels, in the engines' orders and dtypes.

Letters: N ranks, S per shard group (the blocks 0..S−1, S..2S−1, ...), R = N / S replicas, K micro-steps, P
parameters, s the shard in shard order (the layout over S ranks: layouts/_flat.py or layouts/_partition.py).

    level one   each shard group's S gradients summed in its ring's order, element by element as the layout
                says who owns it (`naive_reduce(chunks=owner_chunks)`): the reduce-scatter's sums, whole
    level two   for each shard p, the R replicas' level-one shards summed in the replicate ring's order, each
                element owned by sub-shard c of a fixed cut of the shard in R (`naive_reduce`'s default chunks
                over the shard): the engines' all-reduce over the replicate groups
                (parallel/data/multinode/_replicate.py)
    when        HSDP: level two every micro-step, then FSDP2's post-divide and cast, then accumulate; HSDP without
                all-reduce until the last micro-step: level one summed in the reduce dtype, level two once;
                MiCS: level one, cast and accumulate per replica group, level two on the accumulated gradient

Code shared with the engines: the layout passed in (its owners and its shard order). Not shared: the recipes'
arithmetic (the oracle's own, _recipes.py: FSDP2's AVG or pre/post divide, MiCS's `div_(R)` before its all-reduce),
the ring, its chunk bookkeeping, the groups, which rank holds what.
"""

from __future__ import annotations

import numpy as np

from zerosim.collectives import naive_reduce
from zerosim.reference import _recipes as recipes


def level_one(grads: list, shards: int, twin, policy, n: int, layout, order: str) -> list:
    """Each shard group's reduction of its S gradients (model order, the oracle's padded length): R arrays."""
    chunks = layout.owner_chunks(grads[0].shape[0])
    return [naive_reduce(recipes.wire_inputs(grads[i:i + shards], twin, policy, n), op="sum", wire=policy.reduce_format,
                         order=order, chunks=chunks) for i in range(0, len(grads), shards)]


def level_two(partials: list, recipe: str, policy, wire, layout, num_params: int, order: str) -> np.ndarray:
    """The R replicas' arrays (model order) summed shard by shard in the replicate ring's order: one array."""
    if len(partials) == 1:  # one replica: the all-reduce is skipped (DeepSpeed: param_repli_size <= 1)
        return partials[0]
    s = layout.shard_size
    shard_order = [layout.arrange(np.ascontiguousarray(x[:num_params])) for x in partials]  # (S·s,) each
    shard_order = recipes.replicate_inputs(shard_order, recipe, policy, layout.world_size, wire)
    out = np.concatenate([naive_reduce([x[p * s:(p + 1) * s] for x in shard_order], op="sum", wire=wire, order=order)
                          for p in range(layout.world_size)])  # shard p: the R replicas' copies, sub-shard by sub-shard
    whole = np.zeros(partials[0].shape[0], dtype=out.dtype)
    whole[:num_params] = layout.unarrange(out)
    return whole


def reduce_on_mesh(grads_by_step: list, policy, recipe, layout, plan, num_params: int, order: str) -> np.ndarray:
    """The K micro-steps' N gradients (model order) -> the accumulated, reduced gradient every rank's shard holds
    once the plan's last collective ran (not yet averaged by N·K, nor unscaled), as the engine makes it."""
    n, shards = len(grads_by_step[0]), layout.world_size
    wire, K, twin, name = policy.reduce_format, len(grads_by_step), recipes.TWINS[recipe.reduction], recipe.reduction
    accum = recipes.accum_format(policy, twin, True).dtype
    acc, partial, per_group = None, None, None
    for k, grads in enumerate(grads_by_step):
        first, last = k == 0, k == K - 1
        ones = level_one(grads, shards, twin, policy, n, layout, order)  # R arrays, reduce dtype
        if plan.replicate == "each micro-step":
            reduced = recipes.after(level_two(ones, name, policy, wire, layout, num_params, order), twin, n, policy)
            acc = _accumulate(acc, reduced, accum, first)
        elif plan.replicate == "last micro-step":  # FSDP2's partial_reduce_output, in the reduce dtype
            if not last:
                partial = ones if first else [p + x for p, x in zip(partial, ones)]
                continue
            summed = ones if first else [x + p for x, p in zip(ones, partial)]  # reduce_output += partial
            reduced = recipes.after(level_two(summed, name, policy, wire, layout, num_params, order), twin, n, policy)
            acc = _accumulate(None, reduced, accum, True)
        else:  # "accumulated" (MiCS): each replica group accumulates its own; level two at the boundary
            kept = [recipes.after(x, twin, n, policy) for x in ones]
            per_group = [_accumulate(None if first else a, x, accum, first)
                         for a, x in zip(per_group or [None] * len(kept), kept)]
            if last:
                acc = level_two(per_group, name, policy, None, layout, num_params, order)
    return acc


def _accumulate(acc, g: np.ndarray, dtype, first: bool) -> np.ndarray:
    """acc = g (first) or acc + g, in the accumulation dtype (_recipes.py `accumulate`)."""
    if acc is None:
        acc = np.zeros(g.shape[0], dtype=dtype)
    recipes.accumulate(acc, g, first)
    return acc
