"""Data parallelism: ZeRO stages 0 (plain data parallel), 1 (optimizer state), 2 (+ gradients), 3 (+ params), and the
many-node strategies (FSDP2's HSDP and resharding, DeepSpeed's MiCS and hpZ) as stage 3 with groups.

The step, one file per piece (read _engine.py first: `step` + `_micro_step` name every collective):

    _engine.py        ZeroEngine: the step, layer by layer across all local ranks
    _plan.py          the stages and strategies as plans: which buffers are sharded, which collective runs when
    _context.py       the small frozen record every helper reads instead of the engine
    _compute.py       one op of the schedule on every rank: its compute, its event, its gradients kept
    _fetch.py         ZeRO-3's gathers and releases by the CommSchedule (prefetch, reuse), over _gather.py
    _gather.py        a unit's all-gather and release; unit weights as a rank reads them; the stage-1/2 refresh
    _reduce.py        gradients kept locally (stages 0/1) or reduce-scattered unit by unit (stages 2/3)
    _buckets.py       the bucket rule (DeepSpeed's), decided once
    _step_checks.py   what the ranks agree on before the update: the overflow flag, the global norm
    _clipping.py      clipping's arithmetic: shard sums of squares, torch's clip coefficient, the error bound
    _update.py        the averaged gradient, the optimizer on each rank's region, the cast back to 16 bits
    _state.py         a rank's params, gradients, fp32 master and optimizer state, born in its ledger
    _batches.py       a step's micro-batches, checked on every rank
    _hooks.py         the named pieces a learner may replace (the exercises plug in there)
    _comm_schedule.py CommSchedule: bucket sizes and prefetch under DeepSpeed's and FSDP's names

and five folders, each an idea of its own:

    recipes/     the frameworks' gradient recipes (DDP, DeepSpeed ZeRO-1/2 and ZeRO-3, FSDP2) and their buckets
    layouts/     how a sharded buffer is cut: flat, or per parameter
    multinode/   the strategies' groups and the replicas' all-reduce
    zeropp/      fewer bits on the wire: ZeRO++ qwZ/qgZ, torchao's fp8 all-gather
    muon/        Muon on sharded state: who gathers each matrix, who orthogonalises it, who receives the update
"""

from zerosim._lazy import lazy_face, names_of

# each name of the face and the module that defines it, imported the first time it is asked for (zerosim/_lazy.py)
_NAMES = {
    "._clipping": ("clip_coefficient", "norm_error_bound"),
    "._comm_schedule": ("BACKWARD_PREFETCH", "CommSchedule", "get_comm_schedule"),
    "._engine": ("ZeroEngine", "check_engine_fits"),
    "._hooks": ("Hooks",),
    "._plan": ("BUFFERS", "PLANS", "STAGES", "STRATEGIES", "Plan", "buffer_sizes", "check_stage", "get_plan"),
    "._reduce": ("grads_name",),
    "._state": ("own_params",),
    "._step_checks": ("skips_steps",),
    ".layouts": ("FlatLayout", "ParamLayout"),
    ".recipes": ("RECIPES", "GradientRecipe"),
    ".zeropp": ("LocoParams", "Wire"),
}
__getattr__, __dir__ = lazy_face(__name__, _NAMES)

__all__ = sorted(names_of(_NAMES))
