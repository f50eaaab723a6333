"""A rank's model states, born through its ledger: 16-bit params, gradients, fp32 master, optimizer state.

Letters: P parameters, N ranks, s = ceil(P/N), Ψ = N*s (the padded flat length). What a rank holds
is decided by the stage's plan (plan.py): the whole flat buffer, or its shard [r*s, (r+1)*s).
"""

from __future__ import annotations

import numpy as np

from zerosim.precision import cast
from zerosim.zero.averaging import accum_format


FILLED_LATER = object()  # ZeroEngine(params=FILLED_LATER): allocate every state, let the caller fill it (a checkpoint load)


class GivenStates(dict):
    """ZeroEngine(params=GivenStates({rank index: {"params": a, "master": a, "optim.<name>": a}})): each local
    rank takes these arrays as its states, in place (a checkpoint loaded at its saved layout: no copy).
    Shapes and dtypes must be the ones the rank would allocate."""


def region(plan, layout, rank_index: int) -> slice:
    """The part of the padded flat buffer this rank updates: its shard, or all of it at stage 0."""
    return layout.own(rank_index) if plan.shards_optimizer else slice(0, layout.padded)


def init_rank(rank, plan, layout, policy, optimizer, padded_init, given: dict | None = None) -> None:
    """Allocate `rank`'s params, grads, master and optimizer state from the (Ψ,) initial weights (float64 or
    float32); with padded_init None, params, master and optimizer state are left unwritten for the caller to
    fill, or taken from `given` ({"params": ..., "master": ..., "optim.<name>": ...}) when it is there."""
    led, fmt = rank.ledger, policy.compute_format
    own, mine = layout.own(rank.index), region(plan, layout, rank.index)
    if given is not None:
        _adopt_given(rank, plan, layout, policy, optimizer, given)
        return
    rank.params = led.alloc("params", own.stop - own.start if plan.shards_params else layout.padded, fmt.dtype, "params")  # (s,) or (Ψ,)
    if padded_init is not None:
        rank.params.array[...] = cast(padded_init[own] if plan.shards_params else padded_init, fmt)
    grad_fmt = accum_format(policy, reduced=plan.shards_grads)
    grad_len = layout.shard_size if plan.shards_grads else layout.padded
    rank.grads = led.alloc("grads", grad_len, grad_fmt.dtype, "grads", fill=0)  # (s,) or (Ψ,); padding stays 0
    if policy.master_format is not None:
        rank.master = led.alloc("master", mine.stop - mine.start, policy.master_format.dtype, "master")  # (s,) or (Ψ,) fp32
        if padded_init is not None:
            rank.master.array[...] = cast(padded_init[mine], policy.master_format)
    rank.optim = optimizer.init_state(led, mine.stop - mine.start, dtype=policy.update_format.dtype,
                                      fill=0 if padded_init is not None else None)


def check_given(rank_index: int, plan, layout, policy, optimizer, given: dict) -> None:
    """Raise ValueError unless `given` holds every state rank `rank_index` would allocate, of its shape and dtype."""
    mine = region(plan, layout, rank_index)
    n_params = layout.shard_size if plan.shards_params else layout.padded
    want = {"params": ((n_params,), policy.compute_format.dtype)}
    if policy.master_format is not None:
        want["master"] = ((mine.stop - mine.start,), policy.master_format.dtype)
    want.update({f"optim.{k}": ((mine.stop - mine.start,), policy.update_format.dtype) for k in optimizer.state_names})
    for name, (shape, dtype) in want.items():
        a = given.get(name)
        if a is None or a.shape != shape or a.dtype != dtype:
            raise ValueError(f"rank {rank_index}: given state {name!r} must be a {shape} {np.dtype(dtype).name} array, "
                             f"got {None if a is None else (a.shape, a.dtype.name)}")


def _adopt_given(rank, plan, layout, policy, optimizer, given: dict) -> None:
    """init_rank with the states given (checked by `check_given` first): adopted, not copied."""
    led = rank.ledger
    rank.params = led.adopt("params", given["params"], "params")
    grad_fmt = accum_format(policy, reduced=plan.shards_grads)
    rank.grads = led.alloc("grads", layout.shard_size if plan.shards_grads else layout.padded, grad_fmt.dtype, "grads", fill=0)
    rank.master = led.adopt("master", given["master"], "master") if policy.master_format is not None else None
    rank.optim = {k: led.adopt(k, given[f"optim.{k}"], f"optim:{k}") for k in optimizer.state_names}


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
