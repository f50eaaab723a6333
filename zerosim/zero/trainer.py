"""A training run as library code: a model on a synthetic task, K micro-batches per rank per step.

    result = train(TrainConfig(widths=(16, 64, 64, 4), stage=2, ranks=4, steps=100))
    result.losses[-1], result.ranks[0]["peak_bytes"]

Each rank gets its own micro-batches every step, drawn in order from a fixed pool made by a random
teacher (so every backend sees the same data and the MPI run equals the simulator's); `zerosim
train` is this function plus argument parsing and printing.
Letters: N ranks, K micro-steps per step (gradient accumulation).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from zerosim.cluster import Cluster
from zerosim.models import MLP
from zerosim.models.data import make_classification, make_regression
from zerosim.optim import get_optimizer
from zerosim.zero.engine import ZeroEngine

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

    def __post_init__(self):
        if self.task not in TASKS:
            raise ValueError(f"task must be one of {TASKS}, got {self.task!r}")
        for name in ("steps", "batch", "ranks", "accumulation_steps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, (int, np.integer)) or self.seed < 0:
            raise ValueError(f"seed must be an integer >= 0, got {self.seed!r}")


@dataclass
class TrainResult:
    """The mean loss after each step, and each rank's memory and traffic at the end (rank order)."""

    losses: list
    ranks: list  # [{"rank", "peak_bytes", "peak_by_kind", "bytes_sent"}] for every rank of the world
    params: int


def train(config: TrainConfig, on_step=None) -> TrainResult:
    """Run `config.steps` steps; `on_step(step, mean_loss)` is called after each (for progress bars).

    Under MPI every process calls this; each returns the same losses and every rank's statistics.
    """
    cluster = Cluster(config.ranks, backend=config.backend, trace="call", timeline=False, **config.backend_options)
    widths = [int(w) for w in config.widths]
    classify = config.task == "classification"
    model = MLP(widths, loss="xent" if classify else "mse")
    engine = ZeroEngine(model, cluster, config.stage, get_optimizer(config.optimizer, lr=config.lr), config.precision,
                        checkpoint=config.checkpoint, params=model.init_params(np.random.default_rng(config.seed + 1)),
                        accumulation_steps=config.accumulation_steps)
    n, k = config.ranks, config.accumulation_steps
    per_step = n * k  # micro-batches a step consumes
    pool_size = per_step * min(config.steps, 32)  # a fixed pool of micro-batches, cycled
    make = make_classification if classify else make_regression
    pool = make(np.random.default_rng(config.seed), pool_size, config.batch, widths)
    losses = []
    for step in range(1, config.steps + 1):
        base = ((step - 1) * per_step) % pool_size
        mine = [[pool[base + r.index * k + j] for j in range(k)] for r in cluster.ranks]  # rank r's K micro-batches
        local = engine.step(mine)
        every = [x for part in cluster.backend.all_meta([local]) for x in part] if cluster.local_size == 1 else local
        losses.append(float(np.mean(np.asarray(every, dtype=np.float64))))
        if on_step is not None:
            on_step(step, losses[-1])
    stats = cluster.backend.all_meta([
        {"rank": r.index, "peak_bytes": r.ledger.peak(), "peak_by_kind": r.ledger.peak_by_kind(), "bytes_sent": cluster.trace.bytes_sent(r.index)}
        for r in cluster.ranks
    ])
    return TrainResult(losses, stats, model.num_params)
