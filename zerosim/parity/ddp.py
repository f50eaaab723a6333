"""DDP's gradient reduction, real torch beside zerosim: the parity kit's first comparison.

torch side (N gloo processes, fp32, one CPU thread each): an MLP of `nn.Linear` + ReLU wrapped in
`DistributedDataParallel` with its defaults (bucket_cap_mb 25, a 1 MiB first bucket, no comm hook,
gradient_as_bucket_view False), trained with plain SGD. Every step each rank also runs the same batch through
an undistributed twin holding the same weights: that twin's gradients are the rank's local gradients, made by
the same CPU kernels DDP's backward runs. DDP's buckets are read from torch itself: a probe run with
gradient_as_bucket_view=True, whose `param.grad` are views of the bucket buffers, shows every parameter's
bucket and offset, before (iteration 1) and after (from iteration 2) the rebuild in gradient-ready order.

zerosim side: each rank's local gradients laid out in those buckets, the `ddp` recipe's op (`grad * (1./N)`
rounded to fp32, `reducer.cpp: Reducer::mark_variable_ready_dense`) and one gloo all-reduce SUM per bucket
(`collectives/gloo.py`) — or, for contrast, zerosim's own ring over the buckets (`reduction="ring"`). The
comparison is DDP's reduced `param.grad`, bit for bit, per step.

torch is imported only inside the rank processes (launch.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from zerosim.parity.launch import run_on_gloo


@dataclass(frozen=True)
class StepParity:
    """One step's comparison: the fraction of gradient elements whose bits equal torch's, and the largest
    distance in fp32 ulps (0 where every bit agrees)."""

    step: int
    equal: float
    max_ulps: int


def _model(torch, widths, seed: int):
    torch.manual_seed(seed)
    layers = []
    for i, (a, b) in enumerate(zip(widths, widths[1:])):
        layers.append(torch.nn.Linear(a, b))
        if i < len(widths) - 2:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def _batch(torch, widths, seed: int, step: int, rank: int, batch: int):
    g = torch.Generator().manual_seed(seed * 1_000_003 + step * 1009 + rank)
    return torch.randn(batch, widths[0], generator=g), torch.randn(batch, widths[-1], generator=g)


def _layout(model) -> list:
    """[(name, bucket, offset, numel)]: where each parameter's gradient sits in DDP's bucket buffers (the
    gradients are views of them with gradient_as_bucket_view=True)."""
    storages = {}
    out = []
    for name, p in model.module.named_parameters():
        key = p.grad.untyped_storage().data_ptr()
        bucket = storages.setdefault(key, len(storages))
        out.append((name, bucket, int(p.grad.storage_offset()), p.numel()))
    return out


def _ddp_rank(rank: int, world: int, widths, steps: int, seed: int, lr: float, batch: int) -> dict:
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    probe = DDP(_model(torch, widths, seed), gradient_as_bucket_view=True)
    layouts = []
    for step in range(2):  # iteration 1: the initial buckets; iteration 2: rebuilt in gradient-ready order
        x, t = _batch(torch, widths, seed, step, rank, batch)
        torch.nn.functional.mse_loss(probe(x), t).backward()
        layouts.append(_layout(probe))
    model = DDP(_model(torch, widths, seed))  # the defaults
    twin = _model(torch, widths, seed)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    records = []
    for step in range(steps):
        twin.load_state_dict(model.module.state_dict())
        x, t = _batch(torch, widths, seed, step, rank, batch)
        twin.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(twin(x), t).backward()
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(model(x), t).backward()
        records.append({
            "local": {n: p.grad.detach().reshape(-1).numpy().copy() for n, p in twin.named_parameters()},
            "reduced": {n: p.grad.detach().reshape(-1).numpy().copy() for n, p in model.module.named_parameters()},
        })
        opt.step()
    return {"layouts": layouts, "records": records}


def run_torch_ddp(world_size: int, widths=(16, 32, 8), steps: int = 20, seed: int = 0, lr: float = 0.05,
                  batch: int = 4) -> list:
    """Real torch DDP on `world_size` gloo processes (module docstring); per rank {"layouts", "records"}."""
    widths = tuple(int(w) for w in widths)
    if len(widths) < 2 or min(widths) < 1:
        raise ValueError(f"widths must be at least two positive layer widths, got {list(widths)}")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    return run_on_gloo(_ddp_rank, world_size, widths, steps, seed, lr, batch)


def ordered(x: np.ndarray) -> np.ndarray:
    """fp32 values as integers in the order of the numbers they encode (-0.0 and +0.0 both 0): a difference of
    these is a distance in ulps."""
    i = np.asarray(x, np.float32).view(np.int32).astype(np.int64)
    return np.where(i < 0, -(i & 0x7FFFFFFF), i)


def zerosim_ddp(ranks: list, reduction: str = "gloo") -> list:
    """zerosim's DDP reduction of torch's local gradients, step by step: per step {name: reduced (n,) fp32}.
    `reduction` "gloo": gloo's all-reduce per bucket (as torch on CPU runs it); "ring": zerosim's ring."""
    from zerosim.cluster import Cluster
    from zerosim.collectives import all_reduce, gloo_all_reduce
    from zerosim.zero.recipes import RECIPES

    n = len(ranks)
    op = RECIPES["ddp"].op(None, n)  # grad * fl32(1/N), stored fp32: Reducer::mark_variable_ready_dense
    collective = {"gloo": gloo_all_reduce, "ring": all_reduce}[reduction]
    out = []
    for step in range(len(ranks[0]["records"])):
        layout = ranks[0]["layouts"][min(step, 1)]  # iteration 1's buckets, then the rebuilt ones
        reduced = {}
        for bucket in sorted({b for _, b, _, _ in layout}):
            members = [(name, off, size) for name, b, off, size in layout if b == bucket]
            length = max(off + size for _, off, size in members)
            bufs = []
            for r in range(n):
                buf = np.zeros(length, np.float32)  # (bucket length,) fp32: DDP's bucket buffer
                for name, off, size in members:
                    buf[off : off + size] = ranks[r]["records"][step]["local"][name]
                bufs.append(buf)
            result = collective(Cluster(n, trace="call"), bufs, op=op)[0]
            for name, off, size in members:
                reduced[name] = result[off : off + size]
        out.append(reduced)
    return out


def compare_ddp(ranks: list, reduction: str = "gloo") -> list:
    """Per step, zerosim's reduction (`zerosim_ddp`) against DDP's reduced gradients on rank 0 (every rank holds
    the same after an all-reduce): one `StepParity` a step."""
    mine = zerosim_ddp(ranks, reduction)
    out = []
    for step, reduced in enumerate(mine):
        theirs = ranks[0]["records"][step]["reduced"]
        a = np.concatenate([reduced[k] for k in theirs])
        b = np.concatenate([theirs[k] for k in theirs])
        same = a.view(np.uint32) == b.view(np.uint32)
        out.append(StepParity(step + 1, float(same.mean()), int(np.abs(ordered(a) - ordered(b)).max(initial=0))))
    return out
