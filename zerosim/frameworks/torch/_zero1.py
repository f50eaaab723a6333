"""DDP + ZeroRedundancyOptimizer (Adam inside), real torch beside zerosim's ZeRO-1: the kit's second comparison.

torch side (N gloo processes, fp32, one CPU thread each): the MLP under `DistributedDataParallel` (its defaults,
as _ddp.py) and `torch.distributed.optim.ZeroRedundancyOptimizer(params, optimizer_class=torch.optim.Adam, lr=...)`
with its defaults. What ZeroRedundancyOptimizer does, from torch/distributed/optim/zero_redundancy_optimizer.py
(torch 2.13.0):

- `_partition_parameters`: whole parameters, never slices — sorted by `numel()`, largest first (Python's stable
  sort: ties keep registration order), each given to the rank with the smallest total so far
  (`_get_min_index`: the first such rank). `zero_redundancy_partition` below is that rule.
- `step` → `_local_step`: the wrapped Adam steps only this rank's parameters (its default path on CPU tensors,
  `_single_tensor_adam`); then `_sync_params` → `_broadcast_params_from_rank` broadcasts each rank's parameters
  from their owner (per parameter; per bucket with parameters_as_bucket_view=True). A broadcast copies bits.

zerosim side: each rank's local gradients (torch's own, from an undistributed twin, or zerosim's own forward/
backward: _own_grads.py), DDP's reduction on DDP's own buckets (_ddp.py `ddp_reduce`: the `ddp` recipe's op and
gloo's all-reduce), then ZeRO-1's update: each rank runs Adam(formula="torch") on the part it owns and the
owners' results are copied to everyone. Adam is elementwise — element i's new value reads only element i of the
weight, gradient and state, and the step count t, the same on every rank — so which rank updates an element
cannot change its bits: zerosim's flat ZeRO-1 slices (`partition="flat"`, ceil(P/N) elements per rank, one
parameter may straddle two ranks: parallel/data/layouts/_flat.py) give the same bits as ZeroRedundancyOptimizer's
whole-parameter partition (`partition="zero-redundancy"`); tests/test_parity_kits.py runs both. sqrt: see _sqrt.py.
"""

from __future__ import annotations

import numpy as np

from zerosim.frameworks.torch._common import first_difference, step_parity, torch_batch, torch_half_mse, torch_model
from zerosim.frameworks.torch._ddp import ddp_reduce, probe_buckets

PARTITIONS = ("zero-redundancy", "flat")


def zero_redundancy_partition(sizes: list, world_size: int) -> list:
    """ZeroRedundancyOptimizer._partition_parameters for one parameter group: `sizes` the parameters' numel in
    registration order; returns, per rank, the indices of the parameters it owns, in the order it was given them."""
    owned = [[] for _ in range(world_size)]
    totals = [0] * world_size
    for i in sorted(range(len(sizes)), key=lambda i: sizes[i], reverse=True):  # stable: ties keep their order
        rank = totals.index(min(totals))  # _get_min_index: the first rank holding the least
        owned[rank].append(i)
        totals[rank] += sizes[i]
    return owned


def _zero1_rank(rank: int, world: int, widths, steps: int, seed: int, lr: float, batch: int) -> dict:
    import torch
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel as DDP

    layouts = probe_buckets(torch, widths, seed, rank, batch)
    model = DDP(torch_model(torch, widths, seed))
    opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=lr)
    names = {id(p): n for n, p in model.module.named_parameters()}
    partition = [[names[id(p)] for group in opt._partition_parameters()[r] for p in group["params"]]
                 for r in range(world)]
    twin = torch_model(torch, widths, seed)
    params = {n: p.detach().reshape(-1).numpy().copy() for n, p in model.module.named_parameters()}
    out = {"layouts": layouts, "partition": partition, "initial": params, "records": []}
    for step in range(steps):
        twin.load_state_dict(model.module.state_dict())
        x, t = torch_batch(torch, widths, seed, step, rank, batch)
        twin.zero_grad(set_to_none=True)
        torch_half_mse(twin(x), t).backward()
        opt.zero_grad(set_to_none=True)
        torch_half_mse(model(x), t).backward()
        record = {"x": x.numpy().copy(), "t": t.numpy().copy(),
                  "local": {n: p.grad.reshape(-1).numpy().copy() for n, p in twin.named_parameters()},
                  "reduced": {n: p.grad.reshape(-1).numpy().copy() for n, p in model.module.named_parameters()}}
        opt.step()
        record["params"] = {n: p.detach().reshape(-1).numpy().copy() for n, p in model.module.named_parameters()}
        out["records"].append(record)
    return out


