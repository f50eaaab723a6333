"""Hand formulas: the bytes one rank holds on its device, its host and its NVMe, per stage and placement.

Letters: Ψ parameters, N ranks, s = ceil(Ψ/N) the shard, p the 16-bit bytes (2), g the gradient's bytes (2, or 4
accumulated in fp32), K the optimizer state's bytes (Adam: 8). A buffer's size is the plan's (Ψ whole or s sharded:
parallel/data/_plan.py); the placement says on which tier it lives. With Adam and fp16/bf16, ZeRO-Offload's
(optimizer-cpu) resting bytes per rank:

    stage   device            host                                        DeepSpeed's own host buffers
    0       2Ψ + 2Ψ           (4 + K)Ψ + 2Ψ (the 16-bit pinned copy)       -
    1       2Ψ + 2Ψ           (4 + K)s + 2s                                fp32 master + m + v, the pinned 16-bit
    2       2Ψ                (2 + 4 + K)s + 2s                            ... + its fp32 grad partition (4s where
                                                                          zerosim keeps the 16-bit reduced shard, 2s,
                                                                          and the fp32 copy only during the step)
    3       2s                (2 + 4 + K)s                                 stage3.py: the same, params on the device

the ZeRO-Offload paper's split (section 4): "fp16 parameters on the GPU, fp16 gradients and all optimizer states
(fp32 parameters, momentum, variance) on the CPU": 2Ψ device, (2 + 12)Ψ host at N = 1, which stage 2 gives. With
ZeRO-Infinity (params-nvme) the device keeps nothing at rest and the NVMe holds (2 + 4 + K)s.
"""

from __future__ import annotations

from dataclasses import field

from zerosim._dataclass import dataclass
from zerosim.collectives import ShardLayout
from zerosim.parallel.data import get_plan
from zerosim.parallel.offload._placement import TIERS, Placement


@dataclass(frozen=True)
class OffloadMemory:
    """Resting bytes of one rank per tier, by ledger kind (params, grads, master, optim:<x>)."""

    stage: int
    placement: str
    tiers: dict = field(default_factory=dict)  # {"device" | "host" | "nvme": {kind: bytes}}

    def total(self, tier: str) -> int:
        return sum(self.tiers.get(tier, {}).values())


def offload_memory(params: int, ranks: int, stage: int, placement: Placement, param_bytes: int = 2,
                   grad_bytes: int = 2, state: tuple = (("optim:m", 4), ("optim:v", 4)), master_bytes: int = 4,
                   dpu: bool = False) -> OffloadMemory:
    """What the ledgers hold at rest after a step of `stage` with `placement` (see the module docstring)."""
    plan = get_plan(stage)
    layout = ShardLayout(int(params), ranks)
    n = plan.sizes(layout.padded, layout.shard_size)  # {buffer: elements}
    region = n["master"]
    held = plan.bytes_of(layout.padded, layout.shard_size,  # {part: bytes}: the plan's one rule
                         {"params": param_bytes, "grads": grad_bytes, "master": master_bytes, **dict(state)})
    tiers = {t: {} for t in TIERS}
    for buffer in ("params", "grads", "master"):
        where = placement.tier(buffer) if buffer != "grads" or plan.shards("grads") else "device"
        tiers[where][buffer] = tiers[where].get(buffer, 0) + held[buffer]
    for kind, _ in state:
        tiers[placement.tier("optimizer")][kind] = held[kind]
    host = tiers["host"]
    if placement.offloads_optimizer and not plan.shards("params") and placement.cast_on == "host":
        host["params"] = host.get("params", 0) + param_bytes * region  # the pinned 16-bit copy (offload.bit16)
    if dpu:
        own = n["params"] if plan.shards("params") or not plan.shards("master") else region
        host["params"] = host.get("params", 0) + param_bytes * own  # DPU's pending params
        host["offload"] = host.get("offload", 0) + 8  # its step counter
    kept = {t: {k: v for k, v in kinds.items() if v} for t, kinds in tiers.items()}
    return OffloadMemory(stage, placement.name, kept)
