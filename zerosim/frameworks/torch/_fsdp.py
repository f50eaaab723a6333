"""FSDP2 `fully_shard`, real torch beside zerosim's `fsdp2` recipe on gloo: the kit's third comparison.

torch side (N gloo processes, one CPU thread each): the MLP with `fully_shard(linear, mp_policy=...)` on every
Linear, then on the root (each Linear one FSDPParamGroup, so one reduce-scatter a layer), and torch.optim.Adam
(its default path on the DTensors' local shards). `MixedPrecisionPolicy(param_dtype, reduce_dtype)` in three
settings, CONFIGS: fp32/fp32, bf16 params with fp32 reduction, bf16/bf16. Each step an undistributed twin in
`param_dtype`, holding the all-gathered weights, gives the rank's local gradients (the same CPU kernels; FSDP's
root casts the input to `param_dtype`, cast_forward_inputs=True, and so does the twin).

What FSDP2 does with them, from torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py (torch 2.13.0):

- `foreach_reduce`: the gradients (in `param_dtype`) are copied into one reduce_scatter_input of `reduce_dtype`
  by `foreach_reduce_scatter_copy_in` (`chunk_cat` on dim 0 into a (N, -1) view: rank r's block is every
  parameter's r-th dim-0 chunk of ceil(rows / N) rows, zero-padded, in registration order); a widening copy is
  exact.
- `_get_gradient_divide_factors`: for fp32 and bf16 "we do not need to worry about overflow", so no pre- or
  post-division and `ReduceOp.AVG` (SUM for N = 1) — zerosim's `fsdp2_divide_factors`
  (parallel/data/recipes/_divide_factors.py).
- `DefaultReduceScatter` → `dist.reduce_scatter_single(..., op=AVG)`; on gloo that is a sum in gloo's ring order
  over the whole buffer, then an exact division by N in `reduce_dtype` (collectives/chunk_maps/_gloo.py:
  `gloo_reduce_scatter`, checked against torch's gloo in tests/test_gloo.py). NCCL's AVG multiplies by
  fl(1/N) instead: the `fsdp2` recipe's op is NCCL's, so the kit takes the recipe's factors and `after` and gloo's
  AVG — what torch runs on a CPU.
- `_div_if_needed(reduce_output, postdivide_factor)` (none here), then `_to_dtype_if_needed(reduce_output,
  orig_dtype)`: the fp32 sharded gradient — the `fsdp2` recipe's `after` (parallel/data/recipes/_recipes.py).

zerosim side: those steps on each rank's local gradients (torch's, or zerosim's own in `param_dtype`:
_own_grads.py), then Adam(formula="torch") on each rank's fp32 shard of each parameter (_sqrt.py for the sqrt).
"""

from __future__ import annotations

import numpy as np

from zerosim.frameworks.torch._common import first_difference, step_parity, torch_batch, torch_half_mse, torch_model

CONFIGS = {  # name: (param_dtype, reduce_dtype), zerosim's format names
    "fp32": ("fp32", "fp32"),
    "bf16-fp32": ("bf16", "fp32"),
    "bf16": ("bf16", "bf16"),
}


def _flat32(t) -> np.ndarray:
    return t.detach().float().reshape(-1).numpy().copy()  # a bf16 value widened to fp32: exact, bits kept


