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
(`collectives/chunk_maps/_gloo.py`) — or, for contrast, zerosim's own ring over the buckets (`reduction="ring"`). The
comparison is DDP's reduced `param.grad`, bit for bit, per step.

torch is imported only inside the rank processes (_launch.py).
"""

from __future__ import annotations

import numpy as np

from zerosim.frameworks.torch._common import StepParity, ordered, step_parity
from zerosim.frameworks.torch._common import torch_batch as _batch
from zerosim.frameworks.torch._common import torch_model as _model
from zerosim.frameworks.torch._launch import run_on_gloo

__all__ = ["StepParity", "compare_ddp", "ddp_reduce", "ordered", "probe_buckets", "run_torch_ddp", "zerosim_ddp"]


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


def probe_buckets(torch, widths, seed: int, rank: int, batch: int) -> list:
    """DDP's buckets on this rank: [iteration 1's layout, the layout rebuilt after it] (`_layout`), read from a
    probe DDP with gradient_as_bucket_view=True (the same bucket caps as the defaults)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    probe = DDP(_model(torch, widths, seed), gradient_as_bucket_view=True)
    layouts = []
    for step in range(2):  # iteration 1: the initial buckets; iteration 2: rebuilt in gradient-ready order
        x, t = _batch(torch, widths, seed, step, rank, batch)
        torch.nn.functional.mse_loss(probe(x), t).backward()
        layouts.append(_layout(probe))
    return layouts


def _ddp_rank(rank: int, world: int, widths, steps: int, seed: int, lr: float, batch: int) -> dict:
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    layouts = probe_buckets(torch, widths, seed, rank, batch)
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


def ddp_reduce(layout: list, local: list, reduction: str = "gloo") -> dict:
    """One step of DDP's reduction in zerosim: `local[r]` is rank r's {name: (n,) fp32 gradient}, `layout` DDP's
    buckets ([(name, bucket, offset, numel)], `_layout`); each bucket gets the `ddp` recipe's op and one
    all-reduce, `reduction` "gloo" (gloo's all-reduce, as torch on CPU runs it) or "ring" (zerosim's ring).
    Returns {name: reduced (n,) fp32}, the same on every rank."""
    from zerosim.cluster import Cluster
    from zerosim.collectives import all_reduce, gloo_all_reduce
    from zerosim.parallel.data.recipes import RECIPES

    n = len(local)
    op = RECIPES["ddp"].op(None, n)  # grad * fl32(1/N), stored fp32: Reducer::mark_variable_ready_dense
    collective = {"gloo": gloo_all_reduce, "ring": all_reduce}[reduction]
    reduced = {}
    for bucket in sorted({b for _, b, _, _ in layout}):
        members = [(name, off, size) for name, b, off, size in layout if b == bucket]
        length = max(off + size for _, off, size in members)
        bufs = []
        for r in range(n):
            buf = np.zeros(length, np.float32)  # (bucket length,) fp32: DDP's bucket buffer
            for name, off, size in members:
                buf[off : off + size] = np.asarray(local[r][name], np.float32).reshape(-1)
            bufs.append(buf)
        result = collective(Cluster(n, trace="call"), bufs, op=op)[0]
        for name, off, size in members:
            reduced[name] = result[off : off + size]
    return reduced


def zerosim_ddp(ranks: list, reduction: str = "gloo") -> list:
    """zerosim's DDP reduction of torch's local gradients, step by step: per step {name: reduced (n,) fp32}.
    `reduction` "gloo": gloo's all-reduce per bucket (as torch on CPU runs it); "ring": zerosim's ring."""
    out = []
    for step in range(len(ranks[0]["records"])):
        layout = ranks[0]["layouts"][min(step, 1)]  # iteration 1's buckets, then the rebuilt ones
        out.append(ddp_reduce(layout, [r["records"][step]["local"] for r in ranks], reduction))
    return out


def compare_ddp(ranks: list, reduction: str = "gloo") -> list:
    """Per step, zerosim's reduction (`zerosim_ddp`) against DDP's reduced gradients on rank 0 (every rank holds
    the same after an all-reduce): one `StepParity` a step."""
    mine = zerosim_ddp(ranks, reduction)
    return [step_parity(step + 1, reduced, ranks[0]["records"][step]["reduced"], "reduced")
            for step, reduced in enumerate(mine)]
