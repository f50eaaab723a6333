"""A training run as library code: a model on a synthetic task, K micro-batches per rank per step.

    result = train(TrainConfig(widths=(16, 64, 64, 4), stage=2, ranks=4, steps=100))
    result.losses[-1], result.ranks[0]["peak_bytes"]

Each rank gets its own micro-batches every step, drawn in order from a fixed pool made by a random
teacher (so every backend sees the same data and the MPI run equals the simulator's); `zerosim
train` is this function plus argument parsing and printing.
Letters: N ranks, K micro-steps per step (gradient accumulation).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np

from zerosim.cluster import Cluster, GradClip
from zerosim.cluster.budget import available_bytes, check_fits
from zerosim.models import MLP
from zerosim.models.data import make_classification, make_regression
from zerosim.optim import get_optimizer
from zerosim.zero.engine import ZeroEngine, check_engine_fits

TASKS = ("regression", "classification")


@dataclass(frozen=True)
class TrainConfig:
    """What to train, where, and how (every field has the CLI's default)."""

    widths: tuple = (16, 64, 64, 4)  # MLP layer sizes, input first
    task: str = "regression"  # or "classification" (softmax cross-entropy on a teacher's argmax)
    stage: int = 2  # ZeRO stage
    ranks: int = 4  # N
    backend: str = "numpy"  # "numpy", "mpi" or "cupy"
    backend_options: dict = field(default_factory=dict)  # e.g. {"native": True} for MPI's own reduce-scatter
    precision: str = "bf16-mixed"
    optimizer: str = "adam"
    lr: float = 1e-2
    steps: int = 100
    batch: int = 16  # samples per micro-batch
    accumulation_steps: int = 1  # K
    seed: int = 0  # data (seed) and initial weights (seed + 1)
    checkpoint: bool = False
    save: str | None = None  # a folder to save checkpoints into (zerosim.checkpoint)
    save_every: int = 0  # save after every this many steps (0: only at the end, when `save` is given)
    resume: str | None = None  # a checkpoint folder to continue from; `steps` counts from the start of the run
    clip_grad: float | None = None  # clip the gradient to this global norm (torch's max_norm), or None

    def __post_init__(self):
        if self.task not in TASKS:
            raise ValueError(f"task must be one of {TASKS}, got {self.task!r}")
        for name in ("steps", "batch", "ranks", "accumulation_steps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, (int, np.integer)) or self.seed < 0:
            raise ValueError(f"seed must be an integer >= 0, got {self.seed!r}")
        if isinstance(self.save_every, bool) or not isinstance(self.save_every, (int, np.integer)) or self.save_every < 0:
            raise ValueError(f"save_every must be an integer >= 0, got {self.save_every!r}")
        if self.save_every and self.save is None:
            raise ValueError("save_every needs a folder to save into (save=...)")


def _check_ranks_agree(cluster, config: TrainConfig) -> None:
    """Under MPI each process parsed its own arguments: refuse, naming the field, if they differ."""
    if cluster.local_size == cluster.world_size:
        return  # one process hosts every rank: one config
    mine = {f.name: getattr(config, f.name) for f in fields(config)}
    everyone = cluster.backend.all_meta([mine])
    for name in mine:
        values = [c[name] for c in everyone]
        if any(v != values[0] for v in values):
            held = ", ".join(f"rank {r} has {v!r}" for r, v in enumerate(values))
            raise ValueError(f"the ranks disagree on {name} (--{name.replace('_', '-')}): {held}")


@dataclass
class TrainResult:
    """The mean loss after each step, and each rank's memory and traffic at the end (rank order)."""

    losses: list  # the mean loss of steps first_step, first_step + 1, ..., steps
    ranks: list  # [{"rank", "peak_bytes", "peak_by_kind", "bytes_sent"}] for every rank of the world
    params: int
    first_step: int = 1  # > 1 when the run resumed from a checkpoint
    scales: list = field(default_factory=list)  # the loss scale each step's loss was multiplied by
    skipped: list = field(default_factory=list)  # the steps the loss scaler skipped (an inf/NaN gradient)
    norms: list = field(default_factory=list)  # the global gradient norm of each step that clipped (None: skipped)


@dataclass(frozen=True)
class StepInfo:
    """What `on_step` hears besides the loss: the loss scale the step used, whether the scaler skipped it,
    and the global gradient norm when clipping (None otherwise, or when skipped)."""

    scale: float
    skipped: bool
    norm: float | None


def train(config: TrainConfig, on_step=None, on_start=None) -> TrainResult:
    """Run up to step `config.steps`; `on_start(num_params, first_step)` is called once every check has
    passed, before the first step, and `on_step(step, mean_loss, StepInfo)` after each (headers, progress bars).

    Under MPI every process calls this; each returns the same losses and every rank's statistics.
    """
    widths = [int(w) for w in config.widths]
    classify = config.task == "classification"
    model = MLP(widths, loss="xent" if classify else "mse")
    optimizer = get_optimizer(config.optimizer, lr=config.lr)
    optimizer.check_stage(config.stage)
    local = config.ranks if config.backend == "numpy" else 1  # ranks this process will host
    check_engine_fits(model, config.ranks, local, config.stage, optimizer, config.precision, available_bytes())  # before any rank exists
    cluster = Cluster(config.ranks, backend=config.backend, trace="call", timeline=False, **config.backend_options)
    _check_ranks_agree(cluster, config)
    if config.resume is not None:  # the saved state, on this run's ranks and stage (resharded if they differ)
        engine = ZeroEngine.load(config.resume, cluster, model, optimizer, stage=config.stage, precision=config.precision,
                                 accumulation_steps=config.accumulation_steps, checkpoint=config.checkpoint, clip_grad=config.clip_grad)
        if engine.iteration >= config.steps:
            raise ValueError(f"the checkpoint in {config.resume} is at step {engine.iteration}; --steps {config.steps} asks for no more")
    else:
        engine = ZeroEngine(model, cluster, config.stage, optimizer, config.precision,
                            checkpoint=config.checkpoint, params=model.init_params(np.random.default_rng(config.seed + 1)),
                            accumulation_steps=config.accumulation_steps, clip_grad=config.clip_grad)
    n, k = config.ranks, config.accumulation_steps
    per_step = n * k  # micro-batches a step consumes
    pool_size = per_step * min(config.steps, 32)  # a fixed pool of micro-batches, cycled
    # (pool, B, D_in) fp32 inputs, (pool, B, D_out) fp32 targets (int64 labels), and each rank's
    # activations while it runs: about B * sum(widths) values per rank in fp32, forward and backward
    per_sample = 4 * widths[0] + (8 if classify else 4 * widths[-1])
    need = pool_size * config.batch * per_sample + cluster.local_size * config.batch * 2 * 4 * sum(widths)
    check_fits(need, f"the data pool ({pool_size:,} micro-batches of {config.batch:,} samples) and activations",
               "use a smaller --batch or fewer --ranks", cluster.backend.available_bytes())
    make = make_classification if classify else make_regression
    pool = make(np.random.default_rng(config.seed), pool_size, config.batch, widths)
    first = engine.iteration + 1  # 1, or the step after a resumed checkpoint's
    if on_start is not None:
        on_start(model.num_params, first)
    losses, scales, skipped, norms = [], [], [], []
    for step in range(engine.iteration + 1, config.steps + 1):  # steps the loss scaler skips count too, as in DeepSpeed
        base = ((step - 1) * per_step) % pool_size
        mine = [[pool[base + r.index * k + j] for j in range(k)] for r in cluster.ranks]  # rank r's K micro-batches
        scales.append(engine.scaler.scale)
        t, since = engine.t, len(cluster.trace.log)
        local = engine.step(mine)
        if engine.t == t:
            skipped.append(step)
        if config.clip_grad is not None:
            clipped = cluster.trace.of_type(GradClip, since)
            norms.append(clipped[-1].norm if clipped else None)
        every = [x for part in cluster.backend.all_meta([local]) for x in part] if cluster.local_size == 1 else local
        losses.append(float(np.mean(np.asarray(every, dtype=np.float64))))
        if on_step is not None:
            on_step(step, losses[-1], StepInfo(scales[-1], step in skipped[-1:], norms[-1] if norms else None))
        if config.save is not None and ((config.save_every and step % config.save_every == 0) or step == config.steps):
            engine.save(config.save)
    stats = cluster.backend.all_meta([
        {"rank": r.index, "peak_bytes": r.ledger.peak(), "peak_by_kind": r.ledger.peak_by_kind(), "bytes_sent": cluster.trace.bytes_sent(r.index)}
        for r in cluster.ranks
    ])
    return TrainResult(losses, stats, model.num_params, first, scales, skipped, norms)
