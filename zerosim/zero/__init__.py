"""ZeRO engines: stage 0 (plain data parallel), 1 (optimizer state), 2 (+ gradients), 3 (+ params).

    engine.py     ZeroEngine: the step, layer by layer across all local ranks (read this first)
    plan.py       the four stages as plans: what each shards, gathers, reduces and refreshes
    state.py      a rank's params, gradients, fp32 master and optimizer state, born in its ledger
    gather.py     ZeRO-3's per-unit gather and free; the stage-1/2 all-gather after the update
    reduce.py     gradients kept locally (stages 0/1) or reduce-scattered unit by unit (stages 2/3)
    averaging.py  one place for averaging: the frameworks' recipes by name, accumulation format, / (N·K), unscaling
    step_checks.py what the ranks agree on before the update: the overflow flag (loss scaling), the global norm
    clipping.py   clipping's arithmetic: shard sums of squares, torch's clip coefficient, the error bound
    update.py     the optimizer on each rank's region, and the cast back to 16 bits
    flat.py       the flat padded layout: shards, and each unit's window and per-rank counts
"""

from zerosim.zero.engine import ZeroEngine
from zerosim.zero.flat import FlatLayout
from zerosim.zero.plan import PLANS, Plan

__all__ = ["FlatLayout", "PLANS", "Plan", "ZeroEngine"]
