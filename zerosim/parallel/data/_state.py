"""A rank's model states, born through its ledger: 16-bit params, gradients, fp32 master, optimizer state.

Letters: P parameters, N ranks, s the shard, Ψ = N*s the padded flat length. How long each buffer is comes
from the plan (`plan.buffer_sizes`: Ψ whole or s sharded); its format from the policy and the recipe.
"""

from __future__ import annotations

import numpy as np

from zerosim.parallel.data._plan import buffer_sizes
from zerosim.parallel.data.recipes import accum_format
from zerosim.precision import cast


def state_specs(plan, layout, policy, recipe, optimizer) -> dict:
    """{state name: ((elements,), dtype)} of every model state one rank holds: "params", "grads", "master"
    (with a master copy), "optim.<name>" — what `init_rank` allocates and a checkpoint must give."""
    n = buffer_sizes(plan, layout)
    specs = {"params": ((n["params"],), policy.compute_format.dtype),
             "grads": ((n["grads"],), accum_format(policy, plan.shards("grads"), recipe).dtype)}
    if policy.master_format is not None:
        specs["master"] = ((n["master"],), policy.master_format.dtype)
    # the optimizer's state in its storage format (fp32, or 16-bit with `optim_state`: optim/_stored_state.py)
    specs.update({f"optim.{k}": ((n["optimizer"],), policy.state_format.dtype) for k in optimizer.state_names})
    return specs


def state_bytes(plan, layout, policy, recipe, optimizer) -> int:
    """Bytes `init_rank` allocates on one rank, from shapes and dtypes alone (for the memory guard)."""
    return sum(shape[0] * np.dtype(dtype).itemsize for shape, dtype in
               state_specs(plan, layout, policy, recipe, optimizer).values())


def init_rank(rank, plan, layout, policy, recipe, optimizer, padded_init=None, given: dict | None = None) -> None:
    """Allocate `rank`'s params, grads, master and optimizer state (grads start at zero).

    From the (Ψ,) initial weights `padded_init` (float64 or float32): params and master cast from it, optimizer
    state zero. From `given` ({"params": a, "master": a, "optim.<name>": a}, checked by `check_given`): those
    arrays adopted as they are (a checkpoint loaded at its saved layout: no copy). With neither: left unwritten
    for the caller to fill (a checkpoint resharded)."""
    n, on = buffer_sizes(plan, layout), lambda buffer: rank.ledger_of(plan.where(buffer))  # each in its tier's ledger
    grads = accum_format(policy, plan.shards("grads"), recipe).dtype
    if given is not None:
        rank.params = on("params").adopt("params", given["params"], "params")
        rank.grads = on("grads").alloc("grads", n["grads"], grads, "grads", fill=0)
        rank.master = (on("master").adopt("master", given["master"], "master") if policy.master_format is not None
                       else None)
        rank.optim = {k: on("optimizer").adopt(k, given[f"optim.{k}"], f"optim:{k}") for k in optimizer.state_names}
        return
    own, mine = layout.own(rank.index), plan.region(layout, rank.index)
    rank.params = on("params").alloc("params", n["params"], policy.compute_format.dtype, "params")  # (s,)/(Ψ,) compute
    if padded_init is not None:
        rank.params.array[...] = cast(padded_init[own] if plan.shards("params") else padded_init, policy.compute_format)
    rank.grads = on("grads").alloc("grads", n["grads"], grads, "grads", fill=0)  # (s,) or (Ψ,); padding stays 0
    if policy.master_format is not None:
        rank.master = on("master").alloc("master", n["master"], policy.master_format.dtype, "master")  # (s,)/(Ψ,) fp32
        if padded_init is not None:
            rank.master.array[...] = cast(padded_init[mine], policy.master_format)
    # (s,) or (Ψ,) per state name, in the storage format: 4 bytes an element in fp32, 2 with optim_state fp16/bf16
    rank.optim = optimizer.init_state(on("optimizer"), n["optimizer"], dtype=policy.state_format.dtype,
                                      fill=0 if padded_init is not None else None)


def check_namespace(ns, policy, recipe) -> None:
    """Refuse, before anything is allocated, formats the backend's arrays cannot compute in: where a format is
    stored as bits (bf16 as uint16 on CuPy: zerosim/precision/cast/_arrays.py) the ring and the casts handle it,
    but the models' forward and backward widen with `astype`, which would read the bits as integers."""
    formats = {policy.compute_format, policy.reduce_format, policy.update_format, policy.state_format,
               accum_format(policy, True, recipe), accum_format(policy, False, recipe)}
    held = sorted(f.name for f in formats if f.name in ns.bit_formats)
    if held:
        raise NotImplementedError(f"this precision uses {', '.join(held)}, which the {ns.name} arrays store as "
                                  "bits: the engine runs fp32 and fp16 policies there (the ring and the casts take "
                                  "bf16 too); use the numpy backend for bf16 training")


def check_given(rank_index: int, plan, layout, policy, recipe, optimizer, given: dict) -> None:
    """Raise ValueError unless `given` holds every state rank `rank_index` would allocate, of its shape and dtype."""
    for name, (shape, dtype) in state_specs(plan, layout, policy, recipe, optimizer).items():
        if name == "grads":
            continue  # gradients are never saved: a step starts them afresh
        a = given.get(name)
        if a is None or a.shape != shape or a.dtype != dtype:
            raise ValueError(f"rank {rank_index}: given state {name!r} must be a {shape} {np.dtype(dtype).name} array, "
                             f"got {None if a is None else (a.shape, a.dtype.name)}")


def own_params(rank, plan, layout) -> np.ndarray:
    """The 16-bit params this rank updates (a view): its whole buffer at stages 0 and 3, its shard at 1/2."""
    if plan.shards("params") or not plan.shards("master"):
        return rank.params.array
    return rank.params.array[layout.own(rank.index)]


def master_of(rank, plan, layout, policy) -> np.ndarray:
    """The rank's update-format weights over its region: the fp32 master, or (pure) its params widened."""
    if rank.master is not None:
        return rank.master.array
    return own_params(rank, plan, layout).astype(policy.update_format.dtype)