def _fsdp_run(torch, rank: int, world: int, widths, steps: int, seed: int, lr: float, batch: int, config) -> dict:
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16}
    param_dtype, reduce_dtype = (dtypes[d] for d in CONFIGS[config])
    model = torch_model(torch, widths, seed)
    policy = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype)
    for module in model:
        if isinstance(module, torch.nn.Linear):
            fully_shard(module, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    twin = torch_model(torch, widths, seed).to(param_dtype)
    out = {"initial": {n: _flat32(p.full_tensor()) for n, p in model.named_parameters()}, "records": []}
    for step in range(steps):
        with torch.no_grad():
            for (name, p), mine in zip(model.named_parameters(), twin.parameters()):
                mine.copy_(p.full_tensor().to(param_dtype))  # what the all-gather of param_dtype copies gives
        x, t = torch_batch(torch, widths, seed, step, rank, batch)
        twin.zero_grad(set_to_none=True)
        torch_half_mse(twin(x.to(param_dtype)), t).backward()
        opt.zero_grad(set_to_none=True)
        torch_half_mse(model(x), t).backward()
        record = {"x": x.numpy().copy(), "t": t.numpy().copy(),
                  "local": {n: _flat32(p.grad) for n, p in twin.named_parameters()},
                  "reduced": {n: _flat32(p.grad.to_local()) for n, p in model.named_parameters()}}
        opt.step()
        record["params"] = {n: _flat32(p.to_local()) for n, p in model.named_parameters()}
        out["records"].append(record)
    return out


def _fsdp_rank(rank: int, world: int, widths, steps: int, seed: int, lr: float, batch: int, configs) -> dict:
    import torch

    return {c: _fsdp_run(torch, rank, world, widths, steps, seed, lr, batch, c) for c in configs}


def dim0_rows(rows: int, world_size: int, rank: int) -> tuple:
    """[start, stop) of the dim-0 rows rank `rank` holds of a parameter with `rows` rows: chunks of
    ceil(rows / N) (torch.chunk, Shard(0)); the last ranks may hold fewer or none."""
    c = -(-rows // world_size)
    return min(rank * c, rows), min((rank + 1) * c, rows)


def fsdp_reduce(unit: list, shapes: dict, local: list, config: str) -> list:
    """One FSDPParamGroup's reduce-scatter in zerosim: `unit` its parameters' names (registration order), `shapes`
    {name: shape}, `local[r]` rank r's {name: gradient} (param_dtype values). Returns, per rank, {name: its fp32
    dim-0 shard of the averaged gradient}."""
    from zerosim.cluster import Cluster
    from zerosim.collectives import gloo_reduce_scatter
    from zerosim.parallel.data.recipes import RECIPES, fsdp2_divide_factors
    from zerosim.precision import MixedPrecision, cast, get_format

    param_dtype, reduce_dtype = CONFIGS[config]
    n, wire = len(local), get_format(reduce_dtype)
    policy = MixedPrecision(compute=param_dtype, master="fp32", reduce=reduce_dtype, reduction="fsdp2",
                            allreduce="gloo")
    factors = fsdp2_divide_factors(n, reduce_dtype)  # fp32/bf16: no pre/post division, AVG (SUM for N = 1)
    bufs = []
    for r in range(n):
        blocks = []
        for q in range(n):  # chunk_cat: block q holds every parameter's q-th dim-0 chunk, zero-padded
            for name in unit:
                rows = shapes[name][0]
                cols = int(np.prod(shapes[name][1:], dtype=np.int64))
                g = np.asarray(local[r][name], np.float32).reshape(rows, cols)
                a, b = dim0_rows(rows, n, q)
                chunk = np.zeros((-(-rows // n), cols), np.float32)  # (ceil(rows/N), cols): padded chunk
                chunk[: b - a] = g[a:b]
                blocks.append(chunk.reshape(-1))
        bufs.append(cast(cast(np.concatenate(blocks), get_format(param_dtype)), wire))  # (N*s,) reduce dtype
    pieces = gloo_reduce_scatter(Cluster(n, trace="call"), bufs, op=factors.reduce_scatter_op)
    out = []
    for r, piece in enumerate(pieces):
        piece = RECIPES["fsdp2"].after(piece, policy, n)  # post-division (none here), then .to(fp32)
        shard, start = {}, 0
        for name in unit:
            rows = shapes[name][0]
            cols = int(np.prod(shapes[name][1:], dtype=np.int64))
            a, b = dim0_rows(rows, n, r)
            shard[name] = np.asarray(piece[start : start + (b - a) * cols], np.float32)
            start += -(-rows // n) * cols
        out.append(shard)
    return out


def shapes_of(widths) -> dict:
    """{torch name: shape} of the MLP's parameters: "2k.weight" (D_k+1, D_k), "2k.bias" (D_k+1,)."""
    out = {}
    for k, (a, b) in enumerate(zip(widths, widths[1:])):
        out[f"{2 * k}.weight"], out[f"{2 * k}.bias"] = (b, a), (b,)
    return out


def compare_fsdp(ranks: list, widths, config: str, grads: str = "torch", sqrt: str = "torch",
                 lr: float = 0.01) -> list:
    """zerosim's FSDP2 step by step against torch's parameters after each step (every rank's fp32 shards, joined
    in rank order): one `StepParity` a step. `grads` "torch" feeds torch's local gradients in, "zerosim" computes
    them in `param_dtype` (_own_grads.py); `sqrt` "torch" substitutes torch's sqrt in Adam (_sqrt.py)."""
    from zerosim.frameworks.torch._own_grads import local_gradients
    from zerosim.frameworks.torch._sqrt import TorchSqrtAdam
    from zerosim.optim import Adam

    runs = [r[config] for r in ranks]
    n, shapes = len(runs), shapes_of(widths)
    units = [[f"{2 * k}.weight", f"{2 * k}.bias"] for k in range(len(widths) - 1)]  # one fully_shard a Linear
    adam = TorchSqrtAdam(lr=lr) if sqrt == "torch" else Adam(lr=lr, formula="torch")
    full = {k: v.copy() for k, v in runs[0]["initial"].items()}  # (numel,) fp32: the weights every rank's shards make
    state = {k: {"m": np.zeros_like(v), "v": np.zeros_like(v)} for k, v in full.items()}
    out = []
    for step in range(len(runs[0]["records"])):
        theirs = [run["records"][step] for run in runs]
        before = runs[0]["initial"] if step == 0 else _joined(runs, step - 1, "params", shapes)
        carried = first_difference([("carried", full, before)])
        if grads == "torch":
            local = [rec["local"] for rec in theirs]
        else:
            local = [local_gradients(widths, full, rec["x"], rec["t"], CONFIGS[config][0]) for rec in theirs]
        reduced = [{} for _ in range(n)]
        for unit in units:
            for r, shard in enumerate(fsdp_reduce(unit, shapes, local, config)):
                reduced[r].update(shard)
        for r in range(n):  # each rank's Adam on its own fp32 shards (views into the full weights)
            for name, g in reduced[r].items():
                a, b = dim0_rows(shapes[name][0], n, r)
                cols = full[name].size // shapes[name][0]
                if b > a:
                    adam.step(full[name][a * cols : b * cols], g, {s: state[name][s][a * cols : b * cols]
                                                                  for s in ("m", "v")}, step + 1)
        mine_reduced = {(r, k): v for r, shard in enumerate(reduced) for k, v in shard.items()}
        their_reduced = {(r, k): rec["reduced"][k] for r, rec in enumerate(theirs) for k in shapes}
        their_params = _joined(runs, step, "params", shapes)
        cause = carried or first_difference([
            ("local", _by_rank(local), _by_rank([rec["local"] for rec in theirs])),
            ("reduced", mine_reduced, their_reduced), ("update", full, their_params)])
        out.append(step_parity(step + 1, full, their_params, cause))
    return out


def _by_rank(local: list) -> dict:
    return {(r, k): np.asarray(v, np.float32) for r, grads in enumerate(local) for k, v in grads.items()}


def _joined(runs: list, step: int, key: str, shapes: dict) -> dict:
    """torch's full fp32 tensors at `step`: every rank's dim-0 shard of each, joined in rank order."""
    return {k: np.concatenate([run["records"][step][key][k] for run in runs]) for k in shapes}
