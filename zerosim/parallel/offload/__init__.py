"""Offload: the optimizer (ZeRO-Offload), and at stage 3 the params too (ZeRO-Infinity), on host memory or NVMe, and
FSDP2's CPUOffloadPolicy; DPU's one-step delayed update. A parallelism beside data parallelism, speaking to the step
through the contract (parallel/_contract.py): where each buffer lives is data on the plan (`place`), each copy an event.

    _placement.py   Placement, PLACEMENTS, get_placement: which buffers leave the device, after DeepSpeed's
                    offload_optimizer / offload_param and FSDP2's CPUOffloadPolicy (the placement apart from its
                    copies);
                    deepspeed_placement: what DeepSpeed runs for its two keys at each stage; host_optimizer: the
                    CPU optimizer DeepSpeed steps there (DeepSpeedCPUAdam)
    _transfers.py   the copies, device <-> host over PCIe and host <-> NVMe, as events with bytes and a link
    _offload.py     Offload: the contract's points, what it places, copies and allocates at each
    _dpu.py         the one-step delayed parameter update on the ranks
    _memory.py      hand formulas: device, host and NVMe bytes per rank of each placement and stage

    engine = ZeroEngine(model, cluster, 2, get_optimizer("adam", formula="deepspeed-cpu"), "bf16-mixed",
                        parallelisms=(Offload("cpu"),))
    rank = engine.cluster.ranks[0]; rank.ledger.by_kind(), rank.ledger_of("host").by_kind()

docs/offload.md walks it through: what fits where, what a step waits for, what staleness does to training.
"""

from zerosim.parallel.offload._memory import OffloadMemory, offload_memory
from zerosim.parallel.offload._offload import Offload
from zerosim.parallel.offload._placement import (
                                                 DEEPSPEED_AT_STAGE,
                                                 DEEPSPEED_CPU_OPTIMIZERS,
                                                 PLACEMENTS,
                                                 TIERS,
                                                 Placement,
                                                 deepspeed_placement,
                                                 get_placement,
                                                 host_optimizer,
)

__all__ = ["DEEPSPEED_AT_STAGE", "DEEPSPEED_CPU_OPTIMIZERS", "Offload", "OffloadMemory", "PLACEMENTS", "Placement",
           "TIERS", "deepspeed_placement", "get_placement", "host_optimizer", "offload_memory"]
