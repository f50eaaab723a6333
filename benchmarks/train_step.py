"""`zerosim train` as a newcomer first runs it, beside the oracle doing the same steps, in turns.

Why: benchmarks/yardstick.py measures ZeRO-3 at 8 and 64 ranks; the command a newcomer runs first is `zerosim train`
with no flags: ZeRO-2 on 4 ranks, the MLP (16, 64, 64, 4), bf16-mixed, Adam at 1e-2, batch 16. A change can slow
that one down and neither yardstick case: issue 41's ninth stop found its step 10-25 % slower after a hint that paid
only at 32 ranks and more (docs/speed.md, item 12), by rerunning benchmarks/long_run.py against an older commit.

Each round runs, in a new seeded order:

    train        `zerosim.train.train(TrainConfig(steps=S, ...))`: the command's own run in this process (its
                 cluster, its windowed trace, its data pool and checks), without the printing
    oracle       `Reference(order="ring-native")` (the README's yardstick: zerosim's layer code on one device, the
                 reduction in the ring's order, the same bits as the exact oracle) over the same micro-batches
                 drawn from the same pool, from the same initial weights, S steps

and after each round checks that every one of the S mean losses is the same float (the same arithmetic). Rows:
the defaults, and the defaults at stage 3 (every unit gathered twice a step). Both sides pay their setup each round
(the model, the pool, the checks): it is part of what the command costs. CPU time of this process, BLAS pinned to one
thread (set before numpy loads), median of --repeats; the load average before and after.

    python benchmarks/train_step.py [--repeats 9] [--steps 100]
"""

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from zerosim import Reference, get_optimizer  # noqa: E402
from zerosim.models import make_regression  # noqa: E402
from zerosim.precision import get_precision  # noqa: E402
from zerosim.train import TrainConfig, build_model, train  # noqa: E402

ROWS = {"zerosim train (defaults: ZeRO-2)": {}, "zerosim train --stage 3": {"stage": 3}}


def oracle_losses(config: TrainConfig) -> list:
    """The mean loss of each of `config.steps` steps, on the oracle: the micro-batches `train` draws for an MLP
    regression run (its pool of min(steps, 32) steps' worth, cycled; rank r takes the r-th of a step's), its
    initial weights (seed + 1), its optimizer and precision."""
    model, n = build_model(config), config.ranks
    pool_size = n * min(config.steps, 32)
    pool = make_regression(np.random.default_rng(config.seed), pool_size, config.batch, list(config.widths))
    oracle = Reference(model, get_optimizer(config.optimizer, lr=config.lr), get_precision(config.precision),
                       world_size=n, params=model.init_params(np.random.default_rng(config.seed + 1)),
                       order="ring-native")
    losses = []
    for step in range(1, config.steps + 1):
        base = ((step - 1) * n) % pool_size
        losses.append(float(np.mean(np.asarray(oracle.step(pool[base:base + n]), dtype=np.float64))))
    return losses


def measure(config: TrainConfig, repeats: int) -> tuple:
    """(median CPU s of `train`, of the oracle), in turns; their losses compared after every round."""
    runs = {"train": lambda: train(config).losses, "oracle": lambda: oracle_losses(config)}
    cpu = {name: [] for name in runs}
    order = random.Random(0)
    for round_ in range(repeats + 1):  # round 0 warms up (first-touch allocations, BLAS, imports)
        names = list(runs)
        order.shuffle(names)
        losses = {}
        for name in names:
            start = time.process_time()
            losses[name] = runs[name]()
            if round_:
                cpu[name].append(time.process_time() - start)
        if losses["train"] != losses["oracle"]:
            raise AssertionError(f"round {round_}: `train` and the oracle disagree on a loss: not the same arithmetic")
    return statistics.median(cpu["train"]), statistics.median(cpu["oracle"])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=9)
    p.add_argument("--steps", type=int, default=100, help="steps a run takes (the command's default: 100)")
    args = p.parse_args()
    threads = {v: os.environ[v] for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    print(f"`zerosim train` ÷ the oracle over the same {args.steps} steps, in turns, median of {args.repeats}; "
          f"CPU time; BLAS threads {threads}")
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} (on {os.cpu_count()} cores)")
    print(f"{'run':<34} {'train ms/step':>13} {'oracle ms/step':>14} {'ratio':>6}")
    for name, flags in ROWS.items():
        config = TrainConfig(steps=args.steps, **flags)
        mine, theirs = measure(config, args.repeats)
        print(f"{name:<34} {mine / args.steps * 1e3:>13.2f} {theirs / args.steps * 1e3:>14.2f} {mine / theirs:>6.2f}")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
