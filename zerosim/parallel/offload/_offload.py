"""Offload as a parallelism beside data parallelism: the plan's buffers placed on host or NVMe (`place`), the copies
each step makes at the contract's points, and DPU's one-step delayed parameter update (_dpu.py).

    point            what offload does there (DeepSpeed 0.19.8 stage_1_and_2.py / stage3.py, torch 2.13 FSDP2)
    place            the plan's placement: master, optimizer state, the fp32 gradient (and sharded grads, params)
                     on host or NVMe, as the configuration says (_placement.py)
    setup            the host's pinned 16-bit copy of the region the optimizer updates (DeepSpeed's
                     param_buffer_of_bit16_for_cpu_offload_groups); DPU's pending buffer
    before_unit      params on host/NVMe: the unit's shard read from NVMe, then copied to the device, before it is
                     used (DeepSpeed's partitioned_param_swapper / FSDP2's copy before its all-gather)
    after_unit       sharded grads on host: the unit's reduced shard copied to the host in fp32, beside the next
                     unit's backward (the optimizer step waits for the copies, not the compute)
    end_of_backward  whole grads (stages 0/1): the reduced region to the host; NVMe optimizer: its swap-in
    after_update     the updated 16-bit region to the device (or, params on NVMe, out to NVMe); NVMe optimizer:
                     its swap-out; DPU: the update held back one step

The optimizer itself steps where the plan places it (parallel/data/_update.py marks its `OptimizerStep.where`),
with whatever formula it was given: `get_optimizer("adam", formula="deepspeed-cpu")` is DeepSpeedCPUAdam.
"""

from __future__ import annotations

import numpy as np

from zerosim.cluster import Handle
from zerosim.parallel._contract import Parallelism
from zerosim.parallel.data import own_params
from zerosim.parallel.offload import _dpu as dpu
from zerosim.parallel.offload._placement import Placement, get_placement
from zerosim.parallel.offload._transfers import copy, region_elements, unit_elements

WHOSE = {  # a framework's offload or recipe, by its flags' names (the command line's and the Python API's)
    "deepspeed": "DeepSpeed's (offload_optimizer / offload_param, --offload-optimizer; recipes deepspeed-*)",
    "fsdp2": "FSDP2's (CPUOffloadPolicy, --offload-policy cpu; recipe fsdp2)",
    "ddp": "torch DDP's (recipe ddp)",
}
BIT16 = "offload.bit16"  # (region,) 16-bit host buffer: the updated region cast on the host, copied to the device


