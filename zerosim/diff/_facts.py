"""What a run is, as the explanation reads it: its formats, recipe, ranks and schedule, each from the engine that ran
(the policy, the gradient recipe, the plan, the CommSchedule, ParallelDims), never worked out again here."""

from __future__ import annotations


from zerosim._dataclass import dataclass
from zerosim.parallel.data import recipes as averaging  # averaging's one place (recipes/_averaging.py), by its face


@dataclass(frozen=True)
class Facts:
    """One run's numerics and placement: the facts the cause rules (_causes.py) compare."""

    model: str  # e.g. "MLP [16, 64, 4]", "GPT(...)"
    seed: int
    batch: int  # samples per micro-batch
    micro_batches: int  # G = dp · K: micro-batches a step
    dp: int  # data-parallel ranks (the ring of a gradient reduction)
    K: int  # micro-batches per rank per step
    stage: int
    tp: int
    sp: bool
    compute: str  # the formats
    master: str | None
    reduce: str  # the wire
    update: str
    state: str  # the optimizer state as stored
    accum_local: str  # where a rank's own micro-batches accumulate (stages 0/1)
    accum_reduced: str  # where reduced micro-steps accumulate (stages 2/3)
    reduces_per_unit: bool  # stages 2/3: every micro-step reduced, then accumulated; else accumulated, then reduced
    arithmetic: str
    attention: str
    loss_scale: object  # the policy's: a number or a scaler's name
    unscale: str
    rounding: str
    recipe: str  # the gradient recipe's name
    averaging: str  # what the recipe does before the wire (its ReduceOp's description)
    divides_by_n: bool
    partition: str  # the layout its framework shards by
    collective: str  # how a bucket travels
    allreduce: str  # an all-reduce's chunk map
    bucket: int | None  # reduce_bucket_size (elements), None: one call per unit
    optimizer: str  # the optimizer's repr: its name and hyperparameters
    clip: float | None  # max_norm


LABELS = {  # how a report names each fact
    "model": "model", "seed": "seed", "batch": "samples per micro-batch", "micro_batches": "micro-batches a step",
    "dp": "data-parallel ranks", "K": "accumulation steps", "stage": "ZeRO stage", "tp": "tensor parallel",
    "sp": "sequence parallel", "compute": "compute format", "master": "master format", "reduce": "wire format",
    "update": "update format", "state": "optimizer state format", "accum_local": "local accumulation format",
    "accum_reduced": "reduced accumulation format", "reduces_per_unit": "reduces every micro-step",
    "arithmetic": "kernels", "attention": "attention", "loss_scale": "loss scale", "unscale": "unscale",
    "rounding": "rounding", "recipe": "gradient recipe", "averaging": "averaging", "divides_by_n":
    "divides by N before the sum", "partition": "layout", "collective": "bucket collective",
    "allreduce": "all-reduce chunk map", "bucket": "reduce bucket (elements)", "optimizer": "optimizer",
    "clip": "clip max_norm",
}


def facts_of(config, engine) -> Facts:
    """The facts of a run of `config` that `engine` ran."""
    p, recipe = engine.precision, engine.recipe
    op = averaging.reduce_op(p, engine.ctx.mesh.world.size, recipe)
    model = (f"MLP {list(config.widths)}" if config.model == "mlp" else
             f"{config.model}(vocab={config.vocab}, d_model={config.d_model}, heads={config.heads}, "
             f"layers={config.layers})")
    return Facts(
        model=model, seed=config.seed, batch=config.batch,
        micro_batches=engine.ctx.mesh.world.size * config.accumulation_steps, dp=engine.ctx.mesh.world.size,
        K=engine.accumulation_steps, stage=engine.stage_number, tp=config.tp,
        sp=bool(config.sp), compute=p.compute_format.name,
        master=None if p.master_format is None else p.master_format.name, reduce=p.reduce_format.name,
        update=p.update_format.name, state=p.state_format.name,
        accum_local=averaging.accum_format(p, False, recipe).name,
        accum_reduced=averaging.accum_format(p, True, recipe).name, reduces_per_unit=engine.plan.reduces_per_unit,
        arithmetic=p.arithmetic, attention=config.attention if config.model != "mlp" else "",
        loss_scale=p.loss_scale, unscale=p.unscale, rounding=p.rounding, recipe=recipe.reduction,
        averaging=op.description, divides_by_n=recipe.rules.divides_by_n, partition=recipe.partition,
        collective=recipe.rules.collective, allreduce=recipe.allreduce, bucket=engine.comm.reduce_bucket_size,
        optimizer=repr(engine.optimizer), clip=engine.clip_grad,
    )
