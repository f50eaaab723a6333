"""What a lint rule reads of a configuration: its formats, accumulation, loss scaling, optimizer, stage, parallel
degrees and gradient recipe — from a zerosim.train.TrainConfig, or from a DeepSpeed config as DeepSpeed would run it
(frameworks/deepspeed's reader: "auto" filled, every key checked), each fact read where it is defined."""

from __future__ import annotations


from zerosim._dataclass import dataclass
from zerosim.parallel.data import GradientRecipe
from zerosim.parallel.data import recipes as averaging  # averaging's one place (recipes/_averaging.py), by its face
from zerosim.precision import get_precision


@dataclass(frozen=True)
class Setup:
    """One configuration's numerics, as the rules read them."""

    compute: str  # the 16- or 32-bit format forward and backward run in
    master: str | None  # the master weights' format (None: the optimizer updates the compute copy: "pure")
    state: str  # the optimizer state's storage format
    reduce: str  # the wire format of the gradient reduction
    accumulate: str  # the format a rank's micro-batch gradients accumulate in
    K: int  # micro-batches per rank per step
    loss_scale: object  # a static scale (a number) or a dynamic scaler's name
    optimizer: str
    kept: tuple  # the optimizer's state between steps, by name ("m", "v"; SGD without momentum keeps none)
    stage: int
    ranks: int
    tp: int
    recipe: str  # the gradient recipe (parallel/data/recipes): "deepspeed-zero12", ...; "deepspeed stage 0"
    collective: str  # how a bucket of gradients travels ("bucket all-reduce": the bucket's bounds change bits)
    bucket: int | None  # reduce_bucket_size (elements)
    deepspeed: bool  # the configuration is a DeepSpeed config (its framework's traps apply as DeepSpeed runs it)


def setup_of(config, ds=None) -> Setup:
    """The Setup of `config` (a TrainConfig), or of `ds` (a frameworks.deepspeed.DeepSpeedRun) on `config`'s ranks and
    tensor-parallel degree where one is given."""
    from zerosim.optim import get_optimizer

    if ds is not None:
        policy, stage, k, optimizer = ds.precision, ds.stage, ds.accumulation_steps, ds.optimizer
        kept = get_optimizer(optimizer).state_names
        recipe = GradientRecipe(ds.recipe or "seeds")
        name, bucket = ds.recipe or "deepspeed stage 0", ds.comm.reduce_bucket_size
    else:
        policy, stage, k, optimizer = get_precision(config.precision), config.stage, config.accumulation_steps, \
            config.optimizer
        kept = get_optimizer(optimizer, **config.optimizer_options).state_names
        recipe = GradientRecipe.of(policy)
        name, bucket = recipe.reduction, None if config.comm is None else config.comm.reduce_bucket_size
    return Setup(compute=policy.compute_format.name, master=None if policy.master_format is None else
                 policy.master_format.name, state=policy.state_format.name, reduce=policy.reduce_format.name,
                 accumulate=averaging.accum_format(policy, False, recipe).name, K=k, loss_scale=policy.loss_scale,
                 optimizer=optimizer, kept=kept, stage=stage, ranks=config.ranks if config is not None else
                 ds.train_batch_size // (ds.micro_batch * ds.accumulation_steps),  # the world size DeepSpeed reads
                 tp=config.tp if config is not None else 1, recipe=name,
                 collective=recipe.rules.collective if name != "ddp" else "bucket all-reduce", bucket=bucket,
                 deepspeed=ds is not None)