class Offload(Parallelism):
    """Offload the optimizer (and, at stage 3, the params) to host or NVMe.

    Args:
        optimizer: DeepSpeed's offload_optimizer.device: "cpu" (the default, unless fsdp2), "nvme" or None.
        params: DeepSpeed's offload_param.device: "cpu", "nvme" or None (stage 3 only).
        fsdp2: FSDP2's fully_shard(offload_policy=CPUOffloadPolicy()) instead (stage 3; params, grads, optimizer).
        dpu: the ZeRO-Offload paper's one-step delayed parameter update: step t's forward and backward run on the
            params of step t-2's update while the CPU applies step t-1's (_dpu.py).
        dpu_warmup: optimizer steps taken without delay first (the paper: a few dozen; 0 by default).
        placement: a `Placement` instead of the three names above.
    """

    name = "offload"
    refuses = {"tensor parallel": "offload beside tensor parallelism is not modelled (a TP rank's slice on the host, "
                                  "its copies beside TP's collectives): drop the Offload or the TensorParallel"}

    def __init__(self, optimizer: str | None = ..., params: str | None = None, fsdp2: bool = False,
                 dpu: bool = False, dpu_warmup: int = 0, placement: Placement | None = None):
        if optimizer is ...:  # not given: DeepSpeed's ZeRO-Offload, or FSDP2's policy alone
            optimizer = None if fsdp2 else "cpu"
        self.placement = placement if placement is not None else get_placement(optimizer, params, fsdp2)
        if not isinstance(self.placement, Placement):
            raise TypeError(f"placement must be a zerosim.parallel.offload.Placement, got {placement!r}")
        if type(dpu_warmup) is not int or dpu_warmup < 0:
            raise ValueError(f"dpu_warmup must be an integer >= 0, got {dpu_warmup!r}")
        for name, value in (("dpu", dpu), ("fsdp2", fsdp2)):  # bool("no") is True: a string is refused, not read
            if not isinstance(value, (bool, np.bool_)):
                raise ValueError(f"{name} must be True or False, got {value!r}")
        if dpu_warmup and not dpu:  # the steps before DPU starts: without DPU nothing reads them
            raise ValueError(f"dpu_warmup={dpu_warmup} counts the steps taken before DPU's delay starts; without "
                             "dpu=True there is no delay: add dpu=True (--dpu WARMUP) or drop dpu_warmup")
        self.dpu, self.dpu_warmup = bool(dpu), dpu_warmup
        self._copies = {}  # {id(trace): Handle}: the gradient copies of the step in flight (bookkeeping, not state)

    def __repr__(self) -> str:
        return f"Offload({self.placement.name!r}, dpu={self.dpu}" + (f", dpu_warmup={self.dpu_warmup})" if
                                                                     self.dpu_warmup else ")")

    def __eq__(self, other) -> bool:  # a description, compared by what it describes (MPI ranks check they agree)
        return isinstance(other, Offload) and (self.placement, self.dpu, self.dpu_warmup) == (
            other.placement, other.dpu, other.dpu_warmup)

    def __hash__(self) -> int:
        return hash((self.placement, self.dpu, self.dpu_warmup))

    # -- before any state is born ----------------------------------------------------------------
    def place(self, plan):
        from dataclasses import replace

        p = self.placement
        if plan.stage not in p.stages:
            raise ValueError(f"offload {p.name!r} runs at ZeRO stage {' or '.join(map(str, p.stages))}, not "
                             f"{plan.label} (DeepSpeed offloads through its ZeRO optimizers, stages 1-3; its "
                             "offload_param and NVMe swapping need stage 3)")
        if self.dpu and not p.offloads_optimizer:
            raise ValueError("DPU delays the CPU's update: it needs the optimizer offloaded")
        return replace(plan, placement=p.for_plan(plan))

    def check_recipe(self, recipe) -> None:
        """One framework's offload is refused under the other framework's gradient recipe: DeepSpeed offloads only
        inside its ZeRO optimizers (0.19.8 deepspeed/runtime/zero/stage_1_and_2.py DeepSpeedZeroOptimizer's
        cpu_offload, stage3.py DeepSpeedZeroOptimizer_Stage3's offload_optimizer / offload_param), which reduce
        gradients their own way; FSDP2's CPUOffloadPolicy is an argument of torch 2.13's fully_shard
        (_fully_shard/_fsdp_api.py, applied by _fsdp_param.py FSDPParam), whose reduce-scatter is foreach_reduce.
        Neither framework runs the other's offload, so no mapping would be a run anyone makes. The seeds' own
        protocol (no framework) takes either."""
        theirs, mine = recipe.rules.framework, self.placement.framework
        if theirs is not None and theirs != mine:
            raise ValueError(f"offload {self.placement.name!r} is {WHOSE[mine]}; the gradient recipe "
                             f"{recipe.reduction!r} is {WHOSE.get(theirs, theirs)}: neither framework runs the other's "
                             f"offload. Give a recipe of the offload's framework, or that framework's offload")

    def _keeps_bit16(self, plan) -> bool:
        """DeepSpeed's stage_1_and_2.py keeps a pinned 16-bit host copy of the region (stage3.py copies the fp32
        partition straight into the device's 16-bit one; FSDP2 casts on the device)."""
        return self.placement.offloads_optimizer and not plan.shards("params") and self.placement.cast_on == "host"

    def setup(self, ctx) -> None:
        fmt = ctx.policy.compute_format
        for rank, n in zip(ctx.ranks, region_elements(ctx)):
            if self._keeps_bit16(ctx.plan):
                # (region,) 16-bit pinned host buffer the updated master is cast into before its copy to the device:
                # DeepSpeed 0.19.8 param_buffer_of_bit16_for_cpu_offload_groups, born torch.full(..., 0.0)
                rank.ledger_of("host").alloc(BIT16, n, fmt.dtype, "params", fill=0)
        if self.dpu:
            dpu.setup(ctx)

    # -- the step's points -----------------------------------------------------------------------
    def before_unit(self, ctx, passes, ops) -> Handle:
        op = ops[0]
        if not self.placement.offloads_params or op.layer < 0 or not op.computes:
            return Handle()
        u, handle = unit_elements(ctx, op.layer), Handle()
        fmt = "fp32" if self.placement.cast_on == "device" else ctx.policy.compute_format.name
        width = 4 if fmt == "fp32" else ctx.policy.compute_format.bits // 8
        # params on the host carry what the CPU optimizer made: the fetch starts once its step is done (DeepSpeed's
        # step() and FSDP2's optimizer.step() on CPU tensors return when it is; with DPU, the step before's)
        made_by = None if self.placement.tier("params") != "host" else (
            "after previous host" if self.dpu else "after host")
        with ctx.cluster.trace.about(purpose="offload", layers=(op.layer,)):
            if self.placement.tier("params") == "nvme":
                handle += copy(ctx, "nvme_read", u, width, fmt, f"{ctx.names[op.layer]} params")
            handle += copy(ctx, "h2d", u, width, fmt, f"{ctx.names[op.layer]} params", made_by)
        return handle

    def after_unit(self, ctx, passes, ops) -> Handle:
        op = ops[-1]
        if op.kind != "backward" or ctx.plan.where("grads") == "device":
            return Handle()
        with ctx.cluster.trace.about(purpose="offload", layers=(op.layer,)):
            handle = copy(ctx, "d2h", unit_elements(ctx, op.layer), 4, "fp32", f"{ctx.names[op.layer]} grads")
        # The next unit's backward does not wait for this copy: DeepSpeed 0.19.8 issues it non_blocking on the
        # reduction stream (stage_1_and_2.py async_inplace_copy_grad_to_fp32_buffer_from_gpu) and waits for them all
        # before the step (_wait_for_offload_copies); FSDP2 on its post-reduce stream (_fsdp_collectives.py
        # foreach_reduce, non_blocking with pinned memory). So the step waits for them: end_of_backward's handle.
        trace = ctx.cluster.trace
        self._copies[id(trace)] = trace.live(self._copies.get(id(trace), Handle())) + handle
        return Handle()

    def end_of_backward(self, ctx, reduced) -> Handle:
        trace = ctx.cluster.trace
        handle = trace.live(self._copies.pop(id(trace), Handle()))  # the units' gradient copies, still in flight
        n = region_elements(ctx)
        with ctx.cluster.trace.about(purpose="offload", layers=()):
            if self.placement.offloads_optimizer and ctx.plan.where("grads") == "device":
                handle += copy(ctx, "d2h", n, 4, "fp32", "reduced grads")
            if self.placement.tier("optimizer") == "nvme":
                handle += copy(ctx, "nvme_read", n, _state_width(ctx), "fp32", "optimizer swap-in")
        return handle

    def after_update(self, ctx) -> Handle:
        handle, n = Handle(), region_elements(ctx)
        if self._keeps_bit16(ctx.plan):  # what the copy to the device carries: the update's 16-bit region
            for rank in ctx.ranks:
                # DeepSpeed step(): bit16_partition_buffer.copy_(fp32_partition) on the host (the update's cast, the
                # same bits), then bit16_partitions[...].copy_(bit16_partition_buffer) to the device
                rank.ledger_of("host").get(BIT16).array[...] = own_params(rank, ctx.plan, ctx.layout)
        if self.dpu:
            dpu.delay(ctx, self.dpu_warmup)
        fmt = ctx.policy.compute_format
        bits16 = fmt.bits // 8
        with ctx.cluster.trace.about(purpose="offload", layers=()):
            if self.placement.tier("optimizer") == "nvme":
                handle += copy(ctx, "nvme_write", n, _state_width(ctx), "fp32", "optimizer swap-out", "after host")
            if not self.placement.offloads_optimizer:
                return handle
            made_by = "after previous host" if self.dpu else "after host"  # DPU: the pending params, the step before's
            if self.placement.tier("params") == "nvme":
                handle += copy(ctx, "nvme_write", n, bits16, fmt.name, "updated params", made_by)
            elif not self.placement.offloads_params:
                handle += copy(ctx, "h2d", n, bits16, fmt.name, "updated params", made_by)
        return handle


def _state_width(ctx) -> int:
    """Bytes an element the NVMe optimizer swaps: the fp32 master and each state."""
    return sum(np.dtype(b.dtype).itemsize for b in [ctx.ranks[0].master, *ctx.ranks[0].optim.values()] if b)
