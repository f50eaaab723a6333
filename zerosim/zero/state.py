"""A rank's model states, born through its ledger: 16-bit params, gradients, fp32 master, optimizer state.

Letters: P parameters, N ranks, s = ceil(P/N), Ψ = N*s (the padded flat length). What a rank holds
is decided by the stage's plan (plan.py): the whole flat buffer, or its shard [r*s, (r+1)*s).
"""

from __future__ import annotations

import numpy as np

from zerosim.precision import cast
from zerosim.zero.averaging import accum_format


def region(plan, layout, rank_index: int) -> slice:
    """The part of the padded flat buffer this rank updates: its shard, or all of it at stage 0."""
    return layout.own(rank_index) if plan.shards_optimizer else slice(0, layout.padded)


def init_rank(rank, plan, layout, policy, optimizer, padded_init) -> None:
    """Allocate `rank`'s params, grads, master and optimizer state from the (Ψ,) initial weights (float64 or float32)."""
    led, fmt = rank.ledger, policy.compute_format
    own, mine = layout.own(rank.index), region(plan, layout, rank.index)
    src = padded_init[own] if plan.shards_params else padded_init
    rank.params = led.alloc("params", src.shape[0], fmt.dtype, "params")  # (s,) or (Ψ,) compute format
    rank.params.array[...] = cast(src, fmt)
    grad_fmt = accum_format(policy, reduced=plan.shards_grads)
    grad_len = layout.shard_size if plan.shards_grads else layout.padded
    rank.grads = led.alloc("grads", grad_len, grad_fmt.dtype, "grads", fill=0)  # (s,) or (Ψ,); padding stays 0
    if policy.master_format is not None:
        rank.master = led.alloc("master", mine.stop - mine.start, policy.master_format.dtype, "master")  # (s,) or (Ψ,) fp32
        rank.master.array[...] = cast(padded_init[mine], policy.master_format)
    rank.optim = optimizer.init_state(led, mine.stop - mine.start, dtype=policy.update_format.dtype)


def state_bytes(plan, layout, policy, optimizer) -> int:
    """Bytes `init_rank` allocates on one rank, from shapes and dtypes alone (for the memory guard)."""
    upd = policy.update_format.dtype
    mine = layout.shard_size if plan.shards_optimizer else layout.padded  # the region it updates
    params = (layout.shard_size if plan.shards_params else layout.padded) * policy.compute_format.itemsize
    grads = (layout.shard_size if plan.shards_grads else layout.padded) * accum_format(policy, reduced=plan.shards_grads).itemsize
    master = mine * policy.master_format.itemsize if policy.master_format is not None else 0
    return params + grads + master + mine * optimizer.state_bytes_per_param(upd)


def own_params(rank, plan, layout) -> np.ndarray:
    """The 16-bit params this rank updates (a view): its whole buffer at stages 0 and 3, its shard at 1/2."""
    return rank.params.array if plan.shards_params or not plan.shards_optimizer else rank.params.array[layout.own(rank.index)]


def master_of(rank, plan, layout, policy) -> np.ndarray:
    """The rank's update-format weights over its region: the fp32 master, or (pure) its params widened."""
    if rank.master is not None:
        return rank.master.array
    return own_params(rank, plan, layout).astype(policy.update_format.dtype)
