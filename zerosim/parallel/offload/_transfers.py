"""The copies offload makes, as events: device <-> host over PCIe, host <-> NVMe, each one call over every local rank
(one event per rank, its own copy on its own link: cluster/_trace.py `Trace.transfer`) returning the handle the work
waiting for it names. The timeline runs them on their own streams (analysis/timeline/_simulate.py).

Letters: s the shard, u a unit's elements a rank owns (`layout.counts(unit)[rank]`). What each copy moves, per rank:

    a unit's gradient shard, to the host       u x 4 B (fp32)      stage_1_and_2.py async_inplace_copy_grad_to_fp32_
                                                                  buffer_from_gpu: src.to(fp32), then copy_ to CPU
    the reduced gradient region, to the host   region x 4 B        the same, at stages 0/1 (the region: all, or s)
    the updated 16-bit region, to the device   region x 2 B        step(): bit16_partition_buffer.copy_(fp32) on the
                                                                  host, then bit16_partitions[...].copy_ (2 bytes)
    a unit's param shard, to the device        u x 2 B (DeepSpeed) stage 3 offload_param: ds_tensor on CPU, copied
                                               u x 4 B (FSDP2)     in before its all-gather; FSDP2 copies the fp32
                                                                  CPU shard and casts on the device
    NVMe swaps of the optimizer (in, out)      region x (4 + K) B  partitioned_optimizer_swapper.py: fp32 params and
                                                                  each state swapped in before the step, out after
    NVMe reads of a unit's params              u x 2 B             partitioned_param_swapper.py swap_in
"""

from __future__ import annotations

from zerosim.cluster import Handle


def unit_elements(ctx, layer: int) -> list:
    """u for each local rank: the elements of unit `layer` in its shard (the sharded layouts' counts)."""
    counts = ctx.layout.counts(layer)
    return [counts[rank.index] for rank in ctx.ranks]


def region_elements(ctx) -> list:
    """Each local rank's optimizer region: its shard, or (stage 0) the whole padded buffer."""
    regions = [ctx.plan.region(ctx.layout, rank.index) for rank in ctx.ranks]
    return [r.stop - r.start for r in regions]


def copy(ctx, kind: str, elements: list, itemsize: int, dtype: str, tag: str, after_host: str | None = None) -> Handle:
    """One copy of `elements[i]` `dtype` elements on every local rank i; nothing when every count is 0. `after_host`:
    "after host" when it carries what the CPU optimizer just made, "after previous host" (DPU) what its step before
    made; the timeline starts it when that step ends."""
    if not any(elements):
        return Handle()
    return ctx.cluster.trace.transfer(kind, elements, dtype, itemsize, [r.index for r in ctx.ranks], tag, after_host)