def compare_zero1(ranks: list, widths, grads: str = "torch", sqrt: str = "torch", reduction: str = "gloo",
                  partition: str = "zero-redundancy", lr: float = 0.01) -> list:
    """zerosim's ZeRO-1 step by step against torch's parameters after each step (rank 0's; the broadcast gives
    every rank the same): one `StepParity` a step. `grads` "torch" feeds torch's local gradients in, "zerosim"
    computes them (_own_grads.py); `sqrt` "torch" substitutes torch's sqrt in Adam (_sqrt.py), "zerosim" keeps
    the correctly rounded one; `reduction` "gloo" or "ring" (_ddp.py); `partition` one of PARTITIONS."""
    from zerosim.frameworks.torch._own_grads import local_gradients
    from zerosim.frameworks.torch._sqrt import TorchSqrtAdam
    from zerosim.optim import Adam

    if partition not in PARTITIONS:
        raise ValueError(f"partition must be one of {PARTITIONS}, got {partition!r}")
    n, names = len(ranks), list(ranks[0]["initial"])
    adam = TorchSqrtAdam(lr=lr) if sqrt == "torch" else Adam(lr=lr, formula="torch")
    params = {k: v.copy() for k, v in ranks[0]["initial"].items()}  # (numel,) fp32 each, torch's initial weights
    state = {k: {"m": np.zeros_like(v), "v": np.zeros_like(v)} for k, v in params.items()}
    out = []
    for step in range(len(ranks[0]["records"])):
        theirs = [r["records"][step] for r in ranks]
        before = ranks[0]["initial"] if step == 0 else ranks[0]["records"][step - 1]["params"]
        carried = first_difference([("carried", params, before)])
        if grads == "torch":
            local = [rec["local"] for rec in theirs]
        else:
            local = [local_gradients(widths, params, rec["x"], rec["t"]) for rec in theirs]
        reduced = ddp_reduce(ranks[0]["layouts"][min(step, 1)], local, reduction)
        _update(adam, params, reduced, state, step + 1, n, names, partition)
        cause = carried or first_difference([
            ("local", _by_rank(local), _by_rank([rec["local"] for rec in theirs])),
            ("reduced", reduced, theirs[0]["reduced"]), ("update", params, theirs[0]["params"])])
        out.append(step_parity(step + 1, params, theirs[0]["params"], cause))
    return out


def _by_rank(local: list) -> dict:
    return {(r, k): v for r, grads in enumerate(local) for k, v in grads.items()}


def _update(adam, params: dict, reduced: dict, state: dict, t: int, n: int, names: list, partition: str) -> None:
    """ZeRO-1's optimizer step: each rank updates what it owns; the owners' results are everyone's (the broadcast
    or all-gather copies bits, so one shared dict stands for every rank's copy)."""
    if partition == "zero-redundancy":
        for owned in zero_redundancy_partition([params[k].size for k in names], n):
            for i in owned:
                k = names[i]
                adam.step(params[k], reduced[k], state[k], t)
        return
    from zerosim.collectives import ShardLayout

    flat = {key: np.concatenate([store[k] for k in names]) for key, store in  # (P,) fp32, registration order
            (("w", params), ("g", reduced), ("m", {k: state[k]["m"] for k in names}),
             ("v", {k: state[k]["v"] for k in names}))}
    layout = ShardLayout(flat["w"].size, n)
    for r in range(n):
        a, b = layout.real_bounds(r)  # rank r's flat slice
        adam.step(flat["w"][a:b], flat["g"][a:b], {"m": flat["m"][a:b], "v": flat["v"][a:b]}, t)
    start = 0
    for k in names:
        size = params[k].size
        params[k][...], state[k]["m"][...], state[k]["v"][...] = (
            flat[key][start : start + size] for key in ("w", "m", "v"))
        start += size
