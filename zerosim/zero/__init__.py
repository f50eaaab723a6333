"""ZeRO engines: stage 0 (plain data parallel), 1 (optimizer state), 2 (+ gradients), 3 (+ params).

    engine.py       ZeroEngine: the step, layer by layer across all local ranks (read this first)
    plan.py         the four stages as plans: which buffers are sharded, which collective runs when; buffer sizes
    context.py      the small frozen record every helper reads instead of the engine
    compute.py      one op of the schedule on every rank: its compute, its event, its gradients kept
    fetch.py        ZeRO-3's gathers and releases by the CommSchedule (prefetch, reuse), over gather.py
    gather.py       a unit's all-gather and release; unit weights as a rank reads them; the stage-1/2 refresh
    reduce.py       gradients kept locally (stages 0/1) or reduce-scattered unit by unit (stages 2/3)
    buckets.py      the bucket rule (DeepSpeed's), decided once
    step_checks.py  what the ranks agree on before the update: the overflow flag, the global norm
    update.py       the averaged gradient, the optimizer on each rank's region, the cast back to 16 bits
    state.py        a rank's params, gradients, fp32 master and optimizer state, born in its ledger
    batches.py      a step's micro-batches, checked on every rank
    hooks.py        the named extension points of a step (the exercises plug in there)
    averaging.py    one place for averaging: accumulation format, the recipe's op and after-step, / (N·K), unscaling
    recipes.py      the frameworks' gradient recipes as data; GradientRecipe, the config beside the precision policy
    divide_factors.py  FSDP2's divide factors; torch's scalar multiply and divide, bit for bit
    clipping.py     clipping's arithmetic: shard sums of squares, torch's clip coefficient, the error bound
    comm_schedule.py   CommSchedule: bucket sizes and prefetch under DeepSpeed's and FSDP's names
    layouts.py      which layout a run shards by (flat.py: equal shards; partition.py: per-parameter chunks)
"""

from zerosim.zero.engine import ZeroEngine
from zerosim.zero.flat import FlatLayout
from zerosim.zero.hooks import Hooks
from zerosim.zero.partition import ParamLayout
from zerosim.zero.plan import PLANS, Plan, buffer_sizes, get_plan
from zerosim.zero.recipes import RECIPES, GradientRecipe

__all__ = ["FlatLayout", "GradientRecipe", "Hooks", "PLANS", "ParamLayout", "Plan", "RECIPES", "ZeroEngine",
           "buffer_sizes", "get_plan"]
