"""What a framework's data parallelism becomes beside a pipeline, on its default path: a table, read once where a
pipeline's job is made (analysis/costs/_pipeline.py `pipeline_run`).

    the stage's plan   the communication's framework   beside a pipeline          whose code
    ZeRO-3             FSDP's (CommSchedule.fsdp)       no_reshard_no_sync         torchtitan's apply_fsdp and torch's
                                                                                   pipelining (parallel/data/_plan.py)

torchtitan (018740b, torchtitan/models/llama3/infra/parallelize.py, `apply_fsdp`): `reshard_after_forward = not
pp_enabled` under the default `reshard_after_forward_policy`; torch 2.13 (distributed/pipelining/stage.py,
`_PipelineStageBase.backward_maybe_with_nosync`, `perform_reduce_grad`): every micro-batch's backward with
`set_reshard_after_backward(False)` and `set_requires_gradient_sync(False)`; after the last, each FSDP group's
`post_backward` reshards and reduce-scatters. So a stage gathers its parameters once a step and reduce-scatters once.
Any other pair keeps its plan; a plan named outright (`stage="no_reshard_no_sync"`) is taken as given.
"""

from __future__ import annotations

from zerosim.parallel.data import get_plan

BESIDE_PIPELINE = {  # (the plan's stage, the comm schedule's framework) -> the strategy it becomes beside a pipeline
    (3, "fsdp"): "no_reshard_no_sync",  # torchtitan's FSDP2 under torch's pipelining (module docstring)
}
PIPELINE_STRATEGIES = tuple(BESIDE_PIPELINE.values())  # the strategies by name a pipeline's stage runs


def plan_beside_pipeline(plan, comm):
    """The plan a pipeline's stage runs for `plan` (an unnamed ZeRO stage, or a strategy of PIPELINE_STRATEGIES) with
    `comm` (a CommSchedule or None): BESIDE_PIPELINE's strategy where the framework has one, else `plan` itself."""
    if plan.name:
        return plan
    name = BESIDE_PIPELINE.get((plan.stage, getattr(comm, "framework", None)))
    return plan if name is None else get_plan(name)
