"""The parity kit's comparisons beyond DDP in one launch: DDP + ZeroRedundancyOptimizer (_zero1.py) and FSDP2 in
its settings (_fsdp.py) run one after the other in the same N gloo processes, so torch is started once.

    ranks = run_torch_kits(3, zero1=True, fsdp=("fp32", "bf16"))
    compare_zero1(ranks_of(ranks, "zero1"), widths)       # one StepParity a step
    compare_fsdp(ranks_of(ranks, "fsdp"), widths, "bf16")
"""

from __future__ import annotations

from zerosim.frameworks.torch._fsdp import CONFIGS, _fsdp_rank
from zerosim.frameworks.torch._launch import run_on_gloo
from zerosim.frameworks.torch._zero1 import _zero1_rank


def _kits_rank(rank: int, world: int, widths, steps: int, seed: int, lr: float, batch: int, zero1: bool,
               fsdp: tuple) -> dict:
    out = {}
    if zero1:
        out["zero1"] = _zero1_rank(rank, world, widths, steps, seed, lr, batch)
    if fsdp:
        out["fsdp"] = _fsdp_rank(rank, world, widths, steps, seed, lr, batch, fsdp)
    return out


def run_torch_kits(world_size: int, widths=(16, 32, 8), steps: int = 20, seed: int = 0, lr: float = 0.01,
                   batch: int = 4, zero1: bool = True, fsdp=tuple(CONFIGS)) -> list:
    """Real torch on `world_size` gloo processes: DDP + ZeroRedundancyOptimizer(Adam) if `zero1`, then FSDP2 in
    each setting of `fsdp` (names of fsdp.CONFIGS). Per rank {"zero1": ..., "fsdp": {setting: ...}}."""
    widths = tuple(int(w) for w in widths)
    if len(widths) < 2 or min(widths) < 1:
        raise ValueError(f"widths must be at least two positive layer widths, got {list(widths)}")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    unknown = [c for c in fsdp if c not in CONFIGS]
    if unknown:
        raise ValueError(f"unknown FSDP2 setting(s) {unknown}; choose from {list(CONFIGS)}")
    return run_on_gloo(_kits_rank, world_size, widths, steps, seed, lr, batch, bool(zero1), tuple(fsdp))


def ranks_of(ranks: list, kit: str) -> list:
    """Each rank's records of one kit ("zero1" or "fsdp") from `run_torch_kits`."""
    return [r[kit] for r in ranks]
