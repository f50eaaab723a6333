"""DPU, the ZeRO-Offload paper's one-step delayed parameter update (Ren et al., 2021, section 5.2): the CPU applies step
t's gradient while the GPU already runs step t+1, on params that do not have step t's update yet. So from the first
delayed step d on, the forward and backward of step t+1 read the params of step t-1's update:

    w_t = U(w_{t-1}, g_t),   g_t = grad L(w_{t-2})   (t > d; the paper warms up without delay first)

On the ranks (at the contract's after_update, once the update wrote w_t into the 16-bit params): the params just made
go into a pending host buffer and the device keeps the ones pending since the last step (at the first delayed step,
the params it had before). The fp32 master and the optimizer state are not delayed; only what the GPU computes with.
reference/_stale.py is the oracle that applies the same stale update, on one device.
"""

from __future__ import annotations

import numpy as np

from zerosim.parallel.data import own_params

PENDING = "offload.dpu pending"  # (region,) 16-bit host buffer: the params the device gets one step late
STEPS = "offload.dpu steps"  # (1,) int64 host counter: optimizer steps this rank took (warmup runs undelayed)


def setup(ctx) -> None:
    """Each rank's pending buffer on its host, holding the params it starts from, and its step counter."""
    for rank in ctx.ranks:
        own, host = own_params(rank, ctx.plan, ctx.layout), rank.ledger_of("host")
        host.alloc(PENDING, own.shape, own.dtype, "params").array[...] = own
        host.alloc(STEPS, 1, np.int64, "offload", fill=0)


def delay(ctx, warmup: int) -> None:
    """After the update wrote w_t into the 16-bit params: past `warmup` steps, the device gets the pending params
    (w_{t-1}) and w_t waits in the pending buffer; during the warmup the pending buffer only follows."""
    if not ctx.cluster.backend.holds_values:  # the meta backend: no params to hand over, no count to test
        return
    for rank in ctx.ranks:
        host = rank.ledger_of("host")
        own, pending, steps = own_params(rank, ctx.plan, ctx.layout), host.get(PENDING).array, host.get(STEPS).array
        steps += 1
        fresh = own.copy()  # (region,) 16-bit: w_t as the update rounded it
        if steps[0] > warmup:
            own[...] = pending
        pending[...] = fresh
