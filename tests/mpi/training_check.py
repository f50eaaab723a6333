"""ZeRO training on the MPI backend equals the numpy simulator bit for bit, step by step, on every rank.

    mpiexec -n 2 python tests/mpi/training_check.py
    mpiexec -n 4 python tests/mpi/training_check.py

Letters: N ranks (= processes), P parameters (never a multiple of N here, so the padded flat buffer
of N*s elements has padding and layers straddle shard borders), S steps per run.

Every process builds the same model, initial weights and micro-batches from fixed seeds. For each
configuration -- ZeRO stage 0-3 x precision fp32 / fp16-mixed / bf16-mixed x optimizer Adam / Adan
x activation checkpointing off / on, plus a few variants (the frameworks' gradient recipes, static
and dynamic loss scales with overflows injected on one rank at chosen steps, gradient clipping, NCCL's
all-reduce chunk map, GELU, classification) -- it trains twice: once on `Cluster(N, backend="mpi")` with only its
own rank's micro-batch, and once on the in-process simulator `Cluster(N)` with all N micro-batches. After
every step it compares, for its own rank r only:

    the loss of rank r's micro-batch          (as returned by engine.step)
    rank r's fp32 master region               (engine.master_shards)
    rank r's optimizer state, each buffer     (engine.optimizer_shards)
    rank r's 16-bit (compute-format) params   (engine.compute_params: full buffer, or the shard at stage 3)
    the step count t, the loss scaler's state and its decision (skipped or not), the clipped norm
    the trace: every collective call, and every event rank r sent (so its bytes sent)
    rank r's ledger timeline and its report (bytes live and peak, by kind and in total; bytes sent by collective)

and after the last step, `gather_reports` on rank 0 against the simulator's reports for all ranks.
Exits non-zero if any check fails on any rank; an exception ends the whole job (run_guarded).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from harness import main

from zerosim import MLP, Cluster, ZeroEngine, get_optimizer
from zerosim.cluster import GradClip, LossScaleUpdate
from zerosim.cluster._report import gather_reports, local_reports
from zerosim.models import make_classification, make_regression
from zerosim.precision import get_precision

STEPS = 3
BATCH = 4
OPTIMIZERS = {
    "adam": dict(lr=1e-2),
    "adan": dict(lr=1e-2),  # four state buffers (m, v, n, g_prev), one carried from step to step
}
# P = 6*5+5 + 5*3+3 = 53 and 4*3+3 + 3*3+3 + 3*2+2 = 35: never a multiple of N = 2, 3 or 4
WIDTHS = ([6, 5, 3], [4, 3, 3, 2])


@dataclass(frozen=True)
class Config:
    stage: int
    precision: str
    optimizer: str
    checkpoint: bool
    widths: tuple
    reduction: str = "seeds"
    loss_scale: float | str = 1.0
    activation: str = "relu"
    task: str = "regression"
    scale_options: tuple = ()  # the dynamic scaler's options, e.g. (("growth_interval", 2),)
    inject: tuple = ()  # steps at which one rank's micro-batch overflows fp16 (rank step % N: a huge target)
    clip_grad: float | None = None
    allreduce: str = "ring"

    def __str__(self) -> str:
        defaults = (("reduction", "seeds"), ("loss_scale", 1.0), ("activation", "relu"), ("task", "regression"),
                    ("scale_options", ()), ("inject", ()), ("clip_grad", None), ("allreduce", "ring"))
        extras = "".join(f" {k}={getattr(self, k)}" for k, default in defaults if getattr(self, k) != default)
        return (f"stage {self.stage} {self.precision} {self.optimizer} "
                f"{'checkpoint' if self.checkpoint else 'no-checkpoint'} "
                f"MLP{list(self.widths)}{extras}")

    @property
    def policy(self):
        return get_precision(self.precision).with_(reduction=self.reduction, loss_scale=self.loss_scale,
                                                   loss_scale_options=self.scale_options, allreduce=self.allreduce)


def configs() -> list:
    """The full grid of stage x precision x optimizer x checkpointing, and a few variants on top."""
    grid = []
    for stage in (0, 1, 2, 3):
        for precision in ("fp32", "fp16-mixed", "bf16-mixed"):
            for k, optimizer in enumerate(OPTIMIZERS):
                for checkpoint in (False, True):
                    widths = WIDTHS[(stage + k + checkpoint) % len(WIDTHS)]
                    grid.append(Config(stage, precision, optimizer, checkpoint, tuple(widths)))
    torch2, deepspeed2 = (("growth_interval", 2),), (("scale_window", 2), ("hysteresis", 1))  # grow within three steps
    variants = [
        Config(1, "bf16-mixed", "adam", False, (6, 5, 3), reduction="deepspeed-zero12"),  # DeepSpeed ZeRO-1/2's recipe
        # FSDP2's split division
        Config(3, "fp16-mixed", "adam", True, (4, 3, 3, 2), reduction="fsdp2", loss_scale=1024.0),
        Config(0, "fp16-mixed", "adam", False, (6, 5, 3), reduction="ddp", allreduce="nccl"),  # DDP, NCCL's chunk map
        Config(3, "fp16-mixed", "adam", True, (6, 5, 3), reduction="deepspeed-zero3"),  # per-parameter partitions
        Config(
            3,
            "fp16-mixed",
            "adan",
            False,
            (4, 3, 3, 2),
            reduction="deepspeed-zero3",
            loss_scale="deepspeed",
            scale_options=(("scale_window", 2), ("hysteresis", 1)),
            inject=(2,),
            clip_grad=0.05,
        ),
        Config(3, "bf16-mixed", "adan", True, (6, 5, 3), activation="gelu"),
        Config(3, "fp16-mixed", "adam", False, (4, 3, 3, 2), task="classification"),
        # dynamic loss scaling: one rank's micro-batch overflows at the injected steps; every rank must skip
        Config(0, "fp16-mixed", "adam", False, (6, 5, 3), loss_scale="torch", scale_options=torch2, inject=(2,)),
        Config(
            1, "fp16-mixed", "adan", True, (4, 3, 3, 2), loss_scale="deepspeed", scale_options=deepspeed2, inject=(1, 3)
        ),
        Config(
            2, "fp16-mixed", "adam", False, (6, 5, 3), loss_scale="deepspeed", reduction="deepspeed-zero12", inject=(2,)
        ),
        Config(
            3,
            "fp16-mixed",
            "adam",
            True,
            (4, 3, 3, 2),
            loss_scale="torch",
            scale_options=torch2,
            inject=(1,),
            reduction="fsdp2",
            clip_grad=0.05,
        ),
        # clipping by the global norm over the shards
        Config(0, "bf16-mixed", "adam", False, (6, 5, 3), clip_grad=0.05),
        Config(1, "fp32", "adan", False, (4, 3, 3, 2), clip_grad=0.5),
        Config(2, "fp16-mixed", "adam", True, (6, 5, 3), clip_grad=0.05, loss_scale=256.0),
    ]
    return grid + variants


def build(config: Config, n: int, seed: int):
    """(model, initial fp32 params, S*N micro-batches): the same on every process."""
    rng = np.random.default_rng([seed, n])
    model = MLP(
        list(config.widths), activation=config.activation, loss="xent" if config.task == "classification" else "mse"
    )
    params = model.init_params(np.random.default_rng([seed, n, 1]))
    make = make_classification if config.task == "classification" else make_regression
    data = make(rng, STEPS * n, BATCH, list(config.widths))
    for step in config.inject:  # one rank's target far beyond fp16: its scaled gradient overflows, the others' do not
        x, t = data[(step - 1) * n + step % n]
        t = t.copy()
        t[0, 0] = 6e4
        data[(step - 1) * n + step % n] = (x, t)
    return model, params, data


def engine_on(cluster, model, params, config: Config) -> ZeroEngine:
    optimizer = get_optimizer(config.optimizer, **OPTIMIZERS[config.optimizer])
    return ZeroEngine(
        model,
        cluster,
        config.stage,
        optimizer,
        config.policy,
        checkpoint=config.checkpoint,
        params=params,
        clip_grad=config.clip_grad,
    )


def train_and_compare(h, config: Config, seed: int) -> None:
    n, r = h.world_size, h.rank
    model, params, data = build(config, n, seed)
    if n > 1:  # the point of these widths: a padded flat buffer, layers straddling shard borders
        h.check(f"{config}: P = {model.num_params} is not a multiple of N", model.num_params % n != 0, True)
    mpi, sim = Cluster(n, backend="mpi"), Cluster(n)  # fresh ledgers and traces for every run
    got_engine, want_engine = engine_on(mpi, model, params, config), engine_on(sim, model, params, config)
    h.check_same_rank_state(f"{config}: after init", mpi, sim)
    for step in range(1, STEPS + 1):
        batches = data[(step - 1) * n : step * n]
        (got_loss,) = got_engine.step([batches[r]])
        want_losses = want_engine.step(batches)
        name = f"{config}: step {step}"
        h.check(f"{name}: loss", np.asarray(got_loss), np.asarray(want_losses[r]))
        h.check(f"{name}: fp32 master shard", got_engine.master_shards()[0], want_engine.master_shards()[r])
        h.check(f"{name}: optimizer state shard", got_engine.optimizer_shards()[0], want_engine.optimizer_shards()[r])
        h.check(f"{name}: compute-format params", got_engine.compute_params(0), want_engine.compute_params(r))
        h.check(f"{name}: step count", got_engine.t, want_engine.t)
        h.check(f"{name}: loss scaler state", got_engine.scaler.state_dict(), want_engine.scaler.state_dict())
        h.check(f"{name}: scaler decisions and clipped norms", _decisions(mpi), _decisions(sim))
        h.check_same_rank_state(name, mpi, sim)
    if config.inject and config.loss_scale in ("torch", "deepspeed"):  # the injected overflows did make every rank skip
        skipped = [e.step for e in sim.trace.of_type(LossScaleUpdate) if e.skipped]
        h.check(f"{config}: the injected overflows were skipped", set(config.inject) <= set(skipped), True)
    if n > 1:
        h.check(f"{config}: rank {r} sent bytes", local_reports(mpi)[0].bytes_sent > 0, True)
    gathered = gather_reports(mpi)  # every process must call it
    h.check(f"{config}: gather_reports on rank 0", gathered, local_reports(sim) if r == 0 else None)


def _decisions(cluster) -> list:
    """The loss scaler's decisions and the clipping norms, as the trace recorded them (the same on every rank)."""
    return [e for e in cluster.trace.log if isinstance(e, (LossScaleUpdate, GradClip))]


def body(h) -> None:
    for seed, config in enumerate(configs()):
        train_and_compare(h, config, seed)


if __name__ == "__main__":
    main(body, "training_check")
